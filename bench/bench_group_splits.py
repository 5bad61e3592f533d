"""Benchmark of the strong-vs-weak per-split tables (``splits group-splits``) on a paper-sized
experiment (1,000 rows, four TMs in two groups, one CM and k, the release's 6 demographics, 10
categories and 200 topics), next to its peer measured in the same run: the metrics job's own
split and comparison tables (``splits_table`` + ``comparisons_table``) on the same predictions.

    python bench/bench_group_splits.py --rows 1000 --topics 200
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import polars as pl
from splits.evaluation.group_splits import group_splits_table
from splits.evaluation.metrics import comparisons_table, splits_table
from tiny import parse_args  # bench/, the script's folder

DEMOGRAPHICS = ["black", "catholic", "construction", "hindu_jain_sikh", "jewish", "teacher"]


def predictions(rows: int, topics: int, tms: list[str], seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    pairs = list(itertools.combinations(DEMOGRAPHICS, 2))
    pair = rng.integers(0, len(pairs), rows)
    topic = rng.integers(0, topics, rows)
    frames = []
    for i, tm in enumerate(tms):
        accuracy = 0.65 if i < len(tms) // 2 else 0.55
        frames.append(
            pl.DataFrame(
                {
                    "quadruplet_id": [f"q{r}" for r in range(rows)],
                    "eval_row": np.arange(rows),
                    "tm": tm,
                    "cm": "cm",
                    "k": 42,
                    "correct": rng.random(rows) < accuracy,
                    "detected": True,
                    "demographic_A": [pairs[p][0] for p in pair],
                    "demographic_B": [pairs[p][1] for p in pair],
                    "category": [f"category {t % 10}" for t in topic],
                    "topic": [f"topic {t}" for t in topic],
                }
            )
        )
    return pl.concat(frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, rows=50, topics=10)
    tms = ["strong-1", "strong-2", "weak-1", "weak-2"]
    frame = predictions(args.rows, args.topics, tms, args.seed)
    groups = [("strong", tms[:2]), ("weak", tms[2:])]
    start = time.perf_counter()
    table, _ = group_splits_table(frame, groups, seed=args.seed)
    ours = time.perf_counter() - start
    start = time.perf_counter()
    splits_table(frame)
    comparisons = comparisons_table(frame)
    peer = time.perf_counter() - start
    print(
        f"{args.rows} rows x {len(tms)} TMs, {args.topics} topics: {table.height} group-split keys, "
        f"{comparisons.height} comparison rows"
    )
    print(f"group-splits tables      {ours:7.2f} s")
    print(f"metrics splits+McNemar   {peer:7.2f} s  (ratio {ours / peer:.2f})")


if __name__ == "__main__":
    main()
