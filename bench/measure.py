"""Time and peak memory of one command in its own process, for the benchmarks that compare a
stage with its peer each run alone (``bench_groupness_reduce.py``, ``bench_selfid_users.py``)."""

from __future__ import annotations

import os
import subprocess
import time


def run_measured(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one process, with ``POLARS_MAX_THREADS=1``. Linux
    reports as a child's peak at least this process's resident memory when it started the child
    (the fork's, carried over at exec), so a caller stays small: it makes its inputs in a child
    of their own."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ, "POLARS_MAX_THREADS": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    if status:
        raise SystemExit(f"failed ({status}): {' '.join(cmd)}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024
