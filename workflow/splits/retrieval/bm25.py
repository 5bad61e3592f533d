"""BM25 variants: one scorer for the sparse index (topic splits) and the positional pool index
(hypotheses), and Anserini's ranking and displayed scores.

Methods (``bm25.method`` in the config; k1, b and delta configurable, each method's defaults
below). For a clause c (a term, or a phrase whose frequency tf is its number of occurrences and
whose idf is the sum of its terms' idfs, as Lucene scores a ``PhraseQuery``), a document of
length dl and avgdl the mean length:

- ``robertson`` (k1 = 1.5, b = 0.75, epsilon = 0.25): ``rank_bm25.BM25Okapi``, bit for bit:
  idf = ln(N - df + 0.5) - ln(df + 0.5), negative idf replaced by epsilon x the mean idf of the
  vocabulary; score = idf tf (k1 + 1) / (tf + k1 (1 - b + b dl / avgdl)). Computed by the
  indexes themselves (``splits.topics.index``, ``splits.hypotheses.retrieval``), unchanged.
- ``lucene`` (k1 = 0.9, b = 0.4: Anserini's defaults, which the 2026 release runs): Lucene 9's
  ``BM25Similarity`` exactly, in float32: idf = (float) ln(1 + (N - df + 0.5) / (df + 0.5)) with
  N the documents that hold at least one token (Lucene's ``docCount``; Anserini does not index
  empty documents); a phrase's idf = (float) the double sum of its terms' float idfs; avgdl =
  (float) (total tokens / N); dl is stored as one byte (``SmallFloat.intToByte4``), and decoded
  through a 256-entry table; normInverse[i] = 1f / (k1 ((1 - b) + b L[i] / avgdl)); a clause
  scores w - w / (1 + tf normInverse) with w = boost x idf (a clause repeated m times in the
  query is one clause with boost m, as Lucene's ``BooleanQuery`` rewrite merges them); a
  document's score is the double sum of its clauses' float scores, cast to float. No (k1 + 1)
  factor (Lucene 8+).
- ``atire`` (k1 = 1.5, b = 0.75): idf = ln(N / df), score = idf tf (k1 + 1) / (tf + k1 (1 - b
  + b dl / avgdl)).
- ``bm25l`` (k1 = 1.5, b = 0.75, delta = 0.5): idf = ln((N + 1) / (df + 0.5)), c = tf / (1 - b
  + b dl / avgdl), score = idf (k1 + 1) (c + delta) / (k1 + c + delta).
- ``bm25+`` (k1 = 1.5, b = 0.75, delta = 0.5): idf = ln((N + 1) / df), score = idf ((k1 + 1) tf
  / (k1 (1 - b + b dl / avgdl) + tf) + delta).

The last three follow Kamphuis et al. (ECIR 2020) as ``bm25s`` implements them (float64 here).
BM25L and BM25+ give a document that lacks a clause idf x tfc(0) for it; a document's score is
therefore the sum over its matching clauses of idf (tfc(tf) - tfc(0)) plus the query's constant
sum of idf tfc(0) (what ``bm25s`` returns), and only documents matching a clause are retrieved.

``anserini_order`` and ``anserini_display`` reproduce what pyserini's ``LuceneSearcher.search``
returns: hits by float score descending, ties by external document id ascending, and the
``hit.score`` Anserini shows: each score rounded to 4 decimals (in double), then within a run of
scores less than 1e-4 apart 1e-6 subtracted per rank (``ScoreTiesAdjusterReranker``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from splits.errors import ConfigError

ROBERTSON, LUCENE, ATIRE, BM25L, BM25PLUS = "robertson", "lucene", "atire", "bm25l", "bm25+"
METHODS = (ROBERTSON, LUCENE, ATIRE, BM25L, BM25PLUS)
#: each method's own (k1, b): what a null ``k1`` / ``b`` in the config stands for (the
#: schema's ``topics.bm25`` and ``hypotheses.retrieval`` keys hold every other default)
DEFAULT_K1_B = {
    ROBERTSON: (1.5, 0.75),
    LUCENE: (0.9, 0.4),
    ATIRE: (1.5, 0.75),
    BM25L: (1.5, 0.75),
    BM25PLUS: (1.5, 0.75),
}
#: rank_bm25's floor of negative idfs (x the mean idf): part of the robertson method, no setting
EPSILON = 0.25

F32 = np.float32


@dataclass(frozen=True)
class BM25Params:
    """A BM25 variant and its parameters (from ``topics.bm25`` or ``hypotheses.retrieval``);
    ``k1`` and ``b`` None take the method's own (``DEFAULT_K1_B``)."""

    method: str
    k1: float | None
    b: float | None
    delta: float

    def __post_init__(self):
        if self.method not in METHODS:
            raise ConfigError(
                f"bm25.method: unknown value {self.method!r} (one of {', '.join(METHODS)})"
            )
        k1, b = DEFAULT_K1_B[self.method]
        object.__setattr__(self, "k1", float(k1 if self.k1 is None else self.k1))
        object.__setattr__(self, "b", float(b if self.b is None else self.b))
        if not self.k1 >= 0:
            raise ConfigError("bm25.k1: must be at least 0")
        if not 0 <= self.b <= 1:
            raise ConfigError("bm25.b: must be in [0, 1]")
        if not self.delta >= 0:
            raise ConfigError("bm25.delta: must be at least 0")

    @property
    def epsilon(self) -> float:
        """The robertson method's idf floor factor (``EPSILON``)."""
        return EPSILON


# --------------------------------------------------------------------------- Lucene SmallFloat


def _long_to_int4(i: int) -> int:
    if i < 0:
        raise ValueError("only non-negative values")
    num_bits = i.bit_length()
    if num_bits < 4:
        return i
    shift = num_bits - 4
    encoded = (i >> shift) & 0x07
    return encoded | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits = i & 0x07
    shift = (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_NUM_FREE_VALUES = 255 - _long_to_int4(2**31 - 1)


def int_to_byte4(i: int) -> int:
    """Lucene's ``SmallFloat.intToByte4`` (as an unsigned byte 0..255): exact below 24, then
    4 significant bits (lengths are rounded down)."""
    if i < _NUM_FREE_VALUES:
        return int(i)
    return _NUM_FREE_VALUES + _long_to_int4(int(i) - _NUM_FREE_VALUES)


def byte4_to_int(b: int) -> int:
    """Lucene's ``SmallFloat.byte4ToInt`` of an unsigned byte."""
    if b < _NUM_FREE_VALUES:
        return int(b)
    return _NUM_FREE_VALUES + _int4_to_long(int(b) - _NUM_FREE_VALUES)


#: Lucene's ``BM25Similarity.LENGTH_TABLE``: the document length each norm byte stands for
LENGTH_TABLE = np.array([byte4_to_int(i) for i in range(256)], dtype=F32)
#: the smallest length of each byte, for encoding many lengths at once with searchsorted
_BYTE_FLOOR = np.array([byte4_to_int(i) for i in range(256)], dtype=np.int64)


def norm_bytes(doc_len: np.ndarray) -> np.ndarray:
    """``intToByte4`` of every length (vectorised: a length encodes to the largest byte whose
    decoded length is at most it)."""
    return (np.searchsorted(_BYTE_FLOOR, np.asarray(doc_len, np.int64), side="right") - 1).astype(
        np.int64
    )


def lucene_idf(doc_freq, n_docs: int) -> np.ndarray:
    """(float) ln(1 + (N - df + 0.5) / (df + 0.5)), per document frequency."""
    df = np.asarray(doc_freq, dtype=np.float64)
    return np.log(1 + (n_docs - df + 0.5) / (df + 0.5)).astype(F32)


def lucene_avgdl(total_len: int, n_docs: int) -> np.float32:
    return F32(total_len / float(n_docs)) if n_docs else F32(1.0)


def lucene_norm_cache(avgdl: float, k1: float, b: float) -> np.ndarray:
    """1f / (k1 ((1 - b) + b L[i] / avgdl)) for the 256 norm bytes, in float32."""
    k1_, b_, avg = F32(k1), F32(b), F32(avgdl)
    with np.errstate(divide="ignore"):
        return (F32(1) / (k1_ * ((F32(1) - b_) + b_ * LENGTH_TABLE / avg))).astype(F32)


# --------------------------------------------------------------------------- the scorer


class BM25Scorer:
    """Clause scores of one index for a non-Robertson method.

    Built from every document's length (tokens) and every term's document frequency; clauses
    are scored from (documents, tf) pairs that the index finds (posting lists for a term,
    positions for a phrase), so one scorer serves term and phrase indexes alike."""

    def __init__(self, params: BM25Params, doc_len: np.ndarray, doc_freq: np.ndarray):
        if params.method == ROBERTSON:
            raise ValueError("robertson is scored by the indexes themselves")
        self.params = params
        self.method = params.method
        self.k1, self.b, self.delta = params.k1, params.b, params.delta
        doc_len = np.asarray(doc_len, dtype=np.int64)
        doc_freq = np.asarray(doc_freq, dtype=np.int64)
        n_docs = int((doc_len > 0).sum()) if self.method == LUCENE else len(doc_len)
        self.set_statistics(doc_len, n_docs, int(doc_len.sum()), doc_freq)

    def set_statistics(
        self, doc_len: np.ndarray, n_docs: int, total_len: int, doc_freq: np.ndarray
    ) -> None:
        """Statistics of the corpus the index belongs to (N, total length, df per term) and
        the lengths of the index's own documents."""
        k1, b = self.k1, self.b
        if self.method == LUCENE:
            # Lucene's docCount: documents holding at least one token (Anserini skips empties)
            self.n_docs = int(n_docs)
            self.avgdl = lucene_avgdl(total_len, self.n_docs)
            self.idf = lucene_idf(doc_freq, self.n_docs)
            self.norm_inverse = lucene_norm_cache(self.avgdl, k1, b)[norm_bytes(doc_len)]
            return
        self.n_docs = int(n_docs)
        self.avgdl = total_len / n_docs if n_docs else 0.0
        df = doc_freq.astype(np.float64)
        n = float(n_docs)
        with np.errstate(divide="ignore"):
            if self.method == ATIRE:
                self.idf = np.log(n / df)
            elif self.method == BM25L:
                self.idf = np.log((n + 1) / (df + 0.5))
            else:  # bm25+
                self.idf = np.log((n + 1) / df)
        # the length normalisation 1 - b + b dl / avgdl
        self.length = (
            (1 - b + b * doc_len / self.avgdl) if self.avgdl > 0 else np.full(len(doc_len), 1 - b)
        )

    # ----------------------------------------------------------------- clauses

    def clause_idf(self, term_ids: np.ndarray) -> float:
        """A clause's idf: its term's, or the sum of a phrase's terms' (Lucene: float sum in
        double, then float)."""
        if self.method == LUCENE:
            total = 0.0
            for value in self.idf[term_ids].tolist():  # in order, in double
                total += value
            return F32(total)
        return float(self.idf[term_ids].sum())

    def tf_component(self, docs: np.ndarray, tf: np.ndarray) -> np.ndarray:
        """tfc(tf) - tfc(0) per document (non-Lucene methods)."""
        tf = np.asarray(tf, dtype=np.float64)
        k1, delta = self.k1, self.delta
        norm = self.length[docs]
        if self.method == ATIRE:
            return tf * (k1 + 1) / (tf + k1 * norm)
        if self.method == BM25L:
            c = tf / norm
            return (k1 + 1) * (c + delta) / (k1 + c + delta) - (k1 + 1) * delta / (k1 + delta)
        return (k1 + 1) * tf / (k1 * norm + tf)  # bm25+: (... + delta) - delta

    def zero_component(self) -> float:
        """tfc(0): what a document lacking a clause gets for it, per unit of idf."""
        if self.method == BM25L:
            return (self.k1 + 1) * self.delta / (self.k1 + self.delta)
        if self.method == BM25PLUS:
            return self.delta
        return 0.0

    def clause_scores(
        self, term_ids: np.ndarray, docs: np.ndarray, tf: np.ndarray, boost: int = 1
    ) -> np.ndarray:
        """The clause's score in each of ``docs`` (those where it occurs ``tf`` times)."""
        idf = self.clause_idf(term_ids)
        if self.method == LUCENE:
            weight = F32(boost) * idf
            x = F32(1) + np.asarray(tf, dtype=F32) * self.norm_inverse[docs]
            return (weight - weight / x).astype(F32)
        return boost * idf * self.tf_component(docs, tf)

    def constant(self, clauses: Sequence[tuple[np.ndarray, int]]) -> float:
        """The score every document gets from the clauses it lacks (BM25L, BM25+), for the
        query's clauses (term ids, boost); matching documents' clause scores are the excess."""
        zero = self.zero_component()
        if not zero:
            return 0.0
        return float(sum(boost * self.clause_idf(ids) * zero for ids, boost in clauses))

    def max_score(self, term_ids: np.ndarray) -> float:
        """The supremum of a document's score for a bag of term clauses (tf to infinity)."""
        idf = sum(float(self.clause_idf(ids)) for (ids, _) in _single_terms(term_ids))
        if self.method == LUCENE:
            return idf
        if self.method == BM25PLUS:
            return (self.k1 + 1 + self.delta) * idf
        return (self.k1 + 1) * idf

    def finish(self, summed: np.ndarray) -> np.ndarray:
        """A document's score from the float64 sum of its clause scores."""
        if self.method == LUCENE:
            return np.asarray(summed, dtype=np.float64).astype(F32).astype(np.float64)
        return summed


def _single_terms(term_ids: np.ndarray) -> list[tuple[np.ndarray, int]]:
    return [(np.array([t], dtype=np.int64), 1) for t in np.asarray(term_ids).tolist()]


def merge_clauses(clauses: Sequence[tuple]) -> list[tuple[tuple, int]]:
    """Repeated clauses merged into one with a boost (their count), in first-appearance order,
    as Lucene's ``BooleanQuery`` rewrite does with repeated SHOULD clauses."""
    counts: dict[tuple[str, ...], int] = {}
    for clause in clauses:
        counts[tuple(clause)] = counts.get(tuple(clause), 0) + 1
    return list(counts.items())


# --------------------------------------------------------------------------- Anserini's output


def anserini_order(scores: np.ndarray, external_ids: Sequence[str]) -> np.ndarray:
    """Positions of ``scores`` by float score descending, then external id ascending (Anserini's
    ``BREAK_SCORE_TIES_BY_DOCID`` sort; Python's string order is Lucene's UTF-8 byte order)."""
    scores = np.asarray(scores, dtype=F32)
    ids = np.asarray(list(external_ids), dtype=object)
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[sorted(range(len(ids)), key=ids.__getitem__)] = np.arange(len(ids))
    return np.lexsort((id_rank, -scores.astype(np.float64)))


def anserini_display(scores: Sequence[float]) -> np.ndarray:
    """The ``hit.score`` values pyserini shows for a ranked list of float scores, as Anserini's
    ``ScoreTiesAdjusterReranker`` makes them (read from the bytecode of pyserini 0.21.0's
    Anserini jar): each score rounded to 4 decimals in double, ``(float) (Math.round((double) s
    * 10000.0) / 10000.0)``; then, in float, where a score is at most 1e-4 below the previous
    (already adjusted) one, 1e-6 x (its rank within that run) is subtracted."""
    raw = np.asarray(scores, dtype=F32).astype(np.float64)
    out = (np.floor(raw * 10000.0 + 0.5) / 10000.0).astype(F32)
    dup = 0
    eps = F32(1e-4)
    for i in range(len(out)):
        if i == 0 or (out[i - 1] - out[i]) > eps:
            dup = 0
        else:
            dup += 1
            out[i] = F32(out[i] - F32(1e-6) * F32(dup))
    return out
