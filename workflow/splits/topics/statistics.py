"""Map 1 and reduce 1 of the BM25 topic splits: each shard's vocabulary counts per index group
(one shared index, or one per demographic: ``topics.index``) and the corpus statistics of every
index group summed over the shards, with their files."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import polars as pl

from splits.config.definitions import Topic
from splits.errors import ConfigError
from splits.io import read_json, write_json, write_parquet
from splits.text import query_tokens
from splits.topics.corpus import CorpusStats, ShardCounts

SHARED = "shared"  # the one index group of ``topics.index: shared``


def index_groups(shard: pl.DataFrame, index: str) -> dict[str, pl.DataFrame]:
    """The documents of each index of a shard: all posts (``shared``), or each demographic's
    posts (``per_demographic``), in post-id order."""
    if index == SHARED:
        return {SHARED: shard}
    if index == "per_demographic":
        keys = shard.get_column("demographics").explode().drop_nulls().unique().sort()
        return {k: shard.filter(pl.col("demographics").list.contains(k)) for k in keys}
    raise ConfigError(f"topics.index: unknown value {index!r} (shared or per_demographic)")


def shard_counts(shard: pl.DataFrame, index: str) -> dict[str, ShardCounts]:
    return {
        group: ShardCounts.from_texts(docs.get_column("text"))
        for group, docs in index_groups(shard, index).items()
    }


def topic_terms(topics: Sequence[Topic]) -> set[str]:
    return {token for topic in topics for token in query_tokens(topic.keywords)}


def global_statistics(
    counts: Sequence[dict[str, ShardCounts]], terms: Iterable[str]
) -> dict[str, CorpusStats]:
    """The statistics of every index group over all shards (``counts`` in shard order)."""
    terms = set(terms)
    groups = sorted({group for shard in counts for group in shard})
    return {
        group: CorpusStats.combine([shard[group] for shard in counts if group in shard], terms)
        for group in groups
    }


def write_counts(counts: dict[str, ShardCounts], index: str, vocab_path, counts_path) -> None:
    """A shard's statistics: vocabularies (group, tok, df, rank of first appearance within the
    group) as Parquet, document counts and lengths as JSON."""
    frames = [
        c.vocabulary.with_row_index("rank").select(
            pl.lit(group, dtype=pl.String).alias("group"), "tok", "df", "rank"
        )
        for group, c in counts.items()
    ]
    vocab = (
        pl.concat(frames)
        if frames
        else pl.DataFrame(
            schema={"group": pl.String, "tok": pl.String, "df": pl.Int64, "rank": pl.UInt32}
        )
    )
    write_parquet(vocab, vocab_path)
    groups = {
        g: {"n_docs": c.n_docs, "total_len": c.total_len, "n_nonempty": c.n_nonempty}
        for g, c in counts.items()
    }
    write_json({"index": index, "groups": groups}, counts_path)


def read_counts(vocab_path: Path, counts_path: Path) -> tuple[str, dict[str, ShardCounts]]:
    data = read_json(counts_path)
    vocab = pl.scan_parquet(vocab_path)
    return data["index"], {
        group: ShardCounts(
            n_docs=int(v["n_docs"]),
            total_len=int(v["total_len"]),
            vocabulary=vocab.filter(pl.col("group") == group).select("tok", "df", "rank"),
            n_nonempty=None if v.get("n_nonempty") is None else int(v["n_nonempty"]),
        )
        for group, v in data["groups"].items()
    }


def write_global_stats(stats: dict[str, CorpusStats], index: str, path) -> None:
    groups = {g: s.to_json() for g, s in stats.items()}
    write_json({"index": index, "groups": groups}, path)


def read_global_stats(path: str | Path) -> tuple[str, dict[str, CorpusStats]]:
    data = read_json(path)
    return data["index"], {g: CorpusStats.from_json(v) for g, v in data["groups"].items()}
