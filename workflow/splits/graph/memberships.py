"""Who posted where: the distinct (user, subreddit) memberships of a posts table, users
numbered by a compiled hash table of their names' 128-bit hashes (docs/method.md §2.2)."""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import polars as pl

from splits.errors import ConfigError

MEMBERSHIP_BATCH_ROWS = 1_000_000  # posts read at once while collecting memberships
_USER_SEEDS = (0x5EED_0001, 0x5EED_0002)  # the two hashes of an author's name


@dataclass(frozen=True)
class Memberships:
    """Who posted where: for every user, the distinct subreddits (codes into ``names``)."""

    names: np.ndarray  # object array of str: every subreddit, lower-cased, sorted
    n_posts: np.ndarray  # int64 per name
    n_users: np.ndarray  # int64 per name: distinct authors
    user_indptr: np.ndarray  # int64, n_users_total + 1
    user_codes: np.ndarray  # int64 codes into names, one per (user, subreddit) membership


def memberships(posts: pl.LazyFrame, batch_rows: int = MEMBERSHIP_BATCH_ROWS) -> Memberships:
    """Distinct (user, subreddit) memberships with integer codes. Subreddit names compare
    case-insensitively (variants are merged).

    Two streaming passes over the posts: posts per subreddit name (few groups), then the posts
    in batches of ``batch_rows``, each author reduced to a 128-bit identity (two 64-bit hashes
    of the name with independent seeds: two different names collide with probability about
    n^2 / 2^129, below 1e-22 for 100 million users) and numbered by a compiled hash table; each
    batch leaves its distinct (user, subreddit) pairs, which are finally grouped by user with a
    counting sort. Memory: the user table and 8 bytes per pair, never the names."""
    missing = {"subreddit", "author"} - set(posts.collect_schema().names())
    if missing:
        raise ConfigError(f"posts table lacks column(s) {sorted(missing)}")
    posts = posts.select("subreddit", "author").drop_nulls()
    raw = (
        posts.group_by("subreddit")
        .agg(n=pl.len())
        .sort("subreddit")
        .with_columns(lower=pl.col("subreddit").str.to_lowercase())
        .collect(engine="streaming")
    )
    names = np.array(sorted(set(raw["lower"].to_list())), dtype=object)
    raw_to_code = np.searchsorted(names, raw["lower"].to_numpy().astype(object)).astype(np.int64)
    n_posts = np.bincount(raw_to_code, weights=raw["n"].to_numpy(), minlength=len(names))
    n_names = max(1, len(names))
    users = _UserTable()
    pairs = _PairSet(n_names)
    if raw.height:
        enum = pl.Enum(raw["subreddit"].to_list())
        rows = posts.select(
            h1=pl.col("author").hash(seed=_USER_SEEDS[0]),
            h2=pl.col("author").hash(seed=_USER_SEEDS[1]),
            code=pl.col("subreddit").cast(enum).to_physical(),
        )
        for batch in rows.collect_batches(chunk_size=batch_rows):
            user = users.number(batch["h1"].to_numpy(), batch["h2"].to_numpy())
            code = raw_to_code[batch["code"].to_numpy().astype(np.int64)]
            pairs.add(user * n_names + code, users.count)
    indptr, codes = _group_pairs(pairs.distinct(users.count), users.count, n_names)
    return Memberships(
        names=names,
        n_posts=n_posts.astype(np.int64),
        n_users=np.bincount(codes, minlength=len(names)).astype(np.int64),
        user_indptr=indptr,
        user_codes=codes,
    )


class _PairSet:
    """Distinct (user, code) pairs, packed as ``user * n_names + code``: pairs are added
    batch by batch and their repeats dropped whenever the pending pairs outnumber the distinct
    ones (a linear-time pass), so memory stays within a few times 8 bytes per distinct pair."""

    def __init__(self, n_names: int, min_pending: int = 16_000_000):
        self.n_names = n_names
        self.min_pending = min_pending
        self.parts: list[np.ndarray] = []
        self.pending = 0
        self.kept = 0

    def add(self, packed: np.ndarray, n_users: int) -> None:
        self.parts.append(packed)
        self.pending += len(packed)
        if self.pending > max(self.min_pending, self.kept):
            self.distinct(n_users)

    def distinct(self, n_users: int) -> np.ndarray:
        packed = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=np.int64)
        indptr, codes = _group_pairs(packed, n_users, self.n_names)
        del packed
        users = np.repeat(np.arange(n_users, dtype=np.int64), np.diff(indptr))
        merged = users * self.n_names + codes
        self.parts, self.pending, self.kept = [merged], 0, len(merged)
        return merged


class _UserTable:
    """Open-addressing hash table from 128-bit author identities to user numbers 0, 1, ...
    (in order of first appearance), grown to stay at most half full. A slot is one row of
    ``slots``: (first hash, second hash, user number + 1; 0 when empty)."""

    def __init__(self, size: int = 1 << 16):
        self.slots = np.zeros((size, 3), dtype=np.uint64)
        self.count = 0

    def number(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        need = 2 * (self.count + len(h1))
        if need > len(self.slots):
            self.slots = _rehash(self.slots, 1 << max(need - 1, 1).bit_length())
        out = np.empty(len(h1), dtype=np.int64)
        self.count = _assign_users(h1, h2, self.slots, self.count, out)
        return out


@numba.njit(nogil=True, cache=True)
def _assign_users(h1, h2, slots, count, out):
    mask = slots.shape[0] - 1
    for i in range(h1.shape[0]):
        slot = h1[i] & mask
        while True:
            if slots[slot, 2] == 0:
                slots[slot, 0] = h1[i]
                slots[slot, 1] = h2[i]
                count += 1
                slots[slot, 2] = count
                break
            if slots[slot, 0] == h1[i] and slots[slot, 1] == h2[i]:
                break
            slot = (slot + 1) & mask
        out[i] = slots[slot, 2] - 1
    return count


@numba.njit(nogil=True, cache=True)
def _rehash(slots, size):
    grown = np.zeros((size, 3), dtype=np.uint64)
    mask = size - 1
    for old in range(slots.shape[0]):
        if slots[old, 2] != 0:
            slot = slots[old, 0] & mask
            while grown[slot, 2] != 0:
                slot = (slot + 1) & mask
            grown[slot, 0] = slots[old, 0]
            grown[slot, 1] = slots[old, 1]
            grown[slot, 2] = slots[old, 2]
    return grown


@numba.njit(nogil=True, cache=True)
def _group_pairs(packed, n_users, n_names):
    """CSR (indptr, codes) of the distinct (user, code) pairs in ``packed`` (user * n_names +
    code, repeats allowed): a counting sort by user, then repeats dropped with one mark per
    code (codes keep their first-seen order within a user)."""
    counts = np.zeros(n_users + 1, dtype=np.int64)
    for key in packed:
        counts[key // n_names + 1] += 1
    for u in range(n_users):
        counts[u + 1] += counts[u]
    slots = counts[:-1].copy()
    by_user = np.empty(packed.shape[0], dtype=np.int64)
    for key in packed:
        u = key // n_names
        by_user[slots[u]] = key % n_names
        slots[u] += 1
    mark = np.full(n_names, -1, dtype=np.int64)
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    n = 0
    for u in range(n_users):
        for p in range(counts[u], counts[u + 1]):
            code = by_user[p]
            if mark[code] != u:
                mark[code] = u
                by_user[n] = code
                n += 1
        indptr[u + 1] = n
    return indptr, by_user[:n].copy()
