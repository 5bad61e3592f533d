"""Ingest one input shard (docs/method.md §2.1): a ConvoKit corpus directory or ``.corpus.zip``, or a
Pushshift / Arctic-Shift NDJSON file -> the posts table of that shard and its ingest report.

Files are decompressed by content (magic bytes, not the name): zstd, gzip, bzip2, xz, or plain;
any other compression is refused (InputError, one line naming the file). A compressed stream
that ends inside a frame or does not decompress stops the shard with an InputError naming the
file and the offset reached, before anything is published (:class:`InputStream`).

Streaming with bounded memory, one pass: the input is read in byte chunks cut at line ends;
each chunk is parsed by polars' NDJSON reader with an explicit schema (fast path: no Python per
line); a chunk it refuses (a malformed line, invalid UTF-8, an odd type) is halved at a line end
and retried, down to 64 KiB pieces that are parsed line by line (slow path) so that exactly the
bad lines are dropped and counted. Each chunk is made with one copy of its bytes (``pread`` to
a line end from a plain file; decompressed pieces joined once otherwise) and cleaned by one
polars query (submission titles looked up in a hash index of ``conversations.json``, read by a
fast path that cuts ConvoKit's layout into one line per entry and takes each id and title from
the line's head with one anchored pattern) and streamed into the Parquet output
(zstd level 1, ``splits.io.PARQUET_LEVEL``: the write costs a third less CPU than the default
level for ~10% more bytes).
Both cores work: a pipeline of threads (polars releases the GIL) reads and decompresses the next
chunk and counts its lines (for the blank-line count), parses the one before and cleans the one
before that while the Parquet writer compresses the current one and the titles load in their own
thread (the parse does not wait for them); at most ``IN_FLIGHT`` chunks are in the pipeline at
once (one more in the writer), handed on in input order with per-chunk counts, so output bytes
and report counts do not depend on thread timing.
Duplicate ids are found from the 64-bit hashes of the ids, spilled to bucket files and sorted
per bucket at the end; only when there are some is the output filtered in a second pass.
Memory: ``IN_FLIGHT + 1`` chunks and their parsed frames, plus the conversation titles (about 50
bytes per conversation).

Cleaning, in this order; each dropped record is counted once, under the first reason that applies:
  1. ``invalid_utf8``: the line is not valid UTF-8;
  2. ``malformed_json``: the line is not a JSON object;
  3. ``missing_field:<name>``: a required field is absent or null (``id``, ``author``
     (ConvoKit ``speaker``/``user``), ``conversation_id`` (``conversation_id``/``root``;
     Pushshift comments ``link_id``), ``timestamp`` (ConvoKit ``timestamp``, Pushshift
     ``created_utc``), ``text`` (ConvoKit ``text``; Pushshift ``selftext``/``body``; a
     Pushshift submission needs a ``title``), ``subreddit`` (ConvoKit ``meta.subreddit``));
     ``invalid_field:timestamp``: a timestamp that is not a number;
  4. ``deleted_text`` / ``removed_text``: the text (a submission's body) is ``[deleted]`` /
     ``[removed]``;
  5. ``empty_text``: nothing but white space once a submission's title is joined in (a link
     post with an empty body keeps its title as text);
  6. ``deleted_author``: the author is ``[deleted]``;
  7. ``bot``: a known bot (``AutoModerator``, the shipped list ``resources/bots.txt``); accounts
     named ``...bot`` whose posts are templated, end in the same line or carry a bot's marks,
     and any account whose posts are signed as a bot's ("Beep. Boop. I'm a robot.", a link to
     its own user page), are found and dropped by ``merge-posts``, which sees all shards (the
     ingest report lists each with its reason under ``merge.bots``);
  8. ``duplicate_id``: a post id seen before (first occurrence kept; across shards in
     ``merge-posts``).
Blank lines are not records and are only counted (``blank_lines``); a truncated last line is a
malformed record. Subreddit names are lowercased; a submission's text is
``title + "\\n\\n" + body`` (title alone when the body is empty); missing or non-numeric scores
become null; ConvoKit's ``-1`` reply links become null.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl
from polars.io.plugins import register_io_source

from splits.ingest.bots import DEFAULT_BOTS
from splits.ingest.clean import (
    POSTS_SCHEMA,
    REASONS,
    Cleaner,
    DuplicateFinder,
    drop_duplicate_ids,
)
from splits.ingest.parse import count_lines, parse_chunk
from splits.ingest.settings import IngestBucketsSettings, IngestSettings
from splits.ingest.sources import _Source
from splits.ingest.titles import TitleIndex, read_titles
from splits.io import remove_stale_temporaries, write_json, write_parquet

log = logging.getLogger(__name__)

# threads that parse chunks (a thread beside them cleans the parsed chunks), and the most chunks
# handed to them at once: one is enough (polars' reader spreads a chunk's parse over its own
# threads, the writer compresses beside it); a second used 0.1-0.5 CPU s more per 340 MB,
# ~50 MB more memory, no wall gain
WORKERS = 1
IN_FLIGHT = 3
WORK_SUFFIX = ".work"  # the shard's work folder beside its output: .<name>.<random>.work


# --------------------------------------------------------------------------- input discovery


def shard_name(path: str | Path) -> str:
    name = Path(path).name
    for suffix in (
        ".corpus.zip",
        ".zip",
        ".zst",
        ".gz",
        ".bz2",
        ".xz",
        ".ndjson",
        ".jsonl",
        ".json",
    ):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name) or "input"


def shard_names(paths: list[str]) -> dict[str, str]:
    """Shard name -> path for the configured inputs (names made unique with a counter)."""
    out: dict[str, str] = {}
    for path in paths:
        base = shard_name(path)
        name, i = base, 1
        while name in out:
            i += 1
            name = f"{base}-{i}"
        out[name] = path
    return out


# --------------------------------------------------------------------------- one shard


def ingest_shard(
    path: str | Path,
    out: str | Path,
    report_path: str | Path,
    settings: IngestSettings | IngestBucketsSettings,
    shard: str | None = None,
    bots: set[str] | None = None,
) -> dict:
    """Ingest one input into ``out`` (posts Parquet) and ``report_path`` (JSON); return the
    report. One pass over the input: chunks are parsed, cleaned and streamed into the Parquet
    file; a second pass over the output happens only when duplicate ids were found. With
    ``IngestBucketsSettings`` (``ingest.buckets`` = P > 1) ``out`` is a folder that receives
    the shard's posts as P files by author (``splits.ingest.partition``: 0.parquet,
    1.parquet, ...), the same rows and order as the one file split by author, and the same
    report."""
    started = time.perf_counter()
    bucketed = isinstance(settings, IngestBucketsSettings)  # out is a folder of P files
    source = _Source(path)
    bots = set(DEFAULT_BOTS) if bots is None else bots
    counts: Counter = Counter()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # the work folder (id hash buckets, the staged output) of a killed run is removed here
    remove_stale_temporaries(out, WORK_SUFFIX)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=WORK_SUFFIX, dir=out.parent))
    phase = {"titles": 0.0}
    try:

        def make_cleaner() -> Cleaner:
            titles = TitleIndex(read_titles(source)) if source.format == "convokit" else None
            phase["titles"] = time.perf_counter() - started
            return Cleaner(bots, titles, counts)

        duplicates = DuplicateFinder(work)
        chunk_bytes = max(int(settings.chunk_mb * (1 << 20)), 1 << 12)
        untyped = [False]  # shared by the workers: a non-integer number was seen

        def parse(read: Future) -> tuple[pl.DataFrame, Counter] | None:
            got = read.result()
            if got is None:  # the input has ended
                return None
            chunk, lines = got
            local: Counter = Counter(untyped_chunks=int(untyped[0]))
            raw = parse_chunk(chunk, source.format, local, lines=lines)
            if local["untyped_chunks"]:
                untyped[0] = True
            del local["untyped_chunks"]
            return raw, local

        def clean(parsed: Future, cleaner: Future) -> tuple[pl.DataFrame, Counter] | None:
            got = parsed.result()
            if got is None:
                return None
            raw, local = got
            return cleaner.result()(raw, local), local

        def posts_chunks() -> Iterator[pl.DataFrame]:
            # a pipeline of threads, each stage in input order: one reads (and decompresses)
            # the chunks, one parses them, one cleans them (polars releases the GIL), while
            # the titles load in their own thread and the writer compresses the chunk before;
            # at most IN_FLIGHT chunks are in the pipeline at once, handed on in input order
            with (  # the file closes last, once the threads that read it have stopped
                source.open("utterances.jsonl") as fh,
                ThreadPoolExecutor(1, thread_name_prefix="ingest-titles") as title_pool,
                ThreadPoolExecutor(1, thread_name_prefix="ingest-read") as read_pool,
                ThreadPoolExecutor(WORKERS, thread_name_prefix="ingest-parse") as parse_pool,
                ThreadPoolExecutor(1, thread_name_prefix="ingest-clean") as clean_pool,
            ):
                cleaner = title_pool.submit(make_cleaner)
                pending: deque[Future] = deque()
                chunks = fh.line_chunks(chunk_bytes)
                ended = False  # a read found the input's end: nothing more is submitted

                def submit_more() -> None:
                    while not ended and len(pending) < IN_FLIGHT:
                        read = read_pool.submit(read_next, chunks)
                        parsed = parse_pool.submit(parse, read)
                        pending.append(clean_pool.submit(clean, parsed, cleaner))

                submit_more()
                while pending:
                    got = pending.popleft().result()
                    if got is None:  # the end; the reads submitted after it found nothing
                        ended = True
                        continue
                    posts, local = got
                    submit_more()  # the pipeline goes on while the writer takes these posts
                    counts.update(local)
                    if posts.height:
                        duplicates.add(posts["post_id"])
                        counts["posts"] += posts.height
                        yield posts
                cleaner.result()  # titles errors surface even for an empty utterances file

        if bucketed:
            # here, not at the top: its numpy import (~0.07 CPU s) is for the bucketed output
            from splits.ingest.partition import BucketWriter, drop_bucket_duplicates

            writer = BucketWriter(out, settings.buckets, POSTS_SCHEMA)
            try:
                for posts in posts_chunks():
                    writer.add(posts)
                writer.close()
            except BaseException:
                writer.discard()
                raise
        else:
            write_parquet(stream_frames(posts_chunks, POSTS_SCHEMA), out)
        t_chunks = time.perf_counter()
        dup_hashes = duplicates.candidates()
        if dup_hashes.len() and bucketed:
            n_dup = drop_bucket_duplicates(writer, dup_hashes, work)
            counts["duplicate_id"] += n_dup
            counts["posts"] -= n_dup
        elif dup_hashes.len():
            staged = work / "posts.parquet"
            os.replace(out, staged)
            deduped, n_dup = drop_duplicate_ids(
                pl.scan_parquet(str(staged), row_index_name="_row"), dup_hashes
            )
            write_parquet(deduped, out)
            counts["duplicate_id"] += n_dup
            counts["posts"] -= n_dup
        t_done = time.perf_counter()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    dropped = {r: int(counts.get(r, 0)) for r in REASONS}
    report = {
        "shard": shard or shard_name(path),
        "input": str(path),
        "format": source.format,
        "input_bytes": source.size(),
        "records": int(counts["records"] + counts["invalid_utf8"] + counts["malformed_json"]),
        "posts": int(counts["posts"]),
        "dropped": dropped,
        "dropped_total": int(sum(dropped.values())),
        "blank_lines": int(counts["blank_lines"]),
        "slow_chunks": int(counts["slow_chunks"]),
        "slow_lines": int(counts["slow_lines"]),
    }
    if report["records"] != report["posts"] + report["dropped_total"]:
        raise RuntimeError(f"ingest accounting mismatch in {path}: {report}")
    write_json(report, report_path)
    # timings go to the job's log only: the report is an output and must not change between runs
    log.info(
        "%s: %d records -> %d posts (%d dropped) in %.1f s (%.1f MB/s; titles %.1f s, "
        "chunks %.1f s, duplicates %.1f s)",
        report["shard"],
        report["records"],
        report["posts"],
        report["dropped_total"],
        elapsed,
        report["input_bytes"] / 1e6 / max(elapsed, 1e-9),
        phase["titles"],
        t_chunks - started,
        t_done - t_chunks,
    )
    return report


def read_next(chunks: Iterator[bytes]) -> tuple[bytes, int] | None:
    """The next chunk and its number of lines (None at the input's end). The lines are counted
    here, in the reading thread, which otherwise mostly waits on the disk or the decompressor:
    counted by the parse, they cost ~5% of the stage's wall time (a 352 MB Pushshift file)."""
    chunk = next(chunks, None)
    return None if chunk is None else (chunk, count_lines(chunk))


def stream_frames(make_frames, schema: dict) -> pl.LazyFrame:
    """A lazy frame over the frames a generator function yields (read once, in order), so that
    a streaming sink writes them as they come: memory holds a chunk or two, not the table."""

    def source(with_columns, predicate, n_rows, batch_size) -> Iterator[pl.DataFrame]:
        for frame in make_frames():
            if with_columns is not None:
                frame = frame.select(with_columns)
            if predicate is not None:
                frame = frame.filter(predicate)
            yield frame

    return register_io_source(source, schema=schema)
