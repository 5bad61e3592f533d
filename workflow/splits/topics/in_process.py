"""Every step of the BM25 topic splits in one process, one shard in memory at a time: the same
functions the pipeline's jobs run (``splits topic-splits run``, tests and library callers)."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from splits.config.definitions import Topic
from splits.errors import ConfigError
from splits.topics.findings import TopicSplitResult, finish_splits, post_members
from splits.topics.merge import best_hits, retrieved_counts, topic_posts_table
from splits.topics.scoring import score_shard
from splits.topics.settings import TopicSplitSettings, check_settings, shard_bytes
from splits.topics.shards import SHARD_SCHEMA, cut_shards, from_own_seeds, shard_frames, union_posts
from splits.topics.statistics import global_statistics, shard_counts, topic_terms


def _split(
    shards: Sequence[pl.DataFrame | pl.LazyFrame],
    topics: Sequence[Topic],
    settings: TopicSplitSettings,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, frozenset[str]]]:
    """(topic posts after the pooled cut, the top K per (demographic, topic), retrieved counts,
    the demographics of each topic post's author)."""
    check_settings(settings)

    def load(shard: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        return shard.lazy().collect()

    terms = topic_terms(topics)
    # every shard's counts are held until its scoring (its postings of the topics' terms and its
    # documents' lengths: a small fraction of its texts, which are read again when it is scored)
    counts = [shard_counts(load(s), settings.index, terms) for s in shards]
    stats = global_statistics(counts, terms)
    bm25 = settings.bm25.params()
    hits = [
        score_shard(
            load(s),
            stats,
            settings.index,
            topics,
            settings.top_k,
            bm25,
            {group: c.postings for group, c in counts_of_shard.items()},
        )
        for s, counts_of_shard in zip(shards, counts, strict=True)
    ]
    best = best_hits(hits, settings.top_k)
    posts = pl.concat([s.lazy() for s in shards]) if shards else pl.LazyFrame(schema=SHARD_SCHEMA)
    table = topic_posts_table(best, posts, topics, settings.drop_fraction)
    return table, best, retrieved_counts(hits), post_members(posts, table)


def split_shards_result(
    shards: Sequence[pl.DataFrame | pl.LazyFrame],
    topics: Sequence[Topic],
    settings: TopicSplitSettings,
    demographics: Sequence[str] | None = None,
    seeds: dict[str, Sequence[str]] | None = None,
) -> TopicSplitResult:
    """Every step of the stage over ``shards`` (consecutive, in post-id order) in this process,
    one shard in memory at a time: the same functions the pipeline's jobs run, up to the
    stage's outputs (``finish_splits``). ``demographics`` defaults to those in the shards."""
    table, best, retrieved, members = _split(shards, topics, settings)
    if demographics is None:
        demographics = sorted(
            {
                d
                for s in shards
                for d in s.lazy().select(pl.col("demographics").explode()).collect().to_series()
                if d is not None
            }
        )
    return finish_splits(table, best, retrieved, topics, demographics, settings, seeds, members)


def split_shards(
    shards: Sequence[pl.DataFrame | pl.LazyFrame],
    topics: Sequence[Topic],
    settings: TopicSplitSettings,
) -> pl.DataFrame:
    """The topic posts of ``split_shards_result`` before topics too small to sample are left
    out (every topic's retrieved posts, after the pooled cut)."""
    return _split(shards, topics, settings)[0]


def _in_memory_shards(
    posts: pl.DataFrame, settings: TopicSplitSettings, seeds: dict[str, Sequence[str]] | None
) -> list[pl.DataFrame]:
    check_settings(settings)
    if settings.seed_subreddit_posts == "exclude":
        posts = posts.filter(~from_own_seeds(seeds or {}))
    if posts.is_empty():
        raise ConfigError(
            "topic splits: no posts of users at or above the demographics' thresholds"
        )
    pieces = cut_shards([union_posts(posts)], settings.shard_posts, shard_bytes(settings.shard_mb))
    return shard_frames(pieces)


def topic_splits(
    posts: pl.DataFrame, topics: Sequence[Topic], settings: TopicSplitSettings
) -> pl.DataFrame:
    """The topic_posts table (before topics too small to sample are left out) from in-memory
    (demographic, post) rows (post_id, author, subreddit, text, demographic), cut into shards
    by ``settings`` like the pipeline's."""
    return split_shards(_in_memory_shards(posts, settings, None), topics, settings)


def topic_splits_result(
    posts: pl.DataFrame,
    topics: Sequence[Topic],
    settings: TopicSplitSettings,
    seeds: dict[str, Sequence[str]] | None = None,
) -> TopicSplitResult:
    """``split_shards_result`` from in-memory (demographic, post) rows; ``seeds``: each
    demographic's seed subreddits (the seed share, and ``seed_subreddit_posts: exclude``)."""
    demographics = sorted(posts.get_column("demographic").unique().to_list())
    shards = _in_memory_shards(posts, settings, seeds)
    return split_shards_result(shards, topics, settings, demographics, seeds)
