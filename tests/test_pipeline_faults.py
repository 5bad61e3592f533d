"""Bad input and empty results through the whole pipeline (snakemake): each case ends with its
one-line message (or its warning), and no log of any job holds a traceback."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
import snakemake_fork
import yaml
from conftest import copy_repo, error_lines
from helpers import splits_jobs_of, start_snakemake
from snakemake.utils import update_config

REPO = Path(__file__).resolve().parents[1]
CORNELL = REPO.parent / "shared" / "reference" / "realdata" / "convokit_cornell"
SECRET = "sk-test-PIPELINE-5e1f0c"


def _workdir(
    tmp_path: Path,
    overrides: dict,
    files: dict[str, str] | None = None,
    finished_run: Path | None = None,
) -> Path:
    """A working copy with ``overrides`` in its config: a fresh checkout, or a copy of
    ``finished_run`` (the shared default run) when the case is about a stage downstream of the
    stages the overrides leave unchanged: the plain command then re-runs only the jobs whose
    settings changed, as after a user's config edit, not the whole DAG from the corpus."""
    if finished_run is None:
        work = copy_repo(tmp_path / "repo")
    else:
        work = tmp_path / "repo"
        shutil.copytree(finished_run, work, symlinks=True)
    cfg = work / "config" / "config.yaml"
    config = yaml.safe_load(cfg.read_text())
    update_config(config, overrides)
    cfg.write_text(yaml.safe_dump(config))
    for name, text in (files or {}).items():
        (work / name).write_text(text)
    return work


def _snakemake(work: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0", **(env or {})}
    return snakemake_fork.run(["--cores", "2", *args], work, env, 900)


def _logs(work: Path) -> dict[str, str]:
    found = sorted((work / "logs").rglob("*.log")) + sorted(
        (work / ".snakemake" / "log").glob("*.log")
    )
    return {str(p.relative_to(work)): p.read_text(errors="replace") for p in found}


def _no_traceback(work: Path, proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    for name, text in _logs(work).items():
        assert "Traceback" not in text, f"{name}:\n{text[-3000:]}"


def _error_line(work: Path, log: str, prefix: str) -> str:
    """The one error line of a failed job's log."""
    lines = [ln for ln in (work / log).read_text().splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, (work / log).read_text()[-3000:]
    return lines[0]


def test_empty_input_stops_at_merge_with_one_line_naming_it(tmp_path):
    empty = tmp_path / "RC_2019-01.ndjson"
    empty.write_bytes(b"")
    work = _workdir(tmp_path, {"synth": {"enabled": False}, "ingest": {"inputs": [str(empty)]}})
    proc = _snakemake(work, env={"SPLITS_SALT": "test-salt-of-16-chars"})  # real inputs need a salt
    assert proc.returncode != 0
    line = _error_line(work, "logs/merge_posts/merge_posts.log", "splits merge-posts:")
    assert "input error: no posts after ingest" in line and str(empty) in line
    assert not (work / "logs" / "groupness").exists()  # nothing downstream ran
    _no_traceback(work, proc)


def test_stop_word_topic_stops_before_running(tmp_path):
    topics = yaml.safe_load((REPO / "config" / "topics.yaml").read_text())
    topics["topics"].append(
        {"category": "Misc", "topic": "Nothing", "keywords": ["the", "and", "of it"]}
    )
    work = _workdir(
        tmp_path, {"topics": {"file": "config/bad_topics.yaml"}},
        {"config/bad_topics.yaml": yaml.safe_dump(topics)},
    )  # fmt: skip
    proc = _snakemake(work)
    assert proc.returncode != 0
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and "topic 'Nothing'" in lines[0] and "stop word" in lines[0]
    assert not (work / "results").exists()
    _no_traceback(work, proc)


def test_k_too_large_stops_at_the_topic_splits_naming_k_and_pools(tmp_path, default_run):
    # from the default run, as after a user's edit of sampling.k: its dataset removed, so that
    # what the run makes after the edit is seen
    work = _workdir(tmp_path, {"sampling": {"k": 400}}, finished_run=default_run)
    shutil.rmtree(work / "results" / "dataset")
    proc = _snakemake(work)
    assert proc.returncode != 0
    # every topic is too small for k = 400: the topic splits stop before sampling
    line = _error_line(work, "logs/topic_splits/topic_splits.log", "splits topic-splits:")
    assert "no topic can be sampled: sampling.k = 400" in line and "203" in line
    assert re.search(r"the largest are \d+ and \d+ posts", line)
    assert line in proc.stderr  # repeated on the console when the run ends (run health)
    assert not (work / "results" / "dataset" / "quadruplets.parquet").exists()
    assert not (work / "results" / "dataset" / "export").exists()
    _no_traceback(work, proc)


CORNELL_DEMOGRAPHICS = {
    "demographics": [
        {
            "key": "student",
            "display_name": "student",
            "threshold": "auto",
            "seed_subreddits": ["Cornell"],
            "self_id_phrases": ["I'm a student", "I am a student", "as a student"],
            "anti_self_id_phrases": ["I'm not a student"],
        },
        {
            "key": "alumni",
            "display_name": "alumni",
            "threshold": "auto",
            "seed_subreddits": ["Cornell"],
            "self_id_phrases": ["I graduated", "as an alum", "I'm an alum"],
            "anti_self_id_phrases": ["I'm a student"],
        },
    ]
}


def test_one_subreddit_corpus_ends_in_clear_messages(tmp_path):
    """Cornell alone, two demographics seeded on it: the graph lists r/cornell with no
    neighbour; both auto thresholds rest on self-ID curves that do not support them, so the run
    stops at the self-ID jobs with one line each (demographic, rates below and above, the two
    ways on), repeated at the end of the run. With demographics.accept_unsupported_thresholds
    the run goes on: each threshold is a run-health finding, and the topic splits stop with one line
    (every topic post is by a member of both groups)."""
    if not CORNELL.is_dir():
        pytest.skip(f"reference corpus {CORNELL} is absent (it is only present in CI)")
    overrides = {
        "synth": {"enabled": False},
        "ingest": {"inputs": [str(CORNELL)]},
        "demographics": {"file": "config/cornell.yaml"},
        "graph": {"min_posts": 1},
    }
    work = _workdir(
        tmp_path, overrides, {"config/cornell.yaml": yaml.safe_dump(CORNELL_DEMOGRAPHICS)}
    )
    proc = _snakemake(work, env={"SPLITS_SALT": "test-salt-of-16-chars"})  # real inputs need a salt
    assert proc.returncode != 0
    summary = json.loads((work / "results" / "graph" / "summary.json").read_text())
    assert summary["subreddits_kept"] == 1
    assert summary["subreddits_with_fewer_than_k_neighbours"] == {"cosine": 1, "jaccard": 1}
    for key in ("student", "alumni"):
        line = _error_line(work, f"logs/selfid/{key}.log", "splits selfid:")
        assert f"demographic '{key}'" in line and "not supported" in line
        assert re.search(r"[\d.n/a]+ below, [\d.n/a]+ above", line), line
        assert "config/cornell.yaml" in line and "accept_unsupported_thresholds: true" in line
        # repeated at the end of the run (splits.health)
        assert any(line in end for end in proc.stderr.splitlines()), proc.stderr[-3000:]
    assert not (work / "results" / "demographics" / "thresholds.json").exists()
    _no_traceback(work, proc)

    overrides["demographics"]["accept_unsupported_thresholds"] = True
    cfg = work / "config" / "config.yaml"
    config = yaml.safe_load(cfg.read_text())
    update_config(config, overrides)
    cfg.write_text(yaml.safe_dump(config))
    proc = _snakemake(work, env={"SPLITS_SALT": "test-salt-of-16-chars"})
    assert proc.returncode != 0
    thresholds = json.loads((work / "results" / "demographics" / "thresholds.json").read_text())
    for key in ("student", "alumni"):
        assert thresholds["breakpoint_support"][key]["supported"] is False
        assert thresholds["breakpoint_support"][key]["accepted_unsupported"] is True
        log = (work / "logs" / "selfid" / f"{key}.log").read_text()
        assert "WARNING" in log and "not supported" in log
    health = json.loads((work / "results" / "health" / "selfid.json").read_text())
    assert sorted(f["subject"] for f in health) == ["demographic alumni", "demographic student"]
    assert all(f["code"] == "selfid_unsupported_threshold" for f in health)
    ends = [ln for ln in proc.stderr.splitlines() if "WARNING [selfid] demographic" in ln]
    assert len(ends) == 2, proc.stderr[-3000:]
    # every topic post is by a member of both groups: the topic splits stop before sampling
    line = _error_line(work, "logs/topic_splits/topic_splits.log", "splits topic-splits:")
    assert "no topic can be sampled" in line
    assert re.search(r"the largest are \d+ and 0 posts", line), line
    assert "members of both groups not counted" in line
    _no_traceback(work, proc)


def _openai_overrides(server, **spec) -> dict:
    model = {
        "backend": "openai",
        "base_url": server.base_url,
        "model": "served",
        "api_key_env": "SPLITS_TEST_PIPELINE_KEY",
        "backoff_base_s": 0.01,
        "backoff_max_s": 0.02,
        **spec,
    }
    return {
        "models": {"api": model},
        "evaluation": {
            "experiments": {"sample": {"rows": 40, "tms": ["api"], "cms": ["lexical"], "ks": [4]}}
        },
        "probes": {"enabled": False},
        "hypotheses": {"theories": []},  # the default's theories come from oracle-lexical
    }


def test_dripping_server_fails_the_theory_job_within_its_timeout(tmp_path, default_run):
    from splits.testing.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer(default_action="drip", drip_s=0.2) as server:
        overrides = _openai_overrides(server, timeout_s=1, max_retries=0)
        work = _workdir(tmp_path, overrides, finished_run=default_run)
        proc = _snakemake(work, env={"SPLITS_TEST_PIPELINE_KEY": SECRET})
    assert proc.returncode != 0
    log = "logs/evaluation_tm_batch/api.log"  # the TM's prompts run in its batch job
    line = _error_line(work, log, "splits model-batch:")
    assert "model error" in line and "no complete answer within 1 s" in line
    _no_traceback(work, proc)


def test_key_echoed_by_the_server_is_in_no_output_or_log(tmp_path, default_run):
    from splits.testing.fake_openai_server import FakeOpenAIServer

    def echo(body):
        return f"Group A writes about {SECRET}; group B does not."

    with FakeOpenAIServer(reply=echo) as server:
        work = _workdir(tmp_path, _openai_overrides(server), finished_run=default_run)
        proc = _snakemake(work, env={"SPLITS_TEST_PIPELINE_KEY": SECRET})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert server.calls()  # the TM was asked
    # the served TM's theories (40 rows, k = 4), which hold the echoed text
    theories = work / "results" / "evaluation" / "theories" / "rows-40" / "api" / "k-4.parquet"
    assert "Group A writes about" in pl.read_parquet(theories).write_csv()
    for path in [*(work / "results").rglob("*"), *(work / "logs").rglob("*")]:
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in proc.stdout + proc.stderr
    _no_traceback(work, proc)


def _temporaries(work: Path) -> list[Path]:
    """The temporaries (``.name.tmp`` / ``.name.work``, files or folders) under results/, read
    while jobs run: ``os.walk`` passes over a folder that a job renames or removes between its
    listing and the walk's visit (``Path.rglob`` raised FileNotFoundError there)."""
    found = []
    for folder, dirs, files in os.walk(work / "results"):
        found += [
            Path(folder, name)
            for name in (*dirs, *files)
            if name.startswith(".") and name.endswith((".tmp", ".work"))
        ]
    return sorted(found)


def test_killed_jobs_leave_no_temporaries_after_the_plain_command(tmp_path):
    """Kill the running job (SIGKILL, as the OOM killer or a node failure would) three times
    while it writes an output; the plain command then finishes and no temporary is left."""
    work = _workdir(tmp_path, {"synth": {"posts": 150_000}, "probes": {"enabled": False}})
    kills = 0
    for _ in range(3):
        proc = start_snakemake(work)
        before = set(_temporaries(work))
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            jobs = splits_jobs_of(proc.pid)
            if jobs and set(_temporaries(work)) - before:
                for pid in jobs:
                    os.kill(pid, signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.01)
        proc.wait(timeout=300)
        if proc.returncode == 0:
            break
    assert kills >= 1 and _temporaries(work)  # the killed jobs left temporaries behind
    done = _snakemake(work)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _temporaries(work) == []


def test_twin_groups_are_a_run_health_warning_and_share_no_post(tmp_path, default_run):
    """Issue 25: a fifth group on the same seed subreddits as another. Every post of an author
    at or above both thresholds is left out of their pair (checked here against the users and
    thresholds files), the summary counts them, and the run ends with one groups_overlap
    WARNING line naming both groups and the share."""
    demographics = yaml.safe_load((REPO / "config" / "demographics.sample.yaml").read_text())
    catholic = next(d for d in demographics["demographics"] if d["key"] == "catholic")
    demographics["demographics"].append(
        {**catholic, "key": "catholic_twin", "display_name": "Catholic twin"}
    )
    work = _workdir(
        tmp_path,
        {"demographics": {"file": "config/twins.yaml"}},
        {"config/twins.yaml": yaml.safe_dump(demographics)},
        finished_run=default_run,
    )
    proc = _snakemake(work, "results/dataset/quadruplets.parquet", "results/health/sampling.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = work / "results"
    thresholds = json.loads((results / "demographics" / "thresholds.json").read_text())
    members = {}
    for key in ("catholic", "catholic_twin", "jewish"):
        users = pl.read_parquet(results / "demographics" / key / "users.parquet")
        members[key] = set(users.filter(pl.col("percentile") >= thresholds[key])["author"])
    topic_posts = pl.read_parquet(results / "topics" / "topic_posts.parquet")
    author = dict(zip(topic_posts["post_id"], topic_posts["author"], strict=False))
    quads = pl.read_parquet(results / "dataset" / "quadruplets.parquet")
    checked = 0
    for row in quads.iter_rows(named=True):
        both = members.get(row["demographic_A"], set()) & members.get(row["demographic_B"], set())
        for column in ("example_post_ids", "sample_A_ids", "sample_B_ids"):
            for pid in row[column]:
                assert author[pid] not in both, (row["quadruplet_id"], pid)
                checked += 1
    assert checked > 1000
    summary = json.loads((results / "dataset" / "sampling_summary.json").read_text())
    twin = summary["dual_membership"]["catholic/catholic_twin"]
    shared = members["catholic"] & members["catholic_twin"]
    assert twin["dual_members"] == len(shared) > 0.5 * len(members["catholic"])
    assert twin["posts_left_out"] > 0
    health = json.loads((results / "health" / "sampling.json").read_text())
    overlap = [f for f in health if f["code"] == "groups_overlap"]
    assert [f["subject"] for f in overlap] == ["groups catholic and catholic_twin"]
    ends = [ln for ln in proc.stderr.splitlines() if "WARNING [sampling] groups catholic and" in ln]
    assert len(ends) == 1 and f"{twin['dual_share_of_A']:.0%}" in ends[0]
    _no_traceback(work, proc)
