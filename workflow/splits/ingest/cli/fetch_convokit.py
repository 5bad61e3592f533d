"""``splits fetch-convokit``: download ConvoKit subreddit corpora (needs the convokit extra)."""

from __future__ import annotations

import argparse

from splits.ingest.fetch import fetch


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="+", help="ConvoKit corpus names, e.g. subreddit-Cornell")
    parser.add_argument("--data-dir", help="where to put them (convokit's default otherwise)")


def run(args: argparse.Namespace) -> int:
    for name, path in fetch(args.names, args.data_dir).items():
        print(f"{name}\t{path}")
    return 0
