"""Subreddit user graph and similarity (docs/method.md §2.2).

Users of a subreddit are the accounts that posted or commented there. The stage keeps the top N
subreddits by number of users among those with at least ``min_posts`` posts, and lists for every
kept subreddit its exact top-K neighbours under Jaccard and cosine similarity of the user sets.

The overlaps are rows of the sparse product of the users x subreddits 0/1 incidence matrix with
itself (``At @ A``), computed in blocks of subreddit rows by one compiled kernel (numba) that
fuses the product with the top-K selection: for each row it accumulates the overlap counts in
one dense counter of the subreddits (the classic sparse-product accumulator), and offers every
touched entry to a bounded heap of the K best per measure, so neither the product nor a dense
block of it is ever materialised. Memory is one counter per thread plus K entries per row and
measure; blocks run in a thread pool (the kernel releases the GIL).

Ordering is exact and deterministic: candidates are ranked by value (descending), ties by
neighbour name (ascending). Ranking keys are single correctly rounded divisions of exact
integers (Jaccard ``o / (a + b - o)``, cosine squared ``o^2 / (a b)``), so pairs whose similarity
is equal as a rational number tie exactly. Subreddits sharing no user are never neighbours, so a
subreddit can have fewer than K neighbours.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np
import polars as pl
import scipy.sparse as sp

from splits.errors import ConfigError
from splits.graph.memberships import (  # noqa: F401 (re-exported: the stage's one namespace)
    MEMBERSHIP_BATCH_ROWS,
    Memberships,
    _PairSet,
    _UserTable,
    memberships,
)
from splits.graph.settings import GraphSettings

log = logging.getLogger(__name__)

MEASURES = ("cosine", "jaccard")

SUBREDDITS_SCHEMA = {
    "subreddit": pl.String,
    "n_users": pl.Int64,
    "n_posts": pl.Int64,
    "kept": pl.Boolean,
    "rank": pl.Int64,
}
NEIGHBOURS_SCHEMA = {
    "subreddit": pl.String,
    "measure": pl.String,
    "rank": pl.Int64,
    "neighbour": pl.String,
    "overlap": pl.Int64,
    "value": pl.Float64,
    "size": pl.Int64,
    "neighbour_size": pl.Int64,
}


# --------------------------------------------------------------------------- memberships


@dataclass(frozen=True)
class Incidence:
    """The users x kept-subreddits 0/1 incidence matrix.

    ``names`` are the kept subreddits in alphabetical order: column j is ``names[j]``, so that
    ordering ties by neighbour name is ordering them by column index. ``sizes[j]`` is the number
    of users of ``names[j]`` (the column sum).
    """

    names: np.ndarray  # object array of str, sorted
    sizes: np.ndarray  # int64, users per subreddit
    by_user: sp.csr_matrix  # users x subreddits
    by_subreddit: sp.csr_matrix  # subreddits x users (the transpose, CSR)

    @property
    def n_subreddits(self) -> int:
        return len(self.names)


def subreddit_table(members: Memberships, top_n: int, min_posts: int) -> pl.DataFrame:
    """Per subreddit: users, posts, and the top-N rule (``rank_subreddits``)."""
    counts = pl.DataFrame(
        {
            "subreddit": members.names.tolist(),
            "n_users": members.n_users,
            "n_posts": members.n_posts,
        },
        schema={"subreddit": pl.String, "n_users": pl.Int64, "n_posts": pl.Int64},
    )
    return rank_subreddits(counts, top_n, min_posts)


def rank_subreddits(counts: pl.DataFrame, top_n: int, min_posts: int) -> pl.DataFrame:
    """``counts`` (subreddit, n_users, n_posts) with ``rank``: the position by number of users
    (descending, ties by name) among the subreddits with at least ``min_posts`` posts, null for
    the others; ``kept`` is ``rank <= top_n``."""
    eligible = (
        counts.filter(pl.col("n_posts") >= min_posts)
        .sort(["n_users", "subreddit"], descending=[True, False])
        .with_row_index("rank", offset=1)
        .select("subreddit", pl.col("rank").cast(pl.Int64))
    )
    return (
        counts.join(eligible, on="subreddit", how="left")
        .with_columns(kept=pl.col("rank").is_not_null() & (pl.col("rank") <= top_n))
        .sort(["kept", "n_users", "subreddit"], descending=[True, True, False], nulls_last=True)
        .select(list(SUBREDDITS_SCHEMA))
        .cast(SUBREDDITS_SCHEMA)
    )


def build_incidence(members: Memberships, subreddits: pl.DataFrame) -> Incidence:
    """Incidence matrix over the kept subreddits; rows are the users with a kept membership.

    The memberships are already CSR rows (codes ascending within a user), so the matrix is
    theirs with the dropped subreddits' entries cut out and the empty rows removed."""
    kept_names = set(subreddits.filter("kept")["subreddit"].to_list())
    kept_mask = np.array([name in kept_names for name in members.names], dtype=bool)
    new_code = np.full(len(members.names), -1, dtype=np.int64)
    new_code[kept_mask] = np.arange(int(kept_mask.sum()))  # names are sorted: so are kept ones
    names = members.names[kept_mask]
    n_kept = (
        len(members.user_codes) if kept_mask.all() else int(kept_mask[members.user_codes].sum())
    )
    index_dtype = np.int32 if n_kept < np.iinfo(np.int32).max else np.int64
    codes = np.empty(n_kept, dtype=index_dtype)
    indptr = np.zeros(len(members.user_indptr), dtype=index_dtype)
    rows = _kept_rows(members.user_indptr, members.user_codes, new_code, codes, indptr)
    indptr = indptr[: rows + 1].copy()
    by_user = sp.csr_matrix(
        (np.ones(len(codes), dtype=np.int32), codes, indptr),
        shape=(len(indptr) - 1, len(names)),
    )
    by_user.has_sorted_indices = True
    by_subreddit = by_user.T.tocsr()
    return Incidence(
        names=names,
        sizes=members.n_users[kept_mask],
        by_user=by_user,
        by_subreddit=by_subreddit,
    )


@numba.njit(nogil=True, cache=True)
def _kept_rows(user_indptr, user_codes, new_code, codes, indptr):
    """Fills CSR ``codes`` and ``indptr`` (its rows) with the memberships renumbered by
    ``new_code``, those mapped to -1 dropped, and the users left without any membership dropped
    too; returns the number of rows."""
    n = 0
    rows = 0
    for u in range(user_indptr.shape[0] - 1):
        first = n
        for p in range(user_indptr[u], user_indptr[u + 1]):
            code = new_code[user_codes[p]]
            if code >= 0:
                codes[n] = code
                n += 1
        if n > first:
            rows += 1
            indptr[rows] = n
    return rows


# --------------------------------------------------------------------------- top-K


@dataclass
class BlockNeighbours:
    """Top-K neighbour lists of a block of subreddits, one flat array per field and measure."""

    source: dict[str, np.ndarray]
    rank: dict[str, np.ndarray]
    neighbour: dict[str, np.ndarray]
    overlap: dict[str, np.ndarray]
    value: dict[str, np.ndarray]


@numba.njit(nogil=True, cache=True)
def _worse(key_a: float, col_a: int, key_b: float, col_b: int) -> bool:
    """Whether candidate a ranks below candidate b (smaller key; larger column among ties)."""
    return key_a < key_b or (key_a == key_b and col_a > col_b)


@numba.njit(nogil=True, cache=True)
def _sift_down(keys: np.ndarray, cols: np.ndarray, overlaps: np.ndarray, n: int, i: int) -> None:
    """Restore the heap (worst candidate at the root) below position i."""
    while True:
        worst = i
        for child in (2 * i + 1, 2 * i + 2):
            if child < n and _worse(keys[child], cols[child], keys[worst], cols[worst]):
                worst = child
        if worst == i:
            return
        keys[i], keys[worst] = keys[worst], keys[i]
        cols[i], cols[worst] = cols[worst], cols[i]
        overlaps[i], overlaps[worst] = overlaps[worst], overlaps[i]
        i = worst


@numba.njit(nogil=True, cache=True)
def _offer(heap_keys, heap_cols, heap_overlaps, n, k, o, size_row, size_col, col, measure):
    """Offer column ``col`` (co-membership ``o``) to a row's top-k heap under ``measure`` (0:
    Jaccard, 1: cosine); returns the heap's new size. The one-job graph and the buckets' reduce
    both rank through it, so their ties and scores cannot drift apart."""
    if measure == 0:
        key = o / (size_row + size_col - o)
    else:
        key = (o * o) / (size_row * size_col)
    if n < k:  # fill the heap, then heapify once
        heap_keys[n] = key
        heap_cols[n] = col
        heap_overlaps[n] = o
        n += 1
        if n == k:
            for i in range(k // 2 - 1, -1, -1):
                _sift_down(heap_keys, heap_cols, heap_overlaps, k, i)
    elif _worse(heap_keys[0], heap_cols[0], key, col):
        heap_keys[0] = key
        heap_cols[0] = col
        heap_overlaps[0] = o
        _sift_down(heap_keys, heap_cols, heap_overlaps, k, 0)
    return n


@numba.njit(nogil=True, cache=True)
def _fused_top_k(
    start,
    stop,
    at_indptr,
    at_indices,
    a_indptr,
    a_indices,
    sizes,
    k,
    out_cols,
    out_overlap,
    out_count,
):
    """Top-k neighbours of subreddits [start, stop): columns ``out_cols[m, r, :out_count[m, r]]``
    (and their overlaps in ``out_overlap``) in rank order, for measure m (0 Jaccard, 1 cosine)
    and block row r."""
    n_cols = sizes.shape[0]
    overlap = np.zeros(n_cols, dtype=np.int64)
    touched = np.empty(n_cols, dtype=np.int64)
    heap_keys = np.empty(k, dtype=np.float64)
    heap_cols = np.empty(k, dtype=np.int64)
    heap_overlaps = np.empty(k, dtype=np.int64)
    for row in range(start, stop):
        n_touched = 0
        for p in range(at_indptr[row], at_indptr[row + 1]):
            user = at_indices[p]
            for q in range(a_indptr[user], a_indptr[user + 1]):
                col = a_indices[q]
                if overlap[col] == 0:
                    touched[n_touched] = col
                    n_touched += 1
                overlap[col] += 1
        size_row = float(sizes[row])
        for measure in range(2):
            n = 0
            for t in range(n_touched):
                col = touched[t]
                if col == row:
                    continue
                n = _offer(
                    heap_keys, heap_cols, heap_overlaps, n, k,
                    float(overlap[col]), size_row, float(sizes[col]), col, measure,
                )  # fmt: skip
            if n < k:
                for i in range(n // 2 - 1, -1, -1):
                    _sift_down(heap_keys, heap_cols, heap_overlaps, n, i)
            # pop the worst to the back: the best ends up first
            out_count[measure, row - start] = n
            for last in range(n - 1, -1, -1):
                out_cols[measure, row - start, last] = heap_cols[0]
                out_overlap[measure, row - start, last] = heap_overlaps[0]
                heap_keys[0] = heap_keys[last]
                heap_cols[0] = heap_cols[last]
                heap_overlaps[0] = heap_overlaps[last]
                _sift_down(heap_keys, heap_cols, heap_overlaps, last, 0)
        for t in range(n_touched):
            overlap[touched[t]] = 0


def block_top_k(incidence: Incidence, start: int, stop: int, k: int) -> BlockNeighbours:
    """Top-k neighbours of subreddits [start, stop) by both measures (``_fused_top_k``), with
    their overlaps; values are computed for the selected pairs alone."""
    at, a = incidence.by_subreddit, incidence.by_user
    n_rows = stop - start
    cols = np.empty((len(MEASURES), n_rows, k), dtype=np.int64)
    overlaps = np.empty((len(MEASURES), n_rows, k), dtype=np.int64)
    count = np.zeros((len(MEASURES), n_rows), dtype=np.int64)
    _fused_top_k(
        start, stop, at.indptr, at.indices, a.indptr, a.indices, incidence.sizes, k,
        cols, overlaps, count,
    )  # fmt: skip
    return selected_neighbours(cols, overlaps, count, start, incidence.sizes, k)


def selected_neighbours(
    cols: np.ndarray, overlaps: np.ndarray, count: np.ndarray, start: int, sizes: np.ndarray, k: int
) -> BlockNeighbours:
    """The block of a top-k kernel's selection: ``cols[m, r, :count[m, r]]`` (and their
    ``overlaps``) are the neighbours of row ``start + r`` in rank order, measure m (0 Jaccard,
    1 cosine)."""
    out = BlockNeighbours({}, {}, {}, {}, {})
    for m, measure in enumerate(("jaccard", "cosine")):
        keep = np.arange(k)[None, :] < count[m][:, None]
        rows = np.nonzero(keep)[0]
        neighbour = cols[m][keep]
        source = rows.astype(np.int64) + start
        o = overlaps[m][keep]
        out.source[measure] = source
        out.rank[measure] = (np.nonzero(keep)[1] + 1).astype(np.int64)
        out.neighbour[measure] = neighbour
        out.overlap[measure] = o
        out.value[measure] = similarity(measure, o, sizes[source], sizes[neighbour])
    return out


def similarity(measure: str, overlap: np.ndarray, size: np.ndarray, neighbour_size: np.ndarray):
    """The reported value of selected pairs (int64 arrays in, float64 out)."""
    if measure == "jaccard":
        ov = overlap.astype(np.float64)
        return ov / (size.astype(np.float64) + neighbour_size.astype(np.float64) - ov)
    return overlap / np.sqrt(size * neighbour_size).astype(np.float64)


def block_ranges(n_subreddits: int, block_rows: int) -> list[tuple[int, int]]:
    return [(i, min(i + block_rows, n_subreddits)) for i in range(0, n_subreddits, block_rows)]


def rows_per_block(n_subreddits: int, block_mb: float) -> int:
    """Block height such that a dense-worst-case block of the plain product (row x all
    subreddits) would fit in ``block_mb`` (about 128 bytes per entry in scipy's product). The
    fused kernel holds only K entries per row and measure, so its blocks stay far below that;
    the height sets how finely the threads share the work (and the benchmark's peer, the plain
    blocked product, uses the same blocks)."""
    per_row = max(1, n_subreddits) * 128
    return max(1, min(max(1, n_subreddits), int(block_mb * 2**20) // per_row))


def iter_neighbour_blocks(
    incidence: Incidence, k: int, threads: int, block_mb: float
) -> Iterator[BlockNeighbours]:
    """Top-k blocks in subreddit order; ``threads`` blocks are in flight at once (the kernel
    releases the GIL)."""
    blocks = block_ranges(incidence.n_subreddits, rows_per_block(incidence.n_subreddits, block_mb))
    if threads <= 1:
        for start, stop in blocks:
            yield block_top_k(incidence, start, stop, k)
        return
    with ThreadPoolExecutor(max_workers=threads) as pool:
        pending = []
        for start, stop in blocks:
            pending.append(pool.submit(block_top_k, incidence, start, stop, k))
            if len(pending) > threads:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def neighbour_table(incidence: Incidence, k: int, threads: int, block_mb: float) -> pl.DataFrame:
    """The neighbours table of the data contract, sorted by (subreddit, measure, rank)."""
    blocks = iter_neighbour_blocks(incidence, k, threads, block_mb)
    return neighbours_frame(blocks, incidence.names, incidence.sizes)


def neighbours_frame(
    blocks: Iterator[BlockNeighbours], names: np.ndarray, sizes: np.ndarray
) -> pl.DataFrame:
    """The neighbours table of top-K blocks over subreddits ``names`` of ``sizes`` users."""
    fields: dict[str, dict[str, list[np.ndarray]]] = {m: {} for m in MEASURES}
    for block in blocks:
        for measure in MEASURES:
            for name in ("source", "rank", "neighbour", "overlap", "value"):
                fields[measure].setdefault(name, []).append(getattr(block, name)[measure])
    frames = []
    for measure in MEASURES:
        cat = {
            name: np.concatenate(parts) if parts else np.zeros(0)
            for name, parts in fields[measure].items()
        }
        if not cat or len(cat["source"]) == 0:
            continue
        source = cat["source"].astype(np.int64)
        neighbour = cat["neighbour"].astype(np.int64)
        frames.append(
            pl.DataFrame(
                {
                    "subreddit": names[source].tolist(),
                    "measure": [measure] * len(source),
                    "rank": cat["rank"].astype(np.int64),
                    "neighbour": names[neighbour].tolist(),
                    "overlap": cat["overlap"].astype(np.int64),
                    "value": cat["value"].astype(np.float64),
                    "size": sizes[source],
                    "neighbour_size": sizes[neighbour],
                },
                schema=NEIGHBOURS_SCHEMA,
            )
        )
    if not frames:
        return pl.DataFrame(schema=NEIGHBOURS_SCHEMA)
    return pl.concat(frames).sort(["subreddit", "measure", "rank"])


# --------------------------------------------------------------------------- stage


@dataclass
class GraphResult:
    subreddits: pl.DataFrame
    neighbours: pl.DataFrame
    n_users: int
    n_memberships: int


def compute_graph(posts: pl.LazyFrame, settings: GraphSettings, threads: int = 1) -> GraphResult:
    """The whole stage as a function of the posts table; ``threads`` product blocks at once."""
    check_settings(settings)
    t0 = time.perf_counter()
    members = memberships(posts)
    subreddits = subreddit_table(members, settings.top_n, settings.min_posts)
    incidence = build_incidence(members, subreddits)
    del members
    log.info(
        "incidence: %d users x %d kept subreddits, %d memberships (%.1f s)",
        incidence.by_user.shape[0],
        incidence.n_subreddits,
        incidence.by_user.nnz,
        time.perf_counter() - t0,
    )
    neighbours = neighbour_table(incidence, settings.k, threads, settings.block_mb)
    log.info("neighbours: %d rows (%.1f s)", neighbours.height, time.perf_counter() - t0)
    return GraphResult(
        subreddits=subreddits,
        neighbours=neighbours,
        n_users=int(incidence.by_user.shape[0]),
        n_memberships=int(incidence.by_user.nnz),
    )


def check_settings(settings: GraphSettings) -> None:
    for key, low in (("top_n", 1), ("min_posts", 0), ("k", 1)):
        if getattr(settings, key) < low:
            raise ConfigError(f"graph.{key}: must be at least {low}, got {getattr(settings, key)}")


def summary(result: GraphResult, settings: GraphSettings) -> dict:
    top_n, min_posts, k = settings.top_n, settings.min_posts, settings.k
    subs = result.subreddits
    per_source = result.neighbours.group_by("measure", "subreddit").len()
    # every kept subreddit under every measure, a subreddit sharing no user with any other
    # (no neighbour row at all) counted with 0 neighbours
    per_kept = (
        subs.filter(pl.col("kept"))
        .select("subreddit")
        .join(pl.DataFrame({"measure": list(MEASURES)}), how="cross")
        .join(per_source, on=["measure", "subreddit"], how="left")
        .with_columns(pl.col("len").fill_null(0))
    )
    short = per_kept.filter(pl.col("len") < k).group_by("measure").len()
    n_short = {row["measure"]: row["len"] for row in short.iter_rows(named=True)}
    return {
        "parameters": {"top_n": top_n, "min_posts": min_posts, "k": k},
        "subreddits_seen": subs.height,
        "subreddits_below_min_posts": int(subs["rank"].null_count()),
        "subreddits_kept": int(subs["kept"].sum()),
        "users_of_kept_subreddits": result.n_users,
        "memberships_of_kept_subreddits": result.n_memberships,
        "neighbour_rows": result.neighbours.height,
        "subreddits_with_fewer_than_k_neighbours": {m: n_short.get(m, 0) for m in MEASURES},
    }
