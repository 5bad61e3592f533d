"""Submission titles of a ConvoKit corpus (``conversations.json``): read by a fast path that
cuts ConvoKit's layout into one line per entry and takes each id and title from the line's head
(entry-by-entry JSON decoding where the layout differs), held in a hash index
(:class:`TitleIndex`)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import IO

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
# are '"<id>": {"meta": {"title": ..., ...}, "vectors": [...]}'. The fast path cuts a byte chunk
# of it into one line per entry with one literal replacement (the entry boundary ']}, "' becomes
# ']}\n"'), reads the lines as one text column (polars' CSV reader, no field separator in them)
# and takes the id and the title from the head of each line with one anchored pattern (no JSON
# parse of the rest of the entry: a third of the CPU of parsing every line as JSON). A line that
# does not open with '"<id>": {"meta": {"title": <string or null>' (another layout, a title
# that is not meta's first key, an entry boundary inside meta) fails the whole fast path, and
# the caller decodes the file entry by entry instead.
_ENTRY_END = b']}, "'
_JSON_STRING = r'"(?:[^"\\]|\\.)*"'
_ENTRY_HEAD = rf'^({_JSON_STRING}): \{{"meta": \{{"title": ({_JSON_STRING}|null)[,}}]'
_TITLE_OUT = {"conversation_id": pl.String, "title": pl.String}
_LINE_SEPARATOR = "\x1f"  # a control character: raw in a line, that line is not valid JSON


def _json_strings(tokens: pl.Series) -> pl.Series:
    """The values of JSON string tokens (quotes included; null stays null): the text between
    the quotes, JSON-decoded only where there is an escape."""
    values = tokens.str.strip_prefix('"').str.strip_suffix('"')
    escaped = tokens.str.contains("\\", literal=True).fill_null(False).arg_true()
    if escaped.len():
        values = values.scatter(escaped, tokens.gather(escaped).str.json_decode(pl.String))
    return values


def _entries_frame(piece: bytes) -> pl.DataFrame:
    """(conversation_id, title) of a piece of whole entries (the first opens with its id, the
    last ends with its closing brace); ValueError where an entry has another layout."""
    lines = piece.replace(_ENTRY_END, b']}\n"')
    try:
        frame = pl.read_csv(
            lines,
            has_header=False,
            separator=_LINE_SEPARATOR,
            quote_char=None,
            schema={"line": pl.String},
        )
        heads = frame.select(pl.col("line").str.extract_groups(_ENTRY_HEAD)).unnest("line")
        ids, titles = heads.columns
        if heads[ids].null_count():
            raise ValueError("an entry of another form")
        return pl.DataFrame(
            [
                _json_strings(heads[ids]).alias("conversation_id"),
                _json_strings(heads[titles].replace("null", None)).alias("title"),
            ]
        )
    except Exception as err:  # noqa: BLE001 - any failure: not ConvoKit's layout
        raise ValueError(f"unexpected conversations.json layout ({err})") from err


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
            buf = head[1:].lstrip()
            started = True
        if eof:
            piece, buf = buf.rstrip(), b""
            if not piece.endswith(b"}"):
                raise ValueError("conversations.json is cut short")
            piece = piece[:-1].rstrip()  # the object's closing brace
        else:
            cut = buf.rfind(_ENTRY_END)
            if cut < 0:
                if len(buf) > 8 * chunk_bytes + (1 << 20):
                    raise ValueError("unexpected conversations.json layout")
                continue
            piece, buf = buf[: cut + 2], buf[cut + 4 :]
        yield _entries_frame(piece)


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
    ids, sorted, are binary-searched and every hit is confirmed on the id itself."""

    def __init__(self, titles: pl.DataFrame):
        titles = titles.filter(pl.col("title").is_not_null())
        hashes = titles["conversation_id"].hash(seed=HASH_SEED)
        order = hashes.arg_sort()
        self.hashes = hashes.gather(order)
        self.ids = titles["conversation_id"].gather(order)
        self.titles = titles["title"].gather(order)
        # two different ids with one hash (about 1e-7 at a million titles): hash lookups could
        # miss one of them, so look up by the sorted ids instead
        self.by_hash = self.hashes.n_unique() == self.hashes.len()
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
            pos = self.hashes.search_sorted(ids.hash(seed=HASH_SEED))
        else:
            pos = self.ids.search_sorted(ids.fill_null(""))
        pos = pos.clip(upper_bound=n - 1)
        found = (self.ids.gather(pos) == ids).fill_null(False)
        return (
            self.titles.gather(pos)
            .zip_with(found, pl.Series([None], dtype=pl.String))
            .alias("title")
        )
