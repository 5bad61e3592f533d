"""``splits ingest``: one ConvoKit / Pushshift input shard -> its posts table and ingest report.

By hand: ``splits ingest --input PATH --out posts.parquet --report report.json
[--bots resources/bots.txt] --config config/config.yaml`` (or ``--settings JSON``). With
``--out-dir DIR`` instead of ``--out`` (rule ``ingest`` when ``ingest.buckets`` > 1) the posts
are written as ``ingest.buckets`` files by author, ``DIR/0.parquet`` ...; the settings then
carry ``buckets`` too."""

from __future__ import annotations

import argparse
import os

# ingest does no linear algebra: numpy (the id-hash buckets, the line count) would otherwise
# start OpenBLAS's thread pool on import, whose idle threads spin (~1% of the stage's CPU)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.ingest.bots import load_bot_list
from splits.ingest.read import ingest_shard
from splits.ingest.settings import IngestBucketsSettings, IngestSettings


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", required=True, help="ConvoKit dir / .corpus.zip, or NDJSON(.zst)"
    )
    out = parser.add_mutually_exclusive_group(required=True)
    out.add_argument("--out", help="posts Parquet of this shard")
    out.add_argument(
        "--out-dir", help="ingest.buckets > 1: this shard's posts as one file per bucket here"
    )
    parser.add_argument("--report", required=True, help="ingest report JSON of this shard")
    parser.add_argument("--shard", help="shard name in the report (default: from the input name)")
    parser.add_argument(
        "--bots", help="known-bot list, one name per line (AutoModerator is always dropped)"
    )
    add_settings_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.out_dir is None:
        settings, out = settings_from_args(args, IngestSettings), args.out
    else:
        settings, out = settings_from_args(args, IngestBucketsSettings), args.out_dir
    if settings.chunk_mb <= 0:
        raise ConfigError("ingest.chunk_mb: must be positive")
    bots = load_bot_list(args.bots)
    ingest_shard(args.input, out, args.report, settings, shard=args.shard, bots=bots)
    return 0
