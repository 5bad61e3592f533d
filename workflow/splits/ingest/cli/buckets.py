"""The posts table as buckets by author (``ingest.buckets`` > 1; splits.ingest.partition):
``split-posts`` (one ingest shard -> its P bucket files), ``merge-bucket`` (bucket b of every
shard -> posts bucket b and its report), ``ingest-report`` (the shards' and buckets' reports ->
the ingest report, the same totals as ``merge-posts`` writes)."""

from __future__ import annotations

import argparse
import logging

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.ingest.settings import PostsBucketSettings

log = logging.getLogger(__name__)


def configure_split(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--posts", required=True, help="one ingest shard's posts Parquet")
    parser.add_argument("--out-dir", required=True, help="writes 0.parquet .. P-1.parquet")
    add_settings_arguments(parser)


def run_split(args: argparse.Namespace) -> int:
    from pathlib import Path

    from splits.ingest.partition import split_posts

    settings = settings_from_args(args, PostsBucketSettings)
    if not Path(args.posts).exists():
        raise ConfigError(f"--posts: input {args.posts} does not exist")
    rows = split_posts(args.posts, settings.buckets, args.out_dir)
    log.info("%s: %d posts -> buckets of %s posts", args.posts, sum(rows), rows)
    return 0


def configure_merge(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--posts", nargs="+", required=True, help="this bucket's file of every shard, in order"
    )
    parser.add_argument("--out", required=True, help="posts bucket Parquet")
    parser.add_argument("--report", required=True, help="the bucket's report JSON")


def run_merge(args: argparse.Namespace) -> int:
    from splits.ingest.merge import merge_bucket

    report = merge_bucket(args.posts, args.out, args.report)
    log.info(
        "%d posts; dropped %d bot records and %d duplicates",
        report["posts"], report["bot_posts"], report["duplicate_id"],
    )  # fmt: skip
    return 0


def configure_report(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shard-reports", nargs="+", required=True, help="every shard's report")
    parser.add_argument(
        "--bucket-reports", nargs="+", required=True, help="every bucket's report, in order"
    )
    parser.add_argument("--report", required=True, help="ingest report JSON")


def run_report(args: argparse.Namespace) -> int:
    from splits.ingest.merge import reduce_reports

    report = reduce_reports(args.shard_reports, args.bucket_reports, args.report)
    log.info(
        "%d records -> %d posts in %d buckets; dropped %s",
        report["records"], report["posts"], len(report["buckets"]),
        {k: v for k, v in report["dropped"].items() if v},
    )  # fmt: skip
    return 0


# subcommand of ``splits`` -> (configure_parser, run); the table in splits.cli names this module
SUBCOMMANDS = {
    "split-posts": (configure_split, run_split),
    "merge-bucket": (configure_merge, run_merge),
    "ingest-report": (configure_report, run_report),
}
