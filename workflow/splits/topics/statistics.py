"""Map 1 and reduce 1 of the BM25 topic splits: each shard's vocabulary counts per index group
(one shared index, or one per demographic: ``topics.index``) and the corpus statistics of every
index group summed over the shards, with their files."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import polars as pl

from splits.config.definitions import Topic
from splits.errors import ConfigError
from splits.io import read_json, write_json, write_parquet
from splits.text import query_tokens
from splits.topics.corpus import CorpusStats, QueryPostings, ShardCounts

SHARED = "shared"  # the one index group of ``topics.index: shared``
QUERY_TERMS_KEY = "splits.query_terms"  # the postings file's footer key: the terms they cover
POSTINGS_COLUMNS = {"term": pl.UInt32, "doc": pl.UInt32, "tf": pl.UInt32}


def index_groups(shard: pl.DataFrame, index: str) -> dict[str, pl.DataFrame]:
    """The documents of each index of a shard: all posts (``shared``), or each demographic's
    posts (``per_demographic``), in post-id order."""
    if index == SHARED:
        return {SHARED: shard}
    if index == "per_demographic":
        keys = shard.get_column("demographics").explode().drop_nulls().unique().sort()
        return {k: shard.filter(pl.col("demographics").list.contains(k)) for k in keys}
    raise ConfigError(f"topics.index: unknown value {index!r} (shared or per_demographic)")


def shard_counts(
    shard: pl.DataFrame, index: str, query_terms: Iterable[str] | None = None
) -> dict[str, ShardCounts]:
    """Each index group's counts of the shard; with ``query_terms`` (``topic_terms``) each
    group's postings of those terms too, which its scoring reads instead of tokenising the
    shard again."""
    terms = None if query_terms is None else frozenset(query_terms)
    return {
        group: ShardCounts.from_texts(docs.get_column("text"), query_terms=terms)
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


def write_postings(counts: dict[str, ShardCounts], postings_path, lengths_path) -> None:
    """A shard's postings of the query terms (group, term, doc, tf: ``term`` indexes the sorted
    query terms, kept as JSON in the file's footer under ``QUERY_TERMS_KEY``) and its documents'
    lengths (group, doc_len, in document order within each group), as Parquet."""
    postings = {group: c.postings for group, c in counts.items()}
    if any(p is None for p in postings.values()):
        raise ValueError("write_postings: counts taken without query terms")
    term_lists = {p.terms for p in postings.values()}
    if len(term_lists) > 1:
        raise ValueError("write_postings: the groups' postings were taken for different terms")
    terms = term_lists.pop() if term_lists else ()

    def table(columns: dict[str, np.ndarray], group: str) -> pl.DataFrame:
        frame = pl.DataFrame({c: pl.Series(v, dtype=pl.UInt32) for c, v in columns.items()})
        return frame.select(pl.lit(group, dtype=pl.String).alias("group"), pl.all())

    postings_table = pl.concat(
        [table({c: getattr(p, c) for c in POSTINGS_COLUMNS}, g) for g, p in postings.items()]
        or [table({c: [] for c in POSTINGS_COLUMNS}, "")[:0]]
    )
    lengths_table = pl.concat(
        [table({"doc_len": p.doc_len}, g) for g, p in postings.items()]
        or [table({"doc_len": []}, "")[:0]]
    )
    write_parquet(
        postings_table, postings_path, metadata={QUERY_TERMS_KEY: json.dumps(list(terms))}
    )
    write_parquet(lengths_table, lengths_path)


def read_postings(postings_path: Path, lengths_path: Path) -> dict[str, QueryPostings]:
    """Each index group's ``QueryPostings`` from ``write_postings``'s files."""
    footer = pl.read_parquet_metadata(postings_path)
    if QUERY_TERMS_KEY not in footer:
        raise ConfigError(f"{postings_path}: not a postings file of the topic statistics")
    terms = tuple(json.loads(footer[QUERY_TERMS_KEY]))
    by_group = pl.read_parquet(postings_path).partition_by("group", as_dict=True)
    lengths = pl.read_parquet(lengths_path)
    postings = {}
    for (group,), rows in lengths.group_by("group", maintain_order=True):
        own = by_group.get((group,), pl.DataFrame(schema=POSTINGS_COLUMNS))
        postings[group] = QueryPostings(
            terms,
            *(own.get_column(c).to_numpy() for c in POSTINGS_COLUMNS),
            rows.get_column("doc_len").to_numpy(),
        )
    return postings


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
