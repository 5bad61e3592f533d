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
    "bench_graph": "extrapolation to 50,000 subreddits",
    "bench_ingest": "stage/parse+write",
    "bench_ingest_compressed": "load average at the end",
    "bench_llm_dag": "engine builds:",
    "bench_scale": "scale:",
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
