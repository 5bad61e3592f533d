"""Cleaning raw records into posts (one polars query per chunk, every dropped record counted
under its first reason), and duplicate post ids (64-bit hashes spilled to bucket files,
confirmed on the ids themselves)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl

from splits.ingest.titles import HASH_SEED, TitleIndex

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
        # the first reason that applies, as its index in ``self.reasons`` (a small integer: a
        # chain of integer branches costs a third less than one of text literals)
        rules = [(expr.is_null(), f"missing_field:{name}") for name, expr in REQUIRED]
        rules += [
            (ts.is_null() | ~ts.is_finite(), "invalid_field:timestamp"),
            (special == "[deleted]", "deleted_text"),
            (special == "[removed]", "removed_text"),
            (blank_body & ~has_title, "empty_text"),
            (pl.col("author") == "[deleted]", "deleted_author"),
            (pl.col("author").is_in(self.bots.implode()), "bot"),
        ]
        self.reasons = [name for _, name in rules]
        reason = pl.when(pl.lit(False)).then(pl.lit(None, dtype=pl.UInt8))
        for code, (condition, _) in enumerate(rules):
            reason = reason.when(condition).then(pl.lit(code, dtype=pl.UInt8))
        reason = reason.otherwise(None)
        score = pl.col("score").cast(pl.Float64, strict=False)
        self._has_title = has_title.alias("_has_title")
        self._reason = reason.alias("_reason")
        self._posts = [
            pl.col("post_id"),
            pl.col("kind"),
            pl.col("subreddit"),
            pl.col("author"),
            ts.floor().cast(pl.Int64).alias("created_utc"),
            pl.col("text"),
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
        frame = raw.lazy().with_columns(self._special).with_columns(self._reason, self._has_title)
        frame = frame.collect()
        reasons = frame["_reason"]
        if reasons.null_count() < frame.height:
            for code, n in reasons.drop_nulls().value_counts().iter_rows():
                counts[self.reasons[code]] += int(n)
            frame = frame.filter(pl.col("_reason").is_null())
        # a submission's text is its title + "\n\n" + its body (the title alone on a blank
        # body): built for those rows only and put in place, not for every row of the chunk
        rows = frame["_has_title"].arg_true()
        if rows.len():
            joined = frame.select(
                pl.col("title"), pl.col("text"), (pl.col("_special") == "").fill_null(False)
            )[rows].select(
                pl.when(pl.col("_special"))
                .then(pl.col("title"))
                .otherwise(pl.col("title") + "\n\n" + pl.col("text"))
            )
            frame = frame.with_columns(frame["text"].scatter(rows, joined.to_series()))
        return frame.with_columns(_lowercase(frame["subreddit"])).select(self._posts)


def _lowercase(names: pl.Series) -> pl.Series:
    """Subreddit names lowercased: a chunk holds few distinct names, so they are lowercased once
    each and replaced where they differ (a fifth of the cost of lowercasing every value)."""
    distinct = names.unique()
    lowered = distinct.str.to_lowercase()
    changed = (distinct != lowered).fill_null(False)
    if not changed.any():
        return names
    return names.replace(distinct.filter(changed), lowered.filter(changed))


# --------------------------------------------------------------------------- duplicates


class DuplicateFinder:
    """Finds post ids that occur more than once in a stream of chunks, in bounded memory: the
    64-bit hashes of the ids are held in memory up to ``HELD_HASHES`` (32 MiB); past that,
    every hash goes to one of 16 bucket files on disk (by its top bits) and at the end each
    bucket is sorted alone. Repeated hashes are the candidates (confirmed on the ids
    themselves by :func:`drop_duplicate_ids`)."""

    N_BUCKETS = 16
    HELD_HASHES = 1 << 22

    def __init__(self, work: Path):
        self.paths = [work / f"ids-{b:02d}.u64" for b in range(self.N_BUCKETS)]
        self.files: list | None = None  # opened at the first spill
        self.held: list[pl.Series] = []
        self.n_held = 0

    def add(self, ids: pl.Series) -> None:
        hashes = ids.hash(seed=HASH_SEED)
        if self.files is not None:
            self._spill(hashes)
            return
        self.held.append(hashes)
        self.n_held += hashes.len()
        if self.n_held > self.HELD_HASHES:
            self.files = [open(p, "wb") for p in self.paths]  # noqa: SIM115 - closed in candidates()
            held, self.held = self.held, []
            for part in held:
                self._spill(part)

    def _spill(self, hashes: pl.Series) -> None:
        # numpy only here, past HELD_HASHES: its import costs ~0.1 CPU s, a tenth of the
        # stage's own work on a small shard
        import numpy as np

        values = hashes.to_numpy()
        bucket = (values >> np.uint64(60)).astype(np.int8)
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(self.N_BUCKETS + 1))
        grouped = values[order]
        for b in range(self.N_BUCKETS):
            if bounds[b + 1] > bounds[b]:
                grouped[bounds[b] : bounds[b + 1]].tofile(self.files[b])

    def candidates(self) -> pl.Series:
        """Hashes seen more than once (ascending)."""
        if self.files is None:
            held = pl.concat(self.held) if self.held else pl.Series("h", [], dtype=pl.UInt64)
            self.held = []
            return _repeated(held)
        import numpy as np

        found = []
        for fh, path in zip(self.files, self.paths, strict=True):
            fh.close()
            hashes = pl.Series("h", np.fromfile(path, dtype=np.uint64), dtype=pl.UInt64)
            path.unlink()
            found.append(_repeated(hashes))
        return pl.concat(found)


def _repeated(hashes: pl.Series) -> pl.Series:
    """The values that occur more than once, each once, ascending."""
    ordered = hashes.sort()
    later = ordered.slice(1)
    return later.filter(later == ordered.slice(0, max(ordered.len() - 1, 0))).unique().alias("h")


def duplicate_hashes(lf: pl.LazyFrame) -> pl.Series:
    """The 64-bit hashes of post ids seen more than once (candidates: a hash collision makes
    a candidate that :func:`drop_duplicate_ids` confirms on the ids themselves)."""
    return (
        lf.select(pl.col("post_id").hash(seed=HASH_SEED).alias("h"))
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
    hashed = pl.col("post_id").hash(seed=HASH_SEED)
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
