"""Queries over prebuilt pool indexes, for interactive use (the Python API, the sandbox, ``splits
lexicon``).

    settings = settings_from_config(LiftSettings, load_config("config/config.yaml"))
    engine = HypothesisEngine("results/topics/topic_posts.parquet", settings)
    engine.lift(["finna", "on god"], "Hip-Hop/Rap Music", "black", "jewish", "black")
    engine.ranked(["finna", "on god"], "Hip-Hop/Rap Music", "black", "jewish", top=20)
    result = engine.query(["finna", "on god"], "Hip-Hop/Rap Music", "black", "jewish", "black")

``lift`` runs the lift job's own functions (``lift.project_rows`` or ``lift.release_rows``, then
``lift.lift_frame``) on the pool's index, so its rows are the job's rows of the same lexicon,
with every column the job writes except the hypothesis id, the source and the held-out counts.
``ranked`` is the ranked list as retrieved: post ids, the scores as shown (the project's BM25
score; in release mode the score pyserini shows), the matched character spans, and the padding
after the matching posts, which has no score (null) and ``padding`` true. ``query`` is both, with
triviality, for the sandbox.

A pool's index is built on its first query and kept (up to ``max_pools`` pools, least recently
used dropped first), one per retrieval setting. Every method takes another ``LiftSettings`` than
the engine's (``settings=``). ``q`` needs the whole run's p-values; ``q_values`` adjusts any list
of queries' p-values (e.g. every query of a session) with Benjamini-Hochberg.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from splits.hypotheses.lexicon import Hypothesis, canonical_lexicon
from splits.hypotheses.lift import (
    SetResult,
    lift_frame,
    pool_index,
    project_rows,
    release_rows,
)
from splits.hypotheses.release import release_list
from splits.hypotheses.retrieval import (
    PoolIndex,
    list_length,
    matched_spans,
    pools_of_topic,
)
from splits.hypotheses.settings import RELEASE, LiftSettings, RetrievalSettings
from splits.hypotheses.triviality import (
    Encoder,
    covered_identity_words,
    joined,
    subspace_recall,
)
from splits.stats import benjamini_hochberg

TOP_POSTS = 20  # retrieved posts a query returns unless told
VECTOR_CACHE_TEXTS = 1024  # encoded texts kept for triviality (identity words, lexicons)
QUERY_ID = "query"  # the hypothesis id and source of an interactive query's rows
#: the lift job's columns a query's rows leave out: what names a hypothesis of a set, and the
#: held-out counts (a query scores the whole pool)
NOT_QUERY_COLUMNS = ("hypothesis_id", "source")
RANKED_SCHEMA = {
    "rank": pl.Int64,
    "post_id": pl.String,
    "group": pl.String,
    "score": pl.Float64,
    "padding": pl.Boolean,
    "spans": pl.List(pl.List(pl.Int64)),
    "text": pl.String,
}


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


def _names(values: Sequence[str]) -> str:
    return ", ".join(values) if values else "none"


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
        self._pools: OrderedDict[tuple, PoolIndex] = OrderedDict()
        self._vectors: dict[tuple[str, str], np.ndarray] = {}
        self._analyzers: dict[RetrievalSettings, object] = {}

    def check(self, topic: str, groups: Sequence[str]) -> None:
        """QueryError (one line, naming the valid ones) for an unknown topic or group."""
        if topic not in self.topics:
            raise QueryError(f"unknown topic {topic!r} (topics: {_names(self.topics)})")
        for group in groups:
            if group not in self.demographics:
                raise QueryError(f"unknown group {group!r} (groups: {_names(self.demographics)})")
        if len(set(groups)) < len(groups):
            raise QueryError("the two groups must differ")

    def pool(
        self, topic: str, group_a: str, group_b: str, retrieval: RetrievalSettings | None = None
    ) -> PoolIndex:
        """The index of (topic, pair) under ``retrieval`` (default: the engine's), built once and
        kept."""
        self.check(topic, (group_a, group_b))
        retrieval = retrieval or self.settings.retrieval
        a, b = sorted((group_a, group_b))
        key = (topic, a, b, retrieval)
        if key in self._pools:
            self._pools.move_to_end(key)
            return self._pools[key]
        rows = self._posts.filter(
            (pl.col("topic") == topic) & pl.col("demographic").is_in([a, b])
        ).collect()
        pools, _ = pools_of_topic(rows, topic, [(a, b)], row_order=retrieval.mode == RELEASE)
        pool = pools[(a, b)]
        if not pool.is_a.any() or pool.is_a.all():
            raise QueryError(f"{topic}: the pool of {a} and {b} lacks posts of one group")
        if retrieval not in self._analyzers:
            self._analyzers[retrieval] = None if retrieval.is_default else retrieval.make_analyzer()
        self._pools[key] = pool_index(pool, retrieval, self._analyzers[retrieval])
        while len(self._pools) > self.max_pools:
            self._pools.popitem(last=False)
        return self._pools[key]

    def texts(self, groups: Sequence[str]) -> list[str]:
        """Every text of these groups, on every topic."""
        rows = self._posts.filter(pl.col("demographic").is_in(list(groups)))
        return rows.select(pl.col("text").fill_null("")).collect()["text"].to_list()

    # ----------------------------------------------------------------- the pieces

    def lift(
        self,
        lexicon: Sequence[str],
        topic: str,
        group_a: str,
        group_b: str,
        target: str,
        settings: LiftSettings | None = None,
    ) -> pl.DataFrame:
        """The lift job's rows of one lexicon on the pool (release mode keeps the undefined
        rows, K = 0 or n = 0, with null statistics, as the job does)."""
        settings = settings or self.settings
        _check_lexicon(lexicon)
        if target not in (group_a, group_b):
            raise QueryError(f"the target {target!r} is neither {group_a!r} nor {group_b!r}")
        index = self.pool(topic, group_a, group_b, settings.retrieval)
        pool = index.pool
        query = Hypothesis(
            QUERY_ID, topic, pool.group_a, pool.group_b, target, tuple(lexicon), QUERY_ID
        )
        evaluate = release_rows if settings.retrieval.mode == RELEASE else project_rows
        frame = lift_frame(evaluate(index, query, settings, SetResult()), settings.alpha)
        return frame.drop(
            *NOT_QUERY_COLUMNS, *[c for c in frame.columns if c.startswith("heldout_")]
        )

    def ranked(
        self,
        lexicon: Sequence[str],
        topic: str,
        group_a: str,
        group_b: str,
        top: int | None = None,
        padded: bool = True,
        settings: LiftSettings | None = None,
    ) -> tuple[pl.DataFrame, int]:
        """The first ``top`` posts of the lexicon's ranked list (None: the whole list; without
        ``padded``, the matching posts only), and how many of the pool's posts it matches."""
        settings = settings or self.settings
        _check_lexicon(lexicon)
        index = self.pool(topic, group_a, group_b, settings.retrieval)
        return ranked_posts(index, lexicon, settings, top, padded)

    def triviality(
        self,
        lexicon: Sequence[str],
        target: str,
        identity_words: Sequence[str] | None = None,
        encoder: Encoder | None = None,
    ) -> tuple[float | None, list[str]]:
        """(SubspaceBERTScore recall of the target's identity words against the lexicon, the
        identity words the lexicon's entries hold): the triviality job's score, None without
        identity words or an encoder. Defaults: the engine's identity words and encoder."""
        words = identity_words if identity_words is not None else self.identity_words.get(target)
        encoder = encoder or self.encoder
        if not words:
            return None, []
        covered = covered_identity_words(words, lexicon)
        if encoder is None:
            return None, covered
        identity, vectors = (self._encode(encoder, joined(list(w))) for w in (words, lexicon))
        if not len(identity) or not len(vectors):  # as the job: no token, no score
            return None, covered
        return subspace_recall(identity, vectors), covered

    def query(
        self,
        lexicon: Sequence[str],
        topic: str,
        group_a: str,
        group_b: str,
        target: str,
        top_posts: int = TOP_POSTS,
    ) -> QueryResult:
        """The lift rows with a p-value (what the session's q counts), the top of the ranked
        list and triviality of one lexicon."""
        rows = self.lift(lexicon, topic, group_a, group_b, target)
        rows = rows.filter(pl.col("p_value").is_not_null())  # undefined rows: no test
        posts, matching = self.ranked(lexicon, topic, group_a, group_b, top_posts)
        a, b = sorted((group_a, group_b))
        result = QueryResult(topic, a, b, target, list(lexicon), rows, matching, posts)
        result.triviality, result.identity_words_covered = self.triviality(lexicon, target)
        return result

    def _encode(self, encoder: Encoder, text: str) -> np.ndarray:
        key = (encoder.name, text)
        if key not in self._vectors:
            if len(self._vectors) >= VECTOR_CACHE_TEXTS:  # bounded over a long session
                self._vectors.clear()
            self._vectors[key] = encoder.encode([text])[0]
        return self._vectors[key]


def _check_lexicon(lexicon: Sequence[str]) -> None:
    if isinstance(lexicon, str):  # a string would be read letter by letter
        raise QueryError("the lexicon is a list of entries, not one string")
    if not canonical_lexicon(lexicon):
        raise QueryError("the lexicon has no entry with a letter or digit")


def ranked_posts(
    index: PoolIndex,
    lexicon: Sequence[str],
    settings: LiftSettings,
    top: int | None = None,
    padded: bool = True,
) -> tuple[pl.DataFrame, int]:
    """The ranked list the lift reads (``RANKED_SCHEMA``; the first ``top`` posts, or all),
    and how many of the pool's posts the lexicon matches. Scores as shown: the project's BM25
    score, or in release mode pyserini's (Anserini's rounding and tie adjustment of Lucene's
    float); the padding after the matching posts has none (null)."""
    if top is not None and top < 0:
        raise QueryError("top must be 0 or more")
    if settings.retrieval.mode == RELEASE:
        ranked = release_list(index, lexicon, settings.retrieval.doc_count)
        docs, hits, matching = ranked.docs, ranked.n_hits, ranked.n_matching
        scores = ranked.shown.astype(np.float64)
    else:
        length = list_length(index.n_docs, settings.list_size)
        depth = length if top is None else min(top, length)
        ranking = index.rank(lexicon, settings.seed, settings.list_size, depth)
        docs, matching = ranking.docs, ranking.n_matching
        hits = min(matching, length)
        scores = ranking.scores[: min(hits, len(docs))]
    if not padded:
        docs = docs[:hits]
    if top is not None:
        docs = docs[:top]
    pool = index.pool
    shown = np.full(len(docs), np.nan)
    shown[: min(hits, len(docs))] = scores[: min(hits, len(docs))]
    texts = [pool.texts[d] for d in docs]
    frame = pl.DataFrame(
        {
            "rank": np.arange(1, len(docs) + 1),
            "post_id": [str(pool.post_ids[d]) for d in docs],
            "group": [pool.group_a if pool.is_a[d] else pool.group_b for d in docs],
            "score": shown,
            "padding": np.arange(len(docs)) >= hits,
            "spans": [
                [list(s) for s in matched_spans(text, lexicon)] if i < hits else []
                for i, text in enumerate(texts)
            ],
            "text": texts,
        },
        schema=RANKED_SCHEMA,
    )
    return frame.with_columns(pl.col("score").fill_nan(None)), matching


def q_values(results: Sequence[QueryResult]) -> list[np.ndarray]:
    """Benjamini-Hochberg q of every row of several queries together, split back per query."""
    sizes = [r.rows.height for r in results]
    p = np.concatenate([r.rows["p_value"].to_numpy() for r in results if r.rows.height] or [[]])
    q = benjamini_hochberg(p)
    return list(np.split(q, np.cumsum(sizes)[:-1])) if sizes else []
