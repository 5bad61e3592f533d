"""Partial re-runs: after a full default run, changing one config slice schedules exactly the jobs
downstream of that slice, read from Snakemake's own dry run.

Oracle: for each change, the outputs of the jobs that consume the changed slice (named here from
what each stage means, not from Snakemake) and everything downstream of them in the file graph
(`--detailed-summary` lists every output with its inputs). Snakemake's verdict is the `plan`
column of `--detailed-summary` (per output file) and the job counts of `--dry-run --quiet rules`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import snakemake_fork
import yaml

PENDING = "update pending"


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = snakemake_fork.run(["--cores", "2", *args], workdir, env, 600)
    assert proc.returncode == 0, (
        f"{' '.join(proc.args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


class Output:
    def __init__(self, line: str):
        fields = line.split("\t")
        self.path = fields[0]
        self.rule = fields[2]
        self.log = fields[3]
        self.inputs = [p for p in fields[4].split(",") if p and p != "-"]
        self.plan = fields[-1]

    @property
    def job(self) -> tuple[str, str]:
        return (self.rule, self.log)


def detailed_summary(workdir: Path) -> dict[str, Output]:
    lines = _snakemake(workdir, "--detailed-summary").stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("output_file\t"))
    outputs = [Output(line) for line in lines[start + 1 :] if line.count("\t") >= 7]
    assert outputs, "empty --detailed-summary"
    return {o.path: o for o in outputs}


def dry_run_job_counts(workdir: Path) -> Counter:
    proc = _snakemake(workdir, "--dry-run", "--quiet", "rules")
    text = proc.stdout + proc.stderr
    counts: Counter = Counter()
    if "Nothing to be done" in text:
        return counts
    table = text[text.index("Job stats:") :]
    for line in table.splitlines()[3:]:
        match = re.fullmatch(r"(\S+)\s+(\d+)", line.strip())
        if not match:
            break
        if match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


def downstream(outputs: dict[str, Output], seeds: set[str]) -> set[str]:
    """Seeds plus every output whose job reads, directly or not, an affected output (a job's
    outputs are affected together)."""
    affected = set(seeds)
    by_job: dict[tuple[str, str], set[str]] = {}
    for out in outputs.values():
        by_job.setdefault(out.job, set()).add(out.path)
    changed = True
    while changed:
        changed = False
        for out in outputs.values():
            if out.path in affected:
                continue
            if any(_under(inp, affected) for inp in out.inputs):
                affected |= by_job[out.job]
                changed = True
        for paths in by_job.values():
            if paths & affected and not paths <= affected:
                affected |= paths
                changed = True
    return affected


def _under(path: str, affected: set[str]) -> bool:
    """An input is affected when it is an affected output or lies inside an affected directory."""
    if path in affected:
        return True
    return any(path.startswith(a.rstrip("/") + "/") for a in affected)


def assert_exactly_downstream(workdir: Path, seed_filter) -> set[str]:
    outputs = detailed_summary(workdir)
    seeds = {path for path, out in outputs.items() if seed_filter(out)}
    assert seeds, "the change should touch at least one job"
    expected = downstream(outputs, seeds)
    scheduled = {path for path, out in outputs.items() if out.plan == PENDING}
    assert scheduled == expected, (
        f"scheduled but not downstream of the change: {sorted(scheduled - expected)}\n"
        f"downstream but not scheduled: {sorted(expected - scheduled)}"
    )
    jobs = Counter(rule for rule, _ in {outputs[p].job for p in expected})
    counts = dry_run_job_counts(workdir)
    counts.pop("all", None)
    assert counts == jobs, f"dry-run job counts {dict(counts)} != expected {dict(jobs)}"
    return expected


@contextlib.contextmanager
def edited(path: Path, transform):
    """Change a file for the duration of the block; restore its bytes and mtime after."""
    original = path.read_bytes()
    stat = path.stat()
    try:
        path.write_text(transform(original.decode()))
        yield
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _yaml_edit(change):
    def transform(text: str) -> str:
        data = yaml.safe_load(text)
        change(data)
        return yaml.safe_dump(data, sort_keys=False)

    return transform


@pytest.fixture(scope="module")
def finished(default_run, tmp_path_factory) -> Path:
    """A copy of the finished default run (results, logs and Snakemake's metadata, mtimes kept)."""
    dest = tmp_path_factory.mktemp("reruns") / "repo"
    shutil.copytree(default_run, dest, symlinks=True)
    return dest


def _config(workdir: Path) -> dict:
    return yaml.safe_load((workdir / "config" / "config.yaml").read_text())


def test_nothing_to_do_after_a_full_run(finished):
    outputs = detailed_summary(finished)
    pending = sorted(p for p, o in outputs.items() if o.plan != "no update")
    assert not pending, f"a second run would redo: {pending}"
    assert dry_run_job_counts(finished) == Counter()


def test_one_tm_reruns_only_its_theories_and_downstream(finished):
    config = _config(finished)
    experiment = next(iter(config["evaluation"]["experiments"].values()))
    tm = next(m for m in experiment["tms"] if config["models"][m].get("kind") == "oracle-lexical")
    other_tms = [m for m in experiment["tms"] if m != tm]
    assert other_tms, "the default experiment should compare several TMs"

    def change(data):
        data["models"][tm]["n_words"] = data["models"][tm].get("n_words", 10) + 3

    with edited(finished / "config" / "config.yaml", _yaml_edit(change)):
        expected = assert_exactly_downstream(
            finished,
            lambda o: o.rule == "evaluation_theorize" and f"/{tm}/" in o.path,
        )
    # the other TMs' theories and predictions stay
    assert not any(f"/{other}/" in p for p in expected for other in other_tms)
    assert not any(p.startswith(("results/topics/", "results/dataset/")) for p in expected)


def test_cm_prompt_file_reruns_classification_only(finished):
    config = _config(finished)
    prompt = finished / config["evaluation"]["cm_prompt"]
    overridden = set(config["evaluation"].get("cm_prompts") or {})
    with edited(prompt, lambda text: text + "\n"):
        expected = assert_exactly_downstream(
            finished,
            lambda o: (
                o.rule == "evaluation_classify"
                and o.path.split("/")[-1].rsplit(".", 1)[0] not in overridden
            ),
        )
    assert not any("/theories/" in p for p in expected)


def test_unused_tm_prompt_file_reruns_nothing(finished):
    """The default TMs are builtin: they take no prompt, so editing it re-runs no job."""
    config = _config(finished)
    tms = {m for e in config["evaluation"]["experiments"].values() for m in e["tms"]}
    if any(config["models"][m]["backend"] != "builtin" for m in tms):
        pytest.skip("the default config has an LLM TM: its prompt is used")
    prompt = finished / config["evaluation"]["tm_prompt"]
    with edited(prompt, lambda text: text + "\nUnused line.\n"):
        outputs = detailed_summary(finished)
        assert not [p for p, o in outputs.items() if o.plan != "no update"]
        assert dry_run_job_counts(finished) == Counter()


def test_one_topic_keywords_rerun_topic_splits_and_downstream(finished):
    config = _config(finished)
    topics_file = finished / config["topics"]["file"]

    def change(data):
        topics = data["topics"] if isinstance(data, dict) and "topics" in data else data
        first = topics[0] if isinstance(topics, list) else None
        assert first is not None, "expected the list format of config/topics.yaml"
        first["keywords"] = [*first["keywords"], "scoreboard"]

    # consumers of a topic's keywords: the sample generator (it plants topic posts with them),
    # BM25 topic splits, and the evaluation subsample (topic categories)
    consumers = {"synth", "topic_splits", "evaluation_subsample"}
    with edited(topics_file, _yaml_edit(change)):
        expected = assert_exactly_downstream(finished, lambda o: o.rule in consumers)
    assert any(p.startswith("results/topics/") for p in expected)


def test_one_threshold_reruns_from_that_demographic_selfid(finished):
    config = _config(finished)
    demographics_file = finished / config["demographics"]["file"]
    data = yaml.safe_load(demographics_file.read_text())
    key = data["demographics"][0]["key"]

    def change(doc):
        entry = doc["demographics"][0]
        entry["threshold"] = 80 if entry.get("threshold") != 80 else 85

    with edited(demographics_file, _yaml_edit(change)):
        expected = assert_exactly_downstream(
            finished, lambda o: o.rule == "selfid" and f"/demographics/{key}/" in o.path
        )
    assert not any(p.startswith(("results/posts/", "results/graph/")) for p in expected)


def test_topic_bm25_method_reruns_topic_scoring_and_downstream(finished):
    """topics.bm25 is a parameter of the shards' scoring: changing it re-runs the scoring and
    what reads it, not the shards, their statistics, ingest, the graph or the demographics."""

    def change(data):
        data["topics"]["bm25"] = {"method": "lucene"}

    with edited(finished / "config" / "config.yaml", _yaml_edit(change)):
        expected = assert_exactly_downstream(finished, lambda o: o.rule == "topic_shard_score")
    assert any(p.startswith("results/topics/topic_posts") for p in expected)
    assert not any(
        p.startswith(
            (
                "results/posts/",
                "results/graph/",
                "results/demographics/",
                "results/topics/shards/posts",
                "results/topics/shards/stats",
                "results/topics/global_stats",
            )
        )
        for p in expected
    )


def test_config_salt_reruns_the_export_and_reaches_its_job(finished, tmp_path, monkeypatch):
    """export.salt with $SPLITS_SALT unset: the export (and what reads it) re-runs, nothing else;
    the salt reaches the export job through the environment the Snakefile sets (no library code
    writes the environment), so the exported author hashes are HMACs with that salt."""
    import hashlib
    import hmac

    import polars as pl

    monkeypatch.delenv("SPLITS_SALT", raising=False)
    work = tmp_path / "repo"
    shutil.copytree(finished, work, symlinks=True)  # the run is changed: keep `finished` as is

    def change(data):
        data["export"]["salt"] = "a-config-salt"

    (work / "config" / "config.yaml").write_text(
        _yaml_edit(change)((work / "config" / "config.yaml").read_text())
    )
    assert_exactly_downstream(work, lambda o: o.rule == "export_dataset")
    _snakemake(work, "results/dataset/export/README.md")
    exported = pl.read_parquet(work / "results" / "dataset" / "export" / "topic_posts.parquet")
    posts = pl.read_parquet(work / "results" / "topics" / "topic_posts.parquet")
    assert exported["author_hash"].to_list() == [
        hmac.new(b"a-config-salt", a.encode(), hashlib.sha256).hexdigest()[:16]
        for a in posts["author"]
    ]
    card = (work / "results" / "dataset" / "export" / "README.md").read_text()
    assert "public development salt" not in card and "a-config-salt" not in card


def test_hypotheses_retrieval_k1_reruns_the_lift_jobs_and_downstream(finished):
    """hypotheses.retrieval is read by the lift jobs only (their settings): changing k1 re-runs
    every set's lift and what reads it (the table, its plots, the report), not the sets or their
    triviality."""

    def change(data):
        data.setdefault("hypotheses", {}).setdefault("retrieval", {})["k1"] = 1.2

    with edited(finished / "config" / "config.yaml", _yaml_edit(change)):
        expected = assert_exactly_downstream(finished, lambda o: o.rule == "hypotheses_lift")
    assert any(p.endswith("hypotheses/lift.parquet") for p in expected)
    assert not any(
        p.startswith(("results/hypotheses/sets/", "results/hypotheses/triviality/"))
        for p in expected
    )


def test_hypotheses_report_k_reruns_the_plots_only(finished):
    """hypotheses.report_k is read by the plots job only."""

    def change(data):
        data.setdefault("hypotheses", {})["report_k"] = 0.1

    with edited(finished / "config" / "config.yaml", _yaml_edit(change)):
        expected = assert_exactly_downstream(finished, lambda o: o.rule == "hypotheses_report")
    assert not any(p.endswith(("lift.parquet", "stages.csv", "filtered.csv")) for p in expected)


def test_fighting_words_min_z_reruns_the_baseline_set_and_downstream(finished):
    """hypotheses.fighting_words is read by the baseline's set job only: its lift, matches and
    triviality, the table and the report follow; no other set and no other set's lift."""

    def change(data):
        data.setdefault("hypotheses", {}).setdefault("fighting_words", {})["min_z"] = 2.5

    with edited(finished / "config" / "config.yaml", _yaml_edit(change)):
        expected = assert_exactly_downstream(
            finished, lambda o: o.rule == "hypotheses_fighting_words"
        )
    assert "results/hypotheses/lift/fighting-words.parquet" in expected
    assert not any(p.endswith("/sample.parquet") for p in expected)


def test_redundancy_jaccard_reruns_the_table_and_downstream(finished):
    """hypotheses.redundancy_jaccard is read by the table job only (not the lift, not the sets)."""

    def change(data):
        data.setdefault("hypotheses", {})["redundancy_jaccard"] = 0.7

    with edited(finished / "config" / "config.yaml", _yaml_edit(change)):
        expected = assert_exactly_downstream(finished, lambda o: o.rule == "hypotheses_table")
    assert not any(p.startswith("results/hypotheses/lift/") for p in expected)


def test_heldout_fraction_reruns_the_baseline_and_every_lift(finished):
    """hypotheses.heldout_fraction is read by the baseline's set job and every lift job."""

    def change(data):
        data.setdefault("hypotheses", {})["heldout_fraction"] = 0.4

    with edited(finished / "config" / "config.yaml", _yaml_edit(change)):
        expected = assert_exactly_downstream(
            finished, lambda o: o.rule in ("hypotheses_fighting_words", "hypotheses_lift")
        )
    assert not any(
        p.startswith("results/hypotheses/triviality/") and "fighting" not in p for p in expected
    )
