"""Benchmark: group-ness and percentiles (splits.demographics.groupness) over a large posts table.

Generates a posts table (Zipf subreddit popularity, heavy-tailed user activity, a community
whose members post in the seed subreddits), writes it as Parquet, then times one demographic's
stage work: U_d, bot and top-1% filters, the three group-ness formulas, percentiles (users
table), and D_d written to Parquet. The peer is the same users table computed with pandas
(groupby on the same columns), checked to give the same scores.

    python bench/bench_groupness.py --posts 1000000     # try small first
    python bench/bench_groupness.py --posts 10000000    # the target: <= 60 s on 2 cores
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from splits.config.definitions import Demographic  # noqa: E402
from splits.config.settings import schema_defaults  # noqa: E402
from splits.demographics.d_posts import (  # noqa: E402
    demographic_posts,
    table_rows,
    write_demographic_posts,
)
from splits.demographics.groupness import build_users, read_bots  # noqa: E402
from splits.demographics.settings import GroupnessSettings  # noqa: E402
from splits.io import write_parquet  # noqa: E402
from tiny import parse_args  # noqa: E402 - bench/, the script's folder


def make_posts(n_posts: int, n_users: int, n_subreddits: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    sub_weights = 1.0 / np.arange(1, n_subreddits + 1) ** 1.1
    sub_weights /= sub_weights.sum()
    user_weights = rng.pareto(1.5, n_users) + 1.0
    user_weights /= user_weights.sum()
    authors = rng.choice(n_users, size=n_posts, p=user_weights)
    subs = rng.choice(n_subreddits, size=n_posts, p=sub_weights)
    # a community: 2% of the users put a third of their posts in ten seed subreddits
    members = rng.random(n_users) < 0.02
    member_post = members[authors] & (rng.random(n_posts) < 0.33)
    subs = np.where(member_post, n_subreddits + rng.integers(0, 10, n_posts), subs)
    # everyone else posts there now and then (0.5% of posts): U_d and D_d get large
    noise = rng.random(n_posts) < 0.005
    subs = np.where(noise, n_subreddits + rng.integers(0, 10, n_posts), subs)
    names = np.array([f"sub{i}" for i in range(n_subreddits)] + [f"seed{i}" for i in range(10)])
    return pl.DataFrame(
        {
            "post_id": pl.int_range(0, n_posts, eager=True).cast(pl.String),
            "kind": pl.Series(["comment"], dtype=pl.String).extend_constant("comment", n_posts - 1),
            "subreddit": names[subs],
            "author": pl.Series(authors).cast(pl.String).str.pad_start(8, "u"),
            "created_utc": np.arange(n_posts, dtype=np.int64),
            "text": pl.Series(["some text of a post"]).extend_constant(
                "some text of a post", n_posts - 1
            ),
            "score": np.ones(n_posts, dtype=np.int64),
            "conversation_id": pl.int_range(0, n_posts, eager=True).cast(pl.String),
            "reply_to": pl.Series([None], dtype=pl.String).extend_constant(None, n_posts - 1),
        }
    )


def pandas_peer(path: Path, seeds: list[str]):
    import pandas as pd

    frame = pd.read_parquet(path, columns=["author", "subreddit"])
    seed_posts = frame[frame["subreddit"].isin(seeds)]
    c = seed_posts.groupby(["author", "subreddit"]).size().rename("c").reset_index()
    c["log"] = np.log1p(c["c"])
    g = c.groupby("author")["log"].sum()
    return g, g.rank(method="min").sub(1).mul(100.0 / len(g))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=0, help="default: posts / 20")
    parser.add_argument("--subreddits", type=int, default=5000)
    parser.add_argument("--no-peer", action="store_true")
    args = parse_args(parser, posts=20000, subreddits=200)
    n_users = args.users or max(100, args.posts // 20)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        started = time.perf_counter()
        posts = make_posts(args.posts, n_users, args.subreddits)
        posts.write_parquet(tmp / "posts.parquet", compression="zstd")
        del posts
        print(f"generated {args.posts} posts in {time.perf_counter() - started:.1f} s")
        seeds = [f"seed{i}" for i in range(10)]
        kept = [f"sub{i}" for i in range(args.subreddits)] + seeds
        demographic = Demographic("bench", "bench", tuple(seeds), ("x",), ())

        started = time.perf_counter()
        scan = pl.scan_parquet(tmp / "posts.parquet")
        result = build_users(
            scan, kept, demographic, read_bots(None), schema_defaults(GroupnessSettings)
        )
        users_s = time.perf_counter() - started
        write_parquet(result.users, tmp / "users.parquet")
        # as the job does: told the posts' rows, so D_d's parts may be read from the scan
        write_demographic_posts(
            demographic_posts(scan, result.users, kept), tmp / "d_posts.parquet", table_rows(scan)
        )
        total = time.perf_counter() - started
        n_dd = pl.scan_parquet(tmp / "d_posts.parquet").select(pl.len()).collect().item()
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"splits groupness: users table {users_s:.1f} s, with D_d written {total:.1f} s "
            f"({result.users.height} users, {n_dd} D_d posts, peak RSS {rss_mb:.0f} MB; "
            "target <= 60 s at 10M posts)"
        )
        if not args.no_peer:
            started = time.perf_counter()
            scores, _percentile = pandas_peer(tmp / "posts.parquet", seeds)
            peer_s = time.perf_counter() - started
            # the peer skips the filters: compare scores on the users both have
            print(f"pandas peer (sum_log + percentiles, no filters, no D_d): {peer_s:.1f} s")
            print(f"ratio pandas / splits (users table): {peer_s / users_s:.1f}x")
            ours = dict(result.users.select("author", "g_sum_log").iter_rows())
            same = all(abs(scores[a] - g) < 1e-8 for a, g in ours.items())
            print(f"same sum_log scores as the peer on the {len(ours)} kept users: {same}")
            return 0 if same else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
