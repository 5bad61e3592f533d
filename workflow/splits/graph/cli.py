"""``splits graph``: the subreddit graph (top subreddits by users, nearest neighbours by shared
users) from the cleaned posts."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from splits.config.settings import add_settings_arguments, settings_from_args
from splits.errors import ConfigError
from splits.graph.build import compute_graph, summary
from splits.graph.settings import GraphSettings
from splits.io import scan_posts, write_json, write_parquet

log = logging.getLogger(__name__)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--posts", nargs="+", required=True, help="cleaned posts Parquet files")
    parser.add_argument(
        "--out-dir",
        required=True,
        help="writes subreddits.parquet, neighbours.parquet, summary.json",
    )
    parser.add_argument("--threads", type=int, default=1, help="product blocks computed at once")
    add_settings_arguments(parser)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, GraphSettings)
    for path in args.posts:
        if not Path(path).exists():
            raise ConfigError(f"--posts: input {path} does not exist")
    result = compute_graph(scan_posts(list(args.posts)), settings, threads=max(1, args.threads))
    out = Path(args.out_dir)
    write_parquet(result.subreddits, out / "subreddits.parquet")
    write_parquet(result.neighbours, out / "neighbours.parquet")
    write_json(summary(result, settings), out / "summary.json")
    log.info("wrote %s", out)
    return 0
