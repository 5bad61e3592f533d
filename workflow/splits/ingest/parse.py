"""Parsing byte chunks of NDJSON into raw records: polars' reader with an explicit schema (fast
path); a chunk it refuses is halved at a line end and retried, down to pieces parsed line by
line (slow path) so that exactly the bad lines are dropped and counted."""

from __future__ import annotations

import io
import json
from collections import Counter

import polars as pl

try:  # orjson is faster on the slow (per-line) path; the stdlib is the fallback
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads


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
    """A Reddit fullname's id (``t3_abc`` -> ``abc``): tested by an anchored regex and sliced,
    half the cost of a regex replace (which writes every value anew)."""
    value = pl.col(col)
    return pl.when(value.str.contains(r"^t[0-9]_")).then(value.str.slice(3)).otherwise(value)


def _raw_from_pushshift(frame: pl.DataFrame) -> pl.DataFrame:
    is_sub = pl.col("title").is_not_null() | (
        pl.col("body").is_null() & pl.col("link_id").is_null()
    )
    # the id from the fullname (``name``) only in a chunk where some record lacks its id: the
    # prefix test and slice of every name cost ~0.07 CPU s a million records, for nothing when
    # each has its id (as the dumps' records do)
    has_ids = frame.get_column("id").null_count() == 0
    post_id = pl.col("id") if has_ids else pl.coalesce(pl.col("id"), _strip_prefix("name"))
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


def count_lines(chunk: bytes) -> int:
    """The lines of a chunk (a last one without its line end included), counted by polars'
    line scanner: a fifth less CPU than ``bytes.count`` and without holding the GIL, so the
    reading and cleaning threads go on beside it (numpy's == made a chunk-sized mask: two
    passes, ~10% more CPU). A polars without ``scan_lines`` (an unstable function of recent
    versions) counts with ``bytes.count``."""
    scan_lines = getattr(pl, "scan_lines", None)
    if scan_lines is None:
        return chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
    return scan_lines(chunk).select(pl.len()).collect().item()


def _fast_parse(chunk: bytes, fmt: str, counts: Counter, lines: int | None = None) -> pl.DataFrame:
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
    counts["blank_lines"] += (count_lines(chunk) if lines is None else lines) - frame.height
    return _raw_from_convokit(frame) if fmt == "convokit" else _raw_from_pushshift(frame)


def parse_chunk(
    chunk: bytes, fmt: str, counts: Counter, min_split: int = 1 << 16, lines: int | None = None
) -> pl.DataFrame:
    """Raw rows of a chunk (String columns; integer timestamps and scores may come as Int64).
    Fast path first; a chunk it refuses is cut in two at a line end and each half tried again,
    down to ``min_split`` bytes, where the lines are parsed one by one: a few bad lines cost a
    few small slow pieces, not a slow chunk."""
    try:
        return _fast_parse(chunk, fmt, counts, lines)
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
