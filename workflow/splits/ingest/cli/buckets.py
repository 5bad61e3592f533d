"""The posts table as buckets by author (``ingest.buckets`` > 1; splits.ingest.partition; each
ingest shard is written as its P bucket files by ``splits ingest --out-dir``):
``merge-bucket`` (bucket b of every shard -> posts bucket b and its report), ``ingest-report``
(the shards' and buckets' reports -> the ingest report, the same totals as ``merge-posts``
writes)."""

from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


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
    "merge-bucket": (configure_merge, run_merge),
    "ingest-report": (configure_report, run_report),
}
