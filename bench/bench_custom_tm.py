"""Benchmark of the TMs a researcher brings.

1. Precomputed theories: reading the theories of the evaluation rows from a large file (ours:
   streamed scan keeping the rows' ids) against reading the whole file and filtering it (the
   peer), each in a fresh process: seconds and peak RSS (VmHWM).
2. Python TMs: calls per second through the registry's cached model (a SQLite commit per
   theory, so that a killed job repeats no finished call), against calling the function
   directly (the peer); and the fully cached re-run.

    python bench/bench_custom_tm.py --theories 200000 --ks 42 --rows 500 --calls 5000
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from tiny import parse_args  # bench/, the script's folder

WORKFLOW = Path(__file__).resolve().parents[1] / "workflow"

READ_OURS = """
import sys, time, polars as pl
sys.path.insert(0, {workflow!r})
from splits.evaluation.custom_tm import precomputed_theories
rows = pl.read_parquet({rows!r})
start = time.perf_counter()
got = precomputed_theories({path!r}, rows, {k}, "bench")
print(time.perf_counter() - start, peak_mib(), got.height)
"""
READ_PEER = """
import time, polars as pl
rows = pl.read_parquet({rows!r})
start = time.perf_counter()
frame = pl.read_parquet({path!r})
got = rows.select("quadruplet_id").join(frame.filter(pl.col("k") == {k}), on="quadruplet_id", how="left")
print(time.perf_counter() - start, peak_mib(), got.height)
"""
# VmHWM: this process's own peak RSS (ru_maxrss would include the forking parent's)
PEAK = """
def peak_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""


def run_child(code: str) -> tuple[float, float, int]:
    out = subprocess.run(
        [sys.executable, "-c", PEAK + code], capture_output=True, text=True, check=True
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def bench_precomputed(args, tmp: Path) -> None:
    rng = random.Random(args.seed)
    words = "parish grading lesson rosary students mass budget hoop kitchen garden".split()
    ids = [f"q{i:07d}" for i in range(args.theories)]
    ks = [int(k) for k in args.ks.split(",")]
    # about 600 characters of varied text per theory, like an LLM's (no cheap compression)
    vocabulary = [f"{w}{i}" for w in words for i in range(100)]
    frame = pl.DataFrame(
        {
            "quadruplet_id": [q for q in ids for _ in ks],
            "k": [k for _ in ids for k in ks],
            "theory": [" ".join(rng.choices(vocabulary, k=80)) for _ in ids for _ in ks],
        }
    )
    path = tmp / "theories.parquet"
    frame.write_parquet(path)
    chosen = rng.sample(ids, args.rows)
    rows_path = tmp / "rows.parquet"
    pl.DataFrame({"quadruplet_id": chosen, "eval_row": range(len(chosen))}).write_parquet(rows_path)
    size_mb = path.stat().st_size / 2**20
    values = dict(workflow=str(WORKFLOW), rows=str(rows_path), path=str(path), k=ks[0])
    ours = run_child(READ_OURS.format(**values))
    peer = run_child(READ_PEER.format(**values))
    assert ours[2] == peer[2] == args.rows
    print(
        f"precomputed: {len(frame)} theories ({size_mb:.0f} MB Parquet), {args.rows} rows at k={ks[0]}"
    )
    print(f"  ours (streamed)       {ours[0]:7.3f} s  peak RSS {ours[1]:7.0f} MiB")
    print(f"  peer (read all)       {peer[0]:7.3f} s  peak RSS {peer[1]:7.0f} MiB")
    print(f"  ratio time {peer[0] / ours[0]:.2f}x, memory {peer[1] / ours[1]:.2f}x")


def bench_callable(args, tmp: Path) -> None:
    sys.path.insert(0, str(WORKFLOW))
    from splits.config.settings import schema_defaults
    from splits.evaluation.settings import TMSettings
    from splits.evaluation.theorize import build_tm_requests
    from splits.llm import load_model

    (tmp / "bench_tm.py").write_text(
        "def theorize(group_a, group_b, topic, posts):\n"
        "    return f'Group A ({group_a}): {len(posts)} posts on {topic}\\nGroup B ({group_b}): -'\n"
    )
    rows = pl.DataFrame(
        {
            "quadruplet_id": [f"q{i}" for i in range(args.calls)],
            "eval_row": list(range(args.calls)),
            "description": [f"topic {i}" for i in range(args.calls)],
            "category": ["c"] * args.calls,
            "demographic_A": ["catholic"] * args.calls,
            "demographic_B": ["teacher"] * args.calls,
            "example_posts": [[f"post {i} {j}" for j in range(16)] for i in range(args.calls)],
        }
    )
    requests = build_tm_requests(
        rows, 16, None, {"catholic": "Catholic"}, schema_defaults(TMSettings)
    )
    spec = {"backend": "python", "function": f"{tmp / 'bench_tm.py'}:theorize"}
    cache = tmp / "cache.sqlite"
    with load_model("bench", {"bench": spec}, cache_path=cache) as model:
        function = model.backend.function
        start = time.perf_counter()
        model.generate(requests, progress=False)
        ours = time.perf_counter() - start
    with load_model("bench", {"bench": spec}, cache_path=cache) as model:
        start = time.perf_counter()
        model.generate(requests, progress=False)
        cached = time.perf_counter() - start
    from splits.evaluation.custom_tm import callable_inputs

    start = time.perf_counter()
    for request in requests:
        inputs = callable_inputs(request.payload)
        function(**{k: inputs[k] for k in ("group_a", "group_b", "topic", "posts")})
    peer = time.perf_counter() - start
    n = len(requests)
    print(f"python TM: {n} calls")
    print(f"  ours (cached model, one commit per theory) {n / ours:9.0f} calls/s")
    print(f"  ours, fully cached re-run                  {n / cached:9.0f} calls/s")
    print(f"  peer (direct calls)                        {n / peer:9.0f} calls/s")
    print(f"  overhead per call {1e6 * (ours - peer) / n:.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--theories", type=int, default=50_000, help="rows in the theories file")
    parser.add_argument("--ks", default="42", help="comma-separated ks in the file")
    parser.add_argument("--rows", type=int, default=500, help="evaluation rows")
    parser.add_argument("--calls", type=int, default=2000, help="python TM calls")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, theories=500, rows=20, calls=50)
    with tempfile.TemporaryDirectory() as folder:
        bench_precomputed(args, Path(folder))
        bench_callable(args, Path(folder))
    print(json.dumps({"argv": sys.argv[1:]}))


if __name__ == "__main__":
    main()
