"""Subreddit user graph and similarity (SPEC 2.2).

Users of a subreddit are the accounts that posted or commented there. The stage keeps the top N
subreddits by number of users among those with at least ``min_posts`` posts, and lists for every
kept subreddit its exact top-K neighbours under Jaccard and cosine similarity of the user sets.

The overlaps come from a sparse product of the users x subreddits 0/1 incidence matrix with
itself, computed in blocks of subreddit rows (``At[block] @ A``) so that memory stays bounded
whatever the number of subreddits; each block's rows are reduced to their top K at once.

Ordering is exact and deterministic: candidates are ranked by value (descending), ties by
neighbour name (ascending). Ranking keys are single correctly rounded divisions of exact
integers (Jaccard ``o / (a + b - o)``, cosine squared ``o^2 / (a b)``), so pairs whose similarity
is equal as a rational number tie exactly. Subreddits sharing no user are never neighbours, so a
subreddit can have fewer than K neighbours.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import scipy.sparse as sp

from splits.config import ConfigError
from splits.io import scan_posts, write_json, write_parquet

log = logging.getLogger(__name__)

MEASURES = ("cosine", "jaccard")
DEFAULT_BLOCK_MB = 256

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


def membership_pairs(posts: pl.LazyFrame) -> pl.DataFrame:
    """Distinct (subreddit, author) pairs with their post counts."""
    missing = {"subreddit", "author"} - set(posts.collect_schema().names())
    if missing:
        raise ConfigError(f"posts table lacks column(s) {sorted(missing)}")
    return (
        posts.select(pl.col("subreddit").str.to_lowercase(), pl.col("author"))
        .drop_nulls()
        .group_by("subreddit", "author")
        .agg(n=pl.len())
        .collect()
    )


def subreddit_table(pairs: pl.DataFrame, top_n: int, min_posts: int) -> pl.DataFrame:
    """Per subreddit: users, posts, and the top-N rule.

    ``rank`` is the position by number of users (descending, ties by name) among the subreddits
    with at least ``min_posts`` posts, null for the others; ``kept`` is ``rank <= top_n``.
    """
    counts = pairs.group_by("subreddit").agg(
        n_users=pl.len().cast(pl.Int64), n_posts=pl.col("n").sum().cast(pl.Int64)
    )
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


def build_incidence(pairs: pl.DataFrame, subreddits: pl.DataFrame) -> Incidence:
    """Incidence matrix over the kept subreddits (rows: users in no particular order)."""
    kept = subreddits.filter("kept").sort("subreddit")
    names = kept["subreddit"].to_numpy().astype(object)
    sizes = kept["n_users"].to_numpy().astype(np.int64)
    enum = pl.Enum(kept["subreddit"].to_list())
    lists = (
        pairs.lazy()
        .filter(pl.col("subreddit").is_in(kept["subreddit"].implode()))
        .select("author", code=pl.col("subreddit").cast(enum).to_physical().cast(pl.Int32))
        .group_by("author")
        .agg("code")
        .select(pl.col("code").list.len().alias("degree"), "code")
        .collect()
    )
    degrees = lists["degree"].to_numpy().astype(np.int64)
    indptr = np.zeros(len(degrees) + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    indices = lists["code"].explode().to_numpy().astype(np.int32)
    del lists
    data = np.ones(len(indices), dtype=np.int32)
    n_users = len(degrees)
    by_user = sp.csr_matrix((data, indices, indptr), shape=(n_users, len(names)))
    by_user.sort_indices()
    by_subreddit = by_user.T.tocsr()
    return Incidence(names=names, sizes=sizes, by_user=by_user, by_subreddit=by_subreddit)


# --------------------------------------------------------------------------- top-K


@dataclass
class BlockNeighbours:
    """Top-K neighbour lists of a block of subreddits, one flat array per field and measure."""

    source: dict[str, np.ndarray]
    rank: dict[str, np.ndarray]
    neighbour: dict[str, np.ndarray]
    overlap: dict[str, np.ndarray]
    value: dict[str, np.ndarray]


def top_k_row(keys: np.ndarray, cols: np.ndarray, k: int) -> np.ndarray:
    """Positions of the top-k entries: key descending, ties by column ascending (exact ties at
    the k-th value are all considered before the cut)."""
    n = len(keys)
    if n > k:
        part = np.argpartition(keys, n - k)[n - k :]
        kth = keys[part].min()
        candidates = np.flatnonzero(keys >= kth)
    else:
        candidates = np.arange(n)
    order = np.lexsort((cols[candidates], -keys[candidates]))[:k]
    return candidates[order]


def block_top_k(incidence: Incidence, start: int, stop: int, k: int) -> BlockNeighbours:
    """Overlaps of subreddits [start, stop) with all kept subreddits, reduced to the top k."""
    product = incidence.by_subreddit[start:stop] @ incidence.by_user  # CSR, unsorted columns
    counts = np.diff(product.indptr)
    rows = np.repeat(np.arange(start, stop, dtype=np.int64), counts)
    cols = product.indices.astype(np.int64)
    overlap = product.data.astype(np.int64)
    del product
    not_self = cols != rows
    rows, cols, overlap = rows[not_self], cols[not_self], overlap[not_self]
    indptr = np.zeros(stop - start + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows - start, minlength=stop - start), out=indptr[1:])

    size_row = incidence.sizes[rows]
    size_col = incidence.sizes[cols]
    ov = overlap.astype(np.float64)
    keys = {
        "jaccard": ov / (size_row + size_col - overlap).astype(np.float64),
        "cosine": (ov * ov) / (size_row * size_col).astype(np.float64),
    }
    values = {
        "jaccard": keys["jaccard"],
        "cosine": ov / np.sqrt((size_row * size_col).astype(np.float64)),
    }

    out = BlockNeighbours({}, {}, {}, {}, {})
    for measure in MEASURES:
        key = keys[measure]
        chosen: list[np.ndarray] = []
        ranks: list[np.ndarray] = []
        for r in range(stop - start):
            lo, hi = indptr[r], indptr[r + 1]
            if hi == lo:
                continue
            pos = top_k_row(key[lo:hi], cols[lo:hi], k) + lo
            chosen.append(pos)
            ranks.append(np.arange(1, len(pos) + 1, dtype=np.int64))
        sel = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
        out.source[measure] = rows[sel]
        out.rank[measure] = np.concatenate(ranks) if ranks else np.zeros(0, dtype=np.int64)
        out.neighbour[measure] = cols[sel]
        out.overlap[measure] = overlap[sel]
        out.value[measure] = values[measure][sel]
    return out


def block_ranges(n_subreddits: int, block_rows: int) -> list[tuple[int, int]]:
    return [(i, min(i + block_rows, n_subreddits)) for i in range(0, n_subreddits, block_rows)]


def rows_per_block(n_subreddits: int, block_mb: float) -> int:
    """Block height such that a dense-worst-case block result (row x all subreddits) fits in
    ``block_mb``: about 128 bytes per entry for scipy's product and the per-entry arrays."""
    per_row = max(1, n_subreddits) * 128
    return max(1, min(max(1, n_subreddits), int(block_mb * 2**20) // per_row))


def iter_neighbour_blocks(
    incidence: Incidence, k: int, threads: int = 1, block_mb: float = DEFAULT_BLOCK_MB
) -> Iterator[BlockNeighbours]:
    """Top-k blocks in subreddit order; ``threads`` blocks are in flight at once (scipy's
    product releases the GIL)."""
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


def neighbour_table(
    incidence: Incidence, k: int, threads: int = 1, block_mb: float = DEFAULT_BLOCK_MB
) -> pl.DataFrame:
    """The neighbours table of the data contract, sorted by (subreddit, measure, rank)."""
    fields: dict[str, dict[str, list[np.ndarray]]] = {m: {} for m in MEASURES}
    for block in iter_neighbour_blocks(incidence, k, threads, block_mb):
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
                    "subreddit": incidence.names[source].tolist(),
                    "measure": [measure] * len(source),
                    "rank": cat["rank"].astype(np.int64),
                    "neighbour": incidence.names[neighbour].tolist(),
                    "overlap": cat["overlap"].astype(np.int64),
                    "value": cat["value"].astype(np.float64),
                    "size": incidence.sizes[source],
                    "neighbour_size": incidence.sizes[neighbour],
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


def compute_graph(
    posts: pl.LazyFrame,
    top_n: int,
    min_posts: int,
    k: int,
    threads: int = 1,
    block_mb: float = DEFAULT_BLOCK_MB,
) -> GraphResult:
    """The whole stage as a function of the posts table."""
    for key, value, low in (("top_n", top_n, 1), ("min_posts", min_posts, 0), ("k", k, 1)):
        if value < low:
            raise ConfigError(f"graph.{key}: must be at least {low}, got {value}")
    t0 = time.perf_counter()
    pairs = membership_pairs(posts)
    subreddits = subreddit_table(pairs, top_n, min_posts)
    incidence = build_incidence(pairs, subreddits)
    del pairs
    log.info(
        "incidence: %d users x %d kept subreddits, %d memberships (%.1f s)",
        incidence.by_user.shape[0],
        incidence.n_subreddits,
        incidence.by_user.nnz,
        time.perf_counter() - t0,
    )
    neighbours = neighbour_table(incidence, k, threads, block_mb)
    log.info("neighbours: %d rows (%.1f s)", neighbours.height, time.perf_counter() - t0)
    return GraphResult(
        subreddits=subreddits,
        neighbours=neighbours,
        n_users=int(incidence.by_user.shape[0]),
        n_memberships=int(incidence.by_user.nnz),
    )


def summary(result: GraphResult, top_n: int, min_posts: int, k: int) -> dict:
    subs = result.subreddits
    per_source = result.neighbours.group_by("measure", "subreddit").len()
    short = per_source.filter(pl.col("len") < k).group_by("measure").len()
    return {
        "parameters": {"top_n": top_n, "min_posts": min_posts, "k": k},
        "subreddits_seen": subs.height,
        "subreddits_below_min_posts": int(subs["rank"].null_count()),
        "subreddits_kept": int(subs["kept"].sum()),
        "users_of_kept_subreddits": result.n_users,
        "memberships_of_kept_subreddits": result.n_memberships,
        "neighbour_rows": result.neighbours.height,
        "subreddits_with_fewer_than_k_neighbours": {
            row["measure"]: row["len"] for row in short.iter_rows(named=True)
        },
    }


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--posts", nargs="+", required=True, help="cleaned posts Parquet files")
    parser.add_argument(
        "--top-n", type=int, default=50000, help="keep the top N subreddits by users"
    )
    parser.add_argument(
        "--min-posts", type=int, default=20, help="drop subreddits with fewer posts"
    )
    parser.add_argument("--k", type=int, default=20, help="neighbours per subreddit and measure")
    parser.add_argument(
        "--out-dir",
        required=True,
        help="writes subreddits.parquet, neighbours.parquet, summary.json",
    )
    parser.add_argument("--threads", type=int, default=1, help="product blocks computed at once")
    parser.add_argument(
        "--block-mb",
        type=float,
        default=DEFAULT_BLOCK_MB,
        help="memory budget of one product block (worst case), in MiB",
    )


def run(args: argparse.Namespace) -> int:
    for path in args.posts:
        if not Path(path).exists():
            raise ConfigError(f"--posts: input {path} does not exist")
    if args.block_mb <= 0:
        raise ConfigError(f"graph.block_mb: must be positive, got {args.block_mb}")
    result = compute_graph(
        scan_posts(list(args.posts)),
        top_n=args.top_n,
        min_posts=args.min_posts,
        k=args.k,
        threads=max(1, args.threads),
        block_mb=args.block_mb,
    )
    out = Path(args.out_dir)
    write_parquet(result.subreddits, out / "subreddits.parquet")
    write_parquet(result.neighbours, out / "neighbours.parquet")
    write_json(summary(result, args.top_n, args.min_posts, args.k), out / "summary.json")
    log.info("wrote %s", out)
    return 0
