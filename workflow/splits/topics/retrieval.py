"""Sparse BM25 Okapi index and the sharded BM25 topic splits.

Tokens (shared by documents and queries) are ``splits.text.content_words``: lowercase runs of
Unicode letters and numbers without the English stop words. A topic's query is the concatenation of
the tokens of all its keyword phrases, in order and with repetition ("basketball", "college
basketball" -> basketball, college, basketball), exactly what ``rank_bm25`` would score for that
token list.

Scoring is ``rank_bm25.BM25Okapi``'s definition, reproduced operation by operation so that scores
are bit-identical to it: idf(t) = log(N - df + 0.5) - log(df + 0.5); terms with a negative idf get
``epsilon * mean idf`` (the mean over the whole vocabulary); a query scores
sum over its tokens (with repetition) of idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)).
The per-(document, term) factor is precomputed in a CSC matrix (documents x terms), so a query
touches only the posting lists of its own tokens (no per-document Python loop).

Topic splits: the posts of users at or above each demographic's threshold percentile, each post
once and in post-id order, form one shared index (default ``--index shared``: idf and average
length are the same for every group, so scores compare across groups directly); ``--index
per_demographic`` builds one index per group instead. Either way ``norm_score`` = score / ((k1 +
1) * sum of the query tokens' idf in the index used), the fraction of the largest score the query
can reach there, which corrects for the different idf scales of separate indexes (with a shared
index it is the raw score divided by one constant per topic). The top ``--top-k`` posts (only
posts containing at least one of the topic's keywords as a phrase, ``splits.retrieval.phrases``; ties
broken by post id) are kept per (demographic, topic); a topic's rows are pooled over the
demographics and the bottom ``--drop-fraction`` by ``norm_score`` dropped (rows tied with the
lowest kept score are kept). Topics on which no pair of demographics has the posts one
quadruplet needs are then left out, with a run-health finding (``finish_splits``), and each
group's share of topic posts from its own seed subreddits is measured.

``topics.bm25`` picks another BM25 variant (``splits.retrieval.bm25``: lucene, atire, bm25l,
bm25+, with k1, b and delta); ``norm_score`` is then the score over the variant's largest
attainable score for the query. Each variant decomposes over shards like the default: the shards'
statistics also count their non-empty documents, the N of Lucene's idf and average length.

No index is built over all posts at once. BM25 decomposes exactly over any cut of the documents
into consecutive shards: document counts, lengths and document frequencies are sums, the mean idf
behind the epsilon floor is a sum in order of first appearance, and a shard scored with the
summed statistics scores exactly as the whole index; the top K over the union is the top K of the
shards' top Ks. The stage therefore runs as map -> reduce -> map -> reduce (``splits topic-splits
shard | stats | global-stats | score | merge``, one Snakemake job each, per shard for stats and
score), each holding one shard, and ``topic_splits`` / ``splits topic-splits run`` run the same
functions in one process.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import scipy.sparse as sp

from splits.config.definitions import Topic, load_topics
from splits.errors import ConfigError, InputError
from splits.io import ParquetAppender, read_json, write_json, write_parquet, write_text
from splits.retrieval.bm25 import (
    LUCENE,
    ROBERTSON,
    BM25Params,
    BM25Scorer,
    add_bm25_arguments,
    merge_clauses,
    params_from_args,
)
from splits.retrieval.phrases import PhraseMatches, match_phrases, phrase_tokens
from splits.text import POLARS_WORD_PATTERN, STOP_WORDS_SERIES, content_words, query_tokens

log = logging.getLogger(__name__)

BUILD_BLOCK_DOCS = 200_000  # documents tokenised at once while building an index
COMBINE_PART_ROWS = 4_000_000  # shard vocabulary rows grouped at once into corpus statistics

K1 = 1.5
B = 0.75
EPSILON = 0.25


# --------------------------------------------------------------------------- tokenisation


def _token_frame(texts: pl.Series) -> pl.DataFrame:
    """(doc, tok) rows in document order and, within a document, text order."""
    return (
        pl.DataFrame({"text": texts.cast(pl.String)})
        .with_row_index("doc")
        .select(
            pl.col("doc"),
            pl.col("text")
            .fill_null("")
            .str.to_lowercase()
            .str.extract_all(POLARS_WORD_PATTERN)
            .alias("tok"),
        )
        .explode("tok")
        .filter(pl.col("tok").is_not_null() & ~pl.col("tok").is_in(STOP_WORDS_SERIES.implode()))
    )


# --------------------------------------------------------------------------- index


@dataclass(frozen=True)
class ShardCounts:
    """What one shard of a corpus contributes to the corpus's BM25 statistics: its number of
    documents, its total length in tokens, and its vocabulary (``tok``, ``df``: the number of
    its documents holding the term) in order of first appearance; ``n_nonempty``: its documents
    holding at least one token (Lucene's ``docCount``, the N of ``bm25.method: lucene``)."""

    n_docs: int
    total_len: int
    vocabulary: pl.DataFrame
    n_nonempty: int | None = None

    @classmethod
    def from_texts(
        cls, texts: Sequence[str | None] | pl.Series, block_docs: int = BUILD_BLOCK_DOCS
    ) -> ShardCounts:
        """Counts of raw texts (the module's tokeniser), ``block_docs`` documents at a time."""
        return cls._from_token_blocks(_token_blocks(texts, block_docs), len(texts))

    @classmethod
    def from_token_lists(cls, corpus: Sequence[Sequence[str]]) -> ShardCounts:
        """Counts of pre-tokenised documents, taken as given."""
        return cls._from_token_blocks(_token_list_blocks(corpus), len(corpus))

    @classmethod
    def _from_token_blocks(
        cls, blocks: Iterable[tuple[int, pl.DataFrame]], n_docs: int
    ) -> ShardCounts:
        vocab = _vocabulary_frame([])
        doc_len = np.zeros(n_docs, dtype=np.int64)
        doc_freq = np.zeros(0, dtype=np.int64)
        for start, frame in blocks:
            if frame.height:
                vocab, (term, _, _) = _block_postings(frame, start, vocab, doc_len)
                grown = np.bincount(term, minlength=vocab.height)
                grown[: len(doc_freq)] += doc_freq
                doc_freq = grown
        vocabulary = vocab.select("tok").with_columns(pl.Series("df", doc_freq, dtype=pl.Int64))
        return cls(
            n_docs=n_docs,
            total_len=int(doc_len.sum()),
            vocabulary=vocabulary,
            n_nonempty=int((doc_len > 0).sum()),
        )


def _ranked_vocabulary(vocabulary: pl.LazyFrame, shard: int) -> pl.LazyFrame:
    """tok, df and ``first`` = shard * 2**32 + rank of first appearance within the shard (the
    ``rank`` column where the vocabulary has one, else its row order)."""
    if "rank" not in vocabulary.collect_schema().names():
        vocabulary = vocabulary.with_row_index("rank")
    return vocabulary.select(
        "tok",
        pl.col("df").cast(pl.Int64),
        first=pl.lit(shard << 32, dtype=pl.UInt64) + pl.col("rank").cast(pl.UInt64),
    )


@dataclass(frozen=True)
class CorpusStats:
    """The statistics that fix the BM25 scores of a corpus: document count, total length,
    vocabulary size, the mean idf over the whole vocabulary (before the epsilon floor; the
    floor is ``epsilon * average_idf``) and the document frequency of the terms an index over
    one of its shards needs (``doc_freq``: only terms that occur in the corpus); ``n_nonempty``
    the documents holding at least one token (Lucene's N; None for statistics written before it
    was counted)."""

    n_docs: int
    total_len: int
    n_terms: int
    average_idf: float
    doc_freq: dict[str, int]
    n_nonempty: int | None = None

    @property
    def avgdl(self) -> float:
        return self.total_len / self.n_docs  # rank_bm25's int / int

    @classmethod
    def combine(
        cls,
        shards: Sequence[ShardCounts],
        terms: Iterable[str],
        part_rows: int = COMBINE_PART_ROWS,
    ) -> CorpusStats:
        """The statistics of the union of ``shards`` (consecutive parts of the corpus, in
        corpus order), keeping the document frequency of ``terms``.

        Document frequencies and lengths are sums over shards; a term's place in the union's
        vocabulary is its first appearance (shard, then rank within the shard), which fixes the
        order of rank_bm25's float sum of idf behind the mean idf. The shards' vocabularies are
        grouped by term in parts (terms split by a hash into about ``part_rows`` vocabulary
        rows per part, one streaming group-by each), each part leaving only its terms' first
        appearance and document frequency (16 bytes per term); these are then put in order."""
        n_docs = sum(s.n_docs for s in shards)
        total_len = sum(s.total_len for s in shards)
        nonempty = [s.n_nonempty for s in shards]
        n_nonempty = None if None in nonempty else sum(nonempty)
        if n_docs == 0:
            raise ValueError("cannot compute BM25 statistics over zero documents")
        ranked = [_ranked_vocabulary(s.vocabulary.lazy(), i) for i, s in enumerate(shards)]
        rows = sum(v.select(pl.len()).collect().item() for v in ranked)
        n_parts = max(1, math.ceil(rows / max(1, part_rows)))
        wanted = pl.Series("tok", sorted(set(terms)), dtype=pl.String)
        firsts, doc_freqs, kept = [], [], []
        for part in range(n_parts):
            union = pl.concat(ranked)
            if n_parts > 1:
                union = union.filter(pl.col("tok").hash(seed=0) % n_parts == part)
            vocab = (
                union.group_by("tok")
                .agg(pl.col("df").sum(), pl.col("first").min())
                .collect(engine="streaming")
            )
            firsts.append(vocab.get_column("first").to_numpy())
            doc_freqs.append(vocab.get_column("df").to_numpy())
            kept.append(vocab.filter(pl.col("tok").is_in(wanted.implode())).select("tok", "df"))
            del vocab
        first = np.concatenate(firsts)
        doc_freq = np.concatenate(doc_freqs)[np.argsort(first, kind="stable")]
        del firsts, doc_freqs, first
        idf_raw = _idf(doc_freq.astype(np.int64), n_docs)
        n_terms = len(doc_freq)
        average_idf = float(np.cumsum(idf_raw)[-1]) / n_terms if n_terms else 0.0
        kept_terms = pl.concat(kept).sort("tok")
        return cls(
            n_docs=n_docs,
            total_len=total_len,
            n_terms=n_terms,
            average_idf=average_idf,
            doc_freq=dict(kept_terms.iter_rows()),
            n_nonempty=n_nonempty,
        )

    def to_json(self) -> dict:
        """A JSON-safe dict (floats written with repr, so they read back bit for bit)."""
        return {
            "n_docs": self.n_docs,
            "total_len": self.total_len,
            "n_terms": self.n_terms,
            "average_idf": self.average_idf,
            "doc_freq": self.doc_freq,
            "n_nonempty": self.n_nonempty,
        }

    @classmethod
    def from_json(cls, data: dict) -> CorpusStats:
        return cls(
            n_docs=int(data["n_docs"]),
            total_len=int(data["total_len"]),
            n_terms=int(data["n_terms"]),
            average_idf=float(data["average_idf"]),
            doc_freq={str(t): int(f) for t, f in data["doc_freq"].items()},
            n_nonempty=None if data.get("n_nonempty") is None else int(data["n_nonempty"]),
        )


@dataclass(frozen=True)
class BM25Index:
    """BM25 Okapi over ``n_docs`` documents. ``weights[d, t]`` = tf*(k1+1)/(tf + k1*(1-b+b*dl/avgdl))
    (CSC, documents x terms); ``idf[t]`` after the epsilon floor; ``vocabulary`` maps token -> t."""

    vocabulary: dict[str, int]
    idf: np.ndarray
    weights: sp.csc_matrix
    doc_len: np.ndarray
    avgdl: float
    average_idf: float
    k1: float = K1
    b: float = B
    epsilon: float = EPSILON
    #: another BM25 variant (``splits.retrieval.bm25``): ``weights`` then hold raw tf
    scorer: BM25Scorer | None = None

    @property
    def n_docs(self) -> int:
        return int(self.doc_len.shape[0])

    # ----------------------------------------------------------------- construction

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str | None] | pl.Series,
        k1: float = K1,
        b: float = B,
        epsilon: float = EPSILON,
        block_docs: int = BUILD_BLOCK_DOCS,
        stats: CorpusStats | None = None,
        params: BM25Params | None = None,
    ) -> BM25Index:
        """Index raw texts with the module's tokeniser (vectorised with polars), ``block_docs``
        documents at a time so that memory holds one block's tokens, not the corpus's.

        With ``stats`` (the statistics of a corpus these texts are one shard of), the index
        scores the texts exactly as one index over that whole corpus would: idf, the epsilon
        floor and the average length come from ``stats``, and the vocabulary is the terms of
        ``stats.doc_freq`` (other tokens count towards document lengths only).

        ``params`` (a ``BM25Params``) selects the BM25 variant; k1, b and epsilon then come
        from it (robertson: the same index as without, with its k1, b and epsilon)."""
        return cls._from_token_blocks(
            _token_blocks(texts, block_docs), len(texts), k1, b, epsilon, stats, params
        )

    @classmethod
    def from_token_lists(
        cls,
        corpus: Sequence[Sequence[str]],
        k1: float = K1,
        b: float = B,
        epsilon: float = EPSILON,
        stats: CorpusStats | None = None,
        params: BM25Params | None = None,
    ) -> BM25Index:
        """Index pre-tokenised documents as given (no stop-word removal), like
        ``BM25Okapi(corpus)``; ``stats`` and ``params`` as in ``from_texts``."""
        return cls._from_token_blocks(
            _token_list_blocks(corpus), len(corpus), k1, b, epsilon, stats, params
        )

    @classmethod
    def _from_token_blocks(
        cls,
        blocks: Iterable[tuple[int, pl.DataFrame]],
        n_docs: int,
        k1: float,
        b: float,
        epsilon: float,
        stats: CorpusStats | None = None,
        params: BM25Params | None = None,
    ) -> BM25Index:
        """The index from ``(first doc, (doc, tok) rows)`` blocks in document order, each
        block's doc ids local (from 0). Term ids follow first appearance over the whole corpus
        (rank_bm25's dict order, which fixes the float sum behind the epsilon floor), or the
        order of ``stats.doc_freq``. Each block leaves only its postings (term, doc, tf: 12
        bytes each), sorted by (term, doc); they are then placed straight into CSC order (12
        bytes each) with one cursor per term, so the peak is at most 24 bytes per posting plus
        one block's tokens."""
        if n_docs == 0:
            raise ValueError("cannot build a BM25 index over zero documents")
        fixed = stats is not None
        vocab = _vocabulary_frame(list(stats.doc_freq) if fixed else [])
        doc_len = np.zeros(n_docs, dtype=np.int64)
        postings: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start, frame in blocks:
            if frame.height:
                vocab, block = _block_postings(frame, start, vocab, doc_len, extend=not fixed)
                postings.append(block)
        n_terms = vocab.height
        doc_freq = np.zeros(n_terms, dtype=np.int64)
        for term, _, _ in postings:
            doc_freq += np.bincount(term, minlength=n_terms)
        if stats is None:
            avgdl = int(doc_len.sum()) / n_docs
            idf_raw = _idf(doc_freq, n_docs)
            average_idf = float(np.cumsum(idf_raw)[-1]) / n_terms if n_terms else 0.0
        else:
            avgdl = stats.avgdl
            idf_raw = _idf(np.fromiter(stats.doc_freq.values(), np.int64, n_terms), stats.n_docs)
            average_idf = stats.average_idf
        indptr = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(doc_freq, out=indptr[1:])
        index_dtype = _id_dtype(max(int(indptr[-1]), n_docs))
        scorer = None
        if params is not None:  # robertson too: its k1, b and epsilon
            k1, b, epsilon = params.k1, params.b, params.epsilon
        if params is not None and params.method != ROBERTSON:
            if stats is not None and params.method == LUCENE and stats.n_nonempty is None:
                raise ConfigError(
                    "bm25 lucene over shards needs the count of non-empty documents, which "
                    "these corpus statistics do not hold (re-run the topic statistics)"
                )
            scorer = BM25Scorer(params, doc_len, doc_freq)
            if stats is not None:
                scorer.set_statistics(
                    doc_len,
                    stats.n_nonempty if params.method == LUCENE else stats.n_docs,
                    stats.total_len,
                    np.fromiter(stats.doc_freq.values(), np.int64, n_terms),
                )
        # the same float operations, in the same order, as rank_bm25's get_scores
        length_norm = (
            k1 * (1 - b + b * doc_len / avgdl) if avgdl > 0 else np.full(n_docs, k1 * (1 - b))
        )
        indices = np.empty(int(indptr[-1]), dtype=index_dtype)
        weight = np.empty(int(indptr[-1]), dtype=np.float64)
        cursor = indptr[:-1].copy()  # next free slot of each term
        postings.reverse()
        while postings:  # blocks in doc order, so docs ascend within each term's slots
            term, doc, tf_count = postings.pop()
            if not len(term):
                continue
            run_start = np.flatnonzero(np.r_[True, term[1:] != term[:-1]])
            run_len = np.diff(np.r_[run_start, len(term)])
            slot = cursor[term] + np.arange(len(term)) - np.repeat(run_start, run_len)
            cursor[term[run_start]] += run_len
            tf = tf_count.astype(np.float64)
            indices[slot] = doc
            weight[slot] = tf if scorer is not None else tf * (k1 + 1) / (tf + length_norm[doc])
        idf = np.where(idf_raw < 0, epsilon * average_idf, idf_raw)
        weights = sp.csc_matrix(
            (weight, indices, indptr.astype(index_dtype)), shape=(n_docs, n_terms), copy=False
        )
        return cls(
            vocabulary=dict(zip(vocab.get_column("tok").to_list(), range(n_terms), strict=True)),
            idf=idf,
            weights=weights,
            doc_len=doc_len,
            avgdl=avgdl,
            average_idf=average_idf,
            k1=k1,
            b=b,
            epsilon=epsilon,
            scorer=scorer,
        )

    # ----------------------------------------------------------------- queries

    def term_ids(self, query: Sequence[str]) -> np.ndarray:
        """Ids of the query's known tokens, in order, with repetition (unknown tokens score 0)."""
        ids = [self.vocabulary.get(t) for t in query]
        return np.asarray([i for i in ids if i is not None], dtype=np.int64)

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        """Dense scores of every document, equal to ``BM25Okapi.get_scores(query)``."""
        ids = self.term_ids(query)
        scores = np.zeros(self.n_docs)
        if self.scorer is not None:  # BM25L, BM25+: what every document gets
            scores += self.scorer.constant(_merged_terms(ids))
        docs, doc_scores = self.score_matching(ids)
        scores[docs] = doc_scores
        return scores

    def score_matching(self, term_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(doc ids ascending, scores) of the documents holding at least one of the terms.

        The posting lists of the query's terms are gathered in query order and summed per
        document with ``np.bincount``, which adds in input order: each document's score is
        ((0 + term1) + term2) + ..., the same float operations as rank_bm25's loop over the
        query (documents without a term add exactly 0 there). Other variants: ``_score_variant``."""
        if self.scorer is not None:
            return self._score_variant(term_ids)
        indptr = self.weights.indptr
        starts = indptr[term_ids]
        lengths = indptr[term_ids + 1] - starts
        total = int(lengths.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
        positions = np.arange(total, dtype=np.int64) + offsets
        rows = self.weights.indices[positions]
        contributions = np.repeat(self.idf[term_ids], lengths) * self.weights.data[positions]
        docs, inverse = np.unique(rows, return_inverse=True)
        return docs.astype(np.int64), np.bincount(
            inverse, weights=contributions, minlength=len(docs)
        )

    def _score_variant(self, term_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``score_matching`` for the scorer's variant: a repeated query term is one clause with
        a boost (Lucene's rewrite of repeated SHOULD clauses), clause scores from the term's
        (documents, tf) and summed per document in float64 (Lucene: then cast to float)."""
        indptr = self.weights.indptr
        rows, parts = [], []
        clauses = _merged_terms(term_ids)
        for ids, boost in clauses:
            start, stop = int(indptr[ids[0]]), int(indptr[ids[0] + 1])
            if stop > start:
                docs = self.weights.indices[start:stop].astype(np.int64)
                tf = self.weights.data[start:stop]
                rows.append(docs)
                parts.append(self.scorer.clause_scores(ids, docs, tf, boost).astype(np.float64))
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        docs, inverse = np.unique(np.concatenate(rows), return_inverse=True)
        summed = np.bincount(inverse, weights=np.concatenate(parts), minlength=len(docs))
        return docs.astype(np.int64), self.scorer.finish(summed) + self.scorer.constant(clauses)

    def search(
        self, query: Sequence[str], k: int, doc_mask: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` documents containing at least one query token (restricted to ``doc_mask``),
        as (doc ids, scores) ordered by score descending, then doc id ascending."""
        docs, scores = self.score_matching(self.term_ids(query))
        if doc_mask is not None:
            keep = doc_mask[docs]
            docs, scores = docs[keep], scores[keep]
        return top_k(docs, scores, k)

    def max_score(self, query: Sequence[str]) -> float:
        """The supremum of a document's score for ``query``: (k1 + 1) * sum of its tokens' idf."""
        ids = self.term_ids(query)
        if self.scorer is not None:
            return self.scorer.max_score(ids) if len(ids) else 0.0
        return float((self.k1 + 1) * self.idf[ids].sum()) if len(ids) else 0.0

    def term_docs(self, token: str) -> tuple[np.ndarray, np.ndarray]:
        """(documents ascending, term frequency) of one indexed token (empty if unknown). The
        frequency is read back from the stored weight tf (k1 + 1) / (tf + k1 (1 - b + b dl /
        avgdl)) and rounded (exact for any realistic count)."""
        term = self.vocabulary.get(token)
        if term is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        start, end = self.weights.indptr[term], self.weights.indptr[term + 1]
        docs = self.weights.indices[start:end].astype(np.int64)
        weight = self.weights.data[start:end]
        if self.scorer is not None:  # another BM25 variant stores tf itself
            return docs, np.rint(weight).astype(np.int64)
        norm = (
            self.k1 * (1 - self.b + self.b * self.doc_len[docs] / self.avgdl)
            if self.avgdl > 0
            else np.full(len(docs), self.k1 * (1 - self.b))
        )
        return docs, np.rint(weight * norm / (self.k1 + 1 - weight)).astype(np.int64)

    def docs_with_all(self, tokens: Sequence[str]) -> np.ndarray | None:
        """Documents (ascending) holding every one of ``tokens`` (indexed content words): the
        candidates of a phrase. None for no tokens (nothing restricts the candidates)."""
        if not tokens:
            return None
        docs = None
        for token in sorted(set(tokens), key=lambda t: self._df(t)):
            found = self.term_docs(token)[0]
            docs = found if docs is None else np.intersect1d(docs, found, assume_unique=True)
            if not len(docs):
                break
        return docs

    def _df(self, token: str) -> int:
        term = self.vocabulary.get(token)
        return 0 if term is None else int(self.weights.indptr[term + 1] - self.weights.indptr[term])


def match_keywords(
    index: BM25Index, texts: Sequence[str | None] | pl.Series, phrases: Sequence[str]
) -> PhraseMatches:
    """Which documents of ``index`` (``texts``: its documents' raw texts, in index order)
    contain each keyword phrase as consecutive words (``splits.retrieval.phrases``), and how often.

    The index's posting lists give each phrase's candidates, the documents holding all of its
    content words; only the candidates of phrases of several words (or of stop words) are read
    again for positions, all phrases at once in one ``PositionalIndex``. A one-word phrase whose
    word is an indexed content word is answered from its posting list alone. A phrase without
    content words (only stop words, e.g. "UN" or "to be") takes as candidates the documents whose
    words include all of its words (one scan of the texts' words). The index must hold the
    phrases' content words (an index built with ``stats`` holds only the topics' terms)."""
    if len(texts) != index.n_docs:
        raise ValueError(f"{len(texts)} texts for an index of {index.n_docs} documents")
    direct: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    word_lists: pl.Series | None = None
    positional: list[str] = []
    candidates: list[np.ndarray] = []
    for phrase in dict.fromkeys(phrases):
        tokens, content = phrase_tokens(phrase), content_words(phrase)
        if len(tokens) == 1 and list(tokens) == content:
            direct[phrase] = index.term_docs(content[0])
            continue
        positional.append(phrase)
        if tokens:
            found = index.docs_with_all(content)
            if found is None:  # only stop words: the documents holding all of them, by a scan
                if word_lists is None:
                    series = texts if isinstance(texts, pl.Series) else pl.Series(list(texts))
                    word_lists = (
                        series.cast(pl.String)
                        .fill_null("")
                        .str.to_lowercase()
                        .str.extract_all(POLARS_WORD_PATTERN)
                    )
                held = pl.Series(np.ones(index.n_docs, dtype=bool))
                for token in set(tokens):
                    held = held & word_lists.list.contains(token)
                found = np.flatnonzero(held.to_numpy())
            candidates.append(found)
    if positional:
        union = np.unique(np.concatenate(candidates)) if candidates else np.zeros(0, np.int64)
        read = match_phrases(texts, positional, candidates=union)
        direct.update({p: read.of(p) for p in positional})
    return PhraseMatches(
        phrases=tuple(phrases),
        docs=tuple(direct[p][0] for p in phrases),
        tf=tuple(direct[p][1] for p in phrases),
        n_docs=index.n_docs,
    )


def _merged_terms(term_ids: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Query term ids as (one-term clause, boost = repetitions), in first-appearance order."""
    merged = merge_clauses([(int(t),) for t in term_ids])
    return [(np.array(ids, dtype=np.int64), boost) for ids, boost in merged]


def _idf(doc_freq: np.ndarray, n_docs: int) -> np.ndarray:
    """rank_bm25's idf with math.log (computed once per distinct document frequency)."""
    distinct, inverse = np.unique(doc_freq, return_inverse=True)
    values = np.array([math.log(n_docs - f + 0.5) - math.log(f + 0.5) for f in distinct.tolist()])
    return values[inverse] if len(distinct) else np.zeros(0)


def _id_dtype(largest: int) -> type:
    """int32 for ids and offsets below 2**31 - 1, else int64."""
    return np.int32 if largest < np.iinfo(np.int32).max else np.int64


def _vocabulary_frame(tokens: Sequence[str]) -> pl.DataFrame:
    """(tok, term) with term ids 0.. in the given order."""
    return pl.DataFrame(
        {"tok": pl.Series(tokens, dtype=pl.String), "term": np.arange(len(tokens), dtype=np.int64)}
    )


def _token_list_blocks(corpus: Sequence[Sequence[str]]) -> list[tuple[int, pl.DataFrame]]:
    """One block of (doc, tok) rows of pre-tokenised documents."""
    docs = np.repeat(np.arange(len(corpus), dtype=np.uint32), [len(d) for d in corpus])
    tokens = [str(t) for d in corpus for t in d]
    frame = pl.DataFrame(
        {"doc": pl.Series(docs, dtype=pl.UInt32), "tok": pl.Series(tokens, dtype=pl.String)}
    )
    return [(0, frame)]


def _token_blocks(
    texts: Sequence[str | None] | pl.Series, block_docs: int = BUILD_BLOCK_DOCS
) -> Iterator[tuple[int, pl.DataFrame]]:
    """``(first doc, (doc, tok) rows)`` of ``block_docs`` texts at a time."""
    series = texts if isinstance(texts, pl.Series) else pl.Series("text", list(texts), pl.String)
    block_docs = max(int(block_docs), 1)
    for start in range(0, len(series), block_docs):
        yield start, _token_frame(series.slice(start, block_docs))


def _block_postings(
    frame: pl.DataFrame,
    start: int,
    vocab: pl.DataFrame,
    doc_len: np.ndarray,
    extend: bool = True,
) -> tuple[pl.DataFrame, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """One block of (local doc, tok) rows: its documents' lengths added into ``doc_len``, the
    vocabulary extended by the block's new terms (in first-appearance order, after every
    earlier term; with ``extend`` false, tokens outside the vocabulary are dropped instead) and
    its postings (term, global doc, tf) sorted by (term, doc)."""
    local_doc = frame.get_column("doc").to_numpy().astype(np.int64)
    block_len = int(local_doc.max()) + 1
    doc_len[start : start + block_len] += np.bincount(local_doc, minlength=block_len)
    if extend:
        first_seen = frame.get_column("tok").unique(maintain_order=True)
        new = first_seen.filter(~first_seen.is_in(vocab.get_column("tok").implode()))
        if new.len():
            added = pl.DataFrame({"tok": new}).with_row_index("term", offset=vocab.height)
            vocab = pl.concat([vocab, added.select("tok", pl.col("term").cast(pl.Int64))])
    else:
        frame = frame.filter(pl.col("tok").is_in(vocab.get_column("tok").implode()))
        local_doc = frame.get_column("doc").to_numpy().astype(np.int64)
    term_of_token = (
        frame.select("tok")
        .join(vocab, on="tok", how="left", maintain_order="left")
        .get_column("term")
        .to_numpy()
    )
    keys, counts = np.unique(term_of_token * block_len + local_doc, return_counts=True)
    term, doc = np.divmod(keys, block_len)
    return vocab, (
        term.astype(_id_dtype(vocab.height)),
        (doc + start).astype(_id_dtype(len(doc_len))),
        counts.astype(np.int32),
    )


def top_k(doc_ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best (doc id, score) pairs: score descending, doc id ascending among ties."""
    if k <= 0 or len(doc_ids) == 0:
        return doc_ids[:0], scores[:0]
    if len(doc_ids) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth  # every tie with the k-th score, cut after sorting
        doc_ids, scores = doc_ids[keep], scores[keep]
    order = np.lexsort((doc_ids, -scores))[:k]
    return doc_ids[order], scores[order]


# --------------------------------------------------------------------------- topic splits

SHARED = "shared"  # the one index group of ``--index shared``
INDEX_MODES = (SHARED, "per_demographic")
DEFAULT_SHARD_POSTS = 1_000_000
DEFAULT_SHARD_MB = 512.0
READ_BATCH_ROWS = 65_536  # rows of a demographic's posts file read at once
DEMOGRAPHIC_POST_COLUMNS = ("post_id", "author", "subreddit", "text", "percentile")
SHARD_SCHEMA = {
    "post_id": pl.String,
    "author": pl.String,
    "subreddit": pl.String,
    "text": pl.String,
    "demographics": pl.List(pl.String),
}
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
TOPIC_POSTS_COLUMNS = [
    "post_id",
    "author",
    "subreddit",
    "text",
    "demographic",
    "category",
    "topic",
    "score",
    "norm_score",
    "rank",
]


@dataclass(frozen=True)
class TopicSplitParams:
    top_k: int = 3000
    drop_fraction: float = 0.25
    index: str = SHARED  # or "per_demographic"
    shard_posts: int = DEFAULT_SHARD_POSTS
    shard_mb: float = DEFAULT_SHARD_MB
    sample_k: int = 42  # sampling.k: a topic needs k/2 + 3 posts per group of one pair
    seed_subreddit_posts: str = "keep"  # or "exclude": a group's own seed subreddits left out
    bm25: BM25Params = BM25Params()  # topics.bm25: the BM25 variant the posts are ranked with

    @property
    def shard_bytes(self) -> int:
        return max(1, int(self.shard_mb * 2**20))


def check_params(params: TopicSplitParams) -> None:
    if params.top_k < 1:
        raise ConfigError("topics.top_k: must be at least 1")
    if not 0 <= params.drop_fraction < 1:
        raise ConfigError("topics.drop_fraction: must be in [0, 1)")
    if params.index not in INDEX_MODES:
        raise ConfigError(
            f"topics.index: unknown value {params.index!r} (shared or per_demographic)"
        )
    if params.shard_posts < 1:
        raise ConfigError("topics.shard_posts: must be at least 1")
    if not params.shard_mb > 0:
        raise ConfigError("topics.shard_mb: must be positive")
    if params.sample_k < 2 or params.sample_k % 2:
        raise ConfigError("sampling.k: must be an even number of at least 2")
    if params.seed_subreddit_posts not in SEED_POSTS_MODES:
        raise ConfigError(
            f"topics.seed_subreddit_posts: unknown value {params.seed_subreddit_posts!r} "
            "(keep or exclude)"
        )


# --- map 0: the union of the demographics' posts, cut into shards


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
        self._file = pq.ParquetFile(path)
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
    """(demographic, post) rows -> one row per post, demographics listed, in post-id order."""
    return (
        rows.group_by("post_id")
        .agg(
            pl.col("author").first(),
            pl.col("subreddit").first(),
            pl.col("text").first(),
            pl.col("demographic").unique().sort().alias("demographics"),
        )
        .sort("post_id")
        .select(list(SHARD_SCHEMA))
        .cast(SHARD_SCHEMA)
    )


def iter_union(
    posts_files: dict[str, str | Path],
    thresholds: dict[str, float],
    batch_rows: int = READ_BATCH_ROWS,
    exclude: dict[str, Sequence[str]] | None = None,
) -> Iterator[pl.DataFrame]:
    """The union of the demographics' posts at or above their thresholds: one row per post, in
    post-id order, with the sorted list of demographics holding it, as consecutive frames.

    A k-way merge of the demographics' files, each read ``batch_rows`` rows at a time: every
    round takes from each file the rows up to the smallest last id among the files that may
    still hold more, so memory holds a few batches whatever the corpus size. ``exclude``: per
    demographic, subreddits whose posts are left out of its rows (its own seed subreddits with
    ``topics.seed_subreddit_posts: exclude``; names compared case-insensitively)."""
    streams = []
    for key in sorted(posts_files):
        if key not in thresholds:
            raise ConfigError(f"thresholds: no threshold for demographic {key!r}")
        value = thresholds[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"thresholds: threshold of {key!r} is not a number ({value!r})")
        streams.append(
            _SortedPosts(
                key, Path(posts_files[key]), value, batch_rows, (exclude or {}).get(key, ())
            )
        )
    if not streams:
        raise ConfigError("topic splits: no demographic posts given")
    while True:
        for stream in streams:
            stream.fill()
        live = [s for s in streams if s.buffer.height]
        if not live:
            break
        open_ends = [s.buffer.get_column("post_id")[-1] for s in live if not s.exhausted]
        bound = min(open_ends) if open_ends else None
        yield _union_rows(pl.concat([s.take(bound) for s in live]))
    for stream in streams:
        if stream.kept:
            log.info(
                "%s: %d posts at or above the threshold %s",
                stream.key,
                stream.kept,
                stream.threshold,
            )
        else:
            log.warning(
                "%s: no posts of users at or above the threshold %s", stream.key, stream.threshold
            )
        if stream.repeated:
            log.warning("%s: %d repeated post ids dropped", stream.key, stream.repeated)
        if stream.excluded:
            log.info(
                "%s: %d posts in its own seed subreddits left out (topics.seed_subreddit_posts)",
                stream.key,
                stream.excluded,
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


def write_shards(pieces: Iterable[tuple[int, pl.DataFrame]], out_dir: str | Path) -> dict:
    """Write each shard of ``cut_shards`` as ``out_dir/<00000>.parquet``, piece by piece (memory
    holds one piece), and the plan (``plan.json``: shards in order with posts, text bytes,
    first and last post id); returns the plan."""
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
    if not plan:
        raise ConfigError(
            "topic splits: no posts of users at or above the demographics' thresholds"
        )
    result = {"shards": plan, "posts": sum(s["posts"] for s in plan)}
    write_json(result, out / "plan.json")
    log.info("%d posts in %d shards", result["posts"], len(plan))
    return result


# --- map 1: per-shard statistics; reduce 1: the corpus statistics of every index group


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


# --- map 2: per-shard scoring and top-K; reduce 2: merge, rank and the pooled cut


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
    bm25: BM25Params | None = None,
) -> pl.DataFrame:
    """The shard's top ``top_k_posts`` posts per (demographic, topic), scored with the corpus
    statistics and the BM25 variant ``bm25`` (``topics.bm25``): exactly the scores (and, in
    post-id order, the ties) of one index over all shards. ``norm_score`` = score / the largest
    score the query can reach (robertson: (k1 + 1) * the sum of the query tokens' idf;
    ``BM25Scorer.max_score`` for the other variants)."""
    bm25 = bm25 or BM25Params()
    rows: list[pl.DataFrame] = []
    for group, docs in index_groups(shard, index).items():
        if group not in stats:
            raise ConfigError(f"global statistics: no index group {group!r} (re-run the stats)")
        index_ = BM25Index.from_texts(docs.get_column("text"), stats=stats[group], params=bm25)
        post_ids = docs.get_column("post_id").to_numpy()
        if index == SHARED:
            member_lists = docs.get_column("demographics")
            keys = member_lists.explode().drop_nulls().unique().sort().to_list()
            masks = {k: member_lists.list.contains(k).to_numpy() for k in keys}
        else:
            masks = {group: None}
        rows += _search_rows(index_, docs.get_column("text"), post_ids, masks, topics, top_k_posts)
    return pl.concat(rows) if rows else pl.DataFrame(schema=HIT_SCHEMA)


def best_hits(hits: Iterable[pl.DataFrame | pl.LazyFrame], top_k_posts: int) -> pl.DataFrame:
    """The top ``top_k_posts`` rows per (demographic, topic) over the shards' hits (score
    descending, post id ascending among ties), folded one shard at a time: the top K of the
    union is the top K of the shards' top Ks."""
    best = pl.DataFrame(schema=HIT_SCHEMA)
    for frame in hits:
        both = pl.concat([best, frame.lazy().select(list(HIT_SCHEMA)).collect()])
        best = (
            both.sort(["score", "post_id"], descending=[True, False])
            .group_by(["demographic", "topic"], maintain_order=True)
            .head(top_k_posts)
            .select(list(HIT_SCHEMA))
        )
    return best


def drop_bottom(topic_rows: pl.DataFrame, fraction: float) -> pl.DataFrame:
    """Per topic, drop the bottom ``fraction`` of the pooled rows by norm_score (ties with the
    lowest kept score are kept)."""
    if fraction <= 0:
        return topic_rows
    return (
        topic_rows.with_columns(
            pl.col("norm_score")
            .sort()
            .gather((pl.len() * fraction).floor().cast(pl.Int64).clip(0, pl.len() - 1))
            .first()
            .over("topic")
            .alias("_cut")
        )
        .filter(pl.col("norm_score") >= pl.col("_cut"))
        .drop("_cut")
    )


def topic_posts_table(
    best: pl.DataFrame, posts: pl.LazyFrame, topics: Sequence[Topic], drop_fraction: float
) -> pl.DataFrame:
    """The topic_posts table: ``best`` ranked within (demographic, topic), the pooled bottom
    ``drop_fraction`` of each topic dropped, and author, subreddit and text of the kept posts
    looked up in ``posts`` (the shards)."""
    ranked = best.sort(["score", "post_id"], descending=[True, False]).with_columns(
        pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(["demographic", "topic"]).alias("rank")
    )
    kept = drop_bottom(ranked, drop_fraction)
    meta = (
        posts.select("post_id", "author", "subreddit", "text")
        .join(kept.select("post_id").unique().lazy(), on="post_id", how="semi")
        .unique(subset="post_id", keep="first")
        .collect(engine="streaming")
    )
    topic_order = pl.DataFrame({"topic": [t.topic for t in topics]}).with_row_index("_topic_order")
    return (
        kept.join(meta, on="post_id", how="left")
        .join(topic_order, on="topic", how="left")
        .sort("_topic_order", "demographic", "rank")
        .select(TOPIC_POSTS_COLUMNS)
    )


# --- after the merge: what each (topic, demographic) got, topics too small to sample, seed share

STAGE = "topics"
#: a group's topic posts above this share from its own seed subreddits get a health finding
SEED_SHARE_WARN = 0.8
RETRIEVAL_SCHEMA = {
    "category": pl.String,
    "topic": pl.String,
    "demographic": pl.String,
    "retrieved": pl.Int64,  # posts holding one of the topic's keywords as a phrase
    "pool": pl.Int64,  # min(retrieved, top_k): the top K kept before pooling
    "short_of_top_k": pl.Int64,  # top_k - pool
    "dropped_pooled": pl.Int64,  # pool posts removed by the pooled bottom-drop_fraction cut
    "kept": pl.Int64,  # pool - dropped_pooled
    "sampled_pairs": pl.Int64,  # pairs of the topic with enough posts for one quadruplet
    "topic_kept": pl.Boolean,  # false: the topic is left out of the dataset
}
SEED_SHARE_SCHEMA = {
    "demographic": pl.String,
    "topic_posts": pl.Int64,
    "from_seed_subreddits": pl.Int64,
    "seed_share": pl.Float64,
    "seed_subreddit_posts": pl.String,  # keep | exclude (topics.seed_subreddit_posts)
}
SEED_POSTS_MODES = ("keep", "exclude")


def retrieved_counts(hits: Iterable[pl.DataFrame | pl.LazyFrame]) -> pl.DataFrame:
    """(demographic, topic, retrieved): the posts holding one of the topic's keywords, summed
    over the shards' hits (each shard's count is on every one of its hit rows)."""
    parts = [
        frame.lazy()
        .group_by("demographic", "topic")
        .agg(pl.col("matching").first().cast(pl.Int64))
        .collect()
        for frame in hits
    ]
    if not parts:
        return pl.DataFrame(
            schema={"demographic": pl.String, "topic": pl.String, "retrieved": pl.Int64}
        )
    return (
        pl.concat(parts)
        .group_by("demographic", "topic")
        .agg(pl.col("matching").sum().alias("retrieved"))
    )


def posts_needed(sample_k: int) -> int:
    """Posts one group needs on a topic for one quadruplet: k/2 calibration + the sample posts."""
    from splits.config.definitions import SAMPLE_SIZE

    return sample_k // 2 + SAMPLE_SIZE


def pair_pools(
    table: pl.DataFrame,
    demographics: Sequence[str],
    members: dict[str, frozenset[str]] | None = None,
) -> dict[str, list[tuple[str, str, int, int]]]:
    """Per topic: (A, B, |pool of A|, |pool of B|) for every pair of demographics once the posts
    of dual members are left out, as sampling leaves them out: a post of A is left out of the
    pair when its author is at or above B's threshold too (``members``: post id -> the
    demographics whose threshold its author reaches, the shards' lists) or, without
    ``members``, when it is listed under B as well."""
    out: dict[str, list[tuple[str, str, int, int]]] = {}
    for (topic,), rows in table.group_by("topic"):
        ids = {
            key: set(rows.filter(pl.col("demographic") == key).get_column("post_id").to_list())
            for key in demographics
        }

        def pool(a: str, b: str, ids: dict[str, set[str]] = ids) -> int:
            if members is None:
                return len(ids[a] - ids[b])
            return sum(b not in members.get(p, ()) for p in ids[a] - ids[b])

        out[str(topic)] = [
            (a, b, pool(a, b), pool(b, a))
            for i, a in enumerate(demographics)
            for b in demographics[i + 1 :]
        ]
    return out


def sampled_pairs(
    table: pl.DataFrame,
    demographics: Sequence[str],
    need: int,
    members: dict[str, frozenset[str]] | None = None,
) -> dict[str, int]:
    """Per topic: the pairs of demographics whose pools (:func:`pair_pools`) both hold at least
    ``need`` posts."""
    return {
        topic: sum(n_a >= need and n_b >= need for _, _, n_a, n_b in pools)
        for topic, pools in pair_pools(table, demographics, members).items()
    }


def post_members(posts: pl.LazyFrame, table: pl.DataFrame) -> dict[str, frozenset[str]]:
    """Post id -> the demographics whose threshold its author reaches (the shards' lists), for
    the posts of ``table``."""
    frame = (
        posts.select("post_id", "demographics")
        .join(table.select("post_id").unique().lazy(), on="post_id", how="semi")
        .unique(subset="post_id", keep="first")
        .collect(engine="streaming")
    )
    return {p: frozenset(g or ()) for p, g in frame.iter_rows()}


def retrieval_table(
    retrieved: pl.DataFrame,
    best: pl.DataFrame,
    table: pl.DataFrame,
    topics: Sequence[Topic],
    demographics: Sequence[str],
    top_k_posts: int,
    pairs: dict[str, int],
) -> pl.DataFrame:
    """One row per (topic, demographic): ``RETRIEVAL_SCHEMA``."""
    grid = (
        topics_frame(topics)
        .select("category", "topic")
        .join(
            pl.DataFrame({"demographic": list(demographics)}, schema={"demographic": pl.String}),
            how="cross",
        )
    )
    pool = best.group_by("demographic", "topic").agg(pl.len().cast(pl.Int64).alias("pool"))
    kept = table.group_by("demographic", "topic").agg(pl.len().cast(pl.Int64).alias("kept"))
    frame = (
        grid.join(retrieved, on=["demographic", "topic"], how="left", maintain_order="left")
        .join(pool, on=["demographic", "topic"], how="left", maintain_order="left")
        .join(kept, on=["demographic", "topic"], how="left", maintain_order="left")
        .with_columns(pl.col("retrieved", "pool", "kept").fill_null(0))
    )
    return (
        frame.with_columns(
            (top_k_posts - pl.col("pool")).alias("short_of_top_k"),
            (pl.col("pool") - pl.col("kept")).alias("dropped_pooled"),
            pl.col("topic")
            .replace_strict(pairs, default=0, return_dtype=pl.Int64)
            .alias("sampled_pairs"),
        )
        .with_columns((pl.col("sampled_pairs") > 0).alias("topic_kept"))
        .select([pl.col(c).cast(t) for c, t in RETRIEVAL_SCHEMA.items()])
    )


def seed_share_table(
    table: pl.DataFrame, seeds: dict[str, Sequence[str]], demographics: Sequence[str], mode: str
) -> pl.DataFrame:
    """Per demographic: its topic posts, how many come from its own seed subreddits (names
    compared case-insensitively) and their share."""
    rows = []
    for key in demographics:
        own = table.filter(pl.col("demographic") == key)
        wanted = pl.Series([s.lower() for s in seeds.get(key, ())], dtype=pl.String)
        from_seed = int(
            own.get_column("subreddit").str.to_lowercase().is_in(wanted.implode()).sum()
        )
        rows.append(
            {
                "demographic": key,
                "topic_posts": own.height,
                "from_seed_subreddits": from_seed,
                "seed_share": from_seed / own.height if own.height else None,
                "seed_subreddit_posts": mode,
            }
        )
    return pl.DataFrame(rows, schema=SEED_SHARE_SCHEMA)


def no_samplable_topic_error(
    table: pl.DataFrame,
    demographics: Sequence[str],
    members: dict[str, frozenset[str]] | None,
    sample_k: int,
) -> InputError:
    """One line when every topic is too small to sample: k, what a split needs, and the pools of
    the (topic, pair) that came closest, without the posts of members of both groups."""
    need = posts_needed(sample_k)
    best = (-1, 0, "", "", "")
    for topic, pools in pair_pools(table, demographics, members).items():
        for a, b, n_a, n_b in pools:
            best = max(best, (min(n_a, n_b), max(n_a, n_b), topic, a, b))
    smaller, larger, topic, a, b = best
    where = f" ({topic!r}, {a}/{b})" if topic else ""
    return InputError(
        f"no topic can be sampled: sampling.k = {sample_k} needs two disjoint pools of k/2 + 3 = "
        f"{need} posts in a (topic, A, B) split; the largest are {larger} and {max(smaller, 0)} "
        f"posts{where}, posts by members of both groups not counted; lower sampling.k, raise "
        "topics.top_k, give the topics keywords that occur in the groups' posts or give the "
        "groups more distinct members"
    )


@dataclass(frozen=True)
class TopicSplitResult:
    """The stage's outputs: the topic posts of the kept topics, the per (topic, demographic)
    retrieval table, the per-demographic seed-subreddit share and the run-health findings."""

    topic_posts: pl.DataFrame
    retrieval: pl.DataFrame
    seed_share: pl.DataFrame
    findings: list


def finish_splits(
    table: pl.DataFrame,
    best: pl.DataFrame,
    retrieved: pl.DataFrame,
    topics: Sequence[Topic],
    demographics: Sequence[str],
    params: TopicSplitParams,
    seeds: dict[str, Sequence[str]] | None = None,
    members: dict[str, frozenset[str]] | None = None,
) -> TopicSplitResult:
    """Drop the topics on which no pair of demographics has the posts one quadruplet needs
    (``posts_needed(params.sample_k)`` each, without the posts of authors above both groups'
    thresholds: ``sampled_pairs``), and measure what each (topic, demographic) got and each
    group's seed-subreddit share."""
    from splits.health import Finding

    demographics = sorted(demographics)
    need = posts_needed(params.sample_k)
    pairs = sampled_pairs(table, demographics, need, members)
    retrieval = retrieval_table(retrieved, best, table, topics, demographics, params.top_k, pairs)
    findings = []
    for topic in topics:
        rows = retrieval.filter(pl.col("topic") == topic.topic)
        if rows.get_column("topic_kept").any():
            continue
        counts = ", ".join(
            f"{r['demographic']} {r['retrieved']} retrieved/{r['kept']} kept"
            for r in rows.iter_rows(named=True)
        )
        findings.append(
            Finding(
                stage=STAGE,
                code="topic_too_few_posts",
                subject=f"topic {topic.topic}",
                message=(
                    f"left out of the dataset: no pair of groups has {need} posts each (k/2 = "
                    f"{params.sample_k // 2} calibration + 3 sample posts) holding one of its "
                    "keywords as a phrase, posts by members of both groups not counted "
                    f"({counts}; top_k {params.top_k})"
                ),
                fix=(
                    "give the topic keywords that occur in the groups' posts (see "
                    "topics/topic_retrieval.csv), or lower sampling.k"
                ),
            )
        )
    dropped = [t.topic for t in topics if not pairs.get(t.topic, 0)]
    kept_table = table.filter(~pl.col("topic").is_in(pl.Series(dropped, dtype=pl.String).implode()))
    share = seed_share_table(kept_table, seeds or {}, demographics, params.seed_subreddit_posts)
    for row in share.iter_rows(named=True):
        if row["seed_share"] is not None and row["seed_share"] > SEED_SHARE_WARN:
            findings.append(
                Finding(
                    stage=STAGE,
                    code="topic_posts_from_seed_subreddits",
                    subject=f"group {row['demographic']}",
                    message=(
                        f"{row['seed_share']:.0%} of its topic posts ({row['from_seed_subreddits']:,}"
                        f" of {row['topic_posts']:,}) come from its own seed subreddits, so telling "
                        "the groups apart partly means recognising the subreddit"
                    ),
                    fix=(
                        "set topics.seed_subreddit_posts: exclude to compare the groups outside "
                        "their own communities (or keep it, as the paper does, and read the "
                        "scores as partly subreddit recognition)"
                    ),
                )
            )
    return TopicSplitResult(kept_table, retrieval, share, findings)


def _split(
    shards: Sequence[pl.DataFrame | pl.LazyFrame], topics: Sequence[Topic], params: TopicSplitParams
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, frozenset[str]]]:
    """(topic posts after the pooled cut, the top K per (demographic, topic), retrieved counts,
    the demographics of each topic post's author)."""
    check_params(params)

    def load(shard: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
        return shard.lazy().collect()

    counts = [shard_counts(load(s), params.index) for s in shards]
    stats = global_statistics(counts, topic_terms(topics))
    hits = [
        score_shard(load(s), stats, params.index, topics, params.top_k, params.bm25) for s in shards
    ]
    best = best_hits(hits, params.top_k)
    posts = pl.concat([s.lazy() for s in shards]) if shards else pl.LazyFrame(schema=SHARD_SCHEMA)
    table = topic_posts_table(best, posts, topics, params.drop_fraction)
    return table, best, retrieved_counts(hits), post_members(posts, table)


def split_shards_result(
    shards: Sequence[pl.DataFrame | pl.LazyFrame],
    topics: Sequence[Topic],
    params: TopicSplitParams = TopicSplitParams(),
    demographics: Sequence[str] | None = None,
    seeds: dict[str, Sequence[str]] | None = None,
) -> TopicSplitResult:
    """Every step of the stage over ``shards`` (consecutive, in post-id order) in this process,
    one shard in memory at a time: the same functions the pipeline's jobs run, up to the
    stage's outputs (``finish_splits``). ``demographics`` defaults to those in the shards."""
    table, best, retrieved, members = _split(shards, topics, params)
    if demographics is None:
        demographics = sorted(
            {
                d
                for s in shards
                for d in s.lazy().select(pl.col("demographics").explode()).collect().to_series()
                if d is not None
            }
        )
    return finish_splits(table, best, retrieved, topics, demographics, params, seeds, members)


def split_shards(
    shards: Sequence[pl.DataFrame | pl.LazyFrame],
    topics: Sequence[Topic],
    params: TopicSplitParams = TopicSplitParams(),
) -> pl.DataFrame:
    """The topic posts of ``split_shards_result`` before topics too small to sample are left
    out (every topic's retrieved posts, after the pooled cut)."""
    return _split(shards, topics, params)[0]


def _in_memory_shards(
    posts: pl.DataFrame, params: TopicSplitParams, seeds: dict[str, Sequence[str]] | None
) -> list[pl.DataFrame]:
    check_params(params)
    if params.seed_subreddit_posts == "exclude":
        posts = posts.filter(~from_own_seeds(seeds or {}))
    if posts.is_empty():
        raise ConfigError(
            "topic splits: no posts of users at or above the demographics' thresholds"
        )
    pieces = cut_shards([union_posts(posts)], params.shard_posts, params.shard_bytes)
    return shard_frames(pieces)


def topic_splits(
    posts: pl.DataFrame, topics: Sequence[Topic], params: TopicSplitParams = TopicSplitParams()
) -> pl.DataFrame:
    """The topic_posts table (before topics too small to sample are left out) from in-memory
    (demographic, post) rows (post_id, author, subreddit, text, demographic), cut into shards
    by ``params`` like the pipeline's."""
    return split_shards(_in_memory_shards(posts, params, None), topics, params)


def topic_splits_result(
    posts: pl.DataFrame,
    topics: Sequence[Topic],
    params: TopicSplitParams = TopicSplitParams(),
    seeds: dict[str, Sequence[str]] | None = None,
) -> TopicSplitResult:
    """``split_shards_result`` from in-memory (demographic, post) rows; ``seeds``: each
    demographic's seed subreddits (the seed share, and ``seed_subreddit_posts: exclude``)."""
    demographics = sorted(posts.get_column("demographic").unique().to_list())
    shards = _in_memory_shards(posts, params, seeds)
    return split_shards_result(shards, topics, params, demographics, seeds)


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


def topics_frame(topics: Sequence[Topic]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "category": [t.category for t in topics],
            "topic": [t.topic for t in topics],
            "keywords": [list(t.keywords) for t in topics],
        },
        schema={"category": pl.String, "topic": pl.String, "keywords": pl.List(pl.String)},
    )


def counts_table(
    topic_posts: pl.DataFrame, topics: Sequence[Topic], demographics: Sequence[str]
) -> pl.DataFrame:
    """Posts per topic (rows) and demographic (columns) after the cut, with totals."""
    counts = topic_posts.group_by("topic", "demographic").len()
    table = topics_frame(topics).select("category", "topic")
    for key in demographics:
        table = table.join(
            counts.filter(pl.col("demographic") == key).select("topic", pl.col("len").alias(key)),
            on="topic",
            how="left",
            maintain_order="left",
        )
    table = table.with_columns(pl.col(list(demographics)).fill_null(0).cast(pl.Int64))
    return table.with_columns(pl.sum_horizontal(list(demographics)).alias("total"))


# --------------------------------------------------------------------------- command line


def parse_key_paths(values: Sequence[str]) -> dict[str, str]:
    """``key=path`` pairs, or paths ``.../<key>/posts.parquet`` (the key is the folder name)."""
    out = {}
    for value in values:
        key, sep, path = value.partition("=")
        if not sep:
            path, key = value, Path(value).parent.name
        if key in out:
            raise ConfigError(f"--demographic-posts: demographic {key!r} given twice")
        out[key] = path
    return out


def read_thresholds(path: str | Path) -> dict:
    if not Path(path).exists():
        raise ConfigError(f"{path}: thresholds file does not exist")
    try:
        return read_json(path)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not valid JSON ({err})") from err


def _existing(flag: str, paths: Sequence[str]) -> list[Path]:
    for path in paths:
        if not Path(path).exists():
            raise ConfigError(f"{flag}: {path} does not exist")
    return [Path(p) for p in paths]


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


def write_outputs(result: TopicSplitResult, topics, demographics, args: argparse.Namespace) -> None:
    from splits.health import log_findings, write_findings

    table = result.topic_posts
    write_parquet(topics_frame(topics), args.out_topics)
    write_parquet(table, args.out_topic_posts)
    write_text(counts_table(table, topics, demographics).write_csv(), args.out_counts)
    if args.out_retrieval:
        write_text(result.retrieval.write_csv(), args.out_retrieval)
    if args.out_seed_share:
        write_text(result.seed_share.write_csv(), args.out_seed_share)
    log_findings(result.findings, log)
    if args.out_health:
        write_findings(args.out_health, result.findings)
    log.info(
        "%d topic posts over %d topics and %d demographics",
        len(table),
        table.get_column("topic").n_unique(),
        len(demographics),
    )


def read_seeds(path: str | None) -> dict[str, tuple[str, ...]]:
    """Seed subreddits per demographic key from the demographics file (none without a file)."""
    if not path:
        return {}
    from splits.config.definitions import load_demographics

    return {d.key: d.seed_subreddits for d in load_demographics(path)}


def _add_params(parser: argparse.ArgumentParser, *names: str) -> None:
    if "index" in names:
        parser.add_argument(
            "--index",
            choices=INDEX_MODES,
            default=SHARED,
            help="shared: one BM25 index over every demographic's posts; per_demographic: one index each",
        )
    if "shards" in names:
        parser.add_argument(
            "--shard-posts", type=int, default=DEFAULT_SHARD_POSTS, help="posts per shard, at most"
        )
        parser.add_argument(
            "--shard-mb",
            type=float,
            default=DEFAULT_SHARD_MB,
            help="MiB of text per shard, at most",
        )
    if "top_k" in names:
        parser.add_argument(
            "--top-k", type=int, default=3000, help="posts kept per (demographic, topic)"
        )
    if "drop" in names:
        parser.add_argument(
            "--drop-fraction", type=float, default=0.25, help="pooled bottom share dropped"
        )
    if "seeds" in names:
        parser.add_argument(
            "--demographics-file",
            help="demographics file (seed subreddits: the seed share and --seed-subreddit-posts)",
        )
        parser.add_argument(
            "--seed-subreddit-posts",
            choices=SEED_POSTS_MODES,
            default="keep",
            help="keep: a group's posts in its own seed subreddits are topic posts (the paper); "
            "exclude: they are left out of its topic pools",
        )
    if "sample_k" in names:
        parser.add_argument(
            "--k",
            type=int,
            default=42,
            help="sampling.k: a topic is kept if a pair has k/2 + 3 posts in each group",
        )
    if "outputs" in names:
        parser.add_argument("--out-topics", required=True, help="topics.parquet")
        parser.add_argument("--out-topic-posts", required=True, help="topic_posts.parquet")
        parser.add_argument("--out-counts", required=True, help="counts CSV (topic x demographic)")
        parser.add_argument(
            "--out-retrieval", help="per (topic, demographic): retrieved, pool, cut (CSV)"
        )
        parser.add_argument("--out-seed-share", help="per demographic: seed-subreddit share (CSV)")
        parser.add_argument("--out-health", help="run-health findings of the stage (JSON)")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    posts_help = "D_d posts files (results/demographics/<d>/posts.parquet), sorted by post_id"
    shard = sub.add_parser("shard", help="union of the D_d above threshold, cut into shards")
    shard.add_argument(
        "--demographic-posts", nargs="+", required=True, metavar="[KEY=]FILE", help=posts_help
    )
    shard.add_argument(
        "--thresholds", required=True, help="thresholds.json {demographic: percentile}"
    )
    _add_params(shard, "shards", "seeds")
    shard.add_argument("--out-dir", required=True, help="writes <00000>.parquet ... and plan.json")

    stats = sub.add_parser("stats", help="one shard's BM25 statistics")
    stats.add_argument("--shard", required=True, help="a shard file of `shard`")
    _add_params(stats, "index")
    stats.add_argument("--out-vocab", required=True, help="vocabulary Parquet (group, tok, df)")
    stats.add_argument("--out-counts", required=True, help="documents and lengths (JSON)")

    reduce = sub.add_parser("global-stats", help="the corpus statistics over every shard")
    reduce.add_argument(
        "--vocab", nargs="+", required=True, help="stats vocabularies, in shard order"
    )
    reduce.add_argument("--counts", nargs="+", required=True, help="stats counts, in shard order")
    reduce.add_argument(
        "--topics-file", required=True, help="topic list (our YAML or release JSON)"
    )
    reduce.add_argument("--out", required=True, help="global statistics (JSON)")

    score = sub.add_parser("score", help="one shard's top K per (demographic, topic)")
    score.add_argument("--shard", required=True, help="the posts shard to score (Parquet)")
    score.add_argument(
        "--global-stats",
        required=True,
        help="corpus statistics of all shards (the stats step's output)",
    )
    score.add_argument("--topics-file", required=True, help="the run's topic list (YAML or JSON)")
    _add_params(score, "top_k")
    add_bm25_arguments(score)
    score.add_argument("--out", required=True, help="the shard's hits (Parquet)")

    merge = sub.add_parser("merge", help="top K over the shards, ranks, the pooled cut")
    merge.add_argument("--hits", nargs="+", required=True, help="every shard's hits")
    merge.add_argument("--shards", nargs="+", required=True, help="every shard file (texts)")
    merge.add_argument("--demographics", nargs="+", required=True, help="demographic keys")
    merge.add_argument("--topics-file", required=True, help="the run's topic list (YAML or JSON)")
    _add_params(merge, "top_k", "drop", "seeds", "sample_k", "outputs")

    whole = sub.add_parser("run", help="every step in this process (shards in a temporary folder)")
    whole.add_argument(
        "--demographic-posts", nargs="+", required=True, metavar="[KEY=]FILE", help=posts_help
    )
    whole.add_argument(
        "--thresholds",
        required=True,
        help="self-ID thresholds (thresholds.json of the demographics stage)",
    )
    whole.add_argument("--topics-file", required=True, help="the run's topic list (YAML or JSON)")
    _add_params(whole, "index", "shards", "top_k", "drop", "seeds", "sample_k", "outputs")
    add_bm25_arguments(whole)


def _params(args: argparse.Namespace) -> TopicSplitParams:
    params = TopicSplitParams(
        top_k=getattr(args, "top_k", 3000),
        drop_fraction=getattr(args, "drop_fraction", 0.25),
        index=getattr(args, "index", SHARED),
        shard_posts=getattr(args, "shard_posts", DEFAULT_SHARD_POSTS),
        shard_mb=getattr(args, "shard_mb", DEFAULT_SHARD_MB),
        sample_k=getattr(args, "k", 42),
        seed_subreddit_posts=getattr(args, "seed_subreddit_posts", "keep"),
        bm25=params_from_args(args),
    )
    check_params(params)
    return params


def _shard_files(args: argparse.Namespace, out_dir: Path, params: TopicSplitParams) -> dict:
    posts_files = parse_key_paths(args.demographic_posts)
    exclude = None
    if params.seed_subreddit_posts == "exclude":
        if not args.demographics_file:
            raise ConfigError("--seed-subreddit-posts exclude needs --demographics-file")
        exclude = read_seeds(args.demographics_file)
    union = iter_union(posts_files, read_thresholds(args.thresholds), exclude=exclude)
    return write_shards(cut_shards(union, params.shard_posts, params.shard_bytes), out_dir)


def run(args: argparse.Namespace) -> int:
    params = _params(args)
    if args.action == "shard":
        _shard_files(args, Path(args.out_dir), params)
    elif args.action == "stats":
        (shard,) = _existing("--shard", [args.shard])
        counts = shard_counts(pl.read_parquet(shard), params.index)
        write_counts(counts, params.index, args.out_vocab, args.out_counts)
    elif args.action == "global-stats":
        vocab = _existing("--vocab", args.vocab)
        files = _existing("--counts", args.counts)
        if len(vocab) != len(files):
            raise ConfigError("--vocab and --counts: one of each per shard, in the same order")
        parts = [read_counts(v, c) for v, c in zip(vocab, files, strict=True)]
        modes = {mode for mode, _ in parts}
        if len(modes) != 1:
            raise ConfigError(f"--counts: shards computed for different indexes {sorted(modes)}")
        terms = topic_terms(load_topics(args.topics_file))
        stats = global_statistics([counts for _, counts in parts], terms)
        write_global_stats(stats, modes.pop(), args.out)
    elif args.action == "score":
        (shard,) = _existing("--shard", [args.shard])
        index, stats = read_global_stats(*_existing("--global-stats", [args.global_stats]))
        topics = load_topics(args.topics_file)
        hits = score_shard(pl.read_parquet(shard), stats, index, topics, params.top_k, params.bm25)
        write_parquet(hits, args.out)
    elif args.action == "merge":
        topics = load_topics(args.topics_file)
        hit_files = _existing("--hits", args.hits)
        best = best_hits((pl.scan_parquet(p) for p in hit_files), params.top_k)
        retrieved = retrieved_counts(pl.scan_parquet(p) for p in hit_files)
        posts = pl.scan_parquet(_existing("--shards", args.shards))
        table = topic_posts_table(best, posts, topics, params.drop_fraction)
        demographics = sorted(args.demographics)
        seeds = read_seeds(args.demographics_file)
        members = post_members(posts, table)
        result = finish_splits(table, best, retrieved, topics, demographics, params, seeds, members)
        if topics and result.topic_posts.height == 0:  # a dataset of nothing is no success
            raise no_samplable_topic_error(table, demographics, members, params.sample_k)
        write_outputs(result, topics, demographics, args)
    else:  # run
        topics = load_topics(args.topics_file)
        out_dir = Path(args.out_topic_posts).parent
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".topic-shards-", dir=out_dir) as tmp:
            plan = _shard_files(args, Path(tmp), params)
            shards = [pl.scan_parquet(Path(tmp) / f"{s['shard']}.parquet") for s in plan["shards"]]
            demographics = sorted(parse_key_paths(args.demographic_posts))
            seeds = read_seeds(args.demographics_file)
            result = split_shards_result(shards, topics, params, demographics, seeds)
        write_outputs(result, topics, demographics, args)
    return 0
