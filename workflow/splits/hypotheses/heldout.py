"""Discovery and held-out halves of a pool of posts, so that a lexicon is scored on posts its
source never saw.

A post goes to the held-out half when a seeded hash of its thread (``conversation_id``; its own
id where the thread is unknown) falls below ``fraction``: replies to one post never sit on both
sides (they share words, names and quotes), the split is the same on every run with the same
seed, and it does not depend on which other posts are in the pool.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import polars as pl

DISCOVERY = "discovery"
HELDOUT = "heldout"


def _unit(seed: int, scope: str, unit: str) -> float:
    digest = hashlib.blake2b(f"{seed}\x1f{scope}\x1f{unit}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def split_halves(
    posts: pl.DataFrame,
    seed: int,
    fraction: float,
    scope: str = "",
    thread_column: str = "conversation_id",
) -> pl.DataFrame:
    """``posts`` with a ``half`` column, ``discovery`` or ``heldout`` (``fraction`` of the
    threads, in expectation). ``scope`` (e.g. the topic and pair) makes the split of one pool
    independent of another's."""
    if thread_column in posts.columns:
        units = posts.get_column(thread_column).fill_null(posts.get_column("post_id"))
    else:
        units = posts.get_column("post_id")
    held = heldout_mask(units.cast(pl.String).to_list(), seed, fraction, scope)
    return posts.with_columns(
        half=pl.Series(np.where(held, HELDOUT, DISCOVERY), dtype=pl.String),
    )


def heldout_mask(units: Iterable[str], seed: int, fraction: float, scope: str = "") -> np.ndarray:
    """``True`` for the posts of the held-out half, given each post's thread (``units``, in the
    posts' order): ``split_halves``'s split without a frame (the lift and the baseline split
    each of their pools, a few hundred posts, where a frame's round trip cost more than the
    hashes)."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"held-out fraction must be in (0, 1), got {fraction}")
    sides: dict[str, bool] = {}
    held = []
    for unit in units:
        side = sides.get(unit)
        if side is None:
            side = sides[unit] = _unit(seed, scope, unit) < fraction
        held.append(side)
    return np.array(held, dtype=bool)
