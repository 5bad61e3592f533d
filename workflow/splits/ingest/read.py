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
bad lines are dropped and counted. Each chunk is cleaned by one polars query (submission titles
looked up in a hash index of ``conversations.json``, read by a fast path that turns ConvoKit's
layout into NDJSON with two literal byte replacements) and streamed into the Parquet output
(zstd level 1: the write costs a third less CPU than the default level for ~10% more bytes).
Both cores work: worker threads parse and clean the next chunks (polars releases the GIL) while
the Parquet writer compresses the current one and the titles load in their own thread; at most
``IN_FLIGHT`` chunks are with the workers at once (one more in the writer), handed on in input
order with per-chunk counts, so output bytes and report counts do not depend on thread timing.
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

import argparse
import bz2
import io
import json
import logging
import lzma
import os
import re
import shutil
import tempfile
import time
import zipfile
import zlib
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO

import numpy as np
import polars as pl
from polars.io.plugins import register_io_source

from splits.errors import ConfigError, InputError
from splits.io import remove_stale_temporaries, write_json, write_parquet

try:  # orjson is faster on the slow (per-line) path; the stdlib is the fallback
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

log = logging.getLogger(__name__)

POSTS_SCHEMA = {
    "post_id": pl.String,
    "kind": pl.String,
    "subreddit": pl.String,
    "author": pl.String,
    "created_utc": pl.Int64,
    "text": pl.String,
    "score": pl.Int64,
    "conversation_id": pl.String,
    "reply_to": pl.String,
}
REASONS = (
    "invalid_utf8",
    "malformed_json",
    "missing_field:id",
    "missing_field:author",
    "missing_field:conversation_id",
    "missing_field:timestamp",
    "invalid_field:timestamp",
    "missing_field:text",
    "missing_field:subreddit",
    "deleted_text",
    "removed_text",
    "empty_text",
    "deleted_author",
    "bot",
    "duplicate_id",
)
DEFAULT_BOTS = ("AutoModerator",)
# worker threads that parse and clean chunks, and the most chunks handed to them at once
WORKERS = 2
IN_FLIGHT = 3
KEEP_CONVOKIT = ("utterances.jsonl", "conversations.json")
WORK_SUFFIX = ".work"  # the shard's work folder beside its output: .<name>.<random>.work

# NDJSON schemas of the fast path: every key as String (numbers are kept as their text and cast
# afterwards, so ints, floats and numeric strings all parse), unknown keys ignored.
CONVOKIT_SCHEMA = {
    "id": pl.String,
    "speaker": pl.String,
    "user": pl.String,
    "conversation_id": pl.String,
    "root": pl.String,
    "reply-to": pl.String,
    "reply_to": pl.String,
    "timestamp": pl.String,
    "text": pl.String,
    "meta": pl.Struct({"subreddit": pl.String, "score": pl.String}),
}
PUSHSHIFT_SCHEMA = {
    "id": pl.String,
    "name": pl.String,
    "author": pl.String,
    "subreddit": pl.String,
    "created_utc": pl.String,
    "title": pl.String,
    "selftext": pl.String,
    "body": pl.String,
    "score": pl.String,
    "parent_id": pl.String,
    "link_id": pl.String,
}


# --------------------------------------------------------------------------- input discovery


def input_format(path: str | Path) -> str:
    """``convokit`` (a directory or .zip) or ``pushshift`` (an NDJSON file, maybe compressed)."""
    p = Path(path)
    if p.is_dir() or p.suffix == ".zip":
        return "convokit"
    return "pushshift"


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


def load_bot_list(path: str | Path | None) -> set[str]:
    bots = set(DEFAULT_BOTS)
    if path is None:
        return bots
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"ingest.bots_file: {path} does not exist")
    for line in p.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            bots.add(line)
    return bots


# --------------------------------------------------------------------------- compressed streams

# magic bytes -> compression read; a zstd stream may also open with a skippable frame
COMPRESSIONS = (
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)
# magic bytes of formats that are not read, named in the refusal
REFUSED_FORMATS = (
    (b"PK\x03\x04", "zip"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
    (b"Rar!\x1a\x07", "rar"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"\x02\x21\x4c\x18", "lz4 (legacy)"),
    (b"\x1f\x9d", "compress (.Z)"),
    (b"\x1f\xa0", "compress (LZH)"),
    (b"LZIP", "lzip"),
    (b"\x89LZO\x00", "lzo"),
    (b"\x5d\x00\x00", "lzma (legacy .lzma)"),
)
REFUSED_SUFFIXES = {".br": "brotli", ".lz4": "lz4", ".7z": "7z", ".rar": "rar", ".lz": "lzip"}
SUFFIX_COMPRESSION = {".zst": "zstd", ".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}
ACCEPTED = "plain NDJSON, zstd (.zst), gzip (.gz), bzip2 (.bz2) or xz (.xz)"
_READ_BLOCK = 1 << 18  # compressed bytes fed to the decompressor at a time
_HEAD = 1 << 16  # bytes looked at to tell the format


def detect_compression(head: bytes, label: str) -> str:
    """``plain`` or the compression of a stream from its first bytes (magic bytes, not the
    name); InputError for any other compression or binary content."""
    for magic, kind in COMPRESSIONS:
        if head.startswith(magic):
            return kind
    if len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18":
        return "zstd"  # a skippable frame first
    for magic, kind in REFUSED_FORMATS:
        if head.startswith(magic):
            raise InputError(f"{label}: {kind} compression is not supported (accepted: {ACCEPTED})")
    refused = REFUSED_SUFFIXES.get(Path(label).suffix)
    if refused or _looks_binary(head):
        what = f"{refused} compression" if refused else "binary content (no known magic bytes)"
        raise InputError(f"{label}: {what} is not supported (accepted: {ACCEPTED})")
    named = SUFFIX_COMPRESSION.get(Path(label).suffix)
    if named and head:
        log.warning(
            "%s: the name says %s but the content is not compressed; read as text", label, named
        )
    return "plain"


def _looks_binary(head: bytes) -> bool:
    """Most of it is not text: over 30% of the characters are invalid UTF-8 or control
    characters other than tab and line ends (compressed data: about half; a damaged text
    file: a few lines, counted one by one instead)."""
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") + len(re.findall(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", text))
    return bad > 0.3 * len(text)


def _decompressor(kind: str):
    if kind == "zstd":
        import zstandard

        # Pushshift's dumps use windows up to 2 GiB (zstd --long=31)
        return zstandard.ZstdDecompressor(max_window_size=2**31).decompressobj()
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    if kind == "bzip2":
        return bz2.BZ2Decompressor()
    return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)


def _decompress_errors() -> tuple[type[BaseException], ...]:
    import zstandard

    return (zstandard.ZstdError, zlib.error, lzma.LZMAError, OSError, EOFError, ValueError)


class InputStream(io.RawIOBase):
    """The bytes of one input file (or archive member), decompressed by content: plain, zstd,
    gzip, bzip2 or xz, concatenated frames / members / streams included. A stream that ends
    inside a frame (a download cut short) or does not decompress raises InputError naming the
    file, the compressed offset reached and the bytes decompressed so far, so that nothing of
    the shard is published as complete."""

    def __init__(self, raw: IO[bytes], label: str, size: int | None = None):
        super().__init__()
        self.raw = raw
        self.label = label
        self.size = size
        self.consumed = 0  # bytes read from the file
        self.produced = 0  # bytes handed on
        self.buffer = bytearray()
        self.ended = False
        self.frame = None  # the decompressor of the current frame, or None between frames
        head = self._raw_read(_HEAD)
        self.kind = detect_compression(head, label)
        if self.kind == "plain":
            self.buffer += head.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark
        else:
            self._feed(head)

    def readable(self) -> bool:
        return True

    def _where(self) -> str:
        of = f" of {self.size:,}" if self.size is not None else ""
        return f"compressed byte {self.consumed:,}{of} ({self.produced + len(self.buffer):,} bytes decompressed)"

    def _raw_read(self, n: int) -> bytes:
        try:
            data = self.raw.read(n)
        except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as err:
            raise InputError(
                f"{self.label}: read error after byte {self.consumed:,} ({err}); the file is damaged"
            ) from err
        self.consumed += len(data)
        if not data:
            self.ended = True
        return data

    def _feed(self, data: bytes) -> None:
        while data:
            if self.frame is None:
                if self.kind in ("gzip", "xz"):
                    data = data.lstrip(b"\x00")  # zero padding between members / streams
                    if not data:
                        return
                self.frame = _decompressor(self.kind)
            try:
                self.buffer += self.frame.decompress(data)
            except _decompress_errors() as err:
                raise InputError(
                    f"{self.label}: {self.kind} data is corrupt near {self._where()}: {err}"
                ) from err
            if self.frame.eof:
                data = self.frame.unused_data
                self.frame = None
            else:
                data = b""

    def _fill(self, want: int) -> None:
        while len(self.buffer) < want and not self.ended:
            if self.kind == "plain":
                self.buffer += self._raw_read(max(want - len(self.buffer), _READ_BLOCK))
                continue
            data = self._raw_read(_READ_BLOCK)
            if data:
                self._feed(data)
            elif self.frame is not None:
                raise InputError(
                    f"{self.label}: the {self.kind} stream ends early at {self._where()}: "
                    "the file is truncated (an interrupted download?); nothing of it is published"
                )

    def readinto(self, b) -> int:
        want = len(b)
        self._fill(want)
        n = min(want, len(self.buffer))
        b[:n] = self.buffer[:n]
        del self.buffer[:n]
        self.produced += n
        return n

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            chunks = []
            while data := self.read(1 << 24):
                chunks.append(data)
            return b"".join(chunks)
        if self.kind == "plain" and not self.buffer:  # no copy on the common path
            data = self._raw_read(n)
            self.produced += len(data)
            return data
        self._fill(n)
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        self.produced += len(out)
        return out

    def close(self) -> None:
        if not self.closed:
            self.raw.close()
        super().close()


class _Source:
    """Opens the parts of one input: utterances and titles (ConvoKit) or the NDJSON stream."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise ConfigError(f"ingest.inputs: input {path} does not exist")
        self.format = input_format(self.path)
        self.zip: zipfile.ZipFile | None = None
        self.members: dict[str, str] = {}
        if self.path.suffix == ".zip":
            try:
                self.zip = zipfile.ZipFile(self.path)
            except zipfile.BadZipFile as err:
                raise ConfigError(f"ingest.inputs: {path} is not a valid zip file") from err
            for info in self.zip.infolist():
                base = info.filename.rsplit("/", 1)[-1]
                if base in KEEP_CONVOKIT and base not in self.members:
                    self.members[base] = info.filename
        elif self.path.is_dir():
            for base in KEEP_CONVOKIT:
                found = self.path / base
                if not found.exists():
                    nested = sorted(self.path.glob(f"*/{base}"))
                    found = nested[0] if nested else found
                if found.exists():
                    self.members[base] = str(found)
        if self.format == "convokit" and "utterances.jsonl" not in self.members:
            raise ConfigError(
                f"ingest.inputs: {path} has no utterances.jsonl (not a ConvoKit corpus)"
            )

    def open(self, member: str) -> InputStream | None:
        """The decompressed bytes of the NDJSON file, or of a member of a ConvoKit corpus."""
        if self.format == "pushshift":
            return InputStream(open(self.path, "rb"), str(self.path), self.path.stat().st_size)
        if member not in self.members:
            return None
        if self.zip is not None:
            info = self.zip.getinfo(self.members[member])
            try:
                raw = self.zip.open(info)
            except (zipfile.BadZipFile, OSError, EOFError) as err:
                raise InputError(f"{self.path}: cannot open {info.filename} ({err})") from err
            return InputStream(raw, f"{self.path}:{info.filename}", info.file_size)
        path = self.members[member]
        return InputStream(open(path, "rb"), str(path), Path(path).stat().st_size)

    def size(self) -> int:
        if self.format == "pushshift":
            return self.path.stat().st_size
        if self.zip is not None:
            return sum(
                i.file_size
                for i in self.zip.infolist()
                if i.filename == self.members["utterances.jsonl"]
            )
        return Path(self.members["utterances.jsonl"]).stat().st_size


def iter_line_chunks(fh: IO[bytes], chunk_bytes: int) -> Iterator[bytes]:
    """Byte chunks of about ``chunk_bytes`` that end at a line end (the last one may not)."""
    rest = b""
    while True:
        data = fh.read(chunk_bytes)
        if not data:
            break
        if rest:
            data = rest + data
        cut = data.rfind(b"\n")
        if cut < 0:
            rest = data
            continue
        rest = data[cut + 1 :]
        yield data[: cut + 1]
    if rest:
        yield rest


# --------------------------------------------------------------------------- titles


def iter_titles(fh: IO[bytes], chunk_chars: int = 1 << 22) -> Iterator[tuple[str, str | None]]:
    """Stream (conversation id, title) pairs out of a ConvoKit ``conversations.json`` object
    without loading it whole: entries are decoded one at a time."""
    decoder = json.JSONDecoder()
    reader = io.TextIOWrapper(fh, encoding="utf-8", errors="replace")
    buf = ""
    pos = 0
    eof = False

    def need(n: int) -> bool:
        nonlocal buf, pos, eof
        while len(buf) - pos < n and not eof:
            more = reader.read(chunk_chars)
            if not more:
                eof = True
                break
            buf = buf[pos:] + more
            pos = 0
        return len(buf) - pos >= n

    def skip_ws() -> str:
        nonlocal pos
        while True:
            if not need(1):
                return ""
            c = buf[pos]
            if c in " \t\r\n":
                pos += 1
                continue
            return c

    if skip_ws() != "{":
        return
    pos += 1
    while True:
        c = skip_ws()
        if c in ("}", ""):
            return
        if c == ",":
            pos += 1
            continue
        while True:  # decode the key, then the value; read more when an item is cut
            try:
                key, end = decoder.raw_decode(buf, pos)
                rest_start = end
                while True:
                    if not need(rest_start - pos + 1):
                        return
                    if buf[rest_start] in " \t\r\n:":
                        rest_start += 1
                        continue
                    break
                value, end = decoder.raw_decode(buf, rest_start)
                break
            except json.JSONDecodeError:
                if eof:
                    return
                size = len(buf) - pos
                if not need(size + chunk_chars):
                    if eof and len(buf) - pos == size:
                        return
        pos = end
        title = None
        if isinstance(value, dict) and isinstance(value.get("meta"), dict):
            t = value["meta"].get("title")
            title = t if isinstance(t, str) else None
        yield str(key), title


# ConvoKit (json.dump, default separators) writes conversations.json as one object whose entries
# are '"<id>": {"meta": {...}, "vectors": [...]}'. The fast path turns a byte chunk of it into
# NDJSON with two literal replacements (no per-entry Python): '"<id>": {"meta": ' becomes
# '"<id>", "v": {"meta": ' and each entry boundary ']}, "' becomes ']}}\n{"id": "'. A chunk
# that does not have this layout (or a "meta" nested deeper, or an entry end inside meta) gives
# lines that are not valid JSON, and the caller falls back to decoding entry by entry.
_ENTRY_END = b']}, "'
_TITLE_SCHEMA = {"id": pl.String, "v": pl.Struct({"meta": pl.Struct({"title": pl.String})})}
_TITLE_OUT = {"conversation_id": pl.String, "title": pl.String}


def _title_lines(piece: bytes, last: bool) -> bytes:
    lines = piece.replace(_ENTRY_END, b']}}\n{"id": "').replace(
        b'": {"meta": ', b'", "v": {"meta": '
    )
    return lines if last else lines + b"}"


def _fast_titles(fh: IO[bytes], chunk_bytes: int) -> Iterator[pl.DataFrame]:
    """(conversation_id, title) frames of a conversations.json laid out as ConvoKit writes it
    (see above), one per byte chunk. Raises ValueError where the layout differs."""
    buf = b""
    eof = False
    started = False
    while not eof:
        data = fh.read(chunk_bytes)
        eof = not data
        buf += data
        if not started:
            head = buf.lstrip()
            if not head:
                if eof:
                    return
                continue
            if not head.startswith(b"{"):
                raise ValueError("conversations.json is not a JSON object")
            if head[1:].strip() == b"}":
                return
            if not eof and len(head) < 2:
                continue
            buf = b'{"id": ' + head[1:].lstrip()
            started = True
        if eof:
            piece, buf = buf.rstrip(), b""
            if not piece.endswith(b"}"):
                raise ValueError("conversations.json is cut short")
        else:
            cut = buf.rfind(_ENTRY_END)
            if cut < 0:
                if len(buf) > 8 * chunk_bytes + (1 << 20):
                    raise ValueError("unexpected conversations.json layout")
                continue
            piece, buf = buf[: cut + 2], b'{"id": ' + buf[cut + 4 :]
        try:
            frame = pl.read_ndjson(io.BytesIO(_title_lines(piece, eof)), schema=_TITLE_SCHEMA)
        except Exception as err:  # noqa: BLE001 - any failure: not ConvoKit's layout
            raise ValueError(f"unexpected conversations.json layout ({err})") from err
        yield frame.select(
            pl.col("id").alias("conversation_id"),
            pl.col("v").struct.field("meta").struct.field("title").alias("title"),
        )


def read_titles(source: _Source, chunk_bytes: int = 1 << 24) -> pl.DataFrame:
    """All (conversation_id, title) pairs of a ConvoKit corpus (first entry of an id kept):
    the fast path above, or entry-by-entry decoding where the layout differs. The file is
    streamed; what stays in memory is the pairs themselves."""
    frames: list[pl.DataFrame] = []
    fh = source.open("conversations.json")
    if fh is None:
        return pl.DataFrame(schema=_TITLE_OUT)
    try:
        with fh:
            frames.extend(_fast_titles(fh, chunk_bytes))
    except ValueError as err:
        log.info("conversations.json: %s; decoding entry by entry", err)
        frames.clear()
        ids: list[str] = []
        titles: list[str | None] = []
        with source.open("conversations.json") as fh2:
            for cid, title in iter_titles(fh2):
                ids.append(cid)
                titles.append(title)
                if len(ids) >= 500_000:
                    frames.append(
                        pl.DataFrame({"conversation_id": ids, "title": titles}, schema=_TITLE_OUT)
                    )
                    ids, titles = [], []
        frames.append(pl.DataFrame({"conversation_id": ids, "title": titles}, schema=_TITLE_OUT))
    if not frames:
        return pl.DataFrame(schema=_TITLE_OUT)
    return pl.concat(frames, rechunk=True).unique(
        "conversation_id", keep="first", maintain_order=True
    )


class TitleIndex:
    """Titles looked up by conversation id without a join per chunk: the 64-bit hashes of the
    ids, sorted, are binary-searched (numpy) and every hit is confirmed on the id itself."""

    def __init__(self, titles: pl.DataFrame):
        titles = titles.filter(pl.col("title").is_not_null())
        hashes = titles["conversation_id"].hash(seed=_HASH_SEED)
        order = hashes.arg_sort()
        self.hashes = hashes.gather(order).to_numpy()
        self.ids = titles["conversation_id"].gather(order)
        self.titles = titles["title"].gather(order)
        # two different ids with one hash (about 1e-7 at a million titles): hash lookups could
        # miss one of them, so look up by the sorted ids instead
        self.by_hash = not bool((self.hashes[1:] == self.hashes[:-1]).any())
        if not self.by_hash:
            order = self.ids.arg_sort()
            self.ids = self.ids.gather(order)
            self.titles = self.titles.gather(order)

    def __len__(self) -> int:
        return len(self.ids)

    def lookup(self, ids: pl.Series) -> pl.Series:
        """The title of each id (null where there is none)."""
        n = len(self.ids)
        if n == 0 or ids.len() == 0:
            return pl.Series("title", [None] * ids.len(), dtype=pl.String)
        if self.by_hash:
            pos = np.searchsorted(self.hashes, ids.hash(seed=_HASH_SEED).to_numpy())
        else:
            pos = self.ids.search_sorted(ids.fill_null("")).to_numpy()
        pos = pl.Series(np.minimum(pos, n - 1).astype(np.int64))
        found = (self.ids.gather(pos) == ids).fill_null(False)
        return (
            self.titles.gather(pos)
            .zip_with(found, pl.Series([None], dtype=pl.String))
            .alias("title")
        )


# --------------------------------------------------------------------------- parsing


def _raw_from_convokit(frame: pl.DataFrame) -> pl.DataFrame:
    """Normalise parsed ConvoKit rows (either key spelling) to the raw column set."""
    meta = pl.col("meta")
    return frame.select(
        pl.col("id").alias("post_id"),
        pl.coalesce("speaker", "user").alias("author"),
        pl.coalesce("conversation_id", "root").alias("conversation_id"),
        # ConvoKit writes -1 (or "-1") where an utterance replies to nothing
        pl.when(pl.coalesce("reply-to", "reply_to").is_in(["-1", ""]))
        .then(None)
        .otherwise(pl.coalesce("reply-to", "reply_to"))
        .alias("reply_to"),
        pl.col("timestamp"),
        pl.col("text"),
        pl.lit(None, dtype=pl.String).alias("title"),
        meta.struct.field("subreddit").alias("subreddit"),
        meta.struct.field("score").alias("score"),
        pl.when(pl.col("id") == pl.coalesce("conversation_id", "root"))
        .then(pl.lit("submission"))
        .otherwise(pl.lit("comment"))
        .alias("kind"),
    )


def _strip_prefix(col: str) -> pl.Expr:
    return pl.col(col).str.replace(r"^t[0-9]_", "")


def _raw_from_pushshift(frame: pl.DataFrame) -> pl.DataFrame:
    is_sub = pl.col("title").is_not_null() | (
        pl.col("body").is_null() & pl.col("link_id").is_null()
    )
    post_id = pl.coalesce(pl.col("id"), _strip_prefix("name"))
    return frame.select(
        post_id.alias("post_id"),
        pl.col("author"),
        pl.when(is_sub).then(post_id).otherwise(_strip_prefix("link_id")).alias("conversation_id"),
        pl.when(is_sub).then(None).otherwise(_strip_prefix("parent_id")).alias("reply_to"),
        pl.col("created_utc").alias("timestamp"),
        # a link post has no selftext: its title is its text
        pl.when(is_sub & pl.col("title").is_not_null())
        .then(pl.col("selftext").fill_null(""))
        .when(is_sub)
        .then(pl.col("selftext"))
        .otherwise(pl.col("body"))
        .alias("text"),
        pl.when(is_sub).then(pl.col("title")).otherwise(None).alias("title"),
        pl.col("subreddit"),
        pl.col("score"),
        pl.when(is_sub).then(pl.lit("submission")).otherwise(pl.lit("comment")).alias("kind"),
    )


def _as_text(value) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _slow_parse(chunk: bytes, fmt: str, counts: Counter) -> pl.DataFrame:
    """Line-by-line parse of a chunk the fast path refused; bad lines are counted."""
    schema = CONVOKIT_SCHEMA if fmt == "convokit" else PUSHSHIFT_SCHEMA
    rows: dict[str, list] = {k: [] for k in schema}
    meta_sub: list = []
    meta_score: list = []
    lines = chunk.split(b"\n")
    if chunk.endswith(b"\n"):
        lines.pop()
    counts["slow_lines"] += len(lines)
    for line in lines:
        if not line.strip():
            counts["blank_lines"] += 1
            continue
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            counts["invalid_utf8"] += 1
            continue
        try:
            obj = _loads(line)
        except ValueError:
            counts["malformed_json"] += 1
            continue
        if not isinstance(obj, dict):
            counts["malformed_json"] += 1
            continue
        for key in schema:
            if key == "meta":
                continue
            value = obj.get(key)
            if (
                key in ("text", "title", "selftext", "body")
                and value is not None
                and not isinstance(value, str)
            ):
                value = None  # a non-string text is as good as missing
            rows[key].append(_as_text(value))
        if fmt == "convokit":
            meta = obj.get("meta")
            meta = meta if isinstance(meta, dict) else {}
            meta_sub.append(_as_text(meta.get("subreddit")))
            meta_score.append(_as_text(meta.get("score")))
    frame = pl.DataFrame(
        {k: v for k, v in rows.items() if k != "meta"},
        schema={k: pl.String for k in schema if k != "meta"},
    )
    if fmt == "convokit":
        frame = frame.with_columns(
            pl.struct(
                pl.Series("subreddit", meta_sub, dtype=pl.String),
                pl.Series("score", meta_score, dtype=pl.String),
            ).alias("meta")
        )
        return _raw_from_convokit(frame)
    return _raw_from_pushshift(frame)


def _typed(schema: dict, fields: dict) -> dict:
    out = dict(schema)
    for key, dtype in fields.items():
        if key == "meta":
            out["meta"] = pl.Struct({**dict(schema["meta"].to_schema()), **dtype})
        else:
            out[key] = dtype
    return out


# the fast path first tries integer timestamps and scores (cheaper than text); a file where
# they are not all integers is read with the all-String schema from then on
TYPED_SCHEMAS = {
    "convokit": _typed(CONVOKIT_SCHEMA, {"timestamp": pl.Int64, "meta": {"score": pl.Int64}}),
    "pushshift": _typed(PUSHSHIFT_SCHEMA, {"created_utc": pl.Int64, "score": pl.Int64}),
}


def _fast_parse(chunk: bytes, fmt: str, counts: Counter) -> pl.DataFrame:
    frame = None
    if not counts["untyped_chunks"]:
        try:
            frame = pl.read_ndjson(io.BytesIO(chunk), schema=TYPED_SCHEMAS[fmt])
        except Exception:  # noqa: BLE001 - a non-integer number: all-String schema from now on
            counts["untyped_chunks"] += 1
    if frame is None:
        frame = pl.read_ndjson(
            io.BytesIO(chunk), schema=CONVOKIT_SCHEMA if fmt == "convokit" else PUSHSHIFT_SCHEMA
        )
    # numpy counts bytes about twice as fast as bytes.count
    n_lines = int(np.count_nonzero(np.frombuffer(chunk, dtype=np.uint8) == 10))
    n_lines += 0 if chunk.endswith(b"\n") else 1
    counts["blank_lines"] += n_lines - frame.height
    return _raw_from_convokit(frame) if fmt == "convokit" else _raw_from_pushshift(frame)


def parse_chunk(chunk: bytes, fmt: str, counts: Counter, min_split: int = 1 << 16) -> pl.DataFrame:
    """Raw rows of a chunk (String columns; integer timestamps and scores may come as Int64).
    Fast path first; a chunk it refuses is cut in two at a line end and each half tried again,
    down to ``min_split`` bytes, where the lines are parsed one by one: a few bad lines cost a
    few small slow pieces, not a slow chunk."""
    try:
        return _fast_parse(chunk, fmt, counts)
    except Exception:  # noqa: BLE001 - any parse failure: split, or parse line by line
        pass
    mid = chunk.find(b"\n", len(chunk) // 2)
    if len(chunk) <= min_split or mid < 0 or mid + 1 >= len(chunk):
        counts["slow_chunks"] += 1
        return _slow_parse(chunk, fmt, counts)
    return pl.concat(
        [
            parse_chunk(chunk[: mid + 1], fmt, counts, min_split),
            parse_chunk(chunk[mid + 1 :], fmt, counts, min_split),
        ],
        how="vertical_relaxed",
    )


# --------------------------------------------------------------------------- cleaning


REQUIRED = (
    ("id", pl.col("post_id")),
    ("author", pl.col("author")),
    ("conversation_id", pl.col("conversation_id")),
    ("timestamp", pl.col("timestamp")),
    ("text", pl.col("text")),
    ("subreddit", pl.col("subreddit")),
)


class Cleaner:
    """Cleans raw chunks (vectorised polars expressions, one query per chunk), counting every
    dropped record under its first reason; titles come from a :class:`TitleIndex`."""

    def __init__(self, bots: set[str], titles: TitleIndex | None, counts: Counter):
        self.bots = pl.Series("bots", sorted(bots), dtype=pl.String)
        self.titles = titles
        self.counts = counts
        ts = pl.col("timestamp").cast(pl.Float64, strict=False)
        # one anchored regex classifies a text as blank (""), "[deleted]", "[removed]" or other
        # (null); most texts fail at their first character, nothing is copied
        self._special = (
            pl.col("text").str.extract(r"^\s*(\[deleted\]|\[removed\]|)\s*$", 1).alias("_special")
        )
        special = pl.col("_special")
        blank_body = (special == "").fill_null(False)
        is_sub = pl.col("kind") == "submission"
        title = pl.col("title")
        has_title = (is_sub & ~title.str.contains(r"^\s*$")).fill_null(False)
        text = (
            pl.when(has_title & ~blank_body)
            .then(title + "\n\n" + pl.col("text"))
            .when(has_title)
            .then(title)
            .otherwise(pl.col("text"))
        )
        reason = pl.when(pl.lit(False)).then(pl.lit(None, dtype=pl.String))
        for name, expr in REQUIRED:
            reason = reason.when(expr.is_null()).then(pl.lit(f"missing_field:{name}"))
        reason = (
            reason.when(ts.is_null() | ~ts.is_finite())
            .then(pl.lit("invalid_field:timestamp"))
            .when(special == "[deleted]")
            .then(pl.lit("deleted_text"))
            .when(special == "[removed]")
            .then(pl.lit("removed_text"))
            .when(blank_body & ~has_title)
            .then(pl.lit("empty_text"))
            .when(pl.col("author") == "[deleted]")
            .then(pl.lit("deleted_author"))
            .when(pl.col("author").is_in(self.bots.implode()))
            .then(pl.lit("bot"))
            .otherwise(None)
        )
        score = pl.col("score").cast(pl.Float64, strict=False)
        self._text = text.alias("_text")
        self._reason = reason.alias("_reason")
        self._posts = [
            pl.col("post_id"),
            pl.col("kind"),
            pl.col("subreddit").str.to_lowercase().alias("subreddit"),
            pl.col("author"),
            ts.floor().cast(pl.Int64).alias("created_utc"),
            pl.col("_text").alias("text"),
            score.floor().cast(pl.Int64).alias("score"),
            pl.col("conversation_id"),
            pl.col("reply_to"),
        ]

    def __call__(self, raw: pl.DataFrame, counts: Counter | None = None) -> pl.DataFrame:
        """The posts of a raw chunk that pass every rule, in input order; the dropped records
        are counted in ``counts`` (default: the cleaner's own counter)."""
        counts = self.counts if counts is None else counts
        counts["records"] += raw.height
        if raw.height == 0:  # a chunk of blank or unparseable lines only
            return pl.DataFrame(schema=POSTS_SCHEMA)
        if self.titles is not None and len(self.titles):
            rows = (raw["kind"] == "submission").arg_true()
            found = self.titles.lookup(raw["post_id"].gather(rows))
            title = pl.Series("title", [None], dtype=pl.String).extend_constant(
                None, raw.height - 1
            )
            raw = raw.with_columns(title.scatter(rows, found))
        frame = raw.lazy().with_columns(self._special).with_columns(self._reason, self._text)
        frame = frame.collect()
        reasons = frame["_reason"]
        if reasons.null_count() < frame.height:
            for r, n in reasons.drop_nulls().value_counts().iter_rows():
                counts[r] += int(n)
            frame = frame.filter(pl.col("_reason").is_null())
        return frame.select(self._posts)


# --------------------------------------------------------------------------- duplicates


_HASH_SEED = 0


class DuplicateFinder:
    """Finds post ids that occur more than once in a stream of chunks, in bounded memory: the
    64-bit hash of every id goes to one of 16 bucket files on disk (by its top bits); at the
    end each bucket is sorted alone and repeated hashes are the candidates (confirmed on the
    ids themselves by :func:`drop_duplicate_ids`)."""

    N_BUCKETS = 16

    def __init__(self, work: Path):
        self.paths = [work / f"ids-{b:02d}.u64" for b in range(self.N_BUCKETS)]
        self.files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 - closed in candidates()

    def add(self, ids: pl.Series) -> None:
        hashes = ids.hash(seed=_HASH_SEED).to_numpy()
        bucket = (hashes >> np.uint64(60)).astype(np.int8)
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self.N_BUCKETS + 1))
        grouped = hashes[order]
        for b in range(self.N_BUCKETS):
            if bounds[b + 1] > bounds[b]:
                grouped[bounds[b] : bounds[b + 1]].tofile(self.files[b])

    def candidates(self) -> pl.Series:
        """Hashes seen more than once."""
        found = []
        for fh, path in zip(self.files, self.paths, strict=True):
            fh.close()
            hashes = np.sort(np.fromfile(path, dtype=np.uint64))
            path.unlink()
            repeated = hashes[1:][hashes[1:] == hashes[:-1]]
            if repeated.size:
                found.append(np.unique(repeated))
        values = np.concatenate(found) if found else np.zeros(0, dtype=np.uint64)
        return pl.Series("h", values, dtype=pl.UInt64)


# --------------------------------------------------------------------------- one shard


def ingest_shard(
    path: str | Path,
    out: str | Path,
    report_path: str | Path,
    shard: str | None = None,
    bots: set[str] | None = None,
    chunk_mb: float = 16,
) -> dict:
    """Ingest one input into ``out`` (posts Parquet) and ``report_path`` (JSON); return the
    report. One pass over the input: chunks are parsed, cleaned and streamed into the Parquet
    file; a second pass over the output happens only when duplicate ids were found."""
    started = time.perf_counter()
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
        chunk_bytes = max(int(chunk_mb * (1 << 20)), 1 << 12)
        untyped = [False]  # shared by the workers: a non-integer number was seen

        def parse_and_clean(chunk: bytes, cleaner: Future) -> tuple[pl.DataFrame, Counter]:
            local: Counter = Counter(untyped_chunks=int(untyped[0]))
            raw = parse_chunk(chunk, source.format, local)
            if local["untyped_chunks"]:
                untyped[0] = True
            posts = cleaner.result()(raw, local)
            del local["untyped_chunks"]
            return posts, local

        def posts_chunks() -> Iterator[pl.DataFrame]:
            # titles load while the first chunks parse; chunks are parsed and cleaned by a pool
            # (polars releases the GIL) and handed on in input order, at most IN_FLIGHT at once
            with (
                ThreadPoolExecutor(1, thread_name_prefix="ingest-titles") as title_pool,
                ThreadPoolExecutor(WORKERS, thread_name_prefix="ingest-chunks") as pool,
                source.open("utterances.jsonl") as fh,
            ):
                cleaner = title_pool.submit(make_cleaner)
                pending: deque[Future] = deque()
                chunks = iter_line_chunks(fh, chunk_bytes)

                def submit_more() -> None:
                    while len(pending) < IN_FLIGHT:
                        chunk = next(chunks, None)
                        if chunk is None:
                            return
                        pending.append(pool.submit(parse_and_clean, chunk, cleaner))

                submit_more()
                while pending:
                    posts, local = pending.popleft().result()
                    submit_more()  # the workers go on while the writer takes these posts
                    counts.update(local)
                    if posts.height:
                        duplicates.add(posts["post_id"])
                        counts["posts"] += posts.height
                        yield posts
                cleaner.result()  # titles errors surface even for an empty utterances file

        write_parquet(stream_frames(posts_chunks, POSTS_SCHEMA), out, compression_level=1)
        t_chunks = time.perf_counter()
        dup_hashes = duplicates.candidates()
        if dup_hashes.len():
            staged = work / "posts.parquet"
            os.replace(out, staged)
            deduped, n_dup = drop_duplicate_ids(
                pl.scan_parquet(str(staged), row_index_name="_row"), dup_hashes
            )
            write_parquet(deduped, out, compression_level=1)
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


def duplicate_hashes(lf: pl.LazyFrame) -> pl.Series:
    """The 64-bit hashes of post ids seen more than once (candidates: a hash collision makes
    a candidate that :func:`drop_duplicate_ids` confirms on the ids themselves)."""
    return (
        lf.select(pl.col("post_id").hash(seed=_HASH_SEED).alias("h"))
        .group_by("h")
        .len()
        .filter(pl.col("len") > 1)
        .select("h")
        .collect(engine="streaming")
    )["h"]


def drop_duplicate_ids(
    lf: pl.LazyFrame, dup_hashes: pl.Series | None = None
) -> tuple[pl.LazyFrame, int]:
    """Keep the first row of every post id (in row order); return the frame (without ``_row``)
    and the number of rows dropped. Candidates are found on 64-bit hashes (memory stays small;
    given as ``dup_hashes`` when already known, e.g. from a superset of the rows) and confirmed
    on the ids themselves. Give ``lf`` a ``_row`` column from the scan
    (``scan_parquet(..., row_index_name="_row")``): a row index added later makes polars load
    the whole table instead of streaming it."""
    hashed = pl.col("post_id").hash(seed=_HASH_SEED)
    if dup_hashes is None:
        dup_hashes = duplicate_hashes(lf)
    indexed = lf if "_row" in lf.collect_schema().names() else lf.with_row_index("_row")
    if dup_hashes.len() == 0:
        return indexed.drop("_row"), 0
    candidates = (
        indexed.filter(hashed.is_in(dup_hashes.implode())).select("_row", "post_id").collect()
    )
    drop = candidates.filter(pl.col("_row") != pl.col("_row").min().over("post_id"))["_row"]
    if drop.len() == 0:
        return indexed.drop("_row"), 0
    return indexed.filter(~pl.col("_row").is_in(drop.implode())).drop("_row"), int(drop.len())


# --------------------------------------------------------------------------- CLI


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input", required=True, help="ConvoKit dir / .corpus.zip, or NDJSON(.zst)"
    )
    parser.add_argument("--out", required=True, help="posts Parquet of this shard")
    parser.add_argument("--report", required=True, help="ingest report JSON of this shard")
    parser.add_argument("--shard", default=None, help="shard name in the report")
    parser.add_argument("--bots", default=None, help="known-bot list (one name per line)")
    parser.add_argument("--chunk-mb", type=float, default=16, help="bytes parsed per chunk (MiB)")


def run(args: argparse.Namespace) -> int:
    if args.chunk_mb <= 0:
        raise ConfigError("ingest.chunk_mb: must be positive")
    bots = load_bot_list(args.bots)
    ingest_shard(args.input, args.out, args.report, args.shard, bots, args.chunk_mb)
    return 0
