"""The authors' released data (Hugging Face dataset ``ecaplan/splits``) as the pipeline's tables.

Configs and fields (the release's DETAILS.md):

- ``all_seed_user_posts`` (v1) and ``high_groupness_user_posts`` (v2): ``id``, ``user`` (the
  Reddit username), ``timestamp`` (unix milliseconds), ``text``, ``demographic``, ``subreddit``,
  and in v2 ``metric_percentile`` (the author's group-ness percentile in the group). Written as
  the demographics stage's per-group post files (``<out>/<demographic>/posts.parquet``: post_id,
  author, subreddit, text, created_utc in seconds, percentile; sorted by post_id, as ``splits
  topic-splits`` reads them), so the topic splits, sampling and evaluation run on them.
- ``high_groupness_by_topic`` (v3): ``id``, ``description`` (the topic), ``demographic``,
  ``content`` (the text), ``metadata`` (``timestamp``, ``score``, ``subreddit``, ``user``) and
  ``score`` (the post's retrieval score for its topic). Written as the topic splits' table
  (``topic_posts.parquet``: post_id, author, subreddit, text, demographic, category, topic,
  score, norm_score, rank), which the lift, triviality and evaluation stages read. ``score`` is
  the release's own retrieval score; ``norm_score`` (the project's fraction of the largest
  reachable BM25 score) cannot be computed from it and is null; ``rank`` is the post's rank by
  that score within (demographic, topic), ties by post id; ``category`` comes from the topic
  list when it names the topic (else null). The rows keep the released rows' order (the order
  in which release mode indexes a pool: ``splits.hypotheses.release``).

Usernames are hashed on the way in (HMAC-SHA256 with the salt of ``export.salt_env``, as the
export hashes authors), so no raw username reaches a file. Rows are read in batches from a local
copy (``datasets``: a ``save_to_disk`` folder, a folder of Parquet or JSON Lines files, or the hub
cache of ``ecaplan/splits`` with no network access), filtered (demographics, topics, a
percentile cut for v2) and appended to Parquet, so the large configs never sit in memory; the
post-id sort of the per-group files and the ranks are computed by polars' streaming engine.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import polars as pl

from splits.errors import ConfigError, InputError
from splits.io import ParquetAppender, write_sorted_parquet

log = logging.getLogger(__name__)

V1, V2, V3 = "all_seed_user_posts", "high_groupness_user_posts", "high_groupness_by_topic"
CONFIGS = (V1, V2, V3)
HUB_ID = "ecaplan/splits"
FIELDS = {
    V1: ("id", "user", "timestamp", "text", "demographic", "subreddit"),
    V2: ("id", "user", "timestamp", "text", "demographic", "subreddit", "metric_percentile"),
    V3: ("id", "description", "demographic", "content", "metadata", "score"),
}
METADATA_FIELDS = ("timestamp", "score", "subreddit", "user")
BATCH_ROWS = 50_000
SORT_ROWS = 2_000_000  # rows of a group's posts sorted at once
POSTS_SCHEMA = {
    "post_id": pl.String,
    "author": pl.String,
    "subreddit": pl.String,
    "text": pl.String,
    "created_utc": pl.Int64,
    "percentile": pl.Float64,
}
TOPIC_POSTS_SCHEMA = {
    "post_id": pl.String,
    "author": pl.String,
    "subreddit": pl.String,
    "text": pl.String,
    "demographic": pl.String,
    "category": pl.String,
    "topic": pl.String,
    "score": pl.Float64,
    "norm_score": pl.Float64,
    "rank": pl.Int64,
}


# --------------------------------------------------------------------------- reading


def _data_files(folder: Path, config: str) -> tuple[str, list[str]] | None:
    """(builder, files) of a folder of Parquet or JSON Lines files (the config's subfolder
    when there is one)."""
    for base in (folder / config, folder / "data" / config, folder):
        if not base.is_dir():
            continue
        for builder, patterns in (("parquet", ("*.parquet",)), ("json", ("*.jsonl", "*.json"))):
            files = sorted(str(p) for pattern in patterns for p in base.rglob(pattern))
            files = [f for f in files if Path(f).name not in ("dataset_info.json", "state.json")]
            if files:
                return builder, files
    return None


def iter_batches(source: str | Path, config: str, batch_rows: int = BATCH_ROWS) -> Iterator[dict]:
    """Batches (dict of columns) of one config of a local copy of the dataset."""
    if config not in CONFIGS:
        raise ConfigError(f"release_data.config: unknown config {config!r} ({', '.join(CONFIGS)})")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local copy: never the network
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    path = Path(source)
    if path.is_dir() and any(
        (base / name).is_file()
        for base in (path, path / config)
        for name in ("state.json", "dataset_dict.json")
    ):
        disk = path / config if (path / config / "state.json").is_file() else path
        data = datasets.load_from_disk(str(disk))  # memory-mapped Arrow
        if isinstance(data, datasets.DatasetDict):
            if config in data:
                data = data[config]
            elif "train" in data:
                data = data["train"]
            else:
                raise InputError(f"{disk}: no split named {config!r} or 'train'")
        yield from data.iter(batch_size=batch_rows)
        return
    if path.is_dir():
        found = _data_files(path, config)
        if found is None:
            raise InputError(f"{path}: no Parquet or JSON Lines files, nor a saved dataset")
        builder, files = found
        data = datasets.load_dataset(builder, data_files=files, split="train", streaming=True)
    elif str(source) == HUB_ID:
        try:  # the hub cache, offline
            data = datasets.load_dataset(HUB_ID, config, split="train", streaming=False)
        except Exception as err:  # the library names what is missing
            raise InputError(f"{HUB_ID} ({config}) is not in the local cache: {err}") from err
    else:
        raise InputError(f"{source}: not a folder (a saved dataset or data files) nor {HUB_ID}")
    yield from data.iter(batch_size=batch_rows)


def _check_fields(batch: dict, config: str) -> None:
    missing = [f for f in FIELDS[config] if f not in batch]
    if missing:
        raise InputError(f"release data ({config}): missing field(s) {', '.join(missing)}")


def _metadata(values: list) -> dict[str, list]:
    """The metadata dicts (or their JSON text) as columns."""
    out: dict[str, list] = {f: [] for f in METADATA_FIELDS}
    for value in values:
        if isinstance(value, str):
            value = json.loads(value) if value else {}
        value = value or {}
        for f in METADATA_FIELDS:
            out[f].append(value.get(f))
    return out


def _hash(authors: pl.Series, salt: str) -> pl.Series:
    from splits.privacy import hash_author

    return pl.Series(
        "author",
        [None if a is None else hash_author(str(a), salt) for a in authors.to_list()],
        dtype=pl.String,
    )


# --------------------------------------------------------------------------- v3: topic posts


def topic_posts(
    source: str | Path,
    out: str | Path,
    salt: str,
    demographics: Sequence[str] | None,
    topics: Sequence[str] | None,
    categories: dict[str, str] | None = None,
    batch_rows: int = BATCH_ROWS,
) -> dict:
    """``high_groupness_by_topic`` as the topic posts table at ``out``; returns counts."""
    counts: Counter = Counter()
    tmp = Path(str(out) + ".part.parquet")
    categories = categories or {}
    sink = ParquetAppender(tmp)
    try:
        for batch in iter_batches(source, V3, batch_rows):
            _check_fields(batch, V3)
            meta = _metadata(batch["metadata"])
            frame = pl.DataFrame(
                {
                    "post_id": pl.Series([str(v) for v in batch["id"]], dtype=pl.String),
                    "user": pl.Series(meta["user"], dtype=pl.String),
                    "subreddit": pl.Series(meta["subreddit"], dtype=pl.String),
                    "text": pl.Series(batch["content"], dtype=pl.String),
                    "demographic": pl.Series(batch["demographic"], dtype=pl.String),
                    "topic": pl.Series(batch["description"], dtype=pl.String),
                    "score": pl.Series(batch["score"], dtype=pl.Float64),
                }
            )
            counts["read"] += frame.height
            if demographics:
                frame = frame.filter(pl.col("demographic").is_in(list(demographics)))
            if topics:
                frame = frame.filter(pl.col("topic").is_in(list(topics)))
            dropped = frame.filter(pl.col("text").is_null() | pl.col("demographic").is_null())
            counts["skipped_no_text_or_group"] += dropped.height
            frame = frame.filter(pl.col("text").is_not_null() & pl.col("demographic").is_not_null())
            counts["kept"] += frame.height
            frame = frame.with_columns(
                _hash(frame["user"], salt),
                pl.col("topic").replace_strict(categories, default=None).alias("category"),
                pl.lit(None, dtype=pl.Float64).alias("norm_score"),
                pl.lit(0, dtype=pl.Int64).alias("rank"),
            )
            sink.write(frame.select(list(TOPIC_POSTS_SCHEMA)))
    except BaseException:
        sink.discard()
        raise
    sink.close(pl.DataFrame(schema=TOPIC_POSTS_SCHEMA))
    # the rows stay in the released order (release mode indexes a (topic, pair) pool in it, as
    # the release built its indexes); the rank is computed in score order and carried back
    (
        pl.scan_parquet(tmp)
        .with_row_index("_row")
        .sort(["demographic", "topic", "score", "post_id"], descending=[False, False, True, False])
        .with_columns(
            pl.int_range(1, pl.len() + 1, dtype=pl.Int64)
            .over(["demographic", "topic"])
            .alias("rank")
        )
        .sort("_row")
        .drop("_row")
        .sink_parquet(out)
    )
    tmp.unlink()
    if not counts["kept"]:
        raise InputError(f"{source}: no post left after picking demographics and topics")
    return dict(counts)


# --------------------------------------------------------------------------- v1 / v2: group posts


def demographic_posts(
    source: str | Path,
    config: str,
    out_dir: str | Path,
    salt: str,
    demographics: Sequence[str] | None,
    min_percentile: float | None = None,
    batch_rows: int = BATCH_ROWS,
) -> dict:
    """v1 / v2 as ``<out_dir>/<demographic>/posts.parquet`` (sorted by post_id); with
    ``min_percentile`` (v2 only) the posts of authors below the cut are left out."""
    if config not in (V1, V2):
        raise ConfigError(f"release_data.config: {config} has no per-group posts (v1 or v2)")
    if min_percentile is not None and config != V2:
        raise ConfigError(
            "release_data.min_percentile: only high_groupness_user_posts carries percentiles"
        )
    out_dir = Path(out_dir)
    parts: dict[str, ParquetAppender] = {}
    counts: Counter = Counter()
    try:
        for batch in iter_batches(source, config, batch_rows):
            _check_fields(batch, config)
            percentile = batch.get("metric_percentile") or [None] * len(batch["id"])
            frame = pl.DataFrame(
                {
                    "post_id": pl.Series([str(v) for v in batch["id"]], dtype=pl.String),
                    "user": pl.Series(batch["user"], dtype=pl.String),
                    "subreddit": pl.Series(batch["subreddit"], dtype=pl.String),
                    "text": pl.Series(batch["text"], dtype=pl.String),
                    "created_utc": pl.Series(batch["timestamp"], dtype=pl.Int64) // 1000,
                    "percentile": pl.Series(percentile, dtype=pl.Float64),
                    "demographic": pl.Series(batch["demographic"], dtype=pl.String),
                }
            )
            counts["read"] += frame.height
            if demographics:
                frame = frame.filter(pl.col("demographic").is_in(list(demographics)))
            if min_percentile is not None:
                below = frame.filter(~(pl.col("percentile") >= min_percentile))
                counts["below_percentile"] += below.height
                frame = frame.filter(pl.col("percentile") >= min_percentile)
            frame = frame.filter(pl.col("text").is_not_null() & pl.col("demographic").is_not_null())
            frame = frame.with_columns(_hash(frame["user"], salt))
            for (group,), rows in frame.partition_by("demographic", as_dict=True).items():
                if group not in parts:
                    path = out_dir / str(group) / "posts.part.parquet"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    parts[group] = ParquetAppender(path)
                parts[group].write(rows.select(list(POSTS_SCHEMA)))
                counts[f"kept:{group}"] += rows.height
    except BaseException:
        for appender in parts.values():
            appender.discard()
        raise
    for appender in parts.values():
        appender.close()
    if not parts:
        raise InputError(f"{source}: no post left after picking demographics and the cut")
    for group in parts:
        part = out_dir / group / "posts.part.parquet"
        posts = pl.scan_parquet(part).unique("post_id", keep="first")
        write_sorted_parquet(posts, "post_id", out_dir / group / "posts.parquet", SORT_ROWS)
        part.unlink()
    return dict(counts)
