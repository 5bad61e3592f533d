"""``splits merge-posts``: the shards' posts merged (cross-shard duplicates, bots seen across
shards) and the ingest report. It reads no setting: its inputs are the shards' outputs."""

from __future__ import annotations

import argparse
import logging

from splits.ingest.merge import merge

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--posts", nargs="+", required=True, help="shard posts Parquet files, in order"
    )
    parser.add_argument("--reports", nargs="+", required=True, help="shard reports, same order")
    parser.add_argument("--out", required=True, help="merged posts Parquet")
    parser.add_argument("--report", required=True, help="ingest report JSON")


def run(args: argparse.Namespace) -> int:
    report = merge(args.posts, args.reports, args.out, args.report)
    log.info(
        "%d records -> %d posts; dropped %s",
        report["records"],
        report["posts"],
        {k: v for k, v in report["dropped"].items() if v},
    )
    return 0
