"""Settings of the topics stage family (the ``topics`` config section; defaults in the schema).

One class per rule of ``workflow/rules/topics.smk``, holding exactly the keys that rule's job
reads (so that changing a key re-runs only the jobs that read it); ``TopicSplitSettings`` holds
every key of the BM25 topic splits, for ``splits topic-splits run`` and library callers.
``topic_global_stats`` reads no setting (the index mode comes with the shards' counts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class TopicBM25Settings:
    """``topics.bm25``: the BM25 variant topic posts are ranked with."""

    SECTION: ClassVar[str] = "topics.bm25"
    method: str
    k1: float | None
    b: float | None
    delta: float

    def params(self):
        """The variant as ``splits.retrieval.bm25.BM25Params`` (null k1 / b: the method's)."""
        from splits.retrieval.bm25 import BM25Params

        return BM25Params(self.method, self.k1, self.b, self.delta)


@dataclass(frozen=True)
class TopicShardsSettings:
    """``topic_shards``: the union of the demographics' posts, cut into shards."""

    SECTION: ClassVar[str] = "topics"
    shard_posts: int
    shard_mb: float
    seed_subreddit_posts: str


@dataclass(frozen=True)
class TopicShardStatsSettings:
    """``topic_shard_stats``: one shard's vocabulary counts."""

    SECTION: ClassVar[str] = "topics"
    index: str


@dataclass(frozen=True)
class TopicShardScoreSettings:
    """``topic_shard_score``: one shard's top K per (demographic, topic)."""

    SECTION: ClassVar[str] = "topics"
    top_k: int
    bm25: TopicBM25Settings


@dataclass(frozen=True)
class TopicMergeSettings:
    """``topic_splits``: the shards' top Ks merged, the pooled cut, topics too small dropped."""

    SECTION: ClassVar[str] = "topics"
    top_k: int
    drop_fraction: float
    seed_subreddit_posts: str
    #: sampling.k: a topic is kept if a pair of groups has k/2 + 3 posts in each
    sample_k: int = field(metadata={"key": "sampling.k"})


@dataclass(frozen=True)
class TopicSplitSettings:
    """Every key of the BM25 topic splits: ``splits topic-splits run`` (all steps in one
    process) and the library's in-process functions."""

    SECTION: ClassVar[str] = "topics"
    top_k: int
    drop_fraction: float
    index: str
    shard_posts: int
    shard_mb: float
    seed_subreddit_posts: str
    bm25: TopicBM25Settings
    sample_k: int = field(metadata={"key": "sampling.k"})


@dataclass(frozen=True)
class GenerateTopicsSettings:
    """``generate_topics``: ``topics.generate`` and the run's seed."""

    SECTION: ClassVar[str] = "topics.generate"
    model: str | None
    categories: list[str] | None
    n_categories: int
    n_topics: int
    n_keywords: int
    max_tokens: int
    seed: int = field(metadata={"key": "seed"})


def shard_bytes(shard_mb: float) -> int:
    """``topics.shard_mb`` in bytes (at least 1)."""
    return max(1, int(shard_mb * 2**20))


INDEX_MODES = ("shared", "per_demographic")
SEED_POSTS_MODES = ("keep", "exclude")


def check_settings(settings: object) -> None:
    """The ranges of the keys ``settings`` holds, for settings given as JSON or built by hand
    (a config file's values were checked against the schema already)."""
    from splits.errors import ConfigError

    def has(name: str) -> bool:
        return hasattr(settings, name)

    if has("top_k") and settings.top_k < 1:
        raise ConfigError("topics.top_k: must be at least 1")
    if has("drop_fraction") and not 0 <= settings.drop_fraction < 1:
        raise ConfigError("topics.drop_fraction: must be in [0, 1)")
    if has("index") and settings.index not in INDEX_MODES:
        raise ConfigError(
            f"topics.index: unknown value {settings.index!r} (shared or per_demographic)"
        )
    if has("shard_posts") and settings.shard_posts < 1:
        raise ConfigError("topics.shard_posts: must be at least 1")
    if has("shard_mb") and not settings.shard_mb > 0:
        raise ConfigError("topics.shard_mb: must be positive")
    if has("sample_k") and (settings.sample_k < 2 or settings.sample_k % 2):
        raise ConfigError("sampling.k: must be an even number of at least 2")
    if has("seed_subreddit_posts") and settings.seed_subreddit_posts not in SEED_POSTS_MODES:
        raise ConfigError(
            f"topics.seed_subreddit_posts: unknown value {settings.seed_subreddit_posts!r} "
            "(keep or exclude)"
        )
    if has("bm25"):
        settings.bm25.params()  # method, k1, b and delta
