"""Subreddit user graph and similarity (docs/method.md §2.2).

Users of a subreddit are the accounts that posted or commented there. The stage keeps the top N
subreddits by number of users among those with at least ``min_posts`` posts, and lists for every
kept subreddit its exact top-K neighbours under Jaccard and cosine similarity of the user sets.

The overlaps are the entries of the sparse product of the users x subreddits 0/1 incidence
matrix with itself (``At @ A``), computed in blocks of subreddit rows by one compiled kernel
(numba, splits.graph.topk) that fuses the product with the top-K selection and, the product being
symmetric, computes only its upper triangle: neither the product nor a dense block of it is ever
materialised. Memory is, per thread, one counter of the subreddits plus K entries per subreddit
and measure; blocks run in a thread pool (the kernel releases the GIL).

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
from dataclasses import dataclass

import numba
import numpy as np
import polars as pl
import scipy.sparse as sp

from splits.errors import ConfigError
from splits.graph.memberships import (  # noqa: F401 (re-exported: the stage's one namespace)
    MEMBERSHIP_BATCH_ROWS,
    Memberships,
    _AuthorTable,
    _NameTable,
    memberships,
)
from splits.graph.settings import GraphSettings
from splits.graph.topk import N_MEASURES, top_k

log = logging.getLogger(__name__)

MEASURES = ("cosine", "jaccard")  # alphabetical: the neighbours table's order

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


def neighbour_table(incidence: Incidence, k: int, threads: int, block_mb: float) -> pl.DataFrame:
    """The neighbours table of the data contract, sorted by (subreddit, measure, rank)."""
    by_user = incidence.by_user
    if not by_user.has_sorted_indices:  # the kernel reads each user's columns in order
        by_user = by_user.sorted_indices()
    n = incidence.n_subreddits
    blocks = block_ranges(n, rows_per_block(n, block_mb))
    # each worker holds heaps of every subreddit (24 bytes an entry, plus the floors and sizes):
    # in place of a dense block, so no more workers than ``threads`` blocks' budget allows
    heaps_bytes = N_MEASURES * max(1, n) * (24 * k + 16)
    workers = max(1, min(threads, int(threads * block_mb * 2**20 // heaps_bytes)))
    cols, overlaps, count = top_k(
        by_user, incidence.by_subreddit, incidence.sizes, k, blocks, workers
    )
    block = selected_neighbours(cols, overlaps, count, 0, incidence.sizes, k)
    return neighbours_frame(iter([block]), incidence.names, incidence.sizes)


def neighbours_frame(
    blocks: Iterator[BlockNeighbours], names: np.ndarray, sizes: np.ndarray
) -> pl.DataFrame:
    """The neighbours table of top-K blocks over subreddits ``names`` (sorted, distinct) of
    ``sizes`` users, sorted by (subreddit, measure, rank): as ``names`` are sorted, by their
    indices, so the rows are ordered by integers and the names gathered once, in that order."""
    fields: dict[str, list[np.ndarray]] = {}
    for block in blocks:
        for m, measure in enumerate(MEASURES):
            n_rows = len(block.source[measure])
            fields.setdefault("measure", []).append(np.full(n_rows, m, dtype=np.int64))
            for name in ("source", "rank", "neighbour", "overlap", "value"):
                fields.setdefault(name, []).append(getattr(block, name)[measure])
    if not fields or not sum(len(part) for part in fields["source"]):
        return pl.DataFrame(schema=NEIGHBOURS_SCHEMA)
    cat = {name: np.concatenate(parts) for name, parts in fields.items()}
    source = cat["source"].astype(np.int64)
    rank = cat["rank"].astype(np.int64)
    order = np.lexsort((rank, cat["measure"], source))  # MEASURES is in alphabetical order
    source, neighbour = source[order], cat["neighbour"].astype(np.int64)[order]
    name_series = pl.Series(names.tolist(), dtype=pl.String)
    return pl.DataFrame(
        {
            "subreddit": name_series.gather(source),
            "measure": pl.Series(MEASURES, dtype=pl.String).gather(cat["measure"][order]),
            "rank": rank[order],
            "neighbour": name_series.gather(neighbour),
            "overlap": cat["overlap"].astype(np.int64)[order],
            "value": cat["value"].astype(np.float64)[order],
            "size": sizes[source],
            "neighbour_size": sizes[neighbour],
        },
        schema=NEIGHBOURS_SCHEMA,
    )


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
    members = memberships(posts, threads=threads)
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
