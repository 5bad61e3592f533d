"""Every benchmark script runs: each ``bench/bench_*.py`` at its ``--tiny`` size (bench/tiny.py),
so that a benchmark broken by a change to the stages (an option renamed, a module moved) fails
here instead of going stale unseen. Its numbers at that size mean nothing and are not checked;
that it runs to the end and prints its results is. A benchmark that cannot run on this machine
(no vllm) says so in one line, and the test is skipped with that reason.

The scripts are found by their names, so a new benchmark is covered without a change here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))
from tiny import SKIP_PREFIX  # noqa: E402

SCRIPTS = sorted(BENCH.glob("bench_*.py"))
# whole pipeline runs (a copy of the repository, Snakemake): minutes at their tiny size
SLOW = {"bench_llm_dag", "bench_scale"}
# what each benchmark prints once it has measured (its last table or summary line)
DONE = {
    "bench_bm25": "topic_splits",
    "bench_dag": "dry-run DAG build",
    "bench_demographic_parts": "same D_d parts",
    "bench_graph": "extrapolation to 50,000 subreddits",
    "bench_groupness_reduce": "same users table and report",
    "bench_ingest": "stage/parse+write",
    "bench_ingest_compressed": "load average at the end",
    "bench_llm_engines": "transformers / release-hf",
    "bench_llm_dag": "engine builds:",
    "bench_scale": "scale:",
    "bench_selfid_users": "same curves",
    "bench_topic_tokens": "same tokens and statistics",
}


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO / "workflow"), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}


def _run(script: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_benchmarks_are_found():
    names = {s.stem for s in SCRIPTS}
    assert {"bench_ingest", "bench_graph", "bench_llm_dag", "bench_vllm_vs_hf"} <= names
    assert set(DONE) <= names and SLOW <= names


@pytest.mark.parametrize(
    "script",
    [pytest.param(s, marks=pytest.mark.slow) if s.stem in SLOW else s for s in SCRIPTS],
    ids=lambda s: s.stem,
)
def test_every_benchmark_runs_at_tiny_size(script):
    """Imports, parses its arguments and runs to its last line (a vLLM benchmark where vllm is
    absent: imports, parses its arguments and says why it stops)."""
    proc = _run(script, "--tiny", timeout=900 if script.stem in SLOW else 300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{script.name} --tiny failed:\n{output[-4000:]}"
    skipped = [line for line in proc.stdout.splitlines() if line.startswith(SKIP_PREFIX)]
    if skipped:
        pytest.skip(f"{script.name}: {skipped[0].removeprefix(SKIP_PREFIX)}")
    assert proc.stdout.strip(), f"{script.name} --tiny printed nothing"
    assert "Traceback" not in output
    if script.stem in DONE:
        assert DONE[script.stem] in proc.stdout, proc.stdout[-3000:]


# --- bench_scale's reading of a run: its jobs, the DAG's edges and the critical path ----------
SCALE_LOG = """Building DAG of jobs...
[Thu Nov 26 20:34:49 2026]
rule merge_posts:
    input: results/posts/shards/a.parquet, results/posts/shards/b.parquet
    output: results/posts/posts.parquet
    log: logs/merge_posts/merge_posts.log
    jobid: 3
    benchmark: results/benchmarks/merge_posts/merge_posts.tsv
    reason: Missing output files: results/posts/posts.parquet
    resources: tmpdir=/tmp, mem_mb=4000
Shell command: splits merge > logs/merge_posts/merge_posts.log 2>&1

rule graph_bucket:
    input: results/posts/posts.parquet
    output: results/graph/buckets/0/counts.parquet, results/graph/buckets/0/memberships.parquet
    log: logs/graph/bucket-0.log
    jobid: 9
    benchmark: results/benchmarks/graph/bucket-0.tsv
    wildcards: bucket=0

rule graph_bucket:
    input: results/posts/posts.parquet
    output: results/graph/buckets/1/counts.parquet, results/graph/buckets/1/memberships.parquet
    log: logs/graph/bucket-1.log
    jobid: 10
    benchmark: results/benchmarks/graph/bucket-1.tsv
    wildcards: bucket=1
Finished jobid: 9 (Rule: graph_bucket)

checkpoint topic_shards:
    input: results/posts/posts.parquet
    output: results/topics/shards/posts
    log: logs/topic_shards/topic_shards.log
    jobid: 30
    benchmark: results/benchmarks/topic_shards/topic_shards.tsv

rule topic_shard_stats:
    input: results/topics/shards/posts/00000.parquet, config/topics.yaml
    output: results/topics/shards/stats/00000.json
    log: logs/topic_shard_stats/00000.log
    jobid: 41
    benchmark: results/benchmarks/topic_shard_stats/00000.tsv

localrule report:
    input: results/graph/buckets/0/counts.parquet, results/graph/buckets/1/memberships.parquet, results/topics/shards/stats/00000.json
    output: results/report.md
    jobid: 50

rule graph_bucket:
    input: results/posts/posts.parquet
    output: results/graph/buckets/1/counts.parquet, results/graph/buckets/1/memberships.parquet
    log: logs/graph/bucket-1.log
    jobid: 10
    benchmark: results/benchmarks/graph/bucket-1.tsv
    wildcards: bucket=1
"""


def test_scale_reads_jobs_and_edges_from_the_snakemake_log():
    """Every job block (rule, checkpoint, localrule) once, a job printed again (a retry) kept
    once; an edge where a job reads another's output or a file in its output folder (the
    checkpoint's shards); inputs nobody wrote (config, the ingest shards) give none."""
    import dag_jobs

    jobs = dag_jobs.parse_jobs(SCALE_LOG)
    assert [(j["rule"], j["jobid"]) for j in jobs] == [
        ("merge_posts", 3),
        ("graph_bucket", 9),
        ("graph_bucket", 10),
        ("topic_shards", 30),
        ("topic_shard_stats", 41),
        ("report", 50),
    ]
    assert jobs[0]["input"] == ["results/posts/shards/a.parquet", "results/posts/shards/b.parquet"]
    assert jobs[5]["benchmark"] is None and dag_jobs.job_key(jobs[5]) == "report#50"
    bench = "results/benchmarks/"
    assert dag_jobs.edges(jobs) == sorted(
        [
            (f"{bench}merge_posts/merge_posts.tsv", f"{bench}graph/bucket-0.tsv"),
            (f"{bench}merge_posts/merge_posts.tsv", f"{bench}graph/bucket-1.tsv"),
            (f"{bench}merge_posts/merge_posts.tsv", f"{bench}topic_shards/topic_shards.tsv"),
            (f"{bench}topic_shards/topic_shards.tsv", f"{bench}topic_shard_stats/00000.tsv"),
            (f"{bench}graph/bucket-0.tsv", "report#50"),
            (f"{bench}graph/bucket-1.tsv", "report#50"),
            (f"{bench}topic_shard_stats/00000.tsv", "report#50"),
        ]
    )
    assert dag_jobs.topological_rules(jobs, dag_jobs.edges(jobs)) == [
        "merge_posts",
        "graph_bucket",
        "topic_shards",
        "topic_shard_stats",
        "report",
    ]


def _all_paths(nodes, links):
    children = {n: [b for a, b in links if a == n] for n in nodes}
    has_parent = {b for _, b in links}
    stack = [[n] for n in nodes if n not in has_parent]
    while stack:
        path = stack.pop()
        yield path
        stack.extend(path + [child] for child in children[path[-1]])


def test_scale_critical_path_is_the_longest_path_by_brute_force():
    """On random DAGs the critical path's length is the largest sum of job seconds over every
    path (all enumerated), and the path it returns is a path of the DAG of that length."""
    import random

    import dag_jobs

    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 9)
        nodes = [f"j{i}" for i in range(n)]
        links = [
            (nodes[a], nodes[b]) for a in range(n) for b in range(a + 1, n) if rng.random() < 0.3
        ]
        seconds = {node: rng.choice([0.0, rng.uniform(0, 10)]) for node in nodes}
        length, path = dag_jobs.critical_path(seconds, links)
        best = max(sum(seconds[j] for j in p) for p in _all_paths(nodes, links))
        assert length == pytest.approx(best)
        assert sum(seconds[j] for j in path) == pytest.approx(best)
        assert all((a, b) in links for a, b in zip(path, path[1:], strict=False))
    with pytest.raises(ValueError, match="cycle"):
        dag_jobs.critical_path({"a": 1.0, "b": 1.0}, [("a", "b"), ("b", "a")])


def test_scale_config_fixed_size_and_one_machine_shapes(tmp_path):
    """bench_scale's config: at a fixed bucket size P and the BM25 shards follow
    --posts-per-bucket; with --one-machine (shard_posts None) P is 1 and the shards keep the
    shipped config's own size, the shape a researcher gets from `snakemake --cores N`."""
    import shutil

    import bench_scale
    import yaml

    (tmp_path / "config").mkdir()
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config" / "config.yaml")
    shipped = yaml.safe_load((REPO / "config" / "config.yaml").read_text())

    fixed = yaml.safe_load(bench_scale.bench_config(tmp_path, 3_000_000, 30, 100_000).read_text())
    assert fixed["ingest"]["buckets"] == 30
    assert fixed["topics"]["shard_posts"] == 100_000
    assert fixed["synth"]["posts"] == 3_000_000 and fixed["synth"]["shards"] == 3

    one = yaml.safe_load(bench_scale.bench_config(tmp_path, 3_000_000, 1, None).read_text())
    assert one["ingest"]["buckets"] == 1
    # the shipped config's own value, or no key at all (the schema's default then applies)
    assert one["topics"].get("shard_posts", "absent") == shipped["topics"].get(
        "shard_posts", "absent"
    )
    assert bench_scale.buckets_for(3_000_000, 100_000) == 30


def _scale_result(posts: int, buckets: int, seconds: float) -> dict:
    jobs = [
        {"rule": "ingest", "job": f"ingest:{b}", "s": seconds, "mib": 300.0} for b in range(buckets)
    ] + [{"rule": "export_dataset", "job": "export", "s": 1.0, "mib": 500.0}]
    edges = [[f"ingest:{b}", "export"] for b in range(buckets)]
    return {
        "posts": posts,
        "buckets": buckets,
        "synth_s": 1.0,
        "total_s": seconds * buckets + 1.0,
        "load": [0.0] * 6,
        "disk_bytes": 0,
        "ingested_posts": posts,
        "jobs": jobs,
        "edges": edges,
        "rule_order": ["ingest", "export_dataset"],
    }


@pytest.mark.parametrize(
    ("buckets", "paper_p", "billion_p"),
    [((2, 20), 178_000, 2_000_000), ((1, 1), 1, 1)],  # fixed 500 posts a bucket; --one-machine
)
def test_scale_report_extrapolates_p_of_the_runs_shape(
    tmp_path, capsys, buckets, paper_p, billion_p
):
    """At a fixed bucket size P grows with the posts extrapolated to; where every run had one
    bucket (--one-machine), P stays 1 (before, 89M posts read as P = 89M / the largest size)."""
    import json

    import bench_scale

    results = {
        1_000: _scale_result(1_000, buckets[0], 2.0),
        10_000: _scale_result(10_000, buckets[1], 2.0 if buckets[1] > 1 else 20.0),
    }
    report_json = tmp_path / "report.json"
    bench_scale.report(results, tmp_path / "scale.png", report_json, [10])
    printed = capsys.readouterr().out
    assert f"89M posts (P = {paper_p:,}):" in printed
    projection = json.loads(report_json.read_text())["projection"]
    assert projection[str(1_000_000_000)]["buckets"] == pytest.approx(billion_p)


def test_scale_refuses_to_fit_sizes_of_two_shapes_together(tmp_path):
    """A --one-machine size and a fixed-bucket-size size in one --results file would be fitted
    as one line: the run stops with one line before it measures anything."""
    import argparse
    import json

    import bench_scale

    results = tmp_path / "results.json"
    one = _scale_result(1_000, 1, 20.0) | {"shape": "one machine"}
    results.write_text(json.dumps({"1000": one}))
    args = argparse.Namespace(
        results=results,
        workdir=tmp_path,
        report_only=False,
        posts=[10_000],
        one_machine=False,
        posts_per_bucket=500,
    )
    with pytest.raises(SystemExit, match="holds sizes run as one machine, this run is 500 posts"):
        bench_scale.measure_and_report(args)
    assert not (tmp_path / "posts-10000").exists()  # nothing was run
