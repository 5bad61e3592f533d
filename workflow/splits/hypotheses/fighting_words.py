"""Fighting Words (Monroe, Colaresi and Quinn 2008): the counting baseline of the hypotheses.

For an n-gram w with counts y_a, y_b in the two groups' texts (totals n_a, n_b) and a Dirichlet
prior a_w (a_0 = the sum of a_w over the vocabulary), the weighted log-odds ratio is

    delta_w = ln((y_a + a_w) / (n_a + a_0 - y_a - a_w)) - ln((y_b + a_w) / (n_b + a_0 - y_b - a_w))

with variance 1/(y_a + a_w) + 1/(y_b + a_w), and z_w = delta_w / sqrt(variance): positive z
marks group A's words, negative z group B's.

Two priors:
- ``informative`` (the paper's, the default): a_w proportional to w's count in a background
  corpus: by default a_w is that count itself (a_0 = the background's size), or a_0 = ``scale``
  spread by the counts' shares. The background is what the pair wrote outside the posts being
  scored (their posts on the other topics, and the discovery half of this one), so the prior
  holds each word's usual rate: a word both groups use everywhere (``they``, ``are``) needs a
  large, consistent difference to stand out, and a word one group uses often (``emory`` for
  Cornell students) gets a large a_w, a small variance and a large |z|.
- ``uniform`` (ConvoKit's default, a_w = 0.1 for every n-gram): the variance of a word one group
  never uses is dominated by 1/0.1, so such words get small |z| and frequent function words rank
  above them.

The vocabulary follows scikit-learn's ``CountVectorizer`` conventions (n-grams of consecutive
tokens joined by a space; ``min_df`` documents at least, at most a ``max_df`` share of them;
then the ``max_features`` most frequent, ties at the cut broken alphabetically, or as
scikit-learn breaks them). The tokens are by default the project's own (``splits.text.words``),
so that every n-gram is a phrase the retrieval can match; ``text_cleaning`` and
``token_pattern`` give ConvoKit's instead (``Tokenizer``): its clean-text step (the ``clean-text``
package's ``clean`` with ConvoKit 5.0.0's options, ``CONVOKIT_CLEAN``) and a scikit-learn token
pattern, applied as ``CountVectorizer`` applies it (the text lowercased; every match a token, or
the pattern's one group).

``fighting_words_scores`` computes everything from the config's section
(``FightingWordsSection``), ``fighting_words_table`` lays the result out as the table
``splits fighting-words`` writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.text import STOP_WORDS, compile_token_pattern, words

# scipy.sparse is imported where a matrix is made (document_terms): the hypotheses baseline
# (splits.hypotheses.gram_table) counts without one, and the import was 0.4 CPU s of its job
if TYPE_CHECKING:
    import scipy.sparse as sp

PRIORS = ("informative", "uniform")
NO_CLEANING, CONVOKIT = "none", "convokit"
ALPHABETICAL, SCIKIT_LEARN = "alphabetical", "scikit-learn"

# ConvoKit 5.0.0's FightingWords.clean_text: clean-text's ``clean`` with these options (fix the
# unicode, transliterate to ASCII, lowercase, line breaks to spaces; URLs, e-mail addresses,
# phone numbers and currency symbols replaced by a token; numbers, digits and punctuation kept)
CONVOKIT_CLEAN = {
    "fix_unicode": True,
    "to_ascii": True,
    "lower": True,
    "no_line_breaks": True,
    "no_urls": True,
    "no_emails": True,
    "no_phone_numbers": True,
    "no_numbers": False,
    "no_digits": False,
    "no_currency_symbols": True,
    "no_punct": False,
    "replace_with_url": "<URL>",
    "replace_with_email": "<EMAIL>",
    "replace_with_phone_number": "<PHONE>",
    "replace_with_number": "<NUMBER>",
    "replace_with_digit": "0",
    "replace_with_currency_symbol": "<CUR>",
    "lang": "en",
}


def _convokit_clean() -> Callable[[str], str]:
    try:
        from cleantext import clean
        from unidecode import unidecode  # noqa: F401 (clean-text transliterates worse without it)
    except ImportError:
        raise ConfigError(
            "hypotheses.fighting_words.text_cleaning: convokit needs the clean-text and "
            "Unidecode packages (pip install clean-text unidecode, or the convokit extra)"
        ) from None

    def convokit_clean(text: str) -> str:
        return clean(text, **CONVOKIT_CLEAN)

    return convokit_clean


class Tokenizer:
    """The tokens of a text: optionally cleaned as ConvoKit cleans it (``text_cleaning``
    convokit), then the project's words (``token_pattern`` None) or the matches of a
    scikit-learn token pattern in the lowercased text (the match, or its one group)."""

    def __init__(self, text_cleaning: str, token_pattern: str | None):
        if text_cleaning not in (NO_CLEANING, CONVOKIT):
            raise ConfigError(
                f"hypotheses.fighting_words.text_cleaning: unknown value {text_cleaning!r} "
                f"({NO_CLEANING} or {CONVOKIT})"
            )
        self.text_cleaning, self.token_pattern = text_cleaning, token_pattern
        self._clean = _convokit_clean() if text_cleaning == CONVOKIT else None
        self._pattern = compile_token_pattern(token_pattern) if token_pattern else None

    def __call__(self, text: str | None) -> list[str]:
        text = str(text) if text else ""
        if self._clean is not None:
            text = self._clean(text)
        if self._pattern is None:
            return words(text)
        return self._pattern.findall(text.lower())

    def __reduce__(self):  # the cleaning function is rebuilt where the tokenizer is unpickled
        return (Tokenizer, (self.text_cleaning, self.token_pattern))


def make_tokenizer(text_cleaning: str, token_pattern: str | None) -> Callable[[str], list[str]]:
    """``splits.text.words`` itself for the defaults (no cleaning, no pattern), else a
    ``Tokenizer``."""
    if text_cleaning == NO_CLEANING and not token_pattern:
        return words
    return Tokenizer(text_cleaning, token_pattern)


@dataclass(frozen=True)
class Vocabulary:
    """n-grams (tokens joined by a space) and their column in a document-term matrix."""

    terms: tuple[str, ...]

    def index(self) -> dict[str, int]:
        return {term: i for i, term in enumerate(self.terms)}


def _ngrams(tokens: Sequence[str], low: int, high: int) -> list[str]:
    out = []
    for n in range(low, high + 1):
        out.extend(" ".join(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    return out


def document_terms(
    texts: Sequence[str],
    ngram_range: tuple[int, int],
    tokenizer: Callable[[str], list[str]] = words,
    vocabulary: Vocabulary | None = None,
) -> tuple[sp.csr_matrix, Vocabulary]:
    """The document-term count matrix of ``texts`` (CSR, int64) and its vocabulary (sorted,
    or the one given, whose other n-grams are not counted)."""
    import scipy.sparse as sp

    low, high = ngram_range
    index = vocabulary.index() if vocabulary is not None else {}
    rows: list[int] = []
    cols: list[int] = []
    for row, text in enumerate(texts):
        for gram in _ngrams(tokenizer(text or ""), low, high):
            col = index.get(gram)
            if col is None:
                if vocabulary is not None:
                    continue
                col = index[gram] = len(index)
            rows.append(row)
            cols.append(col)
    matrix = sp.csr_matrix(
        (np.ones(len(rows), dtype=np.int64), (rows, cols)), shape=(len(texts), len(index))
    )
    matrix.sum_duplicates()
    if vocabulary is not None:
        return matrix, vocabulary
    terms = sorted(index, key=index.get)
    order = np.argsort(np.array(terms, dtype=object), kind="stable")
    return matrix[:, order].tocsr(), Vocabulary(tuple(terms[i] for i in order))


def limit_vocabulary(
    matrix: sp.csr_matrix,
    vocabulary: Vocabulary,
    min_df: int,
    max_df: float,
    max_features: int | None,
    *,
    ties: str,
) -> tuple[sp.csr_matrix, Vocabulary]:
    """Keep the n-grams in at least ``min_df`` documents and at most a ``max_df`` share of them,
    then the ``max_features`` most frequent, in alphabetical order. Among n-grams of equal count
    at the cut, ``ties`` alphabetical keeps the first alphabetically; scikit-learn keeps those
    ``CountVectorizer`` keeps: its call, numpy's default (unstable) argsort of the negated
    counts in alphabetical order, whose choice among equal counts is numpy's (it may differ
    between numpy versions and CPUs, as scikit-learn's own does)."""
    dfs = np.bincount(matrix.indices, minlength=matrix.shape[1])
    totals = np.asarray(matrix.sum(axis=0)).ravel()
    columns = limit_vocabulary_columns(
        dfs, totals, matrix.shape[0], min_df, max_df, max_features, ties=ties
    )
    return matrix[:, columns].tocsr(), Vocabulary(tuple(vocabulary.terms[i] for i in columns))


def limit_vocabulary_columns(
    dfs: np.ndarray,
    totals: np.ndarray,
    n_docs: int,
    min_df: int,
    max_df: float,
    max_features: int | None,
    *,
    ties: str,
) -> np.ndarray:
    """The columns ``limit_vocabulary`` keeps (ascending) of n-grams in alphabetical order with
    document frequencies ``dfs`` and total counts ``totals`` (int64) over ``n_docs`` documents
    (one rule for the matrix and for ``splits.hypotheses.gram_table``'s counts)."""
    if ties not in (ALPHABETICAL, SCIKIT_LEARN):
        raise ConfigError(
            f"hypotheses.fighting_words.max_features_ties: unknown value {ties!r} "
            f"({ALPHABETICAL} or {SCIKIT_LEARN})"
        )
    keep = (dfs >= min_df) & (dfs <= max_df * n_docs)
    if max_features is not None and keep.sum() > max_features:
        candidates = np.flatnonzero(keep)  # alphabetical, so a stable sort breaks ties by term
        kind = "stable" if ties == ALPHABETICAL else None  # None: numpy's default, as sklearn
        chosen = candidates[np.argsort(-totals[candidates], kind=kind)[:max_features]]
        keep = np.zeros_like(keep)
        keep[chosen] = True
    return np.flatnonzero(keep)


def z_scores(counts_a: np.ndarray, counts_b: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Monroe et al.'s z-score of every n-gram (positive: group A's) from the two groups' counts
    over the same vocabulary and the prior's pseudo-counts."""
    counts_a = np.asarray(counts_a, dtype=np.float64)
    counts_b = np.asarray(counts_b, dtype=np.float64)
    prior = np.asarray(prior, dtype=np.float64)
    a0 = prior.sum()
    n_a, n_b = counts_a.sum(), counts_b.sum()
    delta = np.log((counts_a + prior) / (n_a + a0 - counts_a - prior)) - np.log(
        (counts_b + prior) / (n_b + a0 - counts_b - prior)
    )
    variance = 1.0 / (counts_a + prior) + 1.0 / (counts_b + prior)
    return delta / np.sqrt(variance)


def informative_prior(background_counts: np.ndarray, scale: float | None) -> np.ndarray:
    """a_w = the background's count of w (``scale`` None), or ``scale`` x w's share of the
    background's counts; an n-gram the background never holds gets the smallest positive
    pseudo-count of the others (a Dirichlet needs a_w > 0)."""
    counts = np.asarray(background_counts, dtype=np.float64)
    total = counts.sum()
    scale = total if scale is None else scale
    if total <= 0:
        raise ConfigError(
            "hypotheses.fighting_words.prior: the background corpus holds none of the "
            "vocabulary's n-grams; use prior: uniform"
        )
    prior = scale * counts / total
    floor = prior[prior > 0].min()
    return np.where(prior > 0, prior, floor)


@dataclass(frozen=True)
class FightingWordsResult:
    terms: tuple[str, ...]
    z: np.ndarray
    counts_a: np.ndarray
    counts_b: np.ndarray
    prior: np.ndarray

    def top(self, side: str, size: int, min_abs_z: float = 0.0) -> list[str]:
        """The ``size`` n-grams most typical of ``side`` ("a": largest z, "b": smallest), with
        |z| at least ``min_abs_z``; ties by n-gram."""
        sign = 1.0 if side == "a" else -1.0
        return [self.terms[i] for i in top_indices(self.terms, sign * self.z, size, min_abs_z)]


def top_indices(
    terms: Sequence[str], signed_z: np.ndarray, size: int, min_z: float, skip_stop_words=False
) -> list[int]:
    """Positions of the ``size`` n-grams of largest positive ``signed_z`` (z towards one side),
    at least ``min_z``, largest first, ties by n-gram; n-grams made only of stop words left out
    with ``skip_stop_words``."""
    chosen = (
        i
        for i in range(len(terms))
        if signed_z[i] > 0
        and signed_z[i] >= min_z
        and not (skip_stop_words and only_stop_words(terms[i]))
    )
    return sorted(chosen, key=lambda i: (-signed_z[i], terms[i]))[:size]


def only_stop_words(term: str) -> bool:
    return all(token in STOP_WORDS for token in term.split(" "))


def _side_counts(
    texts_a: Sequence[str],
    texts_b: Sequence[str],
    ngram_range: tuple[int, int],
    limits: tuple[int, float, int | None, str],
    tokenizer: Callable[[str], list[str]],
) -> tuple[Vocabulary, np.ndarray, np.ndarray]:
    min_df, max_df, max_features, ties = limits
    matrix, vocabulary = document_terms(list(texts_a) + list(texts_b), ngram_range, tokenizer)
    matrix, vocabulary = limit_vocabulary(
        matrix, vocabulary, min_df, max_df, max_features, ties=ties
    )
    counts_a = np.asarray(matrix[: len(texts_a)].sum(axis=0)).ravel()
    counts_b = np.asarray(matrix[len(texts_a) :].sum(axis=0)).ravel()
    return vocabulary, counts_a, counts_b


def side_counts(
    texts_a: Sequence[str], texts_b: Sequence[str], section, tokenizer: Callable[[str], list[str]]
) -> tuple[Vocabulary, np.ndarray, np.ndarray]:
    """The vocabulary of both groups' texts (within the bounds of ``section``, a
    ``FightingWordsSection``) and each group's counts; ``tokenizer``: ``section.tokenizer()``."""
    limits = (section.min_df, section.max_df, section.max_features, section.max_features_ties)
    return _side_counts(texts_a, texts_b, (1, section.ngram_max), limits, tokenizer)


def _scores(
    vocabulary: Vocabulary,
    counts_a: np.ndarray,
    counts_b: np.ndarray,
    prior_values: tuple[str, float, float | None],
    background: Sequence[str],
    ngram_range: tuple[int, int],
    tokenizer: Callable[[str], list[str]],
) -> FightingWordsResult:
    prior, uniform_prior, prior_scale = prior_values
    if prior == "uniform":
        pseudo = np.full(len(vocabulary.terms), float(uniform_prior))
    else:
        bg, _ = document_terms(background, ngram_range, tokenizer, vocabulary)
        pseudo = informative_prior(np.asarray(bg.sum(axis=0)).ravel(), prior_scale)
    return FightingWordsResult(
        terms=vocabulary.terms,
        z=z_scores(counts_a, counts_b, pseudo),
        counts_a=counts_a,
        counts_b=counts_b,
        prior=pseudo,
    )


def _check_inputs(prior: str, texts_a: Sequence[str], texts_b: Sequence[str]) -> None:
    if prior not in PRIORS:
        raise ConfigError(f"hypotheses.fighting_words.prior: {prior!r} is none of {PRIORS}")
    if not texts_a or not texts_b:
        raise ConfigError("fighting words: each group needs at least one text")


def fighting_words_scores(
    texts_a: Sequence[str], texts_b: Sequence[str], section, background: Sequence[str] = ()
) -> FightingWordsResult:
    """z-scores of the n-grams of two groups' texts with every setting from ``section`` (a
    ``FightingWordsSection``: the config's ``hypotheses.fighting_words``; its prior, vocabulary
    bounds, cleaning, token pattern and tie rule). ``background``: the informative prior's
    texts (unused with the uniform prior)."""
    _check_inputs(section.prior, texts_a, texts_b)
    tokenizer = section.tokenizer()
    vocabulary, counts_a, counts_b = side_counts(texts_a, texts_b, section, tokenizer)
    if not vocabulary.terms:
        raise ConfigError(
            f"hypotheses.fighting_words: no n-gram of the {len(texts_a) + len(texts_b)} texts "
            f"is in at least min_df {section.min_df} of them and at most a share max_df "
            f"{section.max_df}"
        )
    prior_values = (section.prior, section.uniform_prior, section.prior_scale)
    return _scores(
        vocabulary,
        counts_a,
        counts_b,
        prior_values,
        background,
        (1, section.ngram_max),
        tokenizer,
    )


def fighting_words_table(result: FightingWordsResult) -> pl.DataFrame:
    """One row per n-gram: ``ngram``, ``count_a``, ``count_b`` (its counts in each group's
    texts), ``prior`` (its pseudo-count a_w) and ``z`` (positive: group A's), largest z first,
    ties by n-gram."""
    return pl.DataFrame(
        {
            "ngram": list(result.terms),
            "count_a": np.asarray(result.counts_a, dtype=np.int64),
            "count_b": np.asarray(result.counts_b, dtype=np.int64),
            "prior": np.asarray(result.prior, dtype=np.float64),
            "z": np.asarray(result.z, dtype=np.float64),
        },
        schema={
            "ngram": pl.String,
            "count_a": pl.Int64,
            "count_b": pl.Int64,
            "prior": pl.Float64,
            "z": pl.Float64,
        },
    ).sort(["z", "ngram"], descending=[True, False])


def fighting_words(
    texts_a: Sequence[str],
    texts_b: Sequence[str],
    *,
    prior: str,
    ngram_range: tuple[int, int],
    min_df: int,
    max_df: float,
    max_features: int | None,
    uniform_prior: float,
    prior_scale: float | None,
    background: Sequence[str] = (),
    tokenizer: Callable[[str], list[str]] = words,
) -> FightingWordsResult:
    """z-scores of the n-grams of two groups' texts (the vocabulary from both groups' texts),
    each setting a keyword: the project's words (or any ``tokenizer``), no cleaning, ties at the
    ``max_features`` cut alphabetical. ``fighting_words_scores`` takes them all from the
    config's section instead."""
    _check_inputs(prior, texts_a, texts_b)
    limits = (min_df, max_df, max_features, ALPHABETICAL)
    vocabulary, counts_a, counts_b = _side_counts(texts_a, texts_b, ngram_range, limits, tokenizer)
    prior_values = (prior, uniform_prior, prior_scale)
    return _scores(vocabulary, counts_a, counts_b, prior_values, background, ngram_range, tokenizer)
