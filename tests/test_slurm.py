"""The Slurm profile on a real one-node Slurm cluster (Debian's slurm-wlm and munge).

`.ci/slurm/start.sh` starts munged, slurmctld and slurmd on this host (accounting off,
MinJobAge=3600 so finished jobs stay visible to squeue); the CPU stages of the default pipeline
run with `--profile profiles/slurm` (job status through squeue), scaled out where the local run
is one job (the posts, group-ness and graph in GRAPH_BUCKETS user buckets, the BM25 topic splits
cut per posts bucket into shards of at most a third of the posts; the per-bucket jobs bundled in group jobs, as docs/cluster.md advises for many
short jobs), and their outputs must equal a local run's; `.ci/slurm/stop.sh` stops exactly the daemons that were
started. Skips (with the reason) only where it cannot be root, or Slurm is not installed
(`.ci/run` installs it; the test installs nothing), or /etc/slurm/slurm.conf belongs to this
host's own Slurm (or to another running cluster of start.sh), which the test leaves alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml
from conftest import copy_repo
from helpers import BUCKET_GROUPS, GRAPH_BUCKETS

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import standin_engine  # noqa: E402

START = REPO / ".ci" / "slurm" / "start.sh"
STOP = REPO / ".ci" / "slurm" / "stop.sh"
DAEMONS = ("munged", "slurmctld", "slurmd")
BINARIES = ("munged", "slurmctld", "slurmd", "sinfo", "squeue", "sbatch", "srun", "scontrol")
# The CPU stages of the default pipeline (ingest, graph, demographics, topics, dataset).
CPU_TARGETS = (
    "results/posts/posts.parquet",
    "results/posts/ingest_report.json",
    "results/graph/neighbours.parquet",
    "results/demographics/thresholds.json",
    "results/topics/topic_posts.parquet",
    "results/dataset/quadruplets.parquet",
    "results/dataset/export/README.md",
)
# What the export job writes (results/dataset/export/).
EXPORT_FILES = (
    "quadruplets.parquet",
    "topic_posts.parquet",
    "README.md",
    "counts_by_topic.csv",
    "counts_by_category.csv",
    "counts_by_topic.md",
    "counts_by_category.md",
)
# The one posts table of the local run; the Slurm run writes it as GRAPH_BUCKETS bucket files.
POSTS_TABLE = "results/posts/posts.parquet"
SLURM_TARGETS = tuple(t for t in CPU_TARGETS if t != POSTS_TABLE)
CPU_RESULT_DIRS = ("posts", "graph", "demographics", "topics", "dataset")
# The reduces of these stages that take seconds and ~100-200 MB at any corpus size (the scale
# benchmark's 5B-post extrapolation: 1-6 s each): the Snakefile's localrules, run by the
# Snakemake that submits the others rather than queued as Slurm jobs of their own.
SUBMIT_HOST_REDUCES = ("ingest_report", "graph_subreddits", "selfid_summary", "topic_global_stats")

pytestmark = pytest.mark.slow  # about 8 minutes on an idle 2-core machine (2026-11-27)


def _missing_binaries() -> list[str]:
    return [name for name in BINARIES if shutil.which(name) is None]


def _require_slurm() -> None:
    """Skip where no cluster can be started. The test installs nothing: `.ci/run` installs Debian's
    slurm-wlm and munge (as root) before the tests."""
    if os.geteuid() != 0:
        pytest.skip("a Slurm cluster needs root (slurmd runs jobs as their owner); not root here")
    missing = _missing_binaries()
    if missing:
        pytest.skip(
            f"Slurm is not installed (missing {', '.join(missing)}): "
            "apt-get install slurm-wlm munge, as .ci/run does"
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class SlurmCluster:
    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.env = {
            **os.environ,
            "SLURM_CONF": str(state_dir / "slurm.conf"),
            "SPLITS_SLURMCTLD_PORT": str(_free_port()),
            "SPLITS_SLURMD_PORT": str(_free_port()),
            "PYTHONHASHSEED": "0",
        }
        for name in ("SPLITS_SLURM_ACCOUNT", "SPLITS_SLURM_PARTITION"):
            self.env.pop(name, None)
        self.pids: dict[str, int] = {}

    def start(self) -> None:
        proc = subprocess.run(
            ["bash", str(START), str(self.state_dir)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        self.pids = {
            name: int((self.state_dir / f"{name}.pid").read_text().strip())
            for name in DAEMONS
            if (self.state_dir / f"{name}.pid").is_file()
        }
        if proc.returncode == 3:  # this host's own Slurm, or another test's cluster, is running
            self.stop()
            pytest.skip(f"no private Slurm cluster here: {proc.stderr.strip()}")
        if proc.returncode != 0:
            logs = "".join(
                f"\n--- {p.name}\n{p.read_text()[-2000:]}"
                for p in sorted((self.state_dir / "log").glob("*.log"))
            )
            self.stop()
            pytest.fail(f"start.sh failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}{logs}")

    def stop(self) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(STOP), str(self.state_dir)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def run(self, *cmd: str, cwd: Path | None = None, timeout: int = 60):
        return subprocess.run(
            list(cmd), cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout
        )


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    _require_slurm()
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    cluster.start()
    try:
        yield cluster
    finally:
        proc = cluster.stop()
        assert proc.returncode == 0, f"stop.sh: {proc.stdout}{proc.stderr}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(map(_pid_alive, cluster.pids.values())):
            time.sleep(0.2)
        alive = {name: pid for name, pid in cluster.pids.items() if _pid_alive(pid)}
        assert not alive, f"daemons still running after stop.sh: {alive}"
        assert not Path("/etc/slurm/slurm.conf").is_symlink() or not str(
            Path("/etc/slurm/slurm.conf").readlink()
        ).startswith(str(cluster.state_dir))


def _failure_report(workdir: Path, proc: subprocess.CompletedProcess) -> str:
    """What a failed run needs to be diagnosed from CI's output alone: Snakemake's "Error in
    rule" blocks, the logs of the rules that failed (their command's own error line) and the
    Slurm logs Snakemake kept (only failed jobs' logs are kept), each cut to its tail."""
    text = proc.stdout + proc.stderr
    errors = re.findall(r"Error in rule .*?(?=\n\S|\Z)", text, flags=re.DOTALL)
    failed_logs = sorted(set(re.findall(r"log: (logs/\S+?\.log)", "\n".join(errors))))
    parts = [f"{text[-3000:]}", "=== Error blocks ===", *(e[-1500:] for e in errors[-6:])]
    for name in failed_logs:
        path = workdir / name
        parts.append(f"=== {name} ===\n{path.read_text()[-2000:] if path.exists() else '(absent)'}")
    for path in sorted((workdir / ".snakemake" / "slurm_logs").rglob("*.log"))[-4:]:
        parts.append(f"=== {path.relative_to(workdir)} ===\n{path.read_text()[-2000:]}")
    return "\n".join(parts)


def test_cluster_runs_a_job(slurm_cluster):
    assert set(slurm_cluster.pids) == set(DAEMONS)
    for name, pid in slurm_cluster.pids.items():
        assert _pid_alive(pid), f"{name} (pid {pid}) is not running"
        assert Path(f"/proc/{pid}/comm").read_text().strip() == name
    info = slurm_cluster.run("sinfo", "-h", "-o", "%P %t")
    assert info.stdout.split() == ["ci*", "idle"], info.stdout + info.stderr
    out = slurm_cluster.state_dir / "probe.out"
    job = slurm_cluster.run(
        "sbatch", "--parsable", "-o", str(out), "--wrap", "srun -n1 echo splits-slurm-ok"
    )
    assert job.returncode == 0, job.stderr
    job_id = job.stdout.strip().split(";")[0]
    state = ""
    for _ in range(120):
        state = slurm_cluster.run(
            "squeue", "-h", "--states=all", "-j", job_id, "-o", "%T"
        ).stdout.strip()
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
            break
        time.sleep(0.5)
    assert state == "COMPLETED", f"job {job_id}: {state}; {out.read_text() if out.exists() else ''}"
    assert "splits-slurm-ok" in out.read_text()
    config = slurm_cluster.run("scontrol", "show", "config").stdout
    assert "MinJobAge               = 3600 sec" in config
    assert "accounting_storage/none" in config


def _parquet_files(root: Path) -> dict[str, Path]:
    files = {}
    for sub in CPU_RESULT_DIRS:
        for path in sorted((root / "results" / sub).rglob("*.parquet")):
            files[str(path.relative_to(root))] = path
    return files


# pytest-timeout counts the fixtures: the local run and the whole CPU DAG through Slurm, about 8
# minutes on an idle 2-core machine, 11-14 in the suite on a loaded one
SLURM_PIPELINE_TIMEOUT = pytest.mark.timeout(2400)
# Snakemake's Slurm executor, run with its status checks at most STATUS_CHECK_S apart. The plugin
# (snakemake-executor-plugin-slurm 2.x) waits 10 s longer after each round of checks in which no
# job finished, up to 180 s, a pace made for a real cluster's minutes-long jobs: here the jobs
# take seconds and the DAG is some twenty steps deep, so its waits were most of this test's
# 10-14 minutes (events in the run's log fell on a 12 s and a 33 s grid). Only the wait between
# rounds is capped (RemoteExecutor.sleep); submission, squeue status and job steps are the
# plugin's own.
STATUS_CHECK_S = 2
SNAKEMAKE_CAPPED_STATUS_WAIT = f"""
import asyncio
import sys

from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor


async def _capped_sleep(self):
    await asyncio.sleep(min(self.next_seconds_between_status_checks, {STATUS_CHECK_S}))


RemoteExecutor.sleep = _capped_sleep
from snakemake.cli import main

sys.argv[0] = "snakemake"
sys.exit(main())
"""


class SlurmPipeline:
    """One run of the CPU stages through the Slurm profile: its working copy, the local run's
    topic plan it was cut against, the rule (or group) of every Slurm job it submitted and the
    rule of every job it ran (a group's jobs each once)."""

    def __init__(self, workdir: Path, local_plan: dict, submitted: list[str], ran: list[str]):
        self.workdir = workdir
        self.local_plan = local_plan
        self.submitted = submitted
        self.ran = ran


@pytest.fixture(scope="module")
def slurm_pipeline(slurm_cluster, default_run, tmp_path_factory) -> SlurmPipeline:
    """The CPU stages on Slurm, scaled out where the local run is one job: the BM25 topic splits
    cut per posts bucket (one cut job per bucket) into shards of at most a third of the posts (one
    shard locally) and the graph in GRAPH_BUCKETS user buckets (one job
    locally), every job a Slurm job or, for the per-bucket rules (BUCKET_GROUPS), part of a group
    job of GRAPH_BUCKETS of them, except the Snakefile's localrules (SUBMIT_HOST_REDUCES), which
    run beside the submitting Snakemake. Both cases below read this one run."""
    workdir = copy_repo(tmp_path_factory.mktemp("slurm-run") / "repo")
    local_plan = json.loads((default_run / "results/topics/shards/posts/plan.json").read_text())
    assert len(local_plan["shards"]) == 1
    local_config = yaml.safe_load((default_run / "config/config.yaml").read_text())
    assert local_config.get("ingest", {}).get("buckets", 1) == 1  # the schema's default: one job
    config_path = workdir / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["topics"]["shard_posts"] = -(-local_plan["posts"] // 3)  # a third of the posts
    config["ingest"]["buckets"] = GRAPH_BUCKETS
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    jobs_before = set(slurm_cluster.run("squeue", "-h", "--states=all", "-o", "%i").stdout.split())
    proc = slurm_cluster.run(
        sys.executable,
        "-c",
        SNAKEMAKE_CAPPED_STATUS_WAIT,
        "--profile",
        "profiles/slurm",
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--latency-wait",
        "5",
        "--retries",
        "0",
        *SLURM_TARGETS,  # before the options that take a list
        # a group job's width: its jobs one at a time, so it requests one job's CPU and memory
        # (--cores does not limit the run itself on a cluster, only the groups' layering)
        "--cores",
        "1",
        "--groups",
        *(f"{rule}={group}" for rule, group in BUCKET_GROUPS.items()),
        "--group-components",
        *(f"{group}={GRAPH_BUCKETS}" for group in sorted(set(BUCKET_GROUPS.values()))),
        cwd=workdir,
        timeout=1500,
    )
    assert proc.returncode == 0, _failure_report(workdir, proc)
    assert "squeue" in proc.stdout + proc.stderr or "Slurm" in proc.stdout + proc.stderr

    # every job went through Slurm: the run's jobs are all in squeue, COMPLETED
    rows = slurm_cluster.run("squeue", "-h", "--states=all", "-o", "%i|%T|%k").stdout.splitlines()
    new = [row.split("|") for row in rows if row.split("|")[0] not in jobs_before]
    assert len(new) >= 10, f"expected the pipeline's jobs in squeue, got {new}"
    assert all(state == "COMPLETED" for _, state, _ in new), new
    # a job's comment is rule_<rule>_wildcards_..., a group job's rule_<group>_<its rules>
    submitted = [comment.split("_wildcards")[0].removeprefix("rule_") for *_, comment in new]
    # every job the run ran, in a group job or alone: Snakemake's log names each one's rule and
    # job id (a group job's jobs may be listed more than once: each id is counted once)
    log = max((workdir / ".snakemake" / "log").glob("*.snakemake.log"), key=os.path.getmtime)
    job_ids = set(
        re.findall(
            r"^\s*(?:localrule|rule|checkpoint) (\w+):\n(?:\s+\w+: .*\n)*?\s+jobid: (\d+)$",
            log.read_text(),
            flags=re.MULTILINE,
        )
    )
    ran = [rule for rule, _ in sorted(job_ids)]
    return SlurmPipeline(workdir, local_plan, submitted, ran)


@SLURM_PIPELINE_TIMEOUT
def test_cpu_stages_on_slurm_equal_local_run(slurm_pipeline, default_run):
    """Also: the BM25 topic splits run as separate Slurm jobs per bucket and shard (a shard or
    more per bucket here, one in the local run), and their output equals the local run's."""
    workdir, submitted = slurm_pipeline.workdir, slurm_pipeline.submitted
    submitted_rules = set(submitted)
    assert {"synth", "ingest", "graph", "groupness", "topic_splits"} <= submitted_rules, (
        submitted_rules
    )
    # the per-bucket rules ran bundled: each group a few Slurm jobs, none of its rules alone
    ran = slurm_pipeline.ran
    for group in set(BUCKET_GROUPS.values()):
        bundled = [rule for rule, g in BUCKET_GROUPS.items() if g == group]
        jobs = sum(ran.count(rule) for rule in bundled)
        group_jobs = submitted.count(f"{group}_{'_'.join(sorted(bundled))}")
        assert 1 <= group_jobs < jobs, (group, jobs, submitted)
        assert not set(bundled) & submitted_rules, submitted_rules
    # the sharded BM25 stage: a cut per posts bucket, a statistics and a scoring job per shard
    # and one merge, each its own Slurm job (the statistics' reduce runs on the submit host)
    plans = [
        json.loads((workdir / f"results/topics/shards/posts/{b}/plan.json").read_text())
        for b in range(GRAPH_BUCKETS)
    ]
    shards = sum(len(plan["shards"]) for plan in plans)
    for rule, jobs in (
        ("topic_shards", GRAPH_BUCKETS),
        ("topic_shard_stats", shards),
        ("topic_shard_score", shards),
        ("topic_splits", 1),
    ):
        assert submitted.count(rule) == jobs, (rule, submitted)
    assert shards >= GRAPH_BUCKETS
    # the reduces of a few seconds whatever the corpus ran on the submit host (localrules): each
    # ran once and none waited in the queue as a Slurm job of its own
    for rule in SUBMIT_HOST_REDUCES:
        assert ran.count(rule) == 1 and rule not in submitted_rules, (rule, ran, submitted)
    assert sum(plan["posts"] for plan in plans) == slurm_pipeline.local_plan["posts"]

    slurm_files = _parquet_files(workdir)
    local_files = _parquet_files(default_run)
    for files in (
        slurm_files,
        local_files,
    ):  # per-shard files: one or more a bucket here, 1 locally
        for rel in [r for r in files if "/topics/shards/" in r]:
            del files[rel]
    # per-bucket files (posts and group-ness users, GRAPH_BUCKETS here, none locally): the
    # posts buckets together are the local posts table, row for row
    bucket_files = sorted(r for r in slurm_files if "/buckets/" in r)
    posts_buckets = [slurm_files.pop(r) for r in bucket_files if r.startswith("results/posts/")]
    for rel in bucket_files:
        slurm_files.pop(rel, None)
    assert len(posts_buckets) == GRAPH_BUCKETS, bucket_files
    local_posts = pl.read_parquet(local_files.pop(POSTS_TABLE))
    bucketed_posts = pl.concat([pl.read_parquet(p) for p in posts_buckets])
    assert bucketed_posts.height == local_posts.height > 0
    assert bucketed_posts.sort("post_id").equals(local_posts.sort("post_id"))
    # each demographic's D_d as GRAPH_BUCKETS parts (one file locally): together the local D_d,
    # row for row; the parts' self-ID phrase matches are those of the local matches
    for d_d in sorted(
        r for r in local_files if r.endswith("/posts.parquet") and "/demographics/" in r
    ):
        folder = d_d.removesuffix("/posts.parquet")
        parts = [slurm_files.pop(f"{folder}/posts/{b}.parquet") for b in range(GRAPH_BUCKETS)]
        local = pl.read_parquet(local_files.pop(d_d))
        assert pl.read_parquet(parts).sort(local.columns).equals(local.sort(local.columns)), d_d
        found = [
            slurm_files.pop(f"{folder}/selfid/{b}.matches.parquet") for b in range(GRAPH_BUCKETS)
        ]
        keys = ["post_id", "start"]
        verified = pl.read_parquet(local_files[f"{folder}/selfid_matches.parquet"]).select(keys)
        assert pl.read_parquet(found).select(keys).sort(keys).equals(verified), folder
        # the users table's rows per bucket (what each bucket's D_d job read): together the
        # local users table, each part its own bucket's authors only
        user_parts = [slurm_files.pop(f"{folder}/users/{b}.parquet") for b in range(GRAPH_BUCKETS)]
        users = pl.read_parquet(local_files[f"{folder}/users.parquet"])
        assert users.height > 0
        assert pl.read_parquet(user_parts).sort("author").equals(users), folder
        for b, part in enumerate(user_parts):
            authors = pl.read_parquet(part)["author"]
            assert set(authors) <= set(pl.read_parquet(posts_buckets[b])["author"]), part
    assert slurm_files, "the Slurm run wrote no Parquet files"
    for target in SLURM_TARGETS:
        assert (workdir / target).is_file(), target
    missing = sorted(set(slurm_files) - set(local_files))
    assert not missing, f"files of the Slurm run absent from the local run: {missing}"
    different = []
    for rel, path in slurm_files.items():
        left = pl.read_parquet(path)
        right = pl.read_parquet(local_files[rel])
        if left.schema != right.schema or not left.equals(right):
            different.append(rel)
    assert not different, f"Slurm and local outputs differ: {different}"


@SLURM_PIPELINE_TIMEOUT
def test_graph_buckets_on_slurm_equal_local_run(slurm_pipeline, default_run):
    """The posts and the graph as GRAPH_BUCKETS user buckets (ingest.buckets), each map job run
    through Slurm (an ingest per input file writing its bucket files, a merge per bucket and the report; a group-ness job,
    a D_d parts job and a self-ID search job per bucket, for every demographic; one membership and one
    co-membership job per bucket, one count job and one reduce; the per-bucket ones bundled in
    group jobs), gives the single-machine run's one-job graph, and the dataset exported
    downstream of it is the local export, file for file."""
    ran = slurm_pipeline.ran
    ingest_jobs = ran.count("ingest")
    assert ingest_jobs >= 1, ran
    for rule, jobs in (
        ("split_posts", 0),  # each ingest job writes its shard's bucket files
        ("merge_bucket", GRAPH_BUCKETS),
        ("ingest_report", 1),
        ("merge_posts", 0),
        ("groupness_bucket", GRAPH_BUCKETS),  # every demographic's seed users of a bucket
        ("groupness_posts", GRAPH_BUCKETS),
        ("selfid_bucket", GRAPH_BUCKETS),
        ("graph_bucket", GRAPH_BUCKETS),
        ("graph_subreddits", 1),
        ("graph_overlaps", GRAPH_BUCKETS),
        ("graph", 1),
    ):
        assert ran.count(rule) == jobs, (rule, ran)
    workdir = slurm_pipeline.workdir
    # the buckets' files are temp(): gone once the reduce has read them
    assert not list((workdir / "results/graph/buckets").rglob("*.parquet"))
    for name in ("subreddits.parquet", "neighbours.parquet"):
        bucketed = pl.read_parquet(workdir / "results/graph" / name)
        one_job = pl.read_parquet(default_run / "results/graph" / name)
        assert bucketed.height > 0, name
        assert bucketed.schema == one_job.schema and bucketed.equals(one_job), name
    summary = json.loads((workdir / "results/graph/summary.json").read_text())
    assert summary == json.loads((default_run / "results/graph/summary.json").read_text())
    export = workdir / "results/dataset/export"
    local_export = default_run / "results/dataset/export"
    # the local run's export folder also holds the report's HTML pages of the dataset (the
    # default target): the files of the export job itself must be there and equal
    exported = sorted(p.relative_to(export) for p in export.rglob("*") if p.is_file())
    assert {Path(name) for name in EXPORT_FILES} <= set(exported), exported
    missing = [rel for rel in exported if not (local_export / rel).is_file()]
    assert not missing, f"files of the Slurm export absent from the local export: {missing}"
    for rel in exported:
        if rel.suffix == ".parquet":
            left, right = pl.read_parquet(export / rel), pl.read_parquet(local_export / rel)
            assert left.height > 0 and left.equals(right), rel
        else:
            assert (export / rel).read_bytes() == (local_export / rel).read_bytes(), rel


def test_profile_resources_from_environment(tmp_path):
    """The profile's account and partitions come from SPLITS_SLURM_* variables; LLM-stage jobs go
    to the GPU partition with the long runtime (the evaluation's per-row jobs only read the
    response cache or run builtin models: CPU); memory grows with the attempt (dry run: no
    cluster needed, only the executor plugin)."""
    pytest.importorskip("snakemake_executor_plugin_slurm", reason="pip install '.[slurm]'")
    workdir = copy_repo(tmp_path / "repo")
    env = {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "SPLITS_SLURM_ACCOUNT": "my-lab",
        "SPLITS_SLURM_PARTITION": "cpu",
        "SPLITS_SLURM_GPU_PARTITION": "gpu",
    }
    # one LLM CM on 2 GPUs besides the builtin models: its batch job is the GPU job
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    config["models"]["big"] = {"backend": "vllm", "model": "m", "tensor_parallel_size": 2}
    config["evaluation"]["experiments"]["sample"]["cms"].append("big")
    (tmp_path / "llm.yaml").write_text(yaml.safe_dump(config))
    # vllm is not installed here: the start check would stop; a stand-in engine needs nothing
    site = standin_engine.write_sitecustomize(tmp_path / "site", tmp_path / "builds.jsonl", 0.0)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", "profiles/slurm"]
        + ["--slurm-status-command", "squeue", "--dry-run", "--forceall"]
        + ["--configfile", str(tmp_path / "llm.yaml")],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = re.findall(
        r"^(?:local)?(?:rule|checkpoint) (\w+):\n(?:.*\n)*?\s+resources: (.*)$",
        proc.stdout,
        flags=re.MULTILINE,
    )
    assert len(jobs) > 20, proc.stdout[-2000:]
    llm_rules = {"evaluation_tm_batch", "evaluation_cm_batch", "generate_topics"}
    seen = set()
    for rule, resources in jobs:
        if rule == "all":
            continue
        values = dict(item.split("=", 1) for item in resources.split(", "))
        seen.add(rule)
        assert values["slurm_account"] == "my-lab", (rule, values)
        expected = "gpu" if rule in llm_rules else "cpu"
        assert values["slurm_partition"] == expected, (rule, values)
        if rule in llm_rules:
            assert int(values["runtime"]) >= 720
        if rule == "evaluation_cm_batch":
            assert values["gpu"] == "2", values
        elif rule.startswith("evaluation_"):
            assert values.get("gpu", "0") == "0", (rule, values)
    assert {"synth", "graph", "topic_splits", "evaluation_theorize", "evaluation_cm_batch"} <= seen
