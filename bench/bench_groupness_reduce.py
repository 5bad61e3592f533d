"""Benchmark: the bucketed group-ness reduce (``splits groupness --bucket-users``) at a fixed
number of seed users per bucket, as the number of buckets grows with the corpus.

Generates each bucket's seed-user table (what rule groupness_bucket writes: names sorted, a
heavy-tailed n_posts, the three formulas' scores on counts of posts in ten seeds) and subreddit
names (``--subreddits`` in every bucket), then runs,
each in its own process, the stage's reduce (the users table merged from the buckets in author
order, holding the counts of n_posts and group-ness values and a bounded window of users) and
its peer, the in-memory reduce over every bucket's table concatenated (what the reduce did
before, and what the one-job stage does over its table). Prints each one's time and peak
memory and checks that both write the same users table and report.

    python bench/bench_groupness_reduce.py --buckets 3 30 --users-per-bucket 100000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from measure import run_measured  # noqa: E402 - bench/, the script's folder
from splits.demographics.groupness import (  # noqa: E402
    AGGREGATE_COLUMNS,
    groupness_scores,
)
from splits.io import MERGE_ROW_GROUP_ROWS, write_parquet  # noqa: E402
from tiny import parse_args  # noqa: E402

SEEDS = [f"seed{i}" for i in range(10)]


def bucket_table(bucket: int, users: int, seed: int) -> pl.DataFrame:
    """One bucket's seed users: per (user, seed) post counts, then the stage's own scores."""
    rng = np.random.default_rng([seed, bucket])
    n_seeds = rng.integers(1, 4, users)
    author = np.repeat(np.arange(users), n_seeds)
    counts = pl.DataFrame(
        {
            "author": pl.Series([f"user_{bucket}_{i:08d}" for i in range(users)])[author],
            "subreddit": pl.Series(SEEDS)[rng.integers(0, len(SEEDS), author.size)],
            "c": (rng.pareto(1.2, author.size) + 1).astype(np.int64),
        }
    ).unique(["author", "subreddit"])
    scores = groupness_scores(counts.lazy()).collect()
    n_posts = (scores["n_seed_posts"] * rng.integers(1, 20, scores.height)).alias("n_posts")
    return scores.with_columns(n_posts).select(AGGREGATE_COLUMNS).sort("author")


def write_buckets(folder: str, n_buckets: int, users: int, subreddits: int) -> None:
    """Each bucket's seed-user table and subreddit names, as rule groupness_bucket writes them."""
    others = [f"subreddit_{i:07d}" for i in range(subreddits)]
    for b in range(n_buckets):
        table = bucket_table(b, users, seed=0)
        path = f"{folder}/{b}.users.parquet"
        write_parquet(table, path, row_group_size=MERGE_ROW_GROUP_ROWS)
        # the bucket's subreddit names: most of the corpus's in every bucket
        write_parquet(
            pl.DataFrame({"subreddit": SEEDS + others}), f"{folder}/{b}.subreddits.parquet"
        )


PEER = """
import sys, polars as pl
from splits.config.definitions import load_demographics
from splits.demographics.groupness import read_bots, reduce_users
from splits.demographics.settings import GroupnessSettings
from splits.config.settings import schema_defaults
from splits.io import write_json, write_parquet
users_files, out, report_out, demographics = sys.argv[1:-3], *sys.argv[-3:]
(d,) = load_demographics(demographics)
settings = schema_defaults(GroupnessSettings)
aggregates = pl.read_parquet(users_files).sort("author")
result = reduce_users(aggregates, set(s.lower() for s in d.seed_subreddits), list,
                      [s.lower() for s in d.seed_subreddits], d, read_bots(None), settings)
write_parquet(result.users, out)
result.report["posts"] = int(result.users["n_posts"].sum())
write_json(result.report, report_out)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets", type=int, nargs="+", default=[3, 30])
    parser.add_argument("--users-per-bucket", type=int, default=100_000)
    parser.add_argument(
        "--subreddits", type=int, default=20_000, help="subreddit names in each bucket's list"
    )
    args = parse_args(parser, buckets=[2, 4], users_per_bucket=2000, subreddits=100)
    print(f"{'buckets':>8} {'users':>10} {'reduce s':>9} {'MiB':>7} {'in-memory s':>12} {'MiB':>7}")
    for n_buckets in args.buckets:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            demographics = tmp / "demographics.yaml"
            demographics.write_text(
                yaml.safe_dump({"demographics": [{"key": "d", "seed_subreddits": SEEDS}]})
            )
            subreddits = tmp / "subreddits.parquet"
            write_parquet(pl.DataFrame({"subreddit": SEEDS, "kept": [True] * 10}), subreddits)
            users_files = [str(tmp / f"{b}.users.parquet") for b in range(n_buckets)]
            names_files = [str(tmp / f"{b}.subreddits.parquet") for b in range(n_buckets)]
            # made in a child: Linux reports as a child's peak memory at least its parent's
            # resident memory when it was started, so this process stays small
            make = f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r})\n"
            make += "from bench_groupness_reduce import write_buckets\n"
            make += f"write_buckets({str(tmp)!r}, {n_buckets}, {args.users_per_bucket}, "
            make += f"{args.subreddits})"
            subprocess.run([sys.executable, "-c", make], check=True)
            stage = [sys.executable, "-m", "splits.cli", "groupness"]
            stage += ["--subreddits", str(subreddits), "--demographics", str(demographics)]
            stage += ["--demographic", "d", "--out-users", str(tmp / "users.parquet")]
            stage += ["--out-report", str(tmp / "report.json")]
            stage += ["--config", str(ROOT / "config" / "config.yaml")]
            stage += ["--bucket-users", *users_files, "--bucket-subreddits", *names_files]
            peer = [
                sys.executable,
                "-c",
                f"import sys; sys.path.insert(0, {str(ROOT / 'workflow')!r})\n{PEER}",
            ]
            peer += [*users_files, str(tmp / "peer.parquet"), str(tmp / "peer.json")]
            peer += [str(demographics)]
            stage_s, stage_mib = run_measured(stage)
            peer_s, peer_mib = run_measured(peer)
            same = pl.read_parquet(tmp / "users.parquet").equals(
                pl.read_parquet(tmp / "peer.parquet")
            )
            report = json.loads((tmp / "report.json").read_text())
            if not same or report != json.loads((tmp / "peer.json").read_text()):
                raise SystemExit("the reduce and the in-memory reduce disagree")
            print(
                f"{n_buckets:>8} {report['users']:>10,} {stage_s:>9.2f} {stage_mib:>7.0f}"
                f" {peer_s:>12.2f} {peer_mib:>7.0f}   same users table and report"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
