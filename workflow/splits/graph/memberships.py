"""Who posted where: the distinct (user, subreddit) memberships of a posts table, users and
subreddits numbered by compiled hash tables of their names' 128-bit hashes (docs/method.md §2.2)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
import polars as pl

from splits.errors import ConfigError

MEMBERSHIP_BATCH_ROWS = 1_000_000  # posts read at once while collecting memberships
_USER_SEEDS = (0x5EED_0001, 0x5EED_0002)  # the two hashes of an author's name
_NAME_SEEDS = (0x5EED_0003, 0x5EED_0004)  # the two hashes of a subreddit's name
_CODE_BITS = 32  # a pair is packed as user << 32 | subreddit code (sorts by user, then code)
# authors are numbered in 2^_PART_BITS hash tables, one per value of their first hash's top bits,
# so that a batch's lookups, grouped by table, stay within one cache-sized table at a time (one
# table of every author missed the cache on nearly every post); an author's number within its
# table stays below 2^_LOCAL_BITS (2^31 authors in all: a packed pair fits an int64)
_PART_BITS = 8
_LOCAL_BITS = 31 - _PART_BITS
# the author tables and their pair sets are grown once 7/10 full (linear probing stays short),
# doubled while small and by half when large (memory); a slot is picked by multiply-shift from
# 32 bits of a hash, so that a table's size need not be a power of two
_LOAD = (7, 10)
_SPLIT_ROWS = 1 << 16  # a batch of at least so many posts is grouped by table in parallel
_DOUBLE_BELOW = 1 << 16  # slots a table: below, grown by doubling
_FIBONACCI = 0x9E3779B97F4A7C15  # multiplicative hash of a packed pair (its low bits are a code)


@dataclass(frozen=True)
class Memberships:
    """Who posted where: for every user, the distinct subreddits (codes into ``names``)."""

    names: np.ndarray  # object array of str: every subreddit, lower-cased, sorted
    n_posts: np.ndarray  # int64 per name
    n_users: np.ndarray  # int64 per name: distinct authors
    user_indptr: np.ndarray  # int64, n_users_total + 1
    user_codes: np.ndarray  # int64 codes into names, one per (user, subreddit) membership,
    # ascending within a user


def memberships(
    posts: pl.LazyFrame, batch_rows: int = MEMBERSHIP_BATCH_ROWS, threads: int = 1
) -> Memberships:
    """Distinct (user, subreddit) memberships with integer codes. Subreddit names compare
    case-insensitively (variants are merged).

    One streaming pass over the two columns, in batches of ``batch_rows`` posts. Each author
    and each subreddit name is reduced to a 128-bit identity (two 64-bit hashes of the name
    with independent seeds: two different names collide with probability about n^2 / 2^129,
    below 1e-22 for 100 million users) and numbered by compiled hash tables; a subreddit's name
    is read back (and lower-cased) once, when it is first numbered. Authors are split among 256
    tables by their hash's top bits, each with the set of its authors' (user, subreddit) pairs
    beside it (``_AuthorTable``): a batch's posts are grouped by table, so each table's lookups
    run together in a cache-sized table, shared among ``threads``, and a post whose pair is
    known costs no more than the two lookups. At the end each table's distinct pairs are
    sorted (users numbered table by table, so the tables' sorted pairs follow each other):
    the CSR rows of the incidence matrix. Memory: 34-51 bytes per author and 11-17 bytes per
    distinct pair in the tables (7/10 to 7/15 full), then 8 bytes per pair; never the names."""
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
    users, raw_names = _AuthorTable(threads=threads), _NameTable()
    lower = _LowerNames()
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
        _count_posts(raw, raw_posts)
        users.add(batch["h1"].to_numpy(), batch["h2"].to_numpy(), lower.code[raw])
    # codes so far number the lower-cased names in order of first appearance: the pairs take
    # the codes of the sorted names
    names, order = lower.sorted()
    keys = users.distinct_pairs(relabel=order)
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
def _count_posts(raw, raw_posts):
    """Each post counted in ``raw_posts`` of its raw subreddit name."""
    for i in range(raw.shape[0]):
        raw_posts[raw[i]] += 1


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


@numba.njit(nogil=True, cache=True)
def _first_rows(codes, first_code, stop_code):
    """For codes first_code .. stop_code - 1, the row of its first occurrence in ``codes``."""
    rows = np.full(stop_code - first_code, -1, dtype=np.int64)
    for i in range(codes.shape[0]):
        c = codes[i] - first_code
        if c >= 0 and rows[c] < 0:
            rows[c] = i
    return rows


class _NameTable:
    """Open-addressing hash table from 128-bit name identities (of the subreddits; the authors
    have ``_AuthorTable``) to numbers 0, 1, ... in order of first appearance, grown to stay at
    most half full. A slot is one row of ``slots``: (first hash, second hash, number + 1; 0 when
    empty)."""

    def __init__(self, size: int = 1 << 16):
        self.slots = np.zeros((size, 3), dtype=np.uint64)
        self.count = 0

    def number(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        out = np.empty(len(h1), dtype=np.int64)
        done = 0
        while done < len(h1):  # the kernel stops when the table is half full: grow it, go on
            if 2 * (self.count + 1) > len(self.slots):
                self.slots = _rehash(self.slots, 2 * len(self.slots))
            self.count, done = _assign_names(h1, h2, self.slots, self.count, out, done)
        return out


@numba.njit(nogil=True, cache=True)
def _assign_names(h1, h2, slots, count, out, start):
    """Numbers of names start, start + 1, ... into ``out``; stops before a new name would
    fill more than half of the table. Returns (names numbered, position reached)."""
    mask = slots.shape[0] - 1
    limit = slots.shape[0] // 2
    for i in range(start, h1.shape[0]):
        slot, count = _find_or_add(slots, h1[i], h2[i], h1[i] & mask, count, limit)
        if slot < 0:
            return count, i
        out[i] = slots[slot, 2] - 1
    return count, h1.shape[0]


@numba.njit(nogil=True, cache=True)
def _rehash(slots, size):
    grown = np.zeros((size, 3), dtype=np.uint64)
    for old in range(slots.shape[0]):
        if slots[old, 2] != 0:
            _reinsert(grown, slots[old], slots[old, 0] & (size - 1))
    return grown


@numba.njit(inline="always")
def _find_or_add(table, h1, h2, slot, count, limit):
    """Linear probing of an open-addressing name table (rows: first hash, second hash, number
    + 1 or 0 when empty) from ``slot``: the row of the name (h1, h2), added as number
    ``count`` + 1 if new. Returns (row, names now in the table); row -1, the name not added,
    when it is new and the table already holds ``limit`` names. (``_assign_tables`` writes the
    same probe out in its loop: called there, it cost the author pass about 5%.)"""
    size = table.shape[0]
    while True:
        if table[slot, 2] == 0:
            if count + 1 > limit:
                return -1, count
            table[slot, 0] = h1
            table[slot, 1] = h2
            count += 1
            table[slot, 2] = count
            return slot, count
        if table[slot, 0] == h1 and table[slot, 1] == h2:
            return slot, count
        slot = slot + 1 if slot + 1 < size else 0


@numba.njit(inline="always")
def _reinsert_key(keys, key, at):
    """A key (distinct from those in the set) into the first empty slot (-1) of ``keys`` from
    ``at``: a pair set's growth."""
    size = keys.shape[0]
    while keys[at] >= 0:
        at = at + 1 if at + 1 < size else 0
    keys[at] = key


@numba.njit(inline="always")
def _reinsert(table, row, slot):
    """A name's row (with its number) into the first empty row of ``table`` from ``slot``."""
    size = table.shape[0]
    while table[slot, 2] != 0:
        slot = slot + 1 if slot + 1 < size else 0
    table[slot, 0] = row[0]
    table[slot, 1] = row[1]
    table[slot, 2] = row[2]


def _limit(size):
    """Entries a table of ``size`` slots holds before it is grown (sizes: an int or an array)."""
    return size * _LOAD[0] // _LOAD[1]


def _grown(size: int) -> int:
    """Doubled while small (each growth rehashes every table: few rounds), by half beyond."""
    return 2 * size + 1 if size < _DOUBLE_BELOW else size + size // 2


class _AuthorTable:
    """Authors' 128-bit name identities numbered by 2^_PART_BITS open-addressing tables (rows
    of ``slots``: first hash, second hash, number + 1 or 0 when empty), one per value of the
    first hash's top bits, and beside each the set of its authors' distinct (number, subreddit
    code) pairs (table t's set is ``pairs[pair_start[t]:pair_start[t + 1]]``, -1 when empty).
    The author tables grow together (the hash spreads authors evenly); each pair set grows on
    its own, so that one author of very many subreddits enlarges only its table's set. A
    batch's posts are first grouped by table, then each table's lookups run together, the
    tables shared among ``threads`` (the kernels release the GIL)."""

    def __init__(self, size: int = 1 << 10, pair_size: int = 1 << 12, threads: int = 1):
        parts = 1 << _PART_BITS
        self.slots = np.zeros((parts, size, 3), dtype=np.uint64)
        self.counts = np.zeros(parts, dtype=np.int64)
        self.pair_start = np.arange(parts + 1, dtype=np.int64) * pair_size
        self.pairs = np.full(int(self.pair_start[-1]), -1, dtype=np.int64)
        self.pair_counts = np.zeros(parts, dtype=np.int64)
        self.threads = max(1, threads)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def add(self, h1: np.ndarray, h2: np.ndarray, codes: np.ndarray) -> None:
        """A batch of posts: their authors' hashes and lower-cased subreddit codes."""
        starts, h1, h2, codes = self._group_by_table(h1, h2, codes)
        reached = starts[:-1].copy()
        while True:
            self._spread(_assign_tables, self.slots, self.counts, self.pairs, self.pair_start,
                         self.pair_counts, h1, h2, codes, starts, reached)  # fmt: skip
            if (reached == starts[1:]).all():
                return
            if int(self.counts.max()) >= 1 << _LOCAL_BITS:
                raise ConfigError(
                    f"more than {1 << _LOCAL_BITS:,} authors in one of the graph's "
                    f"{1 << _PART_BITS} author tables (about {1 << 31:,} in all): split the posts "
                    "into user buckets (ingest.buckets) so that each job holds fewer"
                )
            if int(self.counts.max()) + 1 > _limit(self.slots.shape[1]):
                grown = np.zeros((len(self.counts), _grown(self.slots.shape[1]), 3), np.uint64)
                self._spread(_rehash_authors, self.slots, grown)
                self.slots = grown
            sizes = np.diff(self.pair_start)
            full = self.pair_counts + 1 > _limit(sizes)
            if full.any():
                # the sets within a tenth of their limit grow with the full ones: sets fill
                # at about the same pace, and each growth copies every set
                near = full | (self.pair_counts + 1 > sizes * (_LOAD[0] - 1) // _LOAD[1])
                new_sizes = np.where(near, [_grown(int(n)) for n in sizes], sizes)
                start = np.zeros(len(sizes) + 1, dtype=np.int64)
                np.cumsum(new_sizes, out=start[1:])
                grown = np.full(int(start[-1]), -1, dtype=np.int64)
                self._spread(_rehash_pairs, self.pairs, self.pair_start, grown, start)
                self.pairs, self.pair_start = grown, start

    def _group_by_table(self, h1, h2, codes):
        """Counting sort of the posts by their author's table, in input order within a table:
        (starts, h1, h2, codes), table t's posts at starts[t] .. starts[t + 1] - 1. Each thread
        counts, then places, one contiguous part of the batch."""
        workers = self.threads if len(h1) >= _SPLIT_ROWS else 1
        bounds = np.linspace(0, len(h1), workers + 1).astype(np.int64)
        counts = np.zeros((workers, 1 << _PART_BITS), dtype=np.int64)
        self._each(workers, lambda w: _count_by_table(h1, bounds[w], bounds[w + 1], counts[w]))
        starts = np.zeros((1 << _PART_BITS) + 1, dtype=np.int64)
        np.cumsum(counts.sum(axis=0), out=starts[1:])
        # where each part's posts of a table begin: after the earlier parts' posts of the table
        at = starts[:-1] + np.cumsum(counts, axis=0) - counts
        grouped = (np.empty_like(h1), np.empty_like(h2), np.empty(len(codes), dtype=np.int64))
        self._each(workers, lambda w: _place_by_table(h1, h2, codes, bounds[w], bounds[w + 1],
                                                      at[w], *grouped))  # fmt: skip
        return (starts, *grouped)

    def _each(self, workers: int, work) -> None:
        """``work(w)`` for w in 0 .. workers - 1, each in a thread (the kernels release the GIL)."""
        if workers == 1:
            work(0)
            return
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(work, range(workers)))

    def _spread(self, kernel, *args) -> None:
        """``kernel(*args, first, step)`` over the tables, shared among the threads."""
        self._each(self.threads, lambda w: kernel(*args, w, self.threads))

    def distinct_pairs(self, relabel: np.ndarray) -> np.ndarray:
        """Every distinct pair packed as ``user << 32 | relabel[code]``, sorted: users numbered
        densely table by table (each in order of first appearance within its table). Spends
        the tables: the authors' slots are freed before the pairs are collected."""
        self.slots = np.zeros((0, 0, 3), dtype=np.uint64)
        offsets = np.zeros(len(self.counts) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=offsets[1:])
        bounds = np.zeros(len(self.pair_counts) + 1, dtype=np.int64)
        np.cumsum(self.pair_counts, out=bounds[1:])
        out = np.empty(int(bounds[-1]), dtype=np.int64)
        _collect_pairs(self.pairs, self.pair_start, offsets, relabel, bounds, out)
        self.pairs = np.zeros(0, dtype=np.int64)

        def sort(table: int) -> None:  # numpy's sort releases the GIL
            out[bounds[table] : bounds[table + 1]].sort()

        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            list(pool.map(sort, range(len(self.counts))))
        return out


@numba.njit(nogil=True, cache=True)
def _count_by_table(h1, start, stop, counts):
    """Posts start .. stop - 1 counted by their author's table (the hash's top bits)."""
    shift = np.uint64(64 - _PART_BITS)
    for i in range(start, stop):
        counts[np.int64(h1[i] >> shift)] += 1


@numba.njit(nogil=True, cache=True)
def _place_by_table(h1, h2, codes, start, stop, at, g1, g2, gc):
    """Posts start .. stop - 1 copied, in order, to their table's next place (``at[table]``)."""
    shift = np.uint64(64 - _PART_BITS)
    for i in range(start, stop):
        t = np.int64(h1[i] >> shift)
        j = at[t]
        g1[j] = h1[i]
        g2[j] = h2[i]
        gc[j] = codes[i]
        at[t] = j + 1


@numba.njit(inline="always")
def _author_slot(h1, size):
    """Multiply-shift of the hash's low 32 bits (the top bits chose the table) onto 0..size-1."""
    return np.int64(((h1 & np.uint64(0xFFFFFFFF)) * np.uint64(size)) >> np.uint64(32))


@numba.njit(inline="always")
def _pair_slot(key, size):
    """A packed pair (its low bits are a code: mixed first) onto 0..size-1."""
    mixed = (np.uint64(key) * np.uint64(_FIBONACCI)) >> np.uint64(32)
    return np.int64((mixed * np.uint64(size)) >> np.uint64(32))


@numba.njit(nogil=True, cache=True)
def _assign_tables(slots, counts, pairs, pair_start, pair_counts, h1, h2, codes, starts, reached,
                   first, step):  # fmt: skip
    """Tables first, first + step, ...: their posts from ``reached[t]`` on, each author
    numbered (a new one appended to its table) and its (number, code) pair added to the
    table's set; a table stops (``reached[t]`` says where) before a new author or pair would
    fill it beyond its limit (``_limit``; 2^_LOCAL_BITS authors), to be grown and resumed."""
    size = slots.shape[1]
    limit = min(size * _LOAD[0] // _LOAD[1], 1 << _LOCAL_BITS)
    for t in range(first, slots.shape[0], step):
        table = slots[t]
        pair_set = pairs[pair_start[t] : pair_start[t + 1]]
        pair_size = pair_set.shape[0]
        pair_limit = pair_size * _LOAD[0] // _LOAD[1]
        count = counts[t]
        n_pairs = pair_counts[t]
        i = reached[t]
        stop = starts[t + 1]
        while i < stop:
            # _find_or_add and the pair set's find-or-add written out: the hot loop of the
            # stage, where a call cost about 5% (measured at 20k subreddits: 3.1 against 2.95 s
            # for the batches)
            slot = _author_slot(h1[i], size)
            full = False
            while True:
                if table[slot, 2] == 0:
                    if count + 1 > limit:
                        full = True
                        break
                    table[slot, 0] = h1[i]
                    table[slot, 1] = h2[i]
                    count += 1
                    table[slot, 2] = count
                    break
                if table[slot, 0] == h1[i] and table[slot, 1] == h2[i]:
                    break
                slot = slot + 1 if slot + 1 < size else 0
            if full:
                break
            key = ((np.int64(table[slot, 2]) - 1) << _CODE_BITS) | codes[i]
            at = _pair_slot(key, pair_size)
            while True:
                value = pair_set[at]
                if value == key:
                    break
                if value < 0:
                    if n_pairs + 1 > pair_limit:
                        full = True
                        break
                    pair_set[at] = key
                    n_pairs += 1
                    break
                at = at + 1 if at + 1 < pair_size else 0
            if full:
                break
            i += 1
        counts[t] = count
        pair_counts[t] = n_pairs
        reached[t] = i


@numba.njit(nogil=True, cache=True)
def _rehash_authors(slots, grown, first, step):
    """Tables first, first + step, ... of ``slots`` inserted into the larger ``grown``."""
    size = grown.shape[1]
    for t in range(first, slots.shape[0], step):
        for old in range(slots.shape[1]):
            if slots[t, old, 2] != 0:
                _reinsert(grown[t], slots[t, old], _author_slot(slots[t, old, 0], size))


@numba.njit(nogil=True, cache=True)
def _rehash_pairs(pairs, pair_start, grown, grown_start, first, step):
    """Pair sets first, first + step, ...: copied into ``grown`` where their size is kept,
    inserted anew where it grew."""
    for t in range(first, pair_start.shape[0] - 1, step):
        old = pairs[pair_start[t] : pair_start[t + 1]]
        new = grown[grown_start[t] : grown_start[t + 1]]
        size = new.shape[0]
        if size == old.shape[0]:
            new[:] = old
            continue
        for slot in range(old.shape[0]):
            key = old[slot]
            if key >= 0:
                _reinsert_key(new, key, _pair_slot(key, size))


@numba.njit(nogil=True, cache=True)
def _collect_pairs(pairs, pair_start, offsets, relabel, bounds, out):
    """Table t's pairs into ``out[bounds[t]:bounds[t + 1]]`` (unsorted), each author's number
    made dense (``offsets[t]`` + its number in the table) and its code relabelled."""
    low = (1 << _CODE_BITS) - 1
    for t in range(pair_start.shape[0] - 1):
        at = bounds[t]
        for slot in range(pair_start[t], pair_start[t + 1]):
            key = pairs[slot]
            if key >= 0:
                user = offsets[t] + (key >> _CODE_BITS)
                out[at] = (user << _CODE_BITS) | relabel[key & low]
                at += 1
