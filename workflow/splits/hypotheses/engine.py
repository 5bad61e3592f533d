"""One query function over prebuilt pool indexes, for interactive use (a notebook, the sandbox).

    settings = settings_from_config(LiftSettings, load_config("config/config.yaml"))
    engine = HypothesisEngine("results/topics/topic_posts.parquet", settings)
    result = engine.query(["finna", "on god"], "Hip-Hop/Rap Music", "black", "jewish", "black")
    result.rows      # lift@k, interval, p, null band per k fraction
    result.posts     # the top of the ranked list with matched character spans

The numbers are those of the pipeline's lift job (same index, ranking, seed and statistics). A
pool's index is built on its first query and kept (up to ``max_pools`` pools, least recently used
dropped first). ``q`` needs the whole run's p-values; ``q_values`` adjusts any list of queries'
p-values (e.g. every query of a session) with Benjamini-Hochberg.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from splits.hypotheses.lexicon import canonical_lexicon
from splits.hypotheses.lift import lift_statistics, pool_index, ranked_counts
from splits.hypotheses.release import release_counts, release_list
from splits.hypotheses.retrieval import PoolIndex, Ranking, matched_spans, pools_of_topic
from splits.hypotheses.settings import RELEASE, LiftSettings
from splits.hypotheses.triviality import (
    Encoder,
    covered_identity_words,
    joined,
    subspace_recall,
)
from splits.stats import benjamini_hochberg

TOP_POSTS = 20  # retrieved posts a query returns unless told
VECTOR_CACHE_TEXTS = 1024  # encoded texts kept for triviality (identity words, lexicons)


class QueryError(ValueError):
    """A query that cannot be answered (empty lexicon, unknown topic or group); one line."""


@dataclass
class QueryResult:
    topic: str
    group_a: str
    group_b: str
    target: str
    lexicon: list[str]
    rows: pl.DataFrame
    matching_posts: int
    posts: pl.DataFrame
    triviality: float | None = None
    identity_words_covered: list[str] = field(default_factory=list)


class HypothesisEngine:
    def __init__(
        self,
        topic_posts: str | Path | pl.DataFrame | pl.LazyFrame,
        settings: LiftSettings,
        identity_words: Mapping[str, Sequence[str]] | None = None,
        encoder: Encoder | None = None,
        max_pools: int = 32,
    ):
        source = (
            topic_posts.lazy()
            if isinstance(topic_posts, pl.DataFrame | pl.LazyFrame)
            else pl.scan_parquet(topic_posts)
        )
        # posts are read one topic at a time, when a pool of that topic is first asked for, so
        # memory holds the kept pools and not the whole topic posts table
        self._posts = source.select(
            pl.col("post_id").cast(pl.String),
            pl.col("text").cast(pl.String),
            pl.col("demographic").cast(pl.String),
            pl.col("topic").cast(pl.String),
        )
        names = self._posts.select(
            pl.col("topic").unique().sort().implode(),
            pl.col("demographic").unique().sort().implode(),
        ).collect()
        self.topics = [t for t in names["topic"][0] if t is not None]
        self.demographics = [d for d in names["demographic"][0] if d is not None]
        self.settings = settings
        self.identity_words = dict(identity_words or {})
        self.encoder = encoder
        self.max_pools = max_pools
        self._pools: OrderedDict[tuple[str, str, str], PoolIndex] = OrderedDict()
        self._vectors: dict[str, np.ndarray] = {}
        self._analyzer = None

    def pool(self, topic: str, group_a: str, group_b: str) -> PoolIndex:
        """The index of (topic, pair), built once and kept."""
        if topic not in self.topics:
            raise QueryError(f"unknown topic {topic!r}")
        for group in (group_a, group_b):
            if group not in self.demographics:
                raise QueryError(f"unknown group {group!r}")
        if group_a == group_b:
            raise QueryError("the two groups must differ")
        a, b = sorted((group_a, group_b))
        key = (topic, a, b)
        if key in self._pools:
            self._pools.move_to_end(key)
            return self._pools[key]
        rows = self._posts.filter(
            (pl.col("topic") == topic) & pl.col("demographic").is_in([a, b])
        ).collect()
        retrieval = self.settings.retrieval
        pools, _ = pools_of_topic(rows, topic, [(a, b)], row_order=retrieval.mode == RELEASE)
        pool = pools[(a, b)]
        if not pool.is_a.any() or pool.is_a.all():
            raise QueryError(f"{topic}: the pool of {a} and {b} lacks posts of one group")
        if self._analyzer is None and not retrieval.is_default:
            self._analyzer = retrieval.make_analyzer()
        self._pools[key] = pool_index(pool, retrieval, self._analyzer)
        while len(self._pools) > self.max_pools:
            self._pools.popitem(last=False)
        return self._pools[key]

    def query(
        self,
        lexicon: Sequence[str],
        topic: str,
        group_a: str,
        group_b: str,
        target: str,
        top_posts: int = TOP_POSTS,
    ) -> QueryResult:
        if not canonical_lexicon(lexicon):
            raise QueryError("the lexicon has no entry with a letter or digit")
        if target not in (group_a, group_b):
            raise QueryError(f"the target {target!r} is neither {group_a!r} nor {group_b!r}")
        index = self.pool(topic, group_a, group_b)
        pool = index.pool
        if self.settings.retrieval.mode == RELEASE:
            ranked = release_list(index, lexicon, self.settings.retrieval.doc_count)
            counts = release_counts(pool.is_target(target), ranked.docs, self.settings.k_fractions)
            scores = np.nan_to_num(ranked.scores, nan=0.0)
            ranking = Ranking(ranked.docs, scores, ranked.n_hits, len(ranked.docs))
        else:
            ranking, counts = ranked_counts(index, lexicon, target, self.settings, top_posts)
        # no target post in the list, or no post read: no lift (undefined)
        counts = [c for c in counts if c[3] > 0 and c[1] > 0]
        frame = pl.DataFrame(
            counts,
            schema={
                "k_fraction": pl.Float64,
                "n": pl.Int64,
                "hits_at_n": pl.Int64,
                "target_in_list": pl.Int64,
                "list_size": pl.Int64,
            },
            orient="row",
        )
        if frame.height:
            computed = lift_statistics(
                frame["hits_at_n"].to_numpy(),
                frame["n"].to_numpy(),
                frame["target_in_list"].to_numpy(),
                frame["list_size"].to_numpy(),
                self.settings.alpha,
            )
            frame = frame.with_columns(pl.Series(k, v) for k, v in computed.items())
        top = ranking.docs[:top_posts]
        posts = pl.DataFrame(
            {
                "rank": np.arange(1, len(top) + 1),
                "post_id": [str(pool.post_ids[d]) for d in top],
                "text": [pool.texts[d] for d in top],
                "group": [pool.group_a if pool.is_a[d] else pool.group_b for d in top],
                "score": ranking.scores[: len(top)],
                "matched": np.arange(len(top)) < ranking.n_matching,
                "spans": [[list(s) for s in matched_spans(pool.texts[d], lexicon)] for d in top],
            },
            schema_overrides={"spans": pl.List(pl.List(pl.Int64))},
        )
        result = QueryResult(
            topic,
            pool.group_a,
            pool.group_b,
            target,
            list(lexicon),
            frame,
            ranking.n_matching,
            posts,
        )
        words = self.identity_words.get(target)
        if words:
            result.identity_words_covered = covered_identity_words(words, lexicon)
            if self.encoder is not None:
                result.triviality = subspace_recall(
                    self._encode(joined(words)), self._encode(joined(list(lexicon)))
                )
        return result

    def _encode(self, text: str) -> np.ndarray:
        if text not in self._vectors:
            if len(self._vectors) >= VECTOR_CACHE_TEXTS:  # bounded over a long session
                self._vectors.clear()
            self._vectors[text] = self.encoder.encode([text])[0]
        return self._vectors[text]


def q_values(results: Sequence[QueryResult]) -> list[np.ndarray]:
    """Benjamini-Hochberg q of every row of several queries together, split back per query."""
    sizes = [r.rows.height for r in results]
    p = np.concatenate([r.rows["p_value"].to_numpy() for r in results if r.rows.height] or [[]])
    q = benjamini_hochberg(p)
    return list(np.split(q, np.cumsum(sizes)[:-1])) if sizes else []
