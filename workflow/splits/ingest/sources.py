"""The inputs of one ingest shard: a ConvoKit corpus (directory or ``.corpus.zip``) or a
Pushshift / Arctic-Shift NDJSON file, decompressed by content (magic bytes, not the name), read
in byte chunks cut at line ends (:meth:`InputStream.line_chunks`)."""

from __future__ import annotations

import bz2
import io
import logging
import lzma
import os
import re
import stat
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from splits.errors import ConfigError, InputError

log = logging.getLogger(__name__)

KEEP_CONVOKIT = ("utterances.jsonl", "conversations.json")


def input_format(path: str | Path) -> str:
    """``convokit`` (a directory or .zip) or ``pushshift`` (an NDJSON file, maybe compressed)."""
    p = Path(path)
    if p.is_dir() or p.suffix == ".zip":
        return "convokit"
    return "pushshift"


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

    def _raw_readinto(self, b) -> int:
        try:
            n = self.raw.readinto(b)
        except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as err:
            raise InputError(
                f"{self.label}: read error after byte {self.consumed:,} ({err}); the file is damaged"
            ) from err
        self.consumed += n
        if not n:
            self.ended = True
        return n

    def _decompress(self, data: bytes) -> Iterator[bytes]:
        """The decompressed pieces of the compressed bytes ``data`` (across frame ends)."""
        while data:
            if self.frame is None:
                if self.kind in ("gzip", "xz"):
                    data = data.lstrip(b"\x00")  # zero padding between members / streams
                    if not data:
                        return
                self.frame = _decompressor(self.kind)
            try:
                out = self.frame.decompress(data)
            except _decompress_errors() as err:
                raise InputError(
                    f"{self.label}: {self.kind} data is corrupt near {self._where()}: {err}"
                ) from err
            if out:
                yield out
            if self.frame.eof:
                data = self.frame.unused_data
                self.frame = None
            else:
                data = b""

    def _feed(self, data: bytes) -> None:
        for out in self._decompress(data):
            self.buffer += out

    def _ended_early(self) -> InputError:
        return InputError(
            f"{self.label}: the {self.kind} stream ends early at {self._where()}: "
            "the file is truncated (an interrupted download?); nothing of it is published"
        )

    def _fill(self, want: int) -> None:
        while len(self.buffer) < want and not self.ended:
            if self.kind == "plain":
                self.buffer += self._raw_read(max(want - len(self.buffer), _READ_BLOCK))
                continue
            data = self._raw_read(_READ_BLOCK)
            if data:
                self._feed(data)
            elif self.frame is not None:
                raise self._ended_early()

    def readinto(self, b) -> int:
        if self.kind == "plain" and not self.buffer:  # straight into the caller's buffer
            n = self._raw_readinto(b)
            self.produced += n
            return n
        want = len(b)
        self._fill(want)
        n = min(want, len(self.buffer))
        with memoryview(self.buffer) as held:
            b[:n] = held[:n]
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

    def line_chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        """The bytes in chunks that end at the first line end at or after their byte
        ``chunk_bytes`` (the last one may not), each made with one copy of its bytes: read
        straight to a line end with ``pread`` from a plain file; joined from the decompressed
        (or read) pieces otherwise."""
        if self.kind == "plain" and _file_descriptor(self.raw) is not None:
            yield from self._file_line_chunks(chunk_bytes)
        else:
            yield from _join_at_line_ends(self._pieces(), chunk_bytes)

    def _pieces(self) -> Iterator[bytes]:
        """The bytes as they come: read blocks of a plain stream, decompressed pieces."""
        if self.buffer:
            head = bytes(self.buffer)
            self.buffer.clear()
            self.produced += len(head)
            yield head
        while not self.ended:
            data = self._raw_read(_READ_BLOCK * 16 if self.kind == "plain" else _READ_BLOCK)
            if not data:
                if self.kind != "plain" and self.frame is not None:
                    raise self._ended_early()
                return
            if self.kind == "plain":
                self.produced += len(data)
                yield data
                continue
            for out in self._decompress(data):
                self.produced += len(out)
                yield out

    def _file_line_chunks(self, chunk_bytes: int) -> Iterator[bytes]:
        fd = _file_descriptor(self.raw)
        pos = self.consumed - len(self.buffer)  # the bytes read to tell the format, read again
        self.buffer.clear()
        while True:
            end = _next_line_end(fd, pos + chunk_bytes - 1)
            chunk = _pread(fd, end - pos, pos)
            if not chunk:
                self.ended = True
                return
            pos += len(chunk)
            self.consumed = pos
            self.produced += len(chunk)
            yield chunk

    def close(self) -> None:
        if not self.closed:
            self.raw.close()
        super().close()


def _file_descriptor(raw) -> int | None:
    """The descriptor of a regular file under ``raw`` (None for an archive member, a pipe)."""
    try:
        fd = raw.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
    return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _pread(fd: int, n: int, offset: int) -> bytes:
    data = os.pread(fd, n, offset)
    if len(data) == n or not data:
        return data
    parts = [data]  # a short read (a file over 2 GB per call, a file that shrank)
    got = len(data)
    while got < n and (more := os.pread(fd, n - got, offset + got)):
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _next_line_end(fd: int, at: int) -> int:
    """The file offset just past the first line end at or after ``at`` (the file's end if
    there is none)."""
    while block := os.pread(fd, 1 << 16, at):
        found = block.find(b"\n")
        if found >= 0:
            return at + found + 1
        at += len(block)
    return at


def _join_at_line_ends(pieces: Iterator[bytes], chunk_bytes: int) -> Iterator[bytes]:
    """Pieces of bytes joined into chunks that end at the first line end at or after their
    byte ``chunk_bytes`` (the last chunk may not end at one): one copy per byte (``join``),
    the bytes of a piece that is cut copied once more."""
    held: list[bytes] = []  # the parts of the chunk being made
    size = 0  # their bytes
    for piece in pieces:
        pos = 0  # the first byte of the piece not in a chunk yet
        while True:
            at = pos + max(chunk_bytes - 1 - size, 0)
            cut = piece.find(b"\n", at) if at < len(piece) else -1
            if cut < 0:
                break
            held.append(piece if pos == 0 and cut + 1 == len(piece) else piece[pos : cut + 1])
            yield b"".join(held)
            held, size, pos = [], 0, cut + 1
        if pos < len(piece):
            rest = piece[pos:] if pos else piece
            held.append(rest)
            size += len(rest)
    if size:
        yield b"".join(held)


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
