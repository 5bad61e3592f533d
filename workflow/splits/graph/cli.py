"""``splits graph``: the subreddit graph (top subreddits by users, nearest neighbours by shared
users) from the cleaned posts, in one job or as the reduce of the per-bucket steps
(``graph-bucket``, ``graph-subreddits``, ``graph-overlaps``; splits.graph.buckets)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.graph.settings import (
    GraphBucketSettings,
    GraphOverlapsSettings,
    GraphSettings,
    GraphTopSettings,
)
from splits.io import scan_posts, write_json, write_parquet

log = logging.getLogger(__name__)


def _check_exist(flag: str, paths: list[str]) -> None:
    for path in paths:
        if not Path(path).exists():
            raise ConfigError(f"{flag}: input {path} does not exist")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--posts", nargs="+", help="cleaned posts Parquet files (one job)")
    source.add_argument(
        "--subreddits",
        help="the buckets' subreddit table (graph-subreddits); with --overlaps, --bucket-stats",
    )
    parser.add_argument("--overlaps", nargs="+", help="every bucket's overlaps.parquet")
    parser.add_argument("--bucket-stats", nargs="+", help="every bucket's overlaps.json")
    parser.add_argument(
        "--out-dir",
        required=True,
        help="writes subreddits.parquet, neighbours.parquet, summary.json",
    )
    parser.add_argument("--threads", type=int, default=1, help="product blocks computed at once")
    add_settings_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from splits.graph.build import compute_graph, summary

    settings = settings_from_args(args, GraphSettings)
    if args.posts:
        _check_exist("--posts", args.posts)
        result = compute_graph(scan_posts(list(args.posts)), settings, max(1, args.threads))
    else:
        from splits.graph.buckets import reduce_buckets

        if not args.overlaps or not args.bucket_stats:
            raise ConfigError("--subreddits: needs --overlaps and --bucket-stats of every bucket")
        _check_exist("--subreddits", [args.subreddits])
        _check_exist("--overlaps", args.overlaps)
        _check_exist("--bucket-stats", args.bucket_stats)
        result = reduce_buckets(
            args.subreddits, args.overlaps, args.bucket_stats, settings, max(1, args.threads)
        )
    out = Path(args.out_dir)
    write_parquet(result.subreddits, out / "subreddits.parquet")
    write_parquet(result.neighbours, out / "neighbours.parquet")
    write_json(summary(result, settings), out / "summary.json")
    log.info("wrote %s", out)
    return 0


def configure_bucket(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--posts",
        nargs="+",
        required=True,
        help="posts bucket b (what the rule passes), or any posts files: kept to bucket b",
    )
    parser.add_argument("--bucket", type=int, required=True, help="this job's bucket, 0-based")
    parser.add_argument(
        "--out-dir", required=True, help="writes counts.parquet, memberships.parquet"
    )
    add_settings_arguments(parser)


def run_bucket(args: argparse.Namespace) -> int:
    from splits.graph.buckets import check_bucket, write_bucket_memberships

    settings = settings_from_args(args, GraphBucketSettings)
    check_bucket(args.bucket, settings.buckets)
    _check_exist("--posts", args.posts)
    write_bucket_memberships(
        scan_posts(list(args.posts)), args.bucket, settings.buckets, args.out_dir
    )
    return 0


def configure_subreddits(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--counts", nargs="+", required=True, help="every bucket's counts.parquet")
    parser.add_argument("--out", required=True, help="the subreddit table (Parquet)")
    add_settings_arguments(parser)


def run_subreddits(args: argparse.Namespace) -> int:
    from splits.graph.buckets import write_bucket_subreddits

    settings = settings_from_args(args, GraphTopSettings)
    _check_exist("--counts", args.counts)
    write_bucket_subreddits(args.counts, settings, args.out)
    return 0


def configure_overlaps(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bucket-dir", required=True, help="a graph-bucket --out-dir")
    parser.add_argument(
        "--subreddits", required=True, help="the subreddit table (graph-subreddits)"
    )
    parser.add_argument("--out-dir", required=True, help="writes overlaps.parquet, overlaps.json")
    add_settings_arguments(parser)


def run_overlaps(args: argparse.Namespace) -> int:
    from splits.graph.buckets import write_bucket_overlaps

    settings = settings_from_args(args, GraphOverlapsSettings)
    bucket = Path(args.bucket_dir)
    _check_exist(
        "--bucket-dir", [str(bucket / "counts.parquet"), str(bucket / "memberships.parquet")]
    )
    _check_exist("--subreddits", [args.subreddits])
    write_bucket_overlaps(bucket, args.subreddits, settings.block_mb, args.out_dir)
    return 0


# subcommand of ``splits`` -> (configure_parser, run); the table in splits.cli names this module
SUBCOMMANDS = {
    "graph": (configure_parser, run),
    "graph-bucket": (configure_bucket, run_bucket),
    "graph-subreddits": (configure_subreddits, run_subreddits),
    "graph-overlaps": (configure_overlaps, run_overlaps),
}
