"""The posts table as P buckets by author (``ingest.buckets``; docs/cluster.md).

A post's bucket is a hash of its author's name modulo P: the 64-bit FNV-1a hash of the name's
UTF-8 bytes (offset basis 0xcbf29ce484222325, prime 0x100000001b3), passed through the
SplitMix64 finalizer (so that its low bits, which the modulus keeps, depend on every byte). It
is written here, not taken from a library, so that a bucket is the same in every process, run,
machine and version of polars (whose own hash may change between releases); in numpy, not a
compiled kernel, so that a job that buckets posts does not pay for loading a JIT compiler. The graph's user
buckets use the same function: posts bucket b holds exactly the authors of graph bucket b.

``BucketWriter`` writes one ingest shard's posts as P files as the ingest cleans them, each
keeping the shard's row order, so that the bucket merges (splits.ingest.merge.merge_bucket) see
every post in the order the single merge sees it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.ingest.titles import HASH_SEED
from splits.io import ParquetAppender, write_parquet

SPLIT_HELD_ROWS = 200_000  # posts held for the buckets' next row groups, all buckets together
SPLIT_MIN_GROUP_ROWS = 10_000  # the smallest row group written before a bucket's last one
FLUSH_BATCH_ROWS = 20_000  # rows converted to Arrow at once when buckets' groups are written
# the posts' columns with few distinct values in a row group, the only ones dictionary-encoded
# (texts and ids are not: trying costs a fifth of the write; splits.io.ParquetAppender)
DICTIONARY_COLUMNS = ["kind", "subreddit"]

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


class BucketWriter:
    """Posts written as ``out_dir``/{b}.parquet for b in 0..buckets-1 as they come (rule
    ``ingest`` with ``ingest.buckets`` > 1), each bucket's rows in arrival order. ``close``
    writes every file, empty ones with ``schema``. Memory: at most ``SPLIT_HELD_ROWS`` rows and
    one frame held for the buckets' next row groups (a bucket's group is written at
    ``SPLIT_HELD_ROWS`` / P rows, at least ``SPLIT_MIN_GROUP_ROWS``, or when all buckets
    together hold ``SPLIT_HELD_ROWS``, whatever P and the input's size; a bucket's held rows
    are slices of their chunk, so a chunk stays whole until its last bucket's rows are
    written: at small P, up to about one chunk more), and the bucket of every row written
    (``row_buckets``: 1-4 bytes a row, so that a row's place in the whole stream is known
    again; see ``drop_bucket_duplicates``)."""

    def __init__(
        self,
        out_dir: str | Path,
        buckets: int,
        schema: dict,
    ):
        check_buckets(buckets)
        self.buckets = buckets
        self.schema = schema
        self.paths = bucket_paths(out_dir, buckets)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        dictionary = [name for name in DICTIONARY_COLUMNS if name in schema]
        self.writers = [ParquetAppender(p, dictionary=dictionary) for p in self.paths]
        # each bucket's rows are held until there are enough for a row group of useful size,
        # while all buckets together hold about SPLIT_HELD_ROWS at most
        self.flush_rows = max(SPLIT_MIN_GROUP_ROWS, SPLIT_HELD_ROWS // buckets)
        self.pending: list[list[pl.DataFrame]] = [[] for _ in range(buckets)]
        self.held = [0] * buckets
        self.bucket_dtype = np.min_scalar_type(buckets - 1)
        self.row_buckets: list[np.ndarray] = []

    def add(self, frame: pl.DataFrame) -> None:
        which = author_buckets(frame["author"], self.buckets)
        self.row_buckets.append(which.astype(self.bucket_dtype))
        # one stable sort (each bucket's rows keep their arrival order) and one gather; each
        # bucket's part is a slice of it (no copy), whatever P
        order = np.argsort(which, kind="stable")
        bounds = np.searchsorted(which[order], np.arange(self.buckets + 1))
        grouped = frame[order]
        full = []
        for b in range(self.buckets):
            if bounds[b + 1] > bounds[b]:
                self.pending[b].append(grouped.slice(bounds[b], bounds[b + 1] - bounds[b]))
                self.held[b] += int(bounds[b + 1] - bounds[b])
                if self.held[b] >= self.flush_rows:
                    full.append(b)
        if sum(self.held) >= SPLIT_HELD_ROWS:  # many buckets, none full: all go, smaller groups
            full = [b for b in range(self.buckets) if self.pending[b]]
        self._flush(full)

    def _flush(self, buckets: list[int]) -> None:
        """Write each of ``buckets``' held rows as one row group of its file. The rows are
        converted to Arrow a batch of buckets at a time (at least ``FLUSH_BATCH_ROWS`` rows),
        each file given its slice: a conversion costs ~1 ms however few its rows, so one per
        bucket was a fifth of the job with hundreds of buckets, and one for all of them held a
        second copy of every held row."""
        batch: list[int] = []
        rows = 0
        for b in buckets:
            batch.append(b)
            rows += self.held[b]
            if rows >= FLUSH_BATCH_ROWS:
                self._write_batch(batch)
                batch, rows = [], 0
        if batch:
            self._write_batch(batch)

    def _write_batch(self, buckets: list[int]) -> None:
        held = pl.concat([part for b in buckets for part in self.pending[b]], rechunk=False)
        # Arrow's string views: polars' own buffers, no copy (the older large strings copied
        # every text, ~0.2 CPU s a million posts); the files read back the same
        table = held.to_arrow(compat_level=pl.CompatLevel.newest())
        start = 0
        for b in buckets:
            self.writers[b].write(table.slice(start, self.held[b]))
            start += self.held[b]
            self.pending[b], self.held[b] = [], 0

    def close(self) -> list[int]:
        """Finish every bucket file; returns the rows of each."""
        self._flush([b for b in range(self.buckets) if self.pending[b]])
        empty = pl.DataFrame(schema=self.schema)
        for writer in self.writers:
            writer.close(empty)
        return [writer.rows for writer in self.writers]

    def discard(self) -> None:
        for writer in self.writers:
            writer.discard()

    def stream_rows(self, bucket: int, local_rows: np.ndarray) -> np.ndarray:
        """The places in the whole stream (0-based) of rows ``local_rows`` of bucket ``bucket``."""
        if len(self.row_buckets) != 1:  # joined once, at the first call
            self.row_buckets = [np.concatenate([np.zeros(0, self.bucket_dtype), *self.row_buckets])]
        return np.flatnonzero(self.row_buckets[0] == bucket)[local_rows]


def drop_bucket_duplicates(writer: BucketWriter, dup_hashes: pl.Series, work: Path) -> int:
    """Keep the first row of every post id in the order the posts came (as one file's
    ``drop_duplicate_ids`` would), over the closed bucket files of ``writer``: the candidate
    rows (ids whose hash is in ``dup_hashes``) of every bucket, placed in the stream by
    ``writer.stream_rows``; a bucket that loses rows is rewritten (staged in ``work``). Returns
    the number of rows dropped."""
    hashed = pl.col("post_id").hash(seed=HASH_SEED)
    found = []
    for b, path in enumerate(writer.paths):
        local = (
            pl.scan_parquet(path, row_index_name="_row")
            .filter(hashed.is_in(dup_hashes.implode()))
            .select("_row", "post_id")
            .collect()
        )
        if local.height:
            stream = writer.stream_rows(b, local["_row"].to_numpy())
            found.append(local.with_columns(_stream=pl.Series(stream), _bucket=pl.lit(b)))
    if not found:
        return 0
    candidates = pl.concat(found)
    drop = candidates.filter(pl.col("_stream") != pl.col("_stream").min().over("post_id"))
    for (b,), rows in drop.group_by("_bucket"):
        staged = work / f"bucket-{b}.parquet"
        os.replace(writer.paths[b], staged)
        kept = (
            pl.scan_parquet(staged, row_index_name="_row")
            .filter(~pl.col("_row").is_in(rows["_row"].implode()))
            .drop("_row")
        )
        write_parquet(kept, writer.paths[b])
        staged.unlink()
    return drop.height
