"""Shared I/O: atomic writes (Parquet, JSON, text, any file through :func:`atomic_path`),
reading config in stage commands.

Every output is written to a temporary file beside it (``.<name>.<random>.tmp``) and renamed
onto its name when complete, so a killed job leaves no half-written output for Snakemake to
mistake for a finished one. A killed writer leaves its temporary behind; the next write of the
same output removes it (one job writes an output at a time, so these are never live).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from splits.errors import InputError
from splits.filecheck import as_os_error

if TYPE_CHECKING:  # pyarrow loads where a Parquet file is appended to, not with this module
    import pyarrow as pa

PARQUET_COMPRESSION = "zstd"
# zstd level 1, not the library's default 3: the tables are mostly text, written once and read
# a few times by later jobs; level 1 costs ~16% less CPU in a job that writes six D_d parts of
# a 1M-post bucket, for ~5% more bytes (measured 2026-11-28); ingest has written level 1 since
# its first benchmark
PARQUET_LEVEL = 1
TMP_SUFFIX = ".tmp"
STAGED_SUFFIX = ".unsorted"
# the unsorted copy write_sorted_parquet reads once per part and deletes: lz4 writes and reads
# it faster than zstd, for ~1.5x its bytes (a 3M-post D_d: 8.6 + 6.9 CPU s against 10.4 + 7.7
# at zstd, 230 against 150 MB on disk; measured 2026-11-30)
STAGED_COMPRESSION = "lz4"


def stale_temporaries(path: str | Path, suffix: str = TMP_SUFFIX) -> list[Path]:
    """Temporaries of earlier writes of ``path`` (``.<name>.<anything><suffix>`` beside it)."""
    path = Path(path)
    pattern = f".{glob.escape(path.name)}.*{glob.escape(suffix)}"
    return sorted(path.parent.glob(pattern))


def remove_stale_temporaries(path: str | Path, suffix: str = TMP_SUFFIX) -> int:
    """Remove what :func:`stale_temporaries` finds (files or folders); return how many."""
    found = stale_temporaries(path, suffix)
    for stale in found:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    return len(found)


def current_umask() -> int:
    """The process's umask (read from /proc where Linux shows it, without changing it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temporary_beside(path: Path, suffix: str = TMP_SUFFIX) -> str:
    """A new empty temporary file ``.<name>.<random><suffix>`` beside ``path``, after removing
    the stale ones with that suffix (left by a killed writer of the same output). Its mode is
    the one ``open`` would give a new file under the umask (``mkstemp`` alone makes 0600, which
    the renamed output would keep: collaborators of the group could not read results)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path, suffix)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
    finally:
        os.close(fd)
    return tmp


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to: renamed onto ``path`` when the block ends
    without an error, removed otherwise. Stale temporaries of ``path`` are removed first."""
    path = Path(path)
    tmp = temporary_beside(path)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except Exception as err:  # a full disk, a write refused: an OSError naming the output
        raise (as_os_error(err, path) or err) from err
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_parquet(
    frame: pl.DataFrame | pl.LazyFrame,
    path: str | Path,
    compression_level: int | None = PARQUET_LEVEL,
    row_group_size: int | None = None,
    metadata: dict[str, str] | None = None,
) -> Path:
    """Write a frame as zstd Parquet atomically. ``compression_level`` (zstd 1-22, default
    ``PARQUET_LEVEL``; None: the library's default) trades file size for write speed;
    ``row_group_size`` (rows; None: the library's default) bounds what a reader decodes at once
    (see :func:`iter_sorted_merge`); ``metadata``: key-value pairs kept in the file's footer
    (``pl.read_parquet_metadata`` reads them back)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        if isinstance(frame, pl.LazyFrame):
            frame.sink_parquet(
                tmp,
                compression=PARQUET_COMPRESSION,
                compression_level=compression_level,
                row_group_size=row_group_size,
                metadata=metadata,
            )
        else:
            frame.write_parquet(
                tmp,
                compression=PARQUET_COMPRESSION,
                compression_level=compression_level,
                statistics=True,
                row_group_size=row_group_size,
                metadata=metadata,
            )
    return path


class ParquetAppender:
    """A zstd Parquet file written piece by piece (each ``write`` adds row groups), so a job
    never holds the whole table; atomic like ``write_parquet`` (temp file renamed by ``close``).
    Every piece must have the first piece's schema. ``compression_level``: as in
    ``write_parquet``. ``dictionary``: the columns dictionary-encoded (True: every column,
    pyarrow's default); a table of free texts names its few repetitive columns, since trying a
    dictionary on every text and id costs a fifth of the write (measured: 1.70 against 1.36 CPU s
    for a million posts in row groups of 6,667) and its fallback made a larger file (48 against
    44 MB)."""

    def __init__(
        self,
        path: str | Path,
        compression_level: int | None = PARQUET_LEVEL,
        dictionary: bool | list[str] = True,
    ):
        self.path = Path(path)
        self.compression_level = compression_level
        self.dictionary = dictionary
        self._tmp = temporary_beside(self.path)
        self._writer = None
        self.rows = 0

    def write(self, frame: pl.DataFrame | pa.Table, row_group_size: int | None = None) -> None:
        """Add ``frame`` (a polars DataFrame, or a pyarrow Table already converted: a slice of
        one conversion costs nothing, a conversion ~1 ms however small the frame)."""
        import pyarrow.parquet as pq

        table = frame.to_arrow() if isinstance(frame, pl.DataFrame) else frame
        try:
            if self._writer is None:
                self._writer = pq.ParquetWriter(
                    self._tmp,
                    table.schema,
                    compression=PARQUET_COMPRESSION,
                    compression_level=self.compression_level,
                    use_dictionary=self.dictionary,
                )
            self._writer.write_table(table, row_group_size=row_group_size)
        except Exception as err:  # a full disk: the temporary goes, the error names the output
            self.discard()
            raise (as_os_error(err, self.path) or err) from err
        self.rows += table.num_rows

    def close(self, empty: pl.DataFrame | None = None) -> Path:
        """Finish the file (with no piece written: ``empty``'s schema, zero rows)."""
        try:
            if self._writer is None:
                (empty if empty is not None else pl.DataFrame()).write_parquet(
                    self._tmp, compression=PARQUET_COMPRESSION
                )
            else:
                self._writer.close()
            os.replace(self._tmp, self.path)
        except Exception as err:
            self.discard()
            raise (as_os_error(err, self.path) or err) from err
        return self.path

    def discard(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception:  # closing a file the disk could not take: it goes anyway
                pass
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)


def write_sorted_parquet(
    frame: pl.LazyFrame, by: str, path: str | Path, max_rows: int, source_rows: int | None = None
) -> int:
    """Write ``frame`` sorted by the column ``by`` while holding at most about ``max_rows`` rows:
    its ``by`` column alone is read to cut the range into parts of ``max_rows`` rows; each part
    is then read (one filtered pass per part), sorted and appended. Returns the number of rows.

    The parts are read from an unsorted copy of ``frame`` streamed to a temporary file next to
    ``path``, except where ``source_rows`` says ``frame`` is a filter over a Parquet scan of that
    many rows (D_d over the posts table) and reading the parts straight from the scan costs less
    (:func:`_scan_passes_cheaper`): where the rows arrive in long sorted runs, so that each
    part's filter skips most of the scan's row groups, or where the passes cost less than the
    copy all the same (one part of a source not much larger than it)."""
    path = Path(path)
    try:
        if source_rows is not None:
            in_order = frame.select(by).collect(engine="streaming").get_column(by)
            runs = _sorted_runs(in_order)
            keys = in_order.sort()
            del in_order
            if _scan_passes_cheaper(keys.len(), source_rows, max_rows, runs):
                return _write_sorted_parts(frame, keys, by, path, max_rows)
        # its own suffix: the output's writers below remove stale ``.tmp`` files of ``path``
        staged = temporary_beside(path, STAGED_SUFFIX)
        try:
            frame.sink_parquet(staged, compression=STAGED_COMPRESSION)
            copy = pl.scan_parquet(staged)
            if source_rows is None:
                keys = _sorted_keys(copy, by)
            # else the keys read from the scan above: the copy holds the same rows
            return _write_sorted_parts(copy, keys, by, path, max_rows)
        finally:
            os.unlink(staged)
    except Exception as err:
        raise (as_os_error(err, path) or err) from err


# Which way reads the parts for less. Where the rows arrive in long sorted runs (the source laid
# out in key order, as ingest's shards of an id-ordered dump or of the generated corpus are),
# a part's range filter skips the source's row groups outside it, and the passes together read
# the source about once: straight from the scan (a 3.0M-row D_d of 9.6M such posts, four
# parts: 6.6 against 11.8 CPU s for the copy). Elsewhere (ConvoKit's conversation order, say)
# every pass decodes the key and filter columns of every source row. CPU per row measured on
# the same posts shuffled (POLARS_MAX_THREADS=1, 2026-11-30): a part's pass ~0.45 us per source
# row; the copy reads every column of the source once (~0.6 us a row), writes and reads its rows
# once (~1.3 us a row), and a pass over it ~0.44 us per copied row (there four parts straight
# from the scan: 22.3 against ~17 CPU s for the copy). The keys' pass over the scan (~0.28 us a
# row) is made either way: the copy's parts are cut by the same keys.
SORTED_RUN_ROWS = 100_000  # rows per sorted run, on average, above which the filters prune
SCAN_PASS_US = 0.45
COPY_READ_US = 0.6
COPY_WRITE_US = 1.3
COPY_PASS_US = 0.44


def _sorted_runs(keys: pl.Series) -> int:
    """The ascending runs of ``keys`` in their order (1 + the number of descents)."""
    if keys.len() < 2:
        return 1
    return 1 + int((keys.slice(1) < keys.slice(0, keys.len() - 1)).sum())


def _scan_passes_cheaper(rows: int, source_rows: int, max_rows: int, runs: int) -> bool:
    parts = -(-rows // max_rows)
    if rows >= runs * SORTED_RUN_ROWS:
        return True
    scan = parts * SCAN_PASS_US * source_rows
    copy = COPY_READ_US * source_rows + (COPY_WRITE_US + parts * COPY_PASS_US) * rows
    return scan < copy


def _sorted_keys(frame: pl.LazyFrame, by: str) -> pl.Series:
    return frame.select(by).collect(engine="streaming").get_column(by).sort()


def _write_sorted_parts(
    frame: pl.LazyFrame, keys: pl.Series, by: str, path: Path, max_rows: int
) -> int:
    if keys.len() <= max_rows:
        write_parquet(frame.sort(by), path)
        return keys.len()
    bounds = keys.gather(list(range(max_rows, keys.len(), max_rows))).unique(maintain_order=True)
    edges = [None, *bounds.to_list(), None]
    del keys
    out = ParquetAppender(path)
    try:
        for low, high in zip(edges[:-1], edges[1:], strict=True):
            part = frame
            if low is not None:
                part = part.filter(pl.col(by) >= low)
            if high is not None:
                part = part.filter(pl.col(by) < high)
            out.write(part.collect(engine="streaming").sort(by))
    except BaseException:
        out.discard()
        raise
    out.close()
    return out.rows


MERGE_FAN_IN = 64  # files merged at once; more are merged in rounds through scratch files
MERGE_ROW_GROUP_ROWS = 2048  # row group of a file written to be merged (what a reader decodes;
# a merge of P files holds about P of them: 8192 grew the group-ness reduce 189 -> 204 MiB from 3
# to 30 buckets of 20,000 users, 2048 gives 189 -> 177, bench_groupness_reduce.py)
MERGE_MIN_BATCH_ROWS = 1024  # rows a merge reads from a file at once, at least


def iter_sorted_merge(
    paths: list[str | Path],
    by: str,
    max_rows: int,
    columns: list[str] | None = None,
    scratch: str | Path | None = None,
    min_batch_rows: int | None = None,
) -> Iterator[pl.DataFrame]:
    """The rows of Parquet files that are each sorted by the column ``by`` (no nulls), as one
    stream sorted by ``by``: a k-way merge holding about ``max_rows`` rows in all, however
    large the files are together. Each yielded frame is sorted, and every key in it is at most
    every key of the frames after it (a key found in two files comes out in one frame); rows of
    equal keys from one file keep their order there.

    A file is read in batches of ``max_rows`` / files rows (at least ``min_batch_rows``,
    MERGE_MIN_BATCH_ROWS when None: a merge of P files holds up to P times that); a reader
    also decodes one row group
    at a time, so files written for merging keep row groups small (``MERGE_ROW_GROUP_ROWS``).
    Past ``MERGE_FAN_IN`` files, groups of them are first merged into files in ``scratch`` (a
    temporary folder; the system's when None), so the rows held do not grow with the number of
    files. ``columns``: those to read (``by`` is read and yielded first whether named or not),
    all when None. A file out of order is a one-line error."""
    names = None if columns is None else list(dict.fromkeys([by, *columns]))
    paths = [Path(p) for p in paths]
    if len(paths) <= MERGE_FAN_IN:
        yield from _merge_files(paths, by, max_rows, names, min_batch_rows)
        return
    with tempfile.TemporaryDirectory(dir=scratch, prefix=".merge.") as folder:
        while len(paths) > MERGE_FAN_IN:
            rounds = []
            for start in range(0, len(paths), MERGE_FAN_IN):
                rounds.append(Path(folder) / f"{len(rounds)}.{start}.parquet")
                out = ParquetAppender(rounds[-1])
                group = paths[start : start + MERGE_FAN_IN]
                for frame in _merge_files(group, by, max_rows, names, min_batch_rows):
                    out.write(frame, row_group_size=MERGE_ROW_GROUP_ROWS)
                out.close(
                    pl.DataFrame(schema=pl.read_parquet_schema(paths[start])).select(
                        names or pl.all()
                    )
                )
            paths = rounds
        yield from _merge_files(paths, by, max_rows, names, min_batch_rows)


def iter_parquet_slices(
    path: str | Path, columns: list[str] | None = None, rows: int = 65_536
) -> Iterator[pl.DataFrame]:
    """The rows of one Parquet file, ``columns`` only, in frames of at most ``rows``, one
    held at a time. Each is a sliced scan (polars reads the row groups the slice covers), which
    holds less than a pyarrow batch reader: importing pyarrow alone costs ~45 MiB."""
    total = pl.scan_parquet(path).select(pl.len()).collect().item()  # from the footer
    for offset in range(0, total, rows):
        frame = pl.scan_parquet(path).slice(offset, rows)
        yield (frame.select(columns) if columns is not None else frame).collect()


def _merge_files(
    paths: list[Path], by: str, max_rows: int, names: list[str] | None, min_batch_rows: int | None
) -> Iterator[pl.DataFrame]:
    import pyarrow.parquet as pq

    floor = MERGE_MIN_BATCH_ROWS if min_batch_rows is None else min_batch_rows
    batch_rows = max(floor, max_rows // max(1, len(paths)))

    def batches(path):
        last = None
        # pre_buffer=False: with it, pyarrow reads every row group's bytes up front
        reader = pq.ParquetFile(path, pre_buffer=False)
        for batch in reader.iter_batches(batch_size=batch_rows, columns=names):
            frame = pl.from_arrow(batch)
            if frame.height == 0:
                continue
            keys = frame.get_column(by)
            if keys.null_count() or not keys.is_sorted() or (last is not None and keys[0] < last):
                raise InputError(f"{path}: not sorted by {by} (or a null {by}); cannot merge it")
            last = keys[-1]
            yield frame

    sources = [batches(p) for p in paths]
    held = {i: frame for i, src in enumerate(sources) if (frame := next(src, None)) is not None}
    while held:
        # nothing a file has yet to yield sorts below the last key it holds: everything up to
        # the smallest of those is final (and the file holding it is used up to its batch's end)
        bound = min(frame.get_column(by)[-1] for frame in held.values())
        pieces = []
        for i in list(held):
            frame = held[i]
            keys = frame.get_column(by)
            if keys[-1] <= bound:
                take = frame.height
            elif keys[0] > bound:
                take = 0
            else:
                take = keys.search_sorted(bound, side="right")
            if take:
                pieces.append(frame.head(take))
            if take < frame.height:
                held[i] = frame.slice(take)
            elif (following := next(sources[i], None)) is not None:
                held[i] = following
            else:
                del held[i]
        # stable: the rows of equal keys from one file keep that file's order
        yield pl.concat(pieces).sort(by, maintain_order=True)


def write_json(data: Any, path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=True, default=str)
        fh.write("\n")
    return path


def write_text(text: str, path: str | Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def read_json(path: str | Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def scan_posts(paths: str | Path | list[str | Path]) -> pl.LazyFrame:
    """Lazy scan of one or more posts Parquet files (or a directory of them)."""
    if isinstance(paths, str | Path):
        p = Path(paths)
        paths = sorted(p.glob("*.parquet")) if p.is_dir() else [p]
    return pl.scan_parquet([str(p) for p in paths])
