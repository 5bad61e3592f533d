"""The posts table as P buckets by author (``ingest.buckets``; docs/cluster.md).

A post's bucket is a hash of its author's name modulo P: the 64-bit FNV-1a hash of the name's
UTF-8 bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3), passed through the
SplitMix64 finalizer (so that its low bits, which the modulus keeps, depend on every byte). It
is written here, not taken from a library, so that a bucket is the same in every process, run,
machine and version of polars (whose own hash may change between releases); in numpy, not a
compiled kernel, so that a job that buckets posts does not pay for loading a JIT compiler. The graph's user
buckets use the same function: posts bucket b holds exactly the authors of graph bucket b.

``split_posts`` writes one ingest shard's posts as P files, each keeping the shard's row order,
so that the bucket merges (splits.ingest.merge.merge_bucket) see every post in the order the
single merge sees it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.io import ParquetAppender

SPLIT_BATCH_ROWS = 50_000  # posts read at once while splitting a shard
SPLIT_HELD_ROWS = 200_000  # posts held for the buckets' next row groups, all buckets together
SPLIT_MIN_GROUP_ROWS = 10_000  # the smallest row group written before a bucket's last one

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def _hash_names(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """The hash of each of the strings ``data[offsets[i]:offsets[i + 1]]``, vectorised over the
    strings: FNV-1a runs byte position by byte position over the strings still that long (a
    prefix of them once sorted by length, longest first), in numpy's wrapping uint64."""
    lengths = np.diff(offsets)
    order = np.argsort(-lengths, kind="stable")
    starts, lengths = offsets[:-1][order], lengths[order]
    h = np.full(len(order), _FNV_OFFSET, dtype=np.uint64)
    longest = int(lengths[0]) if len(lengths) else 0
    # names longer than j bytes: the first still[j] of the length-sorted order
    still = np.searchsorted(-lengths, -np.arange(longest), side="left")
    for j in range(longest):
        head = h[: still[j]]
        head ^= data[starts[: still[j]] + j]
        head *= _FNV_PRIME
    # SplitMix64 finalizer
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    out = np.empty_like(h)
    out[order] = h
    return out


def author_hashes(authors: pl.Series) -> np.ndarray:
    """The stable 64-bit hash (uint64) of each name; a null hashes as the empty name. Each
    distinct name is hashed once (a bucket of posts has several posts per author)."""
    names = authors.cast(pl.String).fill_null("").rename("name")
    if names.is_empty():
        return np.empty(0, dtype=np.uint64)
    distinct = names.unique()
    arr = distinct.rechunk().to_arrow(compat_level=pl.CompatLevel.oldest())
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    table = pl.DataFrame({"name": distinct, "hash": _hash_names(offsets, data)})
    return (
        names.to_frame()
        .join(table, on="name", how="left", maintain_order="left")
        .get_column("hash")
        .to_numpy()
    )


def author_buckets(authors: pl.Series, buckets: int) -> np.ndarray:
    """The bucket (int64, 0..buckets-1) of each name."""
    check_buckets(buckets)
    return (author_hashes(authors) % np.uint64(buckets)).astype(np.int64)


def bucket_of(buckets: int) -> pl.Expr:
    """The bucket of each post's author, as an expression (keeps the name ``author``)."""
    check_buckets(buckets)
    return pl.col("author").map_batches(
        lambda s: pl.Series(s.name, author_buckets(s, buckets), dtype=pl.Int64),
        return_dtype=pl.Int64,
        is_elementwise=True,
    )


def check_buckets(buckets: int) -> None:
    if buckets < 1:
        raise ConfigError(f"ingest.buckets: must be at least 1, got {buckets}")


def bucket_paths(out_dir: str | Path, buckets: int) -> list[Path]:
    return [Path(out_dir) / f"{b}.parquet" for b in range(buckets)]


def split_posts(posts: str | Path, buckets: int, out_dir: str | Path) -> list[int]:
    """Write one shard's posts as ``out_dir``/{b}.parquet for b in 0..buckets-1 (every file
    written, empty ones with the shard's schema), each in the shard's row order; returns the
    rows of each bucket. Memory: one batch of ``SPLIT_BATCH_ROWS`` posts and about
    ``SPLIT_HELD_ROWS`` (at least ``SPLIT_MIN_GROUP_ROWS`` a bucket) held for the row groups
    of the buckets, whatever the shard's size (read through pyarrow's batch reader without
    pre-buffering: polars' batches of a lazy scan, and pyarrow's pre-buffered reader, held
    memory that grew with the shard's size)."""
    import pyarrow.parquet as pq

    check_buckets(buckets)
    schema = pl.scan_parquet(str(posts)).collect_schema()
    if "author" not in schema.names():
        raise ConfigError(f"{posts}: the posts table lacks the column author")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    writers = [ParquetAppender(p) for p in bucket_paths(out_dir, buckets)]
    # each bucket's rows are held until there are enough for a row group of useful size, while
    # all buckets together hold about SPLIT_HELD_ROWS at most
    flush_rows = max(SPLIT_MIN_GROUP_ROWS, SPLIT_HELD_ROWS // buckets)
    pending: list[list[pl.DataFrame]] = [[] for _ in range(buckets)]
    held = [0] * buckets
    try:
        # pre-buffering keeps what was read of the file: memory would grow with the shard
        with pq.ParquetFile(str(posts), pre_buffer=False, buffer_size=1 << 20) as reader:
            for record_batch in reader.iter_batches(batch_size=SPLIT_BATCH_ROWS):
                batch = pl.from_arrow(record_batch)
                which = author_buckets(batch["author"], buckets)
                # a stable sort keeps each bucket's rows in the shard's order
                order = np.argsort(which, kind="stable")
                bounds = np.searchsorted(which[order], np.arange(buckets + 1))
                for b in range(buckets):
                    if bounds[b + 1] > bounds[b]:
                        pending[b].append(batch[order[bounds[b] : bounds[b + 1]]])
                        held[b] += int(bounds[b + 1] - bounds[b])
                        if held[b] >= flush_rows:
                            writers[b].write(pl.concat(pending[b]))
                            pending[b], held[b] = [], 0
        for b in range(buckets):
            if pending[b]:
                writers[b].write(pl.concat(pending[b]))
    except BaseException:
        for writer in writers:
            writer.discard()
        raise
    empty = pl.DataFrame(schema=schema)
    for writer in writers:
        writer.close(empty)
    return [writer.rows for writer in writers]
