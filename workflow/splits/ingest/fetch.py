"""``splits fetch-convokit NAME...``: download ConvoKit corpora (e.g. ``subreddit-Cornell``)
through convokit's own downloader, for users with internet access. Needs the ``convokit``
extra (``pip install -e '.[convokit]'``). Prints the directory of each downloaded corpus: put
those paths in ``ingest.inputs`` (with ``synth.enabled: false``)."""

from __future__ import annotations

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
