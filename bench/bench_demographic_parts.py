"""Benchmark: one posts bucket's part of every demographic's D_d (rule groupness_posts,
``splits.demographics.d_posts.write_demographic_parts``) against its peer, the same parts
written one demographic at a time (``write_demographic_posts`` of ``demographic_posts``: a read
of the bucket, a staged write and a sort per demographic, what the job did before).

Generates one bucket of posts (authors, a few hundred subreddits of which some are not kept,
texts of a few dozen words) and six users tables that overlap (a post is in several demographics'
D_d, as in the generated corpora); then times each writer in the same run, interleaved
(``--repeats`` rounds, medians), each in this process after a warm-up, and checks that both
write the same files.

    python bench/bench_demographic_parts.py --posts 1000000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from splits.demographics import d_posts  # noqa: E402
from splits.io import scan_posts, write_parquet  # noqa: E402
from tiny import parse_args  # noqa: E402 - bench/, the script's folder

DEMOGRAPHICS = 6


def make_bucket(posts: int, users: int, subreddits: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    words = pl.Series([f"w{i}" for i in range(2000)])
    n_words = rng.integers(5, 60, posts)
    flat = words.gather(rng.zipf(1.3, int(n_words.sum())) % len(words))
    texts = (
        pl.DataFrame({"w": flat, "doc": np.repeat(np.arange(posts), n_words)})
        .group_by("doc", maintain_order=True)
        .agg(pl.col("w").str.join(" "))
        .get_column("w")
    )
    ids = rng.permutation(posts)
    return pl.DataFrame(
        {
            "post_id": [f"{i:09x}" for i in ids],
            "kind": "comment",
            "subreddit": pl.Series([f"Sub{i}" for i in range(subreddits)]).gather(
                rng.integers(0, subreddits, posts)
            ),
            "author": pl.Series([f"user{i:07d}" for i in range(users)]).gather(
                rng.integers(0, users, posts)
            ),
            "created_utc": rng.integers(1_500_000_000, 1_700_000_000, posts),
            "text": texts,
            "score": rng.integers(-5, 100, posts),
            "conversation_id": [f"{i:09x}" for i in ids],
            "reply_to": pl.Series([None] * posts, dtype=pl.String),
        }
    )


def users_tables(users: int, seed: int) -> list[pl.DataFrame]:
    """Six overlapping users tables: a fifth to a third of the bucket's users each."""
    rng = np.random.default_rng(seed + 1)
    tables = []
    for d in range(DEMOGRAPHICS):
        chosen = np.sort(rng.choice(users, size=int(users * (0.2 + 0.03 * d)), replace=False))
        tables.append(
            pl.DataFrame(
                {
                    "author": [f"user{i:07d}" for i in chosen],
                    "groupness": rng.random(len(chosen)),
                    "percentile": rng.random(len(chosen)) * 100,
                }
            )
        )
    return tables


def one_pass_each(posts, users, kept, paths) -> list[int]:
    return [
        d_posts.write_demographic_posts(d_posts.demographic_posts(posts, u, kept), p)
        for u, p in zip(users, paths, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=1_000_000, help="posts in the bucket")
    parser.add_argument("--users", type=int, default=40_000, help="authors in the bucket")
    parser.add_argument("--subreddits", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, posts=5000, users=400, subreddits=40, repeats=1)
    os.environ.setdefault("POLARS_MAX_THREADS", "1")  # as the rule runs it (threads: 1)
    with tempfile.TemporaryDirectory(prefix="bench_dd_") as tmp:
        folder = Path(tmp)
        bucket_path = folder / "bucket.parquet"
        write_parquet(make_bucket(args.posts, args.users, args.subreddits, args.seed), bucket_path)
        users = users_tables(args.users, args.seed)
        kept = [f"sub{i}" for i in range(0, args.subreddits, 4)] + [
            f"Sub{i}" for i in range(1, args.subreddits, 4)
        ]  # names in both cases: the stage compares them case-insensitively
        posts = scan_posts([bucket_path])
        runs = {"stage": [], "peer": []}
        writers = {"stage": d_posts.write_demographic_parts, "peer": one_pass_each}
        counts = {}
        for round_ in range(args.repeats + 1):  # round 0 warms up
            for name, writer in writers.items():
                paths = [folder / f"{name}_{d}.parquet" for d in range(DEMOGRAPHICS)]
                start = time.perf_counter()
                counts[name] = writer(posts, users, kept, paths)
                if round_:
                    runs[name].append(time.perf_counter() - start)
        for d in range(DEMOGRAPHICS):
            stage = pl.read_parquet(folder / f"stage_{d}.parquet")
            peer = pl.read_parquet(folder / f"peer_{d}.parquet")
            assert stage.equals(peer), d
            assert stage["post_id"].is_sorted()
        assert counts["stage"] == counts["peer"]
        stage, peer = statistics.median(runs["stage"]), statistics.median(runs["peer"])
        load = os.getloadavg()[0]
        print(
            f"{args.posts:,} posts in the bucket, D_d parts of {DEMOGRAPHICS} demographics: "
            f"{sum(counts['stage']):,} rows"
        )
        print(f"one read and one sort for all (the stage): {stage:7.2f} s (median)")
        print(f"one pass each (the peer, before):          {peer:7.2f} s (median)")
        print(f"ratio peer / stage {peer / stage:.2f}x; load average {load:.1f}")
        print("same D_d parts")


if __name__ == "__main__":
    main()
