"""Map 2 of the BM25 topic splits: one shard scored with the corpus statistics and the BM25
variant of ``topics.bm25``, its top K posts per (demographic, topic) kept.

``norm_score`` = score / the largest score the topic's query can reach in the index used
(robertson: (k1 + 1) * the sum of the query tokens' idf), which corrects for the different idf
scales of separate indexes (with a shared index it is the raw score divided by one constant per
topic). Only posts containing at least one of the topic's keywords as a phrase
(``splits.retrieval.phrases``) are ranked; ties are broken by post id."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from splits.config.definitions import Topic
from splits.errors import ConfigError
from splits.retrieval.bm25 import BM25Params
from splits.text import query_tokens
from splits.topics.corpus import CorpusStats, QueryPostings
from splits.topics.index import BM25Index, match_keywords, top_k
from splits.topics.statistics import SHARED, index_groups

HIT_SCHEMA = {
    "post_id": pl.String,
    "demographic": pl.String,
    "category": pl.String,
    "topic": pl.String,
    "score": pl.Float64,
    "norm_score": pl.Float64,
    # posts of the shard holding one of the topic's keywords (as a phrase) for the demographic
    "matching": pl.Int64,
}


def _search_rows(
    index: BM25Index,
    texts: pl.Series,
    doc_post_ids: np.ndarray,
    masks: dict[str, np.ndarray | None],
    topics: Sequence[Topic],
    top_k_posts: int,
) -> list[pl.DataFrame]:
    """Per topic and demographic: the top ``top_k_posts`` of the posts that hold one of the
    topic's keywords as a phrase (``match_keywords``), ranked by their BM25 score for the
    topic's query (the keywords' content words); ``matching`` counts those posts."""
    found = match_keywords(index, texts, [kw for topic in topics for kw in topic.keywords])
    rows = []
    for topic in topics:
        query = query_tokens(topic.keywords)
        scored, scored_values = index.score_matching(index.term_ids(query))
        matching = found.any_docs(topic.keywords)
        # BM25 scores of the matching posts (a post matching only a stop-word keyword scores 0)
        at = np.searchsorted(scored, matching).clip(0, max(len(scored) - 1, 0))
        hit = (scored[at] == matching) if len(scored) else np.zeros(len(matching), dtype=bool)
        scores = np.where(hit, scored_values[at] if len(scored) else 0.0, 0.0)
        max_score = index.max_score(query)
        for key, mask in masks.items():
            keep = slice(None) if mask is None else mask[matching]
            member_docs, member_scores = matching[keep], scores[keep]
            docs, doc_scores = top_k(member_docs, member_scores, top_k_posts)
            rows.append(
                pl.DataFrame(
                    {
                        "post_id": pl.Series(doc_post_ids[docs], dtype=pl.String),
                        "demographic": pl.Series([key] * len(docs), dtype=pl.String),
                        "category": pl.Series([topic.category] * len(docs), dtype=pl.String),
                        "topic": pl.Series([topic.topic] * len(docs), dtype=pl.String),
                        "score": pl.Series(doc_scores, dtype=pl.Float64),
                        "norm_score": pl.Series(
                            doc_scores / max_score if max_score > 0 else doc_scores,
                            dtype=pl.Float64,
                        ),
                        "matching": pl.Series([len(member_docs)] * len(docs), dtype=pl.Int64),
                    }
                )
            )
    return rows


def score_shard(
    shard: pl.DataFrame,
    stats: dict[str, CorpusStats],
    index: str,
    topics: Sequence[Topic],
    top_k_posts: int,
    bm25: BM25Params,
    postings: dict[str, QueryPostings],
) -> pl.DataFrame:
    """The shard's top ``top_k_posts`` posts per (demographic, topic), scored with the corpus
    statistics and the BM25 variant ``bm25`` (``topics.bm25``): exactly the scores (and, in
    post-id order, the ties) of one index over all shards. ``norm_score`` = score / the largest
    score the query can reach (robertson: (k1 + 1) * the sum of the query tokens' idf;
    ``BM25Scorer.max_score`` for the other variants). ``postings``: each index group's postings
    of the topics' terms, counted with the shard's statistics (``shard_counts`` with the
    topics' terms), from which its index is built without tokenising the shard again."""
    rows: list[pl.DataFrame] = []
    for group, docs in index_groups(shard, index).items():
        if group not in stats:
            raise ConfigError(f"global statistics: no index group {group!r} (re-run the stats)")
        group_postings = postings.get(group)
        if group_postings is None or group_postings.n_docs != docs.height:
            found = "none" if group_postings is None else f"{group_postings.n_docs:,} documents"
            raise ConfigError(
                f"topic statistics: the postings of index group {group!r} are not this "
                f"shard's ({found}, the shard {docs.height:,}); re-run the topic statistics"
            )
        index_ = BM25Index.from_postings(group_postings, params=bm25, stats=stats[group])
        post_ids = docs.get_column("post_id").to_numpy()
        if index == SHARED:
            member_lists = docs.get_column("demographics")
            keys = member_lists.explode().drop_nulls().unique().sort().to_list()
            masks = {k: member_lists.list.contains(k).to_numpy() for k in keys}
        else:
            masks = {group: None}
        rows += _search_rows(index_, docs.get_column("text"), post_ids, masks, topics, top_k_posts)
    return pl.concat(rows) if rows else pl.DataFrame(schema=HIT_SCHEMA)
