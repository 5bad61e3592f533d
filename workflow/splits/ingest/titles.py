"""Submission titles of a ConvoKit corpus (``conversations.json``): read by a fast path that
turns ConvoKit's layout into NDJSON, held in a hash index (:class:`TitleIndex`)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import IO

import numpy as np
import polars as pl

from splits.ingest.sources import _Source

log = logging.getLogger(__name__)

HASH_SEED = 0  # seed of the 64-bit post id hashes (the titles index, duplicate ids)


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
    titles = pl.concat(frames, rechunk=True)
    # ids are unique as ConvoKit writes them; the check costs a tenth of unique()
    if titles["conversation_id"].n_unique() == titles.height:
        return titles
    return titles.unique("conversation_id", keep="first", maintain_order=True)


class TitleIndex:
    """Titles looked up by conversation id without a join per chunk: the 64-bit hashes of the
    ids, sorted, are binary-searched (numpy) and every hit is confirmed on the id itself."""

    def __init__(self, titles: pl.DataFrame):
        titles = titles.filter(pl.col("title").is_not_null())
        hashes = titles["conversation_id"].hash(seed=HASH_SEED)
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
            pos = np.searchsorted(self.hashes, ids.hash(seed=HASH_SEED).to_numpy())
        else:
            pos = self.ids.search_sorted(ids.fill_null("")).to_numpy()
        pos = pl.Series(np.minimum(pos, n - 1).astype(np.int64))
        found = (self.ids.gather(pos) == ids).fill_null(False)
        return (
            self.titles.gather(pos)
            .zip_with(found, pl.Series([None], dtype=pl.String))
            .alias("title")
        )
