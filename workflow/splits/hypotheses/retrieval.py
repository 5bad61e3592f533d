"""Exact BM25 phrase retrieval over one (topic, pair) pool, and the ranked list of a lexicon.

The pool of (topic t, groups A and B) is the topic posts of A and of B on t; a post listed under
both groups (its author is above both thresholds) is left out, since it is evidence for neither.
One index per pool holds every post's tokens in order (lowercase letter/digit runs, stop words
kept) with a separator after each post, so a phrase never spans two posts.

Scoring is BM25 Okapi as in ``rank_bm25.BM25Okapi`` and the topic splits (k1 and b from
``hypotheses.retrieval``, null: robertson's 1.5 and 0.75; idf = log(N - df + 0.5) - log(df +
0.5), negative idf replaced by epsilon x the mean idf over the pool's vocabulary, epsilon =
0.25). A lexicon is an OR of its entries (Lucene's scoring of a
query of quoted phrases joined by OR, which the 2026 release runs):

- a one-token entry is a term: its contribution to a post is idf(t) x tf (k1 + 1) / (tf + k1 (1 -
  b + b dl / avgdl));
- a phrase contributes the same with tf = the number of positions where its tokens occur
  consecutively (overlapping occurrences count: "ha ha" occurs twice in "ha ha ha") and idf =
  the sum of its tokens' idf;
- a post's score is the sum over the entries it matches.

The ranked list holds the posts that match at least one entry by score, descending, then the other
posts; ties and the order of non-matching posts follow one seeded random permutation per query
(a 64-bit key per post from a hash of the post id and of the query, so the order does not depend
on how the pool's rows are stored and the same query always gives the same list). With a list
size D the list is cut after D posts (the 2026 release retrieves D = 2,000).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from splits.hypotheses.lexicon import canonical_lexicon, entry_tokens, query_text
from splits.retrieval.analyzers import Analyzer
from splits.retrieval.bm25 import (
    ROBERTSON,
    BM25Params,
    BM25Scorer,
    merge_clauses,
)
from splits.retrieval.phrases import PositionalIndex
from splits.text import WORD_RE

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def hash64(text: str) -> int:
    """A 64-bit integer from the text (blake2b, the same on every machine and Python run)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def _splitmix64(values: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser (a bijection of uint64 that mixes every bit), vectorised."""
    z = values.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        z += np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@dataclass(frozen=True)
class Pool:
    """The posts of one (topic, pair): ``is_a`` marks group A's posts (else B's)."""

    topic: str
    group_a: str
    group_b: str
    post_ids: np.ndarray  # str objects
    texts: Sequence[str]
    is_a: np.ndarray  # bool

    @property
    def size(self) -> int:
        return len(self.post_ids)

    def is_target(self, target: str) -> np.ndarray:
        if target == self.group_a:
            return self.is_a
        if target == self.group_b:
            return ~self.is_a
        raise ValueError(f"target {target!r} is neither {self.group_a!r} nor {self.group_b!r}")


def pools_of_topic(
    topic_rows: pl.DataFrame,
    topic: str,
    pairs: Sequence[tuple[str, str]],
    row_order: bool = False,
) -> tuple[dict[tuple[str, str], Pool], dict[tuple[str, str], int]]:
    """The pools of ``pairs`` from one topic's rows of the topic posts table (post_id, text,
    demographic), and per pair the number of posts left out because both groups list them.

    A pool's posts are in post-id order, or with ``row_order`` in the order of ``topic_rows``
    (release mode: the release indexes a pool's rows in the order they come, and its padding
    shuffles the unretrieved posts in that order)."""
    pools: dict[tuple[str, str], Pool] = {}
    in_both: dict[tuple[str, str], int] = {}
    for a, b in pairs:
        rows = topic_rows.filter(pl.col("demographic").is_in([a, b]))
        shared = rows.group_by("post_id").len().filter(pl.col("len") > 1).get_column("post_id")
        rows = rows.filter(~pl.col("post_id").is_in(shared.implode()))
        if not row_order:
            rows = rows.sort("post_id")
        in_both[(a, b)] = shared.len()
        pools[(a, b)] = Pool(
            topic=topic,
            group_a=a,
            group_b=b,
            post_ids=rows.get_column("post_id").to_numpy().astype(object),
            texts=rows.get_column("text").fill_null("").to_list(),
            is_a=(rows.get_column("demographic") == a).to_numpy(),
        )
    return pools, in_both


@dataclass(frozen=True)
class Ranking:
    """A lexicon's ranked list over a pool: ``docs`` (pool positions, best first: the whole list
    or its first ``depth`` posts), their ``scores`` (0 for non-matching posts), how many posts
    match, and the length |R| of the whole list."""

    docs: np.ndarray
    scores: np.ndarray
    n_matching: int
    length: int


class PoolIndex:
    """Positional BM25 index of one pool. Build once, query many lexicons."""

    def __init__(
        self,
        pool: Pool,
        params: BM25Params,
        analyzer: Analyzer | None = None,
        positions: PositionalIndex | None = None,
    ):
        """``params``: the BM25 variant and its k1, b and epsilon (``hypotheses.retrieval``'s,
        ``RetrievalSettings.bm25``). Robertson's is computed by the index itself (rank_bm25's
        float operations), another method's by ``splits.retrieval.bm25``'s scorer. ``analyzer``: the tokens of posts and entries
        (default: lowercase letter/digit runs). ``positions``: the word positions of the pool's
        posts when they are at hand (``PositionalIndex.subset`` of a larger pool's)."""
        if pool.size == 0:
            raise ValueError(f"pool {pool.topic!r} {pool.group_a}/{pool.group_b} has no posts")
        self.pool = pool
        k1, b, epsilon = params.k1, params.b, params.epsilon
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self.analyzer = analyzer
        # word positions (the phrase matcher shared with the topic splits): term ids by first
        # appearance (rank_bm25's vocabulary order, which fixes the float sum behind the mean
        # idf of the epsilon floor), positions grouped by term, ascending within a term
        if positions is not None:
            self.positions = positions
        elif analyzer is not None:
            self.positions = PositionalIndex(tokens=analyzer.tokenize_many(pool.texts))
        else:
            self.positions = PositionalIndex(pool.texts)
        self.vocabulary: dict[str, int] = self.positions.vocabulary
        self._terms = list(self.vocabulary)
        doc_len = self.positions.doc_len.astype(np.int64)
        n_docs = pool.size
        n_terms = len(self._terms)
        term_start = self.positions.term_start
        term_sorted = np.repeat(np.arange(n_terms, dtype=np.int64), np.diff(term_start))
        doc_sorted = (
            np.searchsorted(
                self.positions.doc_start, self.positions.postings.astype(np.int64), side="right"
            )
            - 1
        )
        # document frequency: postings are grouped by term with posts ascending inside a term,
        # so a (term, post) pair is new where either changes from the previous posting
        order = term_sorted  # one entry per posting
        new = np.ones(len(order), dtype=bool)
        new[1:] = (term_sorted[1:] != term_sorted[:-1]) | (doc_sorted[1:] != doc_sorted[:-1])
        doc_freq = np.bincount(term_sorted[new], minlength=n_terms)
        self.doc_len = doc_len
        self.avgdl = float(doc_len.sum()) / n_docs
        idf_raw = np.log(n_docs - doc_freq + 0.5) - np.log(doc_freq + 0.5)
        self.average_idf = float(np.cumsum(idf_raw)[-1]) / n_terms if n_terms else 0.0
        self.idf = np.where(idf_raw < 0, epsilon * self.average_idf, idf_raw)
        self.length_norm = (
            k1 * (1 - b + b * doc_len / self.avgdl)
            if self.avgdl > 0
            else np.full(n_docs, k1 * (1 - b))
        )
        # per (term, post): the post and the BM25 term weight tf (k1 + 1) / (tf + k1 (1 - b + b
        # dl / avgdl)), grouped by term, so one-token entries score without positions
        firsts = np.flatnonzero(new)
        tf = np.diff(np.r_[firsts, len(order)]).astype(np.float64)
        self.term_post_start = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(doc_freq, out=self.term_post_start[1:])
        self.term_post = doc_sorted[firsts]
        self.term_weight = tf * (k1 + 1) / (tf + self.length_norm[self.term_post])
        self.term_tf = tf
        self.scorer = None
        if params.method != ROBERTSON:
            self.scorer = BM25Scorer(params, doc_len, doc_freq)
        self.doc_keys = np.array([hash64(str(p)) for p in pool.post_ids], dtype=np.uint64)

    @property
    def n_docs(self) -> int:
        return self.pool.size

    # ----------------------------------------------------------------- matching

    def clause_ids(self, tokens: Sequence[str]) -> np.ndarray | None:
        """Term ids of an entry's tokens; None when a token is not in the pool (no match)."""
        ids = [self.vocabulary.get(t) for t in tokens]
        if any(i is None for i in ids):
            return None
        return np.asarray(ids, dtype=np.int64)

    def phrase_frequency(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(posts ascending, occurrences) of the consecutive token sequence ``ids``
        (``splits.retrieval.phrases``: overlapping occurrences count, no phrase spans two posts)."""
        return self.positions.phrase_frequency([self._terms[i] for i in ids])

    def entry_tokens(self, entry: str) -> tuple[str, ...]:
        """The tokens of a lexicon entry under this index's analyzer."""
        if self.analyzer is not None:
            return tuple(self.analyzer.tokenize(str(entry)))
        return entry_tokens(entry)

    def clauses(self, lexicon: Sequence[str], merged: bool = False) -> list[tuple[tuple, int]]:
        """The query's clauses (entry tokens, boost): distinct and sorted (the canonical
        lexicon), or with ``merged`` every entry in the given order, repeats merged into one
        clause with a boost (as Lucene parses ``"kw1" OR "kw2" ...``)."""
        if merged:
            return merge_clauses([t for t in (self.entry_tokens(e) for e in lexicon) if t])
        if self.analyzer is not None:
            return [(t, 1) for t in sorted({self.entry_tokens(e) for e in lexicon} - {()})]
        return [(t, 1) for t in canonical_lexicon(lexicon)]

    def variant_scores(self, clauses: Sequence[tuple[tuple, int]]) -> tuple[np.ndarray, np.ndarray]:
        """Dense scores and matches under the index's BM25 variant (``self.scorer``): each
        clause's (posts, tf) from the posting lists (a term) or the positions (a phrase), its
        score in those posts, summed per post in float64 (Lucene: then cast to float)."""
        summed = np.zeros(self.n_docs)
        matched = np.zeros(self.n_docs, dtype=bool)
        used = []
        for tokens, boost in clauses:
            ids = self.clause_ids(tokens)
            if ids is None:
                continue
            if len(ids) == 1:
                start, stop = self.term_post_start[ids[0]], self.term_post_start[ids[0] + 1]
                docs, tf = self.term_post[start:stop], self.term_tf[start:stop]
            else:
                docs, tf = self.phrase_frequency(ids)
            if not len(docs):
                continue
            used.append((ids, boost))
            summed[docs] += self.scorer.clause_scores(ids, docs, tf, boost).astype(np.float64)
            matched[docs] = True
        return self.scorer.finish(summed) + self.scorer.constant(used), matched

    def scores(self, lexicon: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Dense BM25 scores of every post for the lexicon, and which posts match an entry."""
        if self.scorer is not None or self.analyzer is not None:
            if self.scorer is None:
                raise ValueError("an analyzer needs a BM25 variant other than robertson")
            return self.variant_scores(self.clauses(lexicon))
        scores = np.zeros(self.n_docs)
        matched = np.zeros(self.n_docs, dtype=bool)
        terms, phrases = [], []
        for tokens in canonical_lexicon(lexicon):
            ids = self.clause_ids(tokens)
            if ids is not None:
                (terms if len(ids) == 1 else phrases).append(ids)
        if terms:
            # every one-token entry at once: its posts' weights times its idf, summed per post in
            # entry order (the float operations of rank_bm25's get_scores)
            term = np.concatenate(terms)
            starts = self.term_post_start[term]
            lengths = self.term_post_start[term + 1] - starts
            slots = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(
                int(lengths.sum())
            )
            posts = self.term_post[slots]
            weights = np.repeat(self.idf[term], lengths) * self.term_weight[slots]
            scores += np.bincount(posts, weights=weights, minlength=self.n_docs)
            matched[posts] = True
        for ids in phrases:
            docs, tf_count = self.phrase_frequency(ids)
            if not len(docs):
                continue
            tf = tf_count.astype(np.float64)
            idf = float(self.idf[ids].sum())
            scores[docs] += idf * (tf * (self.k1 + 1) / (tf + self.length_norm[docs]))
            matched[docs] = True
        return scores, matched

    # ----------------------------------------------------------------- ranking

    def padding_keys(self, query_key: int) -> np.ndarray:
        """One uint64 per post: the seeded random order of this query (ties and padding)."""
        return _splitmix64(self.doc_keys ^ np.uint64(query_key & 0xFFFFFFFFFFFFFFFF))

    def rank(
        self,
        lexicon: Sequence[str],
        seed: int,
        list_size: int | None = None,
        depth: int | None = None,
        scored: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Ranking:
        """The lexicon's ranked list (matching posts by score, then the rest), cut to
        ``list_size`` posts (None: the whole pool). With ``depth`` only the first ``depth`` posts
        are ordered and returned (the same posts as the whole list's first ``depth``), which
        saves sorting posts that no k reads. ``scored``: the lexicon's ``scores`` when the caller
        has them already."""
        scores, matched = self.scores(lexicon) if scored is None else scored
        keys = self.padding_keys(query_key(lexicon, seed))
        length = list_length(self.n_docs, list_size)
        wanted = length if depth is None else max(0, min(int(depth), length))
        hits = np.flatnonzero(matched)
        ranked = _smallest(hits, -scores[hits], keys[hits], wanted)
        if len(ranked) < wanted:  # padding: the non-matching posts in the query's random order
            rest = np.flatnonzero(~matched)
            ranked = np.concatenate(
                [ranked, _smallest(rest, keys[rest], rest, wanted - len(ranked))]
            )
        return Ranking(ranked, scores[ranked], int(len(hits)), length)


def _smallest(ids: np.ndarray, primary: np.ndarray, secondary: np.ndarray, count: int):
    """The ``count`` ids with the smallest (primary, secondary), in that order."""
    if count <= 0:
        return ids[:0]
    if len(ids) > count:
        kth = np.partition(primary, count - 1)[count - 1]
        keep = primary <= kth  # every tie with the count-th value, cut after sorting
        ids, primary, secondary = ids[keep], primary[keep], secondary[keep]
    return ids[np.lexsort((secondary, primary))[:count]]


def query_key(lexicon: Sequence[str], seed: int) -> int:
    """The 64-bit key of a query: from the run's seed and the canonical query text."""
    return hash64(f"{int(seed)}\x1f{query_text(lexicon)}")


# --------------------------------------------------------------------------- display


def matched_spans(text: str, lexicon: Sequence[str]) -> list[tuple[int, int]]:
    """Character spans (start, end) of every occurrence of a lexicon entry in ``text``, merged
    where they overlap, in text order (for highlighting retrieved posts)."""
    matches = list(WORD_RE.finditer(str(text)))
    words = [m.group(0).lower() for m in matches]
    spans = []
    for tokens in canonical_lexicon(lexicon):
        size = len(tokens)
        for i in range(len(words) - size + 1):
            if tuple(words[i : i + size]) == tokens:
                spans.append((matches[i].start(), matches[i + size - 1].end()))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def list_length(pool_size: int, list_size: int | None) -> int:
    """|R|: the whole pool, or the list size when the pool is larger."""
    return pool_size if list_size is None else min(pool_size, int(list_size))


def depth(k_fraction: float, length: int) -> int:
    """n = floor(f x |R|), computed as the release does (int of the product)."""
    return int(math.floor(k_fraction * length))
