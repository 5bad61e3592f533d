"""``splits fetch-convokit NAME...``: download ConvoKit corpora (e.g. ``subreddit-Cornell``)
through convokit's own downloader, for users with internet access. Needs the ``convokit``
extra (``pip install -e '.[convokit]'``). Prints the directory of each downloaded corpus: put
those paths in ``ingest.inputs`` (with ``synth.enabled: false``)."""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path

from splits.errors import ConfigError

log = logging.getLogger(__name__)

NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def fetch(names: list[str], data_dir: str | Path | None = None) -> dict[str, str]:
    try:
        from convokit import download
    except ImportError as err:
        raise ConfigError(
            "fetch-convokit needs the convokit extra: pip install -e '.[convokit]'"
        ) from err
    out = {}
    for name in names:
        if not NAME.match(name):
            raise ConfigError(
                f"fetch-convokit: {name!r} is not a corpus name (e.g. subreddit-Cornell)"
            )
        kwargs = {"data_dir": str(data_dir)} if data_dir else {}
        path = download(name, **kwargs)
        out[name] = str(path)
        log.info("%s -> %s", name, path)
    return out


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="+", help="ConvoKit corpus names, e.g. subreddit-Cornell")
    parser.add_argument(
        "--data-dir", default=None, help="where to put them (convokit's default otherwise)"
    )


def run(args: argparse.Namespace) -> int:
    for name, path in fetch(args.names, args.data_dir).items():
        print(f"{name}\t{path}")
    return 0
