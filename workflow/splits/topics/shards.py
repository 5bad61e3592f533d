"""Map 0 of the BM25 topic splits: the union of the demographics' posts at or above their
thresholds (each post once, with the demographics holding it; in post-id order, or with
ingest.buckets > 1 in post-id order within each posts bucket, the buckets one after another), cut
into shards of at most ``topics.shard_posts`` posts and ``topics.shard_mb`` MiB of text."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.io import ParquetAppender, read_json, write_json

log = logging.getLogger(__name__)

READ_BATCH_ROWS = 65_536  # rows of a demographic's posts file read at once
READ_BUFFER_BYTES = 1 << 16  # of a posts file's column data read at once
DEMOGRAPHIC_POST_COLUMNS = ("post_id", "author", "subreddit", "text", "percentile")


SHARD_SCHEMA = {
    "post_id": pl.String,
    "author": pl.String,
    "subreddit": pl.String,
    "text": pl.String,
    "demographics": pl.List(pl.String),
}


class _SortedPosts:
    """One demographic's posts at or above its threshold, read ``batch_rows`` at a time from a
    file sorted by post id (as the groupness stage writes D_d); ``buffer`` holds the rows read
    and not yet taken."""

    def __init__(
        self, key: str, path: Path, threshold: float, batch_rows: int, exclude: Sequence[str] = ()
    ):
        import pyarrow.parquet as pq

        if not path.exists():
            raise ConfigError(f"{path}: demographic posts file does not exist")
        self.key, self.path, self.threshold = key, path, float(threshold)
        # pages read as the batches need them (``buffer_size``), not a row group's whole column
        # chunks at once (``pre_buffer``): the merge holds a stream per demographic, and a row
        # group of a large D_d's texts is hundreds of MB
        self._file = pq.ParquetFile(path, pre_buffer=False, buffer_size=READ_BUFFER_BYTES)
        missing = set(DEMOGRAPHIC_POST_COLUMNS) - set(self._file.schema_arrow.names)
        if missing:
            raise ConfigError(f"{path}: missing columns {sorted(missing)}")
        self._batches = self._file.iter_batches(
            batch_size=batch_rows, columns=list(DEMOGRAPHIC_POST_COLUMNS)
        )
        self.buffer = pl.DataFrame(
            schema=dict.fromkeys(
                ("post_id", "author", "subreddit", "text", "demographic"), pl.String
            )
        )
        self.exhausted = False
        self.last_id: str | None = None
        self.kept = 0
        self.repeated = 0
        self.exclude = pl.Series([s.lower() for s in exclude], dtype=pl.String)
        self.excluded = 0

    def fill(self) -> None:
        """Read batches until the buffer holds a row or the file is exhausted."""
        while not self.buffer.height and not self.exhausted:
            batch = next(self._batches, None)
            if batch is None:
                self.exhausted = True
                self._file.close()  # a bucket's streams end before the next bucket's open
                return
            frame = (
                pl.from_arrow(batch)
                .filter(pl.col("percentile") >= self.threshold)
                .select(
                    pl.col("post_id").cast(pl.String),
                    pl.col("author").cast(pl.String),
                    pl.col("subreddit").cast(pl.String),
                    pl.col("text").cast(pl.String),
                    pl.lit(self.key, dtype=pl.String).alias("demographic"),
                )
            )
            if self.exclude.len():
                before = frame.height
                frame = frame.filter(
                    ~pl.col("subreddit").str.to_lowercase().is_in(self.exclude.implode())
                )
                self.excluded += before - frame.height
            if not frame.height:
                continue
            ids = frame.get_column("post_id")
            if (
                ids.null_count()
                or not ids.is_sorted()
                or (self.last_id is not None and ids[0] < self.last_id)
            ):
                raise ConfigError(
                    f"{self.path}: post ids are null or not in ascending order (the groupness "
                    "stage writes D_d sorted by post_id)"
                )
            if self.last_id is not None:  # a post repeated across the batch boundary
                before = frame.height
                frame = frame.filter(pl.col("post_id") > self.last_id)
                self.repeated += before - frame.height
            self.last_id = ids[-1]
            self.buffer = frame

    def take(self, bound: str | None) -> pl.DataFrame:
        """Remove and return the buffered rows with post id <= ``bound`` (all if None)."""
        if bound is None:
            out, self.buffer = self.buffer, self.buffer.clear()
        else:
            n = int((self.buffer.get_column("post_id") <= bound).sum())
            out, self.buffer = self.buffer.head(n), self.buffer.slice(n)
        self.kept += out.height
        return out


def _union_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """(demographic, post) rows -> one row per post, demographics listed, in post-id order.

    A post held by one demographic (most posts) is its own row with a one-item list; only the
    posts held by several are grouped (a group-by of every row cost 4x as much)."""
    shared = rows.get_column("post_id").is_duplicated()
    single = rows.filter(~shared).select(
        "post_id",
        "author",
        "subreddit",
        "text",
        pl.concat_list("demographic").alias("demographics"),
    )
    if not shared.any():
        return single.sort("post_id").cast(SHARD_SCHEMA)
    return pl.concat([single.cast(SHARD_SCHEMA), _grouped_rows(rows.filter(shared))]).sort(
        "post_id"
    )


def _grouped_rows(rows: pl.DataFrame) -> pl.DataFrame:
    """(demographic, post) rows -> one row per post, its demographics listed and sorted."""
    return (
        rows.group_by("post_id")
        .agg(
            pl.col("author").first(),
            pl.col("subreddit").first(),
            pl.col("text").first(),
            pl.col("demographic").unique().sort().alias("demographics"),
        )
        .select(list(SHARD_SCHEMA))
        .cast(SHARD_SCHEMA)
    )


def _parts(files: str | Path | Sequence[str | Path]) -> list[Path]:
    """One demographic's D_d: one file, or its parts (ingest.buckets > 1)."""
    if isinstance(files, str | Path):
        return [Path(files)]
    return [Path(f) for f in files]


def _bucket_groups(parts: dict[str, list[Path]]) -> list[dict[str, list[Path]]]:
    """The demographics' D_d files grouped for the merge: with parts named by posts bucket
    (``<bucket>.parquet``, as rule groupness_posts writes them, the same buckets for every
    demographic) one group per bucket, in bucket order; otherwise one group of every file.

    A bucket holds the posts of its authors only (the posts are bucketed by author), so a post
    held by several demographics is in the same bucket of each: the union of every bucket's own
    union is the whole union, each post once, and the merge never holds more than one bucket's
    streams (one per demographic) however many buckets there are."""
    names = {tuple(sorted(path.stem for path in paths)) for paths in parts.values()}
    stems = names.pop() if len(names) == 1 else ()  # every demographic's, where they agree
    bucketed = (
        len(stems) > 1
        and len(set(stems)) == len(stems)
        and all(stem.isdigit() for stem in stems)
        and all(path.parent.name == "posts" for paths in parts.values() for path in paths)
    )
    if not bucketed:
        return [parts]
    return [
        {key: [path for path in paths if path.stem == stem] for key, paths in parts.items()}
        for stem in sorted(stems, key=int)
    ]


def iter_union(
    posts_files: dict[str, str | Path | Sequence[str | Path]],
    thresholds: dict[str, float],
    batch_rows: int = READ_BATCH_ROWS,
    exclude: dict[str, Sequence[str]] | None = None,
    one_bucket: bool = False,
) -> Iterator[pl.DataFrame]:
    """The union of the demographics' posts at or above their thresholds: one row per post, with
    the sorted list of demographics holding it, as consecutive frames; in post-id order, or, where
    the demographics' D_d are parts by posts bucket (ingest.buckets > 1), in post-id order within
    each bucket, the buckets one after another (``_bucket_groups``).

    A k-way merge of the demographics' files (each sorted by post id, as the groupness stage
    writes D_d; a demographic's files in one merge are read ``batch_rows`` / their number rows
    at a time): every round takes from each stream the rows up to the smallest last id among the
    streams that may still hold more, so memory holds a few batches whatever the corpus size, and
    with posts buckets one bucket's streams at a time, whatever their number. ``exclude``: per
    demographic, subreddits whose posts are left out of its rows (its own seed subreddits with
    ``topics.seed_subreddit_posts: exclude``; names compared case-insensitively). ``one_bucket``:
    the files are one posts bucket's parts (a topic_shards job per bucket), whose log lines say
    so (a demographic with no post in one bucket is no warning)."""
    parts = {}
    for key in sorted(posts_files):
        if key not in thresholds:
            raise ConfigError(f"thresholds: no threshold for demographic {key!r}")
        value = thresholds[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"thresholds: threshold of {key!r} is not a number ({value!r})")
        parts[key] = _parts(posts_files[key])
    if not any(parts.values()):
        raise ConfigError("topic splits: no demographic posts given")
    opened: list[_SortedPosts] = []
    for group in _bucket_groups(parts):
        streams = []
        for key, paths in group.items():
            part_rows = max(1, -(-batch_rows // len(paths)))
            streams += [
                _SortedPosts(key, path, thresholds[key], part_rows, (exclude or {}).get(key, ()))
                for path in paths
            ]
        opened += streams
        yield from _merge(streams)
    _log_union(opened, one_bucket)


def _merge(streams: list[_SortedPosts]) -> Iterator[pl.DataFrame]:
    """The k-way merge of ``streams`` by post id, as consecutive frames of ``_union_rows``."""
    while True:
        for stream in streams:
            stream.fill()
        live = [s for s in streams if s.buffer.height]
        if not live:
            return
        open_ends = [s.buffer.get_column("post_id")[-1] for s in live if not s.exhausted]
        bound = min(open_ends) if open_ends else None
        yield _union_rows(pl.concat([s.take(bound) for s in live]))


def _log_union(streams: list[_SortedPosts], one_bucket: bool = False) -> None:
    """Per demographic, over its parts: the posts kept, repeated ids dropped, posts excluded."""
    where = " in this posts bucket" if one_bucket else ""
    for key in sorted({s.key for s in streams}):
        mine = [s for s in streams if s.key == key]
        threshold = mine[0].threshold
        kept, repeated = sum(s.kept for s in mine), sum(s.repeated for s in mine)
        excluded = sum(s.excluded for s in mine)
        if kept:
            log.info("%s: %d posts at or above the threshold %s%s", key, kept, threshold, where)
        elif one_bucket:  # the other buckets may hold its posts
            log.info("%s: no posts of users at or above the threshold %s%s", key, threshold, where)
        else:
            log.warning("%s: no posts of users at or above the threshold %s", key, threshold)
        if repeated:
            log.warning("%s: %d repeated post ids dropped", key, repeated)
        if excluded:
            log.info(
                "%s: %d posts in its own seed subreddits left out (topics.seed_subreddit_posts)",
                key,
                excluded,
            )


def union_posts(posts: pl.DataFrame) -> pl.DataFrame:
    """The union (as ``iter_union`` yields it) of in-memory (demographic, post) rows with
    columns post_id, author, subreddit, text, demographic."""
    return _union_rows(
        posts.select(
            pl.col("post_id").cast(pl.String),
            pl.col("author").cast(pl.String),
            pl.col("subreddit").cast(pl.String),
            pl.col("text").cast(pl.String),
            pl.col("demographic").cast(pl.String),
        )
    )


def from_own_seeds(seeds: dict[str, Sequence[str]]) -> pl.Expr:
    """True for a (demographic, post) row whose subreddit is one of the demographic's own seed
    subreddits (case-insensitive)."""
    expr = pl.lit(False)
    for key, names in seeds.items():
        wanted = pl.Series([n.lower() for n in names], dtype=pl.String).implode()
        expr = expr | (
            (pl.col("demographic") == key) & pl.col("subreddit").str.to_lowercase().is_in(wanted)
        )
    return expr


def cut_shards(
    frames: Iterable[pl.DataFrame], max_posts: int, max_bytes: int
) -> Iterator[tuple[int, pl.DataFrame]]:
    """(shard number, piece) pairs cutting the posts of ``frames`` (in order) into consecutive
    shards of at most ``max_posts`` posts and ``max_bytes`` bytes of text (UTF-8), except that a
    post longer than ``max_bytes`` makes a shard of its own. A shard's pieces come in order, and
    all of them before the next shard's."""
    shard = rows = size = 0
    for frame in frames:
        while frame.height:
            text_bytes = frame.get_column("text").str.len_bytes().fill_null(0).to_numpy()
            total = np.cumsum(text_bytes, dtype=np.int64)
            fit = min(
                max_posts - rows,
                int(np.searchsorted(total, max_bytes - size, side="right")),
                frame.height,
            )
            if fit == 0 and rows == 0:
                fit = 1
            if fit:
                yield shard, frame.head(fit)
                rows, size = rows + fit, size + int(total[fit - 1])
                frame = frame.slice(fit)
            if frame.height:  # the shard is full
                shard, rows, size = shard + 1, 0, 0


def shard_frames(pieces: Iterable[tuple[int, pl.DataFrame]]) -> list[pl.DataFrame]:
    """The shards of ``cut_shards`` as whole frames (in memory)."""
    shards: list[list[pl.DataFrame]] = []
    for shard, piece in pieces:
        if shard == len(shards):
            shards.append([])
        shards[shard].append(piece)
    return [pl.concat(parts) for parts in shards]


def shard_name(i: int) -> str:
    return f"{i:05d}"


def write_shards(
    pieces: Iterable[tuple[int, pl.DataFrame]], out_dir: str | Path, allow_empty: bool = False
) -> dict:
    """Write each shard of ``cut_shards`` as ``out_dir/<00000>.parquet``, piece by piece (memory
    holds one piece), and the plan (``plan.json``: shards in order with posts, text bytes,
    first and last post id); returns the plan. No piece at all is an error, unless
    ``allow_empty`` (one posts bucket's cut: an empty plan, no shard)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan: list[dict] = []
    writer: ParquetAppender | None = None
    try:
        for shard, piece in pieces:
            if shard == len(plan):
                if writer is not None:
                    writer.close()
                writer = ParquetAppender(out / f"{shard_name(shard)}.parquet")
                plan.append(
                    {"shard": shard_name(shard), "posts": 0, "text_bytes": 0, "first_post_id": None}
                )
            writer.write(piece)
            entry = plan[-1]
            ids = piece.get_column("post_id")
            entry["posts"] += piece.height
            entry["text_bytes"] += int(piece.get_column("text").str.len_bytes().fill_null(0).sum())
            entry["first_post_id"] = entry["first_post_id"] or ids[0]
            entry["last_post_id"] = ids[-1]
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    if writer is not None:
        writer.close()
    if not plan and not allow_empty:
        raise no_posts_error()
    result = {"shards": plan, "posts": sum(s["posts"] for s in plan)}
    write_json(result, out / "plan.json")
    log.info("%d posts in %d shards", result["posts"], len(plan))
    return result


def no_posts_error() -> ConfigError:
    """The run's stop when no post of the union is at or above the thresholds (the one cut's,
    or with posts buckets the global statistics' over no shard at all)."""
    return ConfigError("topic splits: no posts of users at or above the demographics' thresholds")


def read_thresholds(path: str | Path) -> dict:
    if not Path(path).exists():
        raise ConfigError(f"{path}: thresholds file does not exist")
    try:
        return read_json(path)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON ({err})") from err


def read_seeds(path: str | None) -> dict[str, tuple[str, ...]]:
    """Seed subreddits per demographic key from the demographics file (none without a file)."""
    if not path:
        return {}
    from splits.config.definitions import load_demographics

    return {d.key: d.seed_subreddits for d in load_demographics(path)}
