"""The n-gram counts of every distinct text of the Fighting Words baseline, made once per run.

``splits.hypotheses.baseline`` reads each (topic, pair) pool: the two groups' discovery posts
(counted with the tokenizer, ``side_counts``) and the background (the pair's posts everywhere
less the pool's held-out half, cut with polars for ``splits.text.words``). Counted pool by
pool, a post was cut into n-grams once for every pair of its group (five with six groups) and
once more for each held-out half it lies in: most of the baseline's time. ``GramTable`` cuts
every distinct text once, in both ways, into (n-gram id, count) per text, the ids being the
n-grams' ranks in alphabetical order; a pool then only adds up arrays of ids. The results are
those of ``fighting_words.side_counts`` and of a plain count of the tokenizer's n-grams exactly
(the same tokens, the same n-grams, the same integer counts; tests/test_fighting_words.py
compares them).
"""

from __future__ import annotations

import array
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import polars as pl

from splits.arrays import unique_counts
from splits.hypotheses.fighting_words import Vocabulary, limit_vocabulary_columns
from splits.text import word_frame, words

#: texts cut by polars at a time (the background's tokens are streamed, not held)
_CHUNK = 20_000


def _token_ids(
    token_lists: Iterable[Sequence[str]], interned: defaultdict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """The documents' tokens as ids (``interned``: token -> id, grown as tokens come) and the
    number of tokens of each document, without holding the token lists."""
    lengths: list[int] = []
    ids = array.array("q")
    get = interned.__getitem__
    for tokens in token_lists:
        lengths.append(len(tokens))
        ids.extend(map(get, tokens))
    return np.frombuffer(ids, dtype=np.int64), np.array(lengths, dtype=np.int64)


def _doc_tokens(texts: pl.Series) -> Iterable[list[str]]:
    """Each text's ``splits.text.words`` as polars cuts them (``word_frame``), in order."""
    rows = word_frame(texts)
    lengths = np.bincount(rows.get_column("doc").to_numpy(), minlength=len(texts))
    tokens = iter(rows.get_column("tok").to_list())
    return ([next(tokens) for _ in range(n)] for n in lengths.tolist())


def _doc_grams(
    tokens: np.ndarray, lengths: np.ndarray, vocab: pl.Series, ngram_max: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, pl.Series]:
    """(doc, gram, count) of the n-grams (1..``ngram_max``) of each document's tokens (ids into
    ``vocab``, ``lengths`` per document), tokens joined by a space, and the n-grams' strings
    (``gram`` indexes them). The n-grams are counted as integer keys, level by level (an n-gram
    is its first n - 1 tokens' n-gram and one more token): only the distinct n-grams are made
    into strings, by polars."""
    doc = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    n_words = max(len(vocab), 1)
    levels: list[pl.Series] = []
    n_strings = 0
    docs, grams = [], []
    prefix = np.zeros(len(tokens), dtype=np.int64)  # the (n - 1)-gram starting at each position
    previous = pl.Series([""], dtype=pl.String)
    for n in range(1, ngram_max + 1):
        m = len(tokens) - n + 1
        if m <= 0:
            break
        key = prefix[:m] * n_words + tokens[n - 1 :]
        within = doc[:m] == doc[n - 1 :]  # documents are contiguous runs
        distinct, inverse = np.unique(key[within], return_inverse=True)
        last = vocab.gather(distinct % n_words)
        if n == 1:
            previous = last
        else:
            start = previous.gather(distinct // n_words)
            previous = pl.select(pl.concat_str([start, last], separator=" ")).to_series()
        levels.append(previous)
        docs.append(doc[:m][within])
        grams.append(inverse.astype(np.int64) + n_strings)
        n_strings += len(distinct)
        prefix = np.zeros(m, dtype=np.int64)
        prefix[within] = inverse  # crossing n-grams start longer crossing ones: never read
    strings = pl.concat(levels) if levels else pl.Series([], dtype=pl.String)
    if not docs:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, strings
    size = max(n_strings, 1)
    pair = np.concatenate(docs) * size + np.concatenate(grams)
    del docs, grams
    pairs, counts = unique_counts(pair)  # sorted by document
    return pairs // size, pairs % size, counts, strings


class _Segments:
    """Per document, its n-gram ids and counts (``ids[start[d]:start[d + 1]]``), from
    (doc, id, count) sorted by document."""

    def __init__(self, doc: np.ndarray, ids: np.ndarray, counts: np.ndarray, n_docs: int):
        self.ids, self.counts = ids, counts.astype(np.int64)
        self.start = np.zeros(n_docs + 1, dtype=np.int64)
        np.cumsum(np.bincount(doc, minlength=n_docs), out=self.start[1:])

    def gather(self, docs: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The ids and counts of ``docs``, one entry per (document, n-gram)."""
        docs = np.asarray(docs, dtype=np.int64)
        lengths = self.start[docs + 1] - self.start[docs]
        # each entry's position: its document's start plus its rank within the document
        offsets = np.repeat(self.start[docs] - np.cumsum(lengths) + lengths, lengths)
        where = offsets + np.arange(int(lengths.sum()), dtype=np.int64)
        return self.ids[where], self.counts[where]


class GramTable:
    """The n-grams of ``texts`` (distinct strings), cut by ``tokenizer`` (the discovery side)
    and for the background by polars for ``splits.text.words`` (``word_frame``), else by the
    same tokenizer."""

    def __init__(self, texts: Sequence[str], ngram_max: int, tokenizer: Callable[[str], list[str]]):
        self.doc = {text: i for i, text in enumerate(texts)}
        interned: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        side_ids = _token_ids((tokenizer(text or "") for text in texts), interned)
        background_ids = side_ids
        if tokenizer is words:  # the background's words are polars' (splits.text.word_frame)
            series = pl.Series("text", list(texts), dtype=pl.String)
            chunks = (series.slice(start, _CHUNK) for start in range(0, len(series), _CHUNK))
            cut = _token_ids((doc for chunk in chunks for doc in _doc_tokens(chunk)), interned)
            # the engines agree but on the newest code points: the same ids, the same tokens
            if not all(np.array_equal(x, y) for x, y in zip(cut, side_ids, strict=True)):
                background_ids = cut
        vocab = pl.Series(list(interned), dtype=pl.String)  # id order
        side = _doc_grams(*side_ids, vocab, ngram_max)
        background = side if background_ids is side_ids else _doc_grams(*cut, vocab, ngram_max)
        # the ids: ranks in alphabetical order (polars sorts strings by their UTF-8 bytes: the
        # order of their code points, Python's order of str, as ``document_terms`` sorts)
        self.terms = pl.concat([side[3], background[3]]).unique().sort()
        ranks = pl.DataFrame({"gram": self.terms}).with_row_index("rank")
        n = len(texts)
        self.side = self._segments(side, ranks, n)
        self.background = self.side if background is side else self._segments(background, ranks, n)

    @staticmethod
    def _segments(grams, ranks: pl.DataFrame, n_docs: int) -> _Segments:
        doc, local, counts, strings = grams
        to_rank = (
            pl.DataFrame({"gram": strings})
            .join(ranks, on="gram", how="left", maintain_order="left")["rank"]
            .to_numpy()
            .astype(np.int64)
        )
        return _Segments(doc, to_rank[local], counts, n_docs)

    def docs(self, texts: Sequence[str]) -> list[int]:
        return [self.doc[text] for text in texts]

    def side_counts(
        self, texts_a: Sequence[str], texts_b: Sequence[str], section
    ) -> tuple[Vocabulary, np.ndarray, np.ndarray, np.ndarray]:
        """``fighting_words.side_counts`` of the two groups' texts, and the ids of the
        vocabulary's n-grams."""
        ids_a, counts_a = self.side.gather(self.docs(texts_a))
        ids_b, counts_b = self.side.gather(self.docs(texts_b))
        ids = np.concatenate([ids_a, ids_b])
        present, inverse = np.unique(ids, return_inverse=True)  # alphabetical: ids are ranks
        counts = np.concatenate([counts_a, counts_b])
        n = len(present)
        # one entry per (document, n-gram): the entries of an n-gram are its documents
        dfs = np.bincount(inverse, minlength=n)
        totals = np.bincount(inverse, weights=counts, minlength=n).astype(np.int64)
        columns = limit_vocabulary_columns(
            dfs,
            totals,
            len(texts_a) + len(texts_b),
            section.min_df,
            section.max_df,
            section.max_features,
            ties=section.max_features_ties,
        )
        split = len(ids_a)
        side_a = np.bincount(inverse[:split], weights=counts_a, minlength=n)
        side_b = np.bincount(inverse[split:], weights=counts_b, minlength=n)
        kept = present[columns]
        vocabulary = Vocabulary(tuple(self.terms.gather(kept).to_list()))
        return (
            vocabulary,
            side_a[columns].astype(np.int64),
            side_b[columns].astype(np.int64),
            kept,
        )

    def background_counts(self, texts: Sequence[str]) -> np.ndarray:
        """Counts of every n-gram id in ``texts`` (with repetition), the background's cut."""
        ids, counts = self.background.gather(self.docs(texts))
        return np.bincount(ids, weights=counts, minlength=len(self.terms)).astype(np.int64)

    def heldout_counts(self, texts: Sequence[str], gram_ids: np.ndarray) -> np.ndarray:
        """Counts of the n-grams ``gram_ids`` (ascending) in ``texts``."""
        ids, counts = self.background.gather(self.docs(texts))
        at = np.minimum(np.searchsorted(gram_ids, ids), max(len(gram_ids) - 1, 0))
        hit = (gram_ids[at] == ids) if len(gram_ids) else np.zeros(len(ids), dtype=bool)
        return np.bincount(at[hit], weights=counts[hit], minlength=len(gram_ids)).astype(np.int64)
