"""The subreddit graph as a sum over user buckets (``ingest.buckets`` > 1; docs/stages.md).

Bucket b holds the authors whose name hashes to b modulo the number of buckets (the stable
hash of splits.ingest.partition, the posts table's buckets: posts bucket b holds exactly the
posts of graph bucket b), so the buckets split the users. Every quantity of the graph is a sum over users:
a subreddit's users and posts, the users and memberships of the kept subreddits, and the
co-membership counts ``A^T A`` (the numerators of Jaccard and cosine) are the sums of the
buckets' ``A_b^T A_b``. The steps, one job each:

1. ``write_bucket_memberships`` (one per bucket): the bucket's distinct (user, subreddit)
   memberships and its per-subreddit counts, from a lazy scan filtered to the bucket's authors;
2. ``write_bucket_subreddits`` (one): the counts added up, and the top-N rule;
3. ``write_bucket_overlaps`` (one per bucket): the bucket's incidence over the kept subreddits
   and its co-membership counts, written in blocks of subreddit rows sorted by row;
4. ``reduce_buckets`` (one): per block of subreddit rows, the buckets' counts of those rows
   added up (one bucket's at a time, into the block's dense counts) and the exact top K of both
   measures, ranked as the single job ranks them.

The result equals ``build.compute_graph``'s. Memory: steps 1 and 3 hold one bucket's
memberships (and step 3 one block of its product); step 4 a block's dense counts and one
bucket's entries of that block at a time (per thread), whatever the number of buckets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.graph.build import (
    BlockNeighbours,
    GraphResult,
    Memberships,
    block_ranges,
    build_incidence,
    check_settings,
    memberships,
    neighbours_frame,
    rank_subreddits,
    rows_per_block,
    selected_neighbours,
)
from splits.graph.settings import GraphSettings, GraphTopSettings
from splits.graph.topk import _pop_sorted, _push, _ranking_key, _sift_down
from splits.ingest.partition import bucket_of
from splits.io import ParquetAppender, read_json, write_json, write_parquet

log = logging.getLogger(__name__)

COUNTS_SCHEMA = {"subreddit": pl.String, "n_users": pl.Int64, "n_posts": pl.Int64}
MEMBERSHIPS_SCHEMA = {"user": pl.Int64, "code": pl.Int64}
OVERLAPS_SCHEMA = {"row": pl.Int32, "col": pl.Int32, "overlap": pl.Int64}


def check_bucket(bucket: int, buckets: int) -> None:
    if buckets < 1:
        raise ConfigError(f"ingest.buckets: must be at least 1, got {buckets}")
    if not 0 <= bucket < buckets:
        raise ConfigError(f"--bucket: must be in 0..{buckets - 1}, got {bucket}")


# --------------------------------------------------------------------------- step 1: map


def write_bucket_memberships(
    posts: pl.LazyFrame, bucket: int, buckets: int, out_dir: str | Path
) -> Memberships:
    """counts.parquet (subreddit, n_users, n_posts; row i is code i) and memberships.parquet
    (user, code) of the bucket's authors; returns them. ``posts`` is posts bucket b (rule
    graph_bucket: every row is kept) or a whole table (filtered to the bucket's authors)."""
    check_bucket(bucket, buckets)
    missing = {"subreddit", "author"} - set(posts.collect_schema().names())
    if missing:
        raise ConfigError(f"posts table lacks column(s) {sorted(missing)}")
    members = memberships(posts.filter(bucket_of(buckets) == bucket))
    out = Path(out_dir)
    write_parquet(
        pl.DataFrame(
            {"subreddit": members.names.tolist(), "n_users": members.n_users,
             "n_posts": members.n_posts},
            schema=COUNTS_SCHEMA,
        ),
        out / "counts.parquet",
    )  # fmt: skip
    users = np.repeat(
        np.arange(len(members.user_indptr) - 1, dtype=np.int64), np.diff(members.user_indptr)
    )
    write_parquet(
        pl.DataFrame({"user": users, "code": members.user_codes}, schema=MEMBERSHIPS_SCHEMA),
        out / "memberships.parquet",
    )
    log.info(
        "bucket %d of %d: %d users, %d memberships, %d subreddits",
        bucket, buckets, len(members.user_indptr) - 1, len(members.user_codes), len(members.names),
    )  # fmt: skip
    return members


def read_bucket_memberships(bucket_dir: str | Path) -> Memberships:
    folder = Path(bucket_dir)
    counts = pl.read_parquet(folder / "counts.parquet")
    pairs = pl.read_parquet(folder / "memberships.parquet")
    users = pairs["user"].to_numpy()
    n_users = int(users[-1]) + 1 if len(users) else 0
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(np.bincount(users, minlength=n_users), out=indptr[1:])
    return Memberships(
        names=np.array(counts["subreddit"].to_list(), dtype=object),
        n_posts=counts["n_posts"].to_numpy().astype(np.int64),
        n_users=counts["n_users"].to_numpy().astype(np.int64),
        user_indptr=indptr,
        user_codes=pairs["code"].to_numpy().astype(np.int64),
    )


# --------------------------------------------------------------------------- step 2: counts


def write_bucket_subreddits(
    counts_files: list[str | Path], settings: GraphTopSettings, out: str | Path
) -> pl.DataFrame:
    """The subreddit table of the data contract from the buckets' counts."""
    for key, low in (("top_n", 1), ("min_posts", 0)):
        if getattr(settings, key) < low:
            raise ConfigError(f"graph.{key}: must be at least {low}, got {getattr(settings, key)}")
    counts = (
        pl.scan_parquet([str(p) for p in counts_files])
        .group_by("subreddit")
        .agg(pl.col("n_users").sum(), pl.col("n_posts").sum())
        .sort("subreddit")
        .collect()
        .cast(COUNTS_SCHEMA)
    )
    table = rank_subreddits(counts, settings.top_n, settings.min_posts)
    write_parquet(table, out)
    return table


def kept_subreddits(subreddits: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Names (sorted: column j of the incidence is names[j]) and users of the kept subreddits."""
    kept = subreddits.filter("kept").sort("subreddit")
    return np.array(kept["subreddit"].to_list(), dtype=object), kept["n_users"].to_numpy()


# --------------------------------------------------------------------------- step 3: map


def write_bucket_overlaps(
    bucket_dir: str | Path, subreddits_file: str | Path, block_mb: float, out_dir: str | Path
) -> dict:
    """overlaps.parquet: the bucket's co-membership counts (row, col, overlap) of kept
    subreddits (indices into the sorted kept names; row != col, overlap > 0), sorted by row;
    overlaps.json: the bucket's users and memberships of kept subreddits."""
    members = read_bucket_memberships(bucket_dir)
    subreddits = pl.read_parquet(subreddits_file)
    names, _ = kept_subreddits(subreddits)
    incidence = build_incidence(members, subreddits)
    del members
    # the bucket's kept subreddits are a subset of all kept ones: its columns, renumbered
    to_global = np.searchsorted(names, incidence.names).astype(np.int32)
    at, a = incidence.by_subreddit, incidence.by_user
    out = Path(out_dir)
    appender = ParquetAppender(out / "overlaps.parquet")
    try:
        # the reduce's blocks of rows (global row numbers), each written as its own row groups,
        # so that the reduce's filter on a block's rows skips every other row group
        for first, last in block_ranges(len(names), rows_per_block(len(names), block_mb)):
            start, stop = np.searchsorted(to_global, [first, last])
            if start == stop:
                continue
            block = (at[start:stop] @ a).tocoo()  # row by row: the file is sorted by row
            rows = to_global[block.row + start]
            cols = to_global[block.col]
            off_diagonal = rows != cols
            frame = pl.DataFrame(
                {"row": rows[off_diagonal], "col": cols[off_diagonal],
                 "overlap": block.data[off_diagonal].astype(np.int64)},
                schema=OVERLAPS_SCHEMA,
            )  # fmt: skip
            if frame.height:
                appender.write(frame)
        appender.close(empty=pl.DataFrame(schema=OVERLAPS_SCHEMA))
    except BaseException:
        appender.discard()
        raise
    stats = {
        "users_of_kept_subreddits": int(a.shape[0]),
        "memberships_of_kept_subreddits": int(a.nnz),
    }
    write_json(stats, out / "overlaps.json")
    log.info("bucket %s: %d overlap entries, %s", bucket_dir, appender.rows, stats)
    return stats


# --------------------------------------------------------------------------- step 4: reduce


@numba.njit(nogil=True, cache=True)
def _add_overlaps(dense, rows, cols, counts, start):
    """Add one bucket's (row, col, count) entries of a block of rows into the block's dense
    counts (``dense[row - start, col]``)."""
    for i in range(rows.shape[0]):
        dense[rows[i] - start, cols[i]] += counts[i]


@numba.njit(nogil=True, cache=True)
def _top_k_of_rows(indptr, cols, counts, start, sizes, k, out_cols, out_overlap, out_count):
    """Top-k of every row of a CSR block of overlap counts (rows start, start + 1, ...), both
    measures: the keys, heap and tie rule of splits.graph.topk, given the overlaps."""
    heap_keys = np.empty(k, dtype=np.float64)
    heap_cols = np.empty(k, dtype=np.int64)
    heap_overlaps = np.empty(k, dtype=np.int64)
    for r in range(indptr.shape[0] - 1):
        size_row = float(sizes[start + r])
        for measure in range(2):
            n = 0
            for p in range(indptr[r], indptr[r + 1]):
                col = cols[p]
                key = _ranking_key(float(counts[p]), size_row, float(sizes[col]), measure)
                # below a full heap's worst key: turned down here, without a call
                if n < k or key >= heap_keys[0]:
                    n = _push(heap_keys, heap_cols, heap_overlaps, n, k, key, col, counts[p])
            if n < k:
                for i in range(n // 2 - 1, -1, -1):
                    _sift_down(heap_keys, heap_cols, heap_overlaps, n, i)
            out_count[measure, r] = n
            _pop_sorted(
                heap_keys,
                heap_cols,
                heap_overlaps,
                n,
                out_cols[measure, r],
                out_overlap[measure, r],
            )


def block_top_k_from_overlaps(
    parts: Iterable[pl.DataFrame], start: int, stop: int, sizes: np.ndarray, k: int
) -> BlockNeighbours:
    """Top-k neighbours of rows [start, stop) from the buckets' (row, col, overlap) counts of
    those rows, one bucket's ``parts`` at a time (a pair once per bucket that has it): added up
    in a dense block of counts, so that the block's memory does not grow with the number of
    buckets (the block's height is ``rows_per_block``'s, whose budget assumes 128 bytes per
    entry of a dense block: these 8-byte counts use a sixteenth of it)."""
    n_rows = stop - start
    dense = np.zeros((n_rows, len(sizes)), dtype=np.int64)
    for part in parts:  # the columns as stored (int32, int32, int64): no copies
        _add_overlaps(
            dense, part["row"].to_numpy(), part["col"].to_numpy(), part["overlap"].to_numpy(), start
        )
    rows, summed_cols = np.nonzero(dense)  # row by row, columns ascending
    summed = dense[rows, summed_cols]
    del dense
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    cols = np.empty((2, n_rows, k), dtype=np.int64)
    top_overlaps = np.empty((2, n_rows, k), dtype=np.int64)
    count = np.zeros((2, n_rows), dtype=np.int64)
    _top_k_of_rows(indptr, summed_cols, summed, start, sizes, k, cols, top_overlaps, count)
    return selected_neighbours(cols, top_overlaps, count, start, sizes, k)


def reduce_buckets(
    subreddits_file: str | Path,
    overlap_files: list[str | Path],
    stats_files: list[str | Path],
    settings: GraphSettings,
    threads: int = 1,
) -> GraphResult:
    """The stage's result from the buckets' subreddit table and co-membership counts."""
    check_settings(settings)
    if len(stats_files) != len(overlap_files):
        raise ConfigError(
            f"--bucket-stats: one per bucket, got {len(stats_files)} for {len(overlap_files)} "
            "overlap files"
        )
    subreddits = pl.read_parquet(subreddits_file)
    names, sizes = kept_subreddits(subreddits)
    scans = [pl.scan_parquet(str(p), schema=OVERLAPS_SCHEMA) for p in overlap_files]

    def block(bounds: tuple[int, int]) -> BlockNeighbours:
        start, stop = bounds
        # one bucket's rows of the block at a time (the files are written in row groups of the
        # same blocks, so each read skips the others): the block holds one bucket's entries,
        # not every bucket's, and its memory stays flat as the buckets multiply
        parts = (scan.filter(pl.col("row").is_between(start, stop - 1)).collect() for scan in scans)
        return block_top_k_from_overlaps(parts, start, stop, sizes, settings.k)

    def blocks() -> Iterator[BlockNeighbours]:
        ranges = block_ranges(len(names), rows_per_block(len(names), settings.block_mb))
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            yield from pool.map(block, ranges)

    neighbours = neighbours_frame(blocks(), names, sizes)
    stats = [read_json(p) for p in stats_files]
    return GraphResult(
        subreddits=subreddits,
        neighbours=neighbours,
        n_users=sum(s["users_of_kept_subreddits"] for s in stats),
        n_memberships=sum(s["memberships_of_kept_subreddits"] for s in stats),
    )
