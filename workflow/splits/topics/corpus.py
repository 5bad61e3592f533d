"""Tokens and corpus statistics of the BM25 topic splits: what a shard of the corpus contributes
(``ShardCounts``) and the statistics of their union (``CorpusStats``), which fix every score.

Tokens (shared by documents and queries) are ``splits.text.content_words``: lowercase runs of
Unicode letters and numbers without the English stop words. BM25 decomposes exactly over any cut of
the documents into consecutive shards: document counts, lengths and document frequencies are sums,
and the mean idf behind rank_bm25's epsilon floor is a sum in order of first appearance, so a shard
indexed with the summed statistics (``splits.topics.index.BM25Index``) scores exactly as one index
over the whole corpus.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from splits.arrays import unique_counts
from splits.text import word_frame

BUILD_BLOCK_DOCS = 200_000  # documents tokenised at once while building an index
COMBINE_PART_ROWS = 4_000_000  # shard vocabulary rows grouped at once into corpus statistics


# --------------------------------------------------------------------------- tokenisation


def _token_frame(texts: pl.Series) -> pl.DataFrame:
    """(doc, tok) rows in document order and, within a document, text order (``content_words``
    of each text; ``splits.text.word_frame``, checked against ``reference_word_frame``)."""
    return word_frame(texts, drop_stop_words=True)


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


def _vocabulary_frame(tokens: Sequence[str]) -> pl.DataFrame:
    """(tok, term) with term ids 0.. in the given order."""
    return pl.DataFrame(
        {"tok": pl.Series(tokens, dtype=pl.String), "term": np.arange(len(tokens), dtype=np.int64)}
    )


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
    keys, counts = unique_counts(term_of_token * block_len + local_doc)  # polars' radix sort
    term, doc = np.divmod(keys, block_len)
    return vocab, (
        term.astype(_id_dtype(vocab.height)),
        (doc + start).astype(_id_dtype(len(doc_len))),
        counts.astype(np.int32),
    )


def _idf(doc_freq: np.ndarray, n_docs: int) -> np.ndarray:
    """rank_bm25's idf with math.log (computed once per distinct document frequency)."""
    distinct, inverse = np.unique(doc_freq, return_inverse=True)
    values = np.array([math.log(n_docs - f + 0.5) - math.log(f + 0.5) for f in distinct.tolist()])
    return values[inverse] if len(distinct) else np.zeros(0)


def _id_dtype(largest: int) -> type:
    """int32 for ids and offsets below 2**31 - 1, else int64."""
    return np.int32 if largest < np.iinfo(np.int32).max else np.int64


@dataclass(frozen=True)
class QueryPostings:
    """A shard's postings of the query terms and every document's length in tokens: with the
    corpus statistics, all a BM25 index of the shard needs to score the queries
    (``BM25Index.from_postings``), so the shard is tokenised once, when it is counted, and not
    again when it is scored. ``terms``: the query terms they were taken for, sorted (a term absent
    from the postings occurs in no document of the shard); ``term`` (index into ``terms``),
    ``doc`` (the document's place in the shard) and ``tf`` (its count of the term): one posting
    each, sorted by (term, doc); ``doc_len`` in document order."""

    terms: tuple[str, ...]
    term: np.ndarray
    doc: np.ndarray
    tf: np.ndarray
    doc_len: np.ndarray

    @property
    def n_docs(self) -> int:
        return len(self.doc_len)


@dataclass(frozen=True)
class ShardCounts:
    """What one shard of a corpus contributes to the corpus's BM25 statistics: its number of
    documents, its total length in tokens, and its vocabulary (``tok``, ``df``: the number of
    its documents holding the term) in order of first appearance; ``n_nonempty``: its documents
    holding at least one token (Lucene's ``docCount``, the N of ``bm25.method: lucene``);
    ``postings``: where counted for query terms, the shard's postings of those terms."""

    n_docs: int
    total_len: int
    vocabulary: pl.DataFrame
    n_nonempty: int | None = None
    postings: QueryPostings | None = None

    @classmethod
    def from_texts(
        cls,
        texts: Sequence[str | None] | pl.Series,
        block_docs: int = BUILD_BLOCK_DOCS,
        query_terms: Iterable[str] | None = None,
    ) -> ShardCounts:
        """Counts of raw texts (the module's tokeniser), ``block_docs`` documents at a time;
        with ``query_terms``, the postings of those terms as well (``postings``)."""
        return cls._from_token_blocks(_token_blocks(texts, block_docs), len(texts), query_terms)

    @classmethod
    def from_token_lists(cls, corpus: Sequence[Sequence[str]]) -> ShardCounts:
        """Counts of pre-tokenised documents, taken as given."""
        return cls._from_token_blocks(_token_list_blocks(corpus), len(corpus))

    @classmethod
    def _from_token_blocks(
        cls,
        blocks: Iterable[tuple[int, pl.DataFrame]],
        n_docs: int,
        query_terms: Iterable[str] | None = None,
    ) -> ShardCounts:
        vocab = _vocabulary_frame([])
        doc_len = np.zeros(n_docs, dtype=np.int64)
        doc_freq = np.zeros(0, dtype=np.int64)
        query_term = np.zeros(0, dtype=np.int64)  # per vocabulary term: its query term, or -1
        terms = None if query_terms is None else tuple(sorted(set(query_terms)))
        if terms:
            query_terms_frame = pl.DataFrame({"tok": terms}).with_row_index("query_term")
        kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start, frame in blocks:
            if frame.height:
                known = vocab.height
                vocab, (term, doc, tf) = _block_postings(frame, start, vocab, doc_len)
                grown = np.bincount(term, minlength=vocab.height)
                grown[: len(doc_freq)] += doc_freq
                doc_freq = grown
                if terms:
                    query_term = _query_term_of(vocab, query_terms_frame, known, query_term)
                    of_posting = query_term[term]
                    keep = of_posting >= 0
                    kept.append((of_posting[keep], doc[keep], tf[keep]))
        vocabulary = vocab.select("tok").with_columns(pl.Series("df", doc_freq, dtype=pl.Int64))
        postings = None
        if terms is not None:
            postings = _query_postings(terms, kept, doc_len)
        return cls(
            n_docs=n_docs,
            total_len=int(doc_len.sum()),
            vocabulary=vocabulary,
            n_nonempty=int((doc_len > 0).sum()),
            postings=postings,
        )


def _query_term_of(
    vocab: pl.DataFrame, query_terms: pl.DataFrame, known: int, query_term: np.ndarray
) -> np.ndarray:
    """Per vocabulary term (id): its index among the query terms, or -1; ``query_term`` holds
    it for the first ``known`` terms, so only the terms the block added are looked up."""
    added = (
        vocab.slice(known)
        .join(query_terms, on="tok", how="left", maintain_order="left")
        .get_column("query_term")
        .fill_null(-1)
        .to_numpy()
        .astype(np.int64)
    )
    return np.concatenate([query_term, added])


def _query_postings(
    terms: tuple[str, ...],
    blocks: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    doc_len: np.ndarray,
) -> QueryPostings:
    """The blocks' (query term, doc, tf) postings sorted by (query term, doc)."""
    if not blocks:
        empty = np.zeros(0, dtype=np.uint32)
        return QueryPostings(terms, empty, empty, empty, doc_len)
    term, doc, tf = (np.concatenate(parts) for parts in zip(*blocks, strict=True))
    order = pl.Series(term * max(len(doc_len), 1) + doc).arg_sort().to_numpy()
    return QueryPostings(
        terms,
        term[order].astype(np.uint32),
        doc[order].astype(np.uint32),
        tf[order].astype(np.uint32),
        doc_len,
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
