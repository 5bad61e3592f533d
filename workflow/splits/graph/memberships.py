"""Who posted where: the distinct (user, subreddit) memberships of a posts table, users and
subreddits numbered by compiled hash tables of their names' 128-bit hashes (docs/method.md §2.2)."""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import polars as pl

from splits.errors import ConfigError

MEMBERSHIP_BATCH_ROWS = 1_000_000  # posts read at once while collecting memberships
_USER_SEEDS = (0x5EED_0001, 0x5EED_0002)  # the two hashes of an author's name
_NAME_SEEDS = (0x5EED_0003, 0x5EED_0004)  # the two hashes of a subreddit's name
_CODE_BITS = 32  # a pair is packed as user << 32 | subreddit code (sorts by user, then code)


@dataclass(frozen=True)
class Memberships:
    """Who posted where: for every user, the distinct subreddits (codes into ``names``)."""

    names: np.ndarray  # object array of str: every subreddit, lower-cased, sorted
    n_posts: np.ndarray  # int64 per name
    n_users: np.ndarray  # int64 per name: distinct authors
    user_indptr: np.ndarray  # int64, n_users_total + 1
    user_codes: np.ndarray  # int64 codes into names, one per (user, subreddit) membership,
    # ascending within a user


def memberships(posts: pl.LazyFrame, batch_rows: int = MEMBERSHIP_BATCH_ROWS) -> Memberships:
    """Distinct (user, subreddit) memberships with integer codes. Subreddit names compare
    case-insensitively (variants are merged).

    One streaming pass over the two columns, in batches of ``batch_rows`` posts. Each author
    and each subreddit name is reduced to a 128-bit identity (two 64-bit hashes of the name
    with independent seeds: two different names collide with probability about n^2 / 2^129,
    below 1e-22 for 100 million users) and numbered by a compiled hash table; a subreddit's
    name is read back (and lower-cased) once, when it is first numbered. Each batch leaves its
    (user, subreddit) pairs packed in one int64, and the repeats are dropped by sorting (numpy's
    vectorised sort) whenever the pending pairs outnumber the distinct ones, so that the final
    distinct pairs come sorted by user, then subreddit: the CSR rows of the incidence matrix.
    Memory: the two tables and a few times 8 bytes per distinct pair, never the names."""
    missing = {"subreddit", "author"} - set(posts.collect_schema().names())
    if missing:
        raise ConfigError(f"posts table lacks column(s) {sorted(missing)}")
    rows = (
        posts.select("subreddit", "author")
        .drop_nulls()
        .select(
            "subreddit",
            h1=pl.col("author").hash(seed=_USER_SEEDS[0]),
            h2=pl.col("author").hash(seed=_USER_SEEDS[1]),
            s1=pl.col("subreddit").hash(seed=_NAME_SEEDS[0]),
            s2=pl.col("subreddit").hash(seed=_NAME_SEEDS[1]),
        )
    )
    users, raw_names = _UserTable(), _UserTable()
    lower = _LowerNames()
    pairs = _PairSet()
    raw_posts = np.zeros(0, dtype=np.int64)  # posts per raw (case-preserving) name
    for batch in rows.collect_batches(chunk_size=batch_rows):
        known = raw_names.count
        raw = raw_names.number(batch["s1"].to_numpy(), batch["s2"].to_numpy())
        if raw_names.count > known:  # names first seen in this batch: read them once
            first = _first_rows(raw, known, raw_names.count)  # in code order
            lower.add(batch["subreddit"].gather(first).str.to_lowercase().to_list())
        if len(raw_posts) < raw_names.count:
            raw_posts = np.concatenate(
                [raw_posts, np.zeros(raw_names.count - len(raw_posts), dtype=np.int64)]
            )
        user = users.number(batch["h1"].to_numpy(), batch["h2"].to_numpy())
        pairs.add(_pack_pairs(user, raw, lower.code, raw_posts))
    # codes so far number the lower-cased names in order of first appearance: renumber them
    # into the order of the sorted names, then sort the distinct pairs once more
    names, order = lower.sorted()
    keys = pairs.distinct(relabel=order)
    codes = keys & ((1 << _CODE_BITS) - 1)
    indptr = np.searchsorted(keys, np.arange(users.count + 1, dtype=np.int64) << _CODE_BITS)
    del keys
    n_posts = np.bincount(
        order[lower.code[: len(raw_posts)]], weights=raw_posts, minlength=len(names)
    )
    return Memberships(
        names=names,
        n_posts=n_posts.astype(np.int64),
        n_users=np.bincount(codes, minlength=len(names)).astype(np.int64),
        user_indptr=indptr.astype(np.int64),
        user_codes=codes,
    )


@numba.njit(nogil=True, cache=True)
def _pack_pairs(user, raw, lower_code, raw_posts):
    """In place: ``user[i]`` becomes the packed pair of post i (user, lower-cased subreddit
    code), and the post is counted in ``raw_posts`` of its raw name; returns ``user``."""
    for i in range(user.shape[0]):
        raw_posts[raw[i]] += 1
        user[i] = (user[i] << _CODE_BITS) | lower_code[raw[i]]
    return user


class _LowerNames:
    """Raw subreddit names (numbered in order of first appearance) mapped to their lower-cased
    names, numbered in order of first appearance: ``code[raw]``."""

    def __init__(self):
        self.by_name: dict[str, int] = {}
        self.code = np.zeros(0, dtype=np.int64)

    def add(self, lowered: list[str]) -> None:
        new = [self.by_name.setdefault(name, len(self.by_name)) for name in lowered]
        self.code = np.concatenate([self.code, np.array(new, dtype=np.int64)])

    def sorted(self) -> tuple[np.ndarray, np.ndarray]:
        """The lower-cased names sorted, and for each first-appearance code its sorted code."""
        names = np.array(list(self.by_name), dtype=object)
        by_name = np.argsort(names, kind="stable") if len(names) else np.zeros(0, np.int64)
        order = np.empty(len(names), dtype=np.int64)
        order[by_name] = np.arange(len(names))
        return names[by_name], order


class _PairSet:
    """Distinct (user, code) pairs packed in an int64 (``user << 32 | code``): pairs are added
    batch by batch and their repeats dropped whenever the pending pairs outnumber the distinct
    ones, so memory stays within a few times 8 bytes per distinct pair."""

    def __init__(self, min_pending: int = 16_000_000):
        self.min_pending = min_pending
        self.parts: list[np.ndarray] = []
        self.pending = 0
        self.kept = 0

    def add(self, packed: np.ndarray) -> None:
        self.parts.append(packed)
        self.pending += len(packed)
        if self.pending > max(self.min_pending, self.kept):
            self.distinct()

    def distinct(self, relabel: np.ndarray | None = None) -> np.ndarray:
        """The distinct pairs, sorted; ``relabel[code]`` replaces each code first."""
        merged = np.empty(sum(len(p) for p in self.parts), dtype=np.int64)
        at = 0
        while self.parts:  # one part at a time: the parts and the copy never coexist whole
            part = self.parts.pop(0)
            merged[at : at + len(part)] = part
            at += len(part)
            del part
        if relabel is not None:
            _relabel_codes(merged, relabel)
        merged.sort()
        n = _drop_repeats(merged)
        merged = merged[:n].copy() if n < len(merged) else merged
        self.parts, self.pending, self.kept = [merged], 0, len(merged)
        return merged


@numba.njit(nogil=True, cache=True)
def _first_rows(codes, first_code, stop_code):
    """For codes first_code .. stop_code - 1, the row of its first occurrence in ``codes``."""
    rows = np.full(stop_code - first_code, -1, dtype=np.int64)
    for i in range(codes.shape[0]):
        c = codes[i] - first_code
        if c >= 0 and rows[c] < 0:
            rows[c] = i
    return rows


@numba.njit(nogil=True, cache=True)
def _relabel_codes(packed, relabel):
    """In place: the code part of every packed pair replaced by ``relabel[code]``."""
    low = (1 << _CODE_BITS) - 1
    for i in range(packed.shape[0]):
        packed[i] = (packed[i] & ~low) | relabel[packed[i] & low]


@numba.njit(nogil=True, cache=True)
def _drop_repeats(values):
    """In place: the distinct values of a sorted array moved to its front; returns how many."""
    n = 0
    for i in range(values.shape[0]):
        if n == 0 or values[i] != values[n - 1]:
            values[n] = values[i]
            n += 1
    return n


class _UserTable:
    """Open-addressing hash table from 128-bit name identities (of authors, or of subreddits)
    to numbers 0, 1, ... in order of first appearance, grown to stay at most half full. A slot
    is one row of ``slots``: (first hash, second hash, number + 1; 0 when empty)."""

    def __init__(self, size: int = 1 << 16):
        self.slots = np.zeros((size, 3), dtype=np.uint64)
        self.count = 0

    def number(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        out = np.empty(len(h1), dtype=np.int64)
        done = 0
        while done < len(h1):  # the kernel stops when the table is half full: grow it, go on
            if 2 * (self.count + 1) > len(self.slots):
                self.slots = _rehash(self.slots, 2 * len(self.slots))
            self.count, done = _assign_users(h1, h2, self.slots, self.count, out, done)
        return out


@numba.njit(nogil=True, cache=True)
def _assign_users(h1, h2, slots, count, out, start):
    """Numbers of names start, start + 1, ... into ``out``; stops before a new name would
    fill more than half of the table. Returns (names numbered, position reached)."""
    mask = slots.shape[0] - 1
    limit = slots.shape[0] // 2
    for i in range(start, h1.shape[0]):
        slot = h1[i] & mask
        while True:
            if slots[slot, 2] == 0:
                if count + 1 > limit:
                    return count, i
                slots[slot, 0] = h1[i]
                slots[slot, 1] = h2[i]
                count += 1
                slots[slot, 2] = count
                break
            if slots[slot, 0] == h1[i] and slots[slot, 1] == h2[i]:
                break
            slot = (slot + 1) & mask
        out[i] = slots[slot, 2] - 1
    return count, h1.shape[0]


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
