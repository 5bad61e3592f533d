"""Phrase matching: which documents contain a keyword phrase as consecutive words, and how often.

One implementation for every stage that matches keyword phrases: the topic splits (a topic post
must contain one of its topic's keywords as a phrase) and the hypotheses retrieval (a lexicon is
an OR of phrase queries).

- Words are ``splits.text.words``: lowercase runs of Unicode letters and numbers, stop words
  kept (as in a Lucene phrase query over an analyzer without stop words: "three pointer" needs
  "three" right before "pointer"). A phrase's words are ``phrase_tokens(phrase)``; punctuation
  and hyphens split words in phrases and texts alike, so "need-based" is the phrase "need based"
  and matches "need-based" and "need based", never "based" alone.
- A document contains a phrase where its words occur consecutively; the phrase frequency counts
  every start position, overlapping ones included ("ha ha" occurs twice in "ha ha ha"). A phrase
  never spans two documents. A phrase without words matches nothing.

``PositionalIndex`` holds every word position of a set of documents (built once, vectorised
with polars; about 12 bytes per word); its ``phrase_frequency`` anchors on the phrase's rarest
word and checks the other words at their offsets, so a query touches only that word's
positions. ``match_phrases`` answers a list of phrases over raw texts, optionally only over
candidate documents (for example those holding every content word of a phrase, from a BM25
index's posting lists), which keeps the positional work proportional to the candidates.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from splits.arrays import sorted_integers
from splits.text import word_frame, words

__all__ = ["PhraseMatches", "PositionalIndex", "match_phrases", "phrase_tokens"]


def phrase_tokens(phrase: str) -> tuple[str, ...]:
    """The words of a keyword phrase (``splits.text.words``: lowercase, stop words kept)."""
    return tuple(words(phrase))


# the largest (term, position) sort key: int64 (past it, numpy's stable argsort by term)
SORT_KEY_LIMIT = int(np.iinfo(np.int64).max)


def _ids(values: np.ndarray, largest: int) -> np.ndarray:
    return values.astype(np.int32 if largest < np.iinfo(np.int32).max else np.int64)


class PositionalIndex:
    """Word positions of ``texts`` (document i is ``texts[i]``), for phrase queries.

    Attributes: ``vocabulary`` (word -> term id, by first appearance over the documents),
    ``doc_len`` (words per document), ``tokens`` (the term id at each position, each document
    followed by one separator -1), ``doc_start`` (position of each document's first word),
    ``postings`` (positions grouped by term, ascending within a term) and ``term_start``
    (term t's positions are ``postings[term_start[t]:term_start[t + 1]]``)."""

    def __init__(
        self,
        texts: Sequence[str | None] | pl.Series | None = None,
        tokens: Sequence[Sequence[str]] | None = None,
        only: Collection[str] | None = None,
    ):
        """From raw ``texts`` (``words``), or from documents already cut into ``tokens`` by
        another analyzer (taken as given, e.g. WordPiece pieces).

        ``only``: index the positions of these words alone (the words of the phrases to be
        asked); every other word keeps its position under one id that no phrase asks for, so
        phrases of these words match exactly as in the full index, while the vocabulary and
        the postings hold only these words (the full vocabulary's lookup and the sort of every
        position are most of the build)."""
        if tokens is not None:
            tok = pl.Series("text", [list(t) for t in tokens], dtype=pl.List(pl.String))
            doc_len = tok.list.len().fill_null(0).to_numpy().astype(np.int64)
            flat = tok.explode().drop_nulls()
        else:
            series = (
                texts if isinstance(texts, pl.Series) else pl.Series(list(texts), dtype=pl.String)
            )
            rows = word_frame(series)  # (doc, tok): each text's words, in order
            doc_len = np.bincount(rows.get_column("doc").to_numpy(), minlength=len(series))
            doc_len = doc_len.astype(np.int64)
            flat = rows.get_column("tok")
        if only is None:
            vocab = flat.unique(maintain_order=True)
        else:  # the asked words that occur, in first-appearance order as in the full index
            asked = pl.Series(sorted(set(only)), dtype=pl.String)
            vocab = flat.filter(flat.is_in(asked.implode())).unique(maintain_order=True)
        self.vocabulary: dict[str, int] = {t: i for i, t in enumerate(vocab.to_list())}
        n_terms = len(vocab)
        term = (
            pl.DataFrame({"tok": flat})
            .join(
                pl.DataFrame({"tok": vocab}).with_row_index("term"),
                on="tok",
                how="left",
                maintain_order="left",
            )
            .get_column("term")
            .fill_null(n_terms)  # a word not asked for (``only``): one id no query looks up
            .to_numpy()
            .astype(np.int64)
        )
        self._positions(term, doc_len, n_terms, only is not None)

    def _positions(self, term: np.ndarray, doc_len: np.ndarray, n_terms: int, only: bool):
        """The positions, postings and term starts of the documents' words (``term``: each
        word's term id, in document order; ``doc_len``: words per document)."""
        n_docs = len(doc_len)
        self.only = only
        self.doc_start = np.zeros(n_docs + 1, dtype=np.int64)
        np.cumsum(doc_len + 1, out=self.doc_start[1:])
        n_positions = int(self.doc_start[-1])
        # the position of each word: its document's start plus its rank within the document
        position = np.arange(len(term), dtype=np.int64) + np.repeat(
            np.arange(n_docs, dtype=np.int64), doc_len
        )
        self.tokens = np.full(n_positions, -1, dtype=np.int64)
        self.tokens[position] = term
        self.tokens = _ids(self.tokens, max(n_terms + 1, 1))
        if only:  # postings of the asked words only
            asked_at = term < n_terms
            position, term = position[asked_at], term[asked_at]
        # positions grouped by term, ascending within a term: ``position`` ascends, so this is
        # a stable sort by term; as one sort of (term, position) keys, by polars' radix sort
        # (splits.arrays), where the keys fit in int64
        if (n_terms + 1) * max(n_positions, 1) < SORT_KEY_LIMIT:
            keys = sorted_integers(term * max(n_positions, 1) + position)
            self.postings = _ids(keys % max(n_positions, 1), n_positions)
        else:
            self.postings = _ids(position[np.argsort(term, kind="stable")], n_positions)
        self.term_start = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(term, minlength=n_terms)[:n_terms], out=self.term_start[1:])
        self.doc_len = doc_len

    def subset(self, keep: np.ndarray) -> PositionalIndex:
        """The index of the documents where ``keep`` (booleans) is true, or of the documents
        ``keep`` (positions, in that order, repeats allowed), as built from their texts: the
        words are read from this index's positions instead of being cut again (the lift indexes
        a topic's posts once, then each pool of the topic and its held-out half). Not for an
        ``only`` index."""
        if self.only:
            raise ValueError("an index of some words only (only=...) has no subset")
        keep = np.asarray(keep)
        docs = np.flatnonzero(keep) if keep.dtype == bool else keep.astype(np.int64)
        doc_len = self.doc_len[docs]
        # each kept word's position: its document's start plus its rank within the document
        starts = np.repeat(self.doc_start[docs] - (np.cumsum(doc_len) - doc_len), doc_len)
        full = self.tokens[starts + np.arange(int(doc_len.sum()), dtype=np.int64)]
        full = full.astype(np.int64)
        # the vocabulary by first appearance over the kept documents, as a build from the texts
        present, first = np.unique(full, return_index=True)
        present = present[np.argsort(first, kind="stable")]
        renumber = np.zeros(len(self.vocabulary) + 1, dtype=np.int64)
        renumber[present] = np.arange(len(present), dtype=np.int64)
        terms = list(self.vocabulary)
        index = PositionalIndex.__new__(PositionalIndex)
        index.vocabulary = {terms[t]: i for i, t in enumerate(present.tolist())}
        index._positions(renumber[full], doc_len, len(present), False)
        return index

    @property
    def n_docs(self) -> int:
        return len(self.doc_len)

    def term_ids(self, tokens: Sequence[str]) -> np.ndarray | None:
        """Term ids of a phrase's words; None when a word occurs in no document (no match)."""
        ids = [self.vocabulary.get(t) for t in tokens]
        if not ids or any(i is None for i in ids):
            return None
        return np.asarray(ids, dtype=np.int64)

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Start positions (ascending) of the consecutive term sequence ``ids``."""
        counts = self.term_start[ids + 1] - self.term_start[ids]
        anchor = int(np.argmin(counts))  # the rarest word: fewest positions to check
        t = int(ids[anchor])
        start = self.postings[self.term_start[t] : self.term_start[t + 1]].astype(np.int64)
        start = start - anchor
        keep = start >= 0
        last = len(self.tokens) - 1
        for offset, term in enumerate(ids):
            if offset == anchor:
                continue
            at = start + offset
            keep &= (at <= last) & (self.tokens[np.clip(at, 0, last)] == term)
        return start[keep]

    def phrase_frequency(self, phrase: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(documents ascending, occurrences in each) of a phrase: its text, or its words."""
        tokens = phrase_tokens(phrase) if isinstance(phrase, str) else tuple(phrase)
        ids = self.term_ids(tokens)
        if ids is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        owners = np.searchsorted(self.doc_start, self.positions(ids), side="right") - 1
        if not len(owners):
            return owners.astype(np.int64), np.zeros(0, dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
        return owners[starts].astype(np.int64), np.diff(np.r_[starts, len(owners)]).astype(np.int64)

    def match(self, phrases: Sequence[str]) -> PhraseMatches:
        """Which documents contain each phrase, and how often."""
        found = [self.phrase_frequency(p) for p in phrases]
        return PhraseMatches(
            phrases=tuple(phrases),
            docs=tuple(d for d, _ in found),
            tf=tuple(f for _, f in found),
            n_docs=self.n_docs,
        )


@dataclass(frozen=True)
class PhraseMatches:
    """Per phrase (in the order asked), the documents holding it (ids ascending) and its
    frequency in each; ``n_docs`` documents were searched (ids are ``0 .. n_docs - 1``)."""

    phrases: tuple[str, ...]
    docs: tuple[np.ndarray, ...]
    tf: tuple[np.ndarray, ...]
    n_docs: int

    def of(self, phrase: str) -> tuple[np.ndarray, np.ndarray]:
        """(documents, frequencies) of one phrase."""
        i = self.phrases.index(phrase)
        return self.docs[i], self.tf[i]

    def any_docs(self, phrases: Sequence[str] | None = None) -> np.ndarray:
        """Documents (ascending) holding at least one of ``phrases`` (default: all of them)."""
        wanted = range(len(self.phrases)) if phrases is None else map(self.phrases.index, phrases)
        parts = [self.docs[i] for i in wanted]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def mask(self, phrases: Sequence[str] | None = None) -> np.ndarray:
        """Boolean per document: holds at least one of ``phrases`` (default: all of them)."""
        out = np.zeros(self.n_docs, dtype=bool)
        out[self.any_docs(phrases)] = True
        return out


def match_phrases(
    texts: Sequence[str | None] | pl.Series,
    phrases: Sequence[str],
    candidates: np.ndarray | None = None,
) -> PhraseMatches:
    """Which of ``texts`` contain each of ``phrases`` (as consecutive words), and how often.

    With ``candidates`` (document ids, i.e. positions in ``texts``) only those documents are
    read (the others are taken not to match: pass every document that may hold a phrase, e.g.
    those holding all of its content words). Document ids in the result always refer to
    ``texts``."""
    series = texts if isinstance(texts, pl.Series) else pl.Series(list(texts), dtype=pl.String)
    n_docs = len(series)
    # the phrases' words alone are indexed: the answer is the full index's (PositionalIndex)
    asked = {word for phrase in phrases for word in phrase_tokens(phrase)}
    if candidates is None:
        return PositionalIndex(series, only=asked).match(phrases)
    chosen = np.asarray(candidates, dtype=np.int64)
    if len(chosen) > 1 and not (chosen[1:] > chosen[:-1]).all():  # else: ascending already
        chosen = np.unique(chosen)
    if len(chosen) and (chosen[0] < 0 or chosen[-1] >= n_docs):
        raise ValueError(f"candidate document ids must lie in [0, {n_docs})")
    if not len(chosen):
        empty = np.zeros(0, dtype=np.int64)
        return PhraseMatches(
            tuple(phrases), (empty,) * len(phrases), (empty,) * len(phrases), n_docs
        )
    found = PositionalIndex(series.gather(chosen), only=asked).match(phrases)
    return PhraseMatches(
        phrases=found.phrases,
        docs=tuple(chosen[d] for d in found.docs),
        tf=found.tf,
        n_docs=n_docs,
    )
