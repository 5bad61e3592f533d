"""Settings of the hypotheses stage family: one class per rule, holding exactly the keys its job
reads (the ``hypotheses`` config section and ``seed``; defaults in the schema).

``RetrievalSettings`` (``hypotheses.retrieval``) is the one reader of the retrieval keys: the lift
job and the sandbox both take it nested in ``LiftSettings``. Light on purpose (``common.smk``
imports it): the BM25 and analyzer modules are imported where they are used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from splits.errors import ConfigError

PROJECT, RELEASE = "project", "release"
MODES = (PROJECT, RELEASE)


def _sorted_unique(values) -> tuple[float, ...]:
    return tuple(sorted(set(values)))


class _Bounded:
    """The bounds on a lexicon that every set job applies (``max_entries``, ``max_phrase_tokens``)."""

    max_entries: int
    max_phrase_tokens: int

    def __post_init__(self):
        if not 1 <= self.max_phrase_tokens <= 32:
            raise ConfigError("hypotheses.max_phrase_tokens: must be between 1 and 32")
        if self.max_entries < 1:
            raise ConfigError("hypotheses.max_entries: must be at least 1")

    @property
    def limits(self):
        from splits.hypotheses.lexicon import Limits

        return Limits(self.max_entries, self.max_phrase_tokens)


@dataclass(frozen=True)
class FileSettings(_Bounded):
    """Rule ``hypotheses_file``."""

    SECTION: ClassVar[str] = "hypotheses"
    max_entries: int
    max_phrase_tokens: int


@dataclass(frozen=True)
class SampleSettings(_Bounded):
    """Rule ``hypotheses_sample``: ``seed`` draws the null and trivial hypotheses."""

    SECTION: ClassVar[str] = "hypotheses"
    max_entries: int
    max_phrase_tokens: int
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class TheoriesSettings(_Bounded):
    """Rule ``hypotheses_theories``: ``seed`` seeds the theory model's sampling."""

    SECTION: ClassVar[str] = "hypotheses"
    max_entries: int
    max_phrase_tokens: int
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class GenerateSection:
    """``hypotheses.generate``: what the model is shown and asked (``topics`` null: all)."""

    SECTION: ClassVar[str] = "hypotheses.generate"
    topics: list[str] | None
    posts_per_group: int
    per_pool: int
    temperature: float
    max_tokens: int


@dataclass(frozen=True)
class GenerateSettings(_Bounded):
    """Rule ``hypotheses_generate``."""

    SECTION: ClassVar[str] = "hypotheses"
    max_entries: int
    max_phrase_tokens: int
    seed: int = field(metadata={"key": "seed"})
    generate: GenerateSection


@dataclass(frozen=True)
class FightingWordsSection:
    """``hypotheses.fighting_words``: the counting baseline's prior, tokens, vocabulary and
    lexicons (``enabled`` is read where the run's sets are listed)."""

    SECTION: ClassVar[str] = "hypotheses.fighting_words"
    prior: str
    uniform_prior: float
    prior_scale: float | None
    text_cleaning: str
    token_pattern: str | None
    ngram_max: int
    min_df: int
    max_df: float
    max_features: int | None
    max_features_ties: str
    min_z: float
    lexicon_size: int | None
    lexicon_size_without_models: int

    def __post_init__(self):
        if self.prior not in ("informative", "uniform"):
            raise ConfigError(
                f"hypotheses.fighting_words.prior: unknown value {self.prior!r} "
                "(informative or uniform)"
            )
        if self.uniform_prior <= 0:
            raise ConfigError("hypotheses.fighting_words.uniform_prior: must be above 0")
        if self.prior_scale is not None and self.prior_scale <= 0:
            raise ConfigError("hypotheses.fighting_words.prior_scale: must be above 0 (or null)")
        if not 1 <= self.ngram_max <= 6:
            raise ConfigError("hypotheses.fighting_words.ngram_max: must be between 1 and 6")
        if self.min_df < 1:
            raise ConfigError("hypotheses.fighting_words.min_df: must be at least 1")
        if not 0 < self.max_df <= 1:
            raise ConfigError("hypotheses.fighting_words.max_df: must be in (0, 1]")
        if self.text_cleaning not in ("none", "convokit"):
            raise ConfigError(
                f"hypotheses.fighting_words.text_cleaning: unknown value {self.text_cleaning!r} "
                "(none or convokit)"
            )
        if self.max_features_ties not in ("alphabetical", "scikit-learn"):
            raise ConfigError(
                "hypotheses.fighting_words.max_features_ties: unknown value "
                f"{self.max_features_ties!r} (alphabetical or scikit-learn)"
            )
        if self.token_pattern is not None:
            from splits.text import compile_token_pattern

            compile_token_pattern(self.token_pattern)

    def tokenizer(self):
        """The tokens Fighting Words counts: ``splits.text.words``, or ConvoKit's cleaning and
        a token pattern (``splits.hypotheses.fighting_words.Tokenizer``)."""
        from splits.hypotheses.fighting_words import make_tokenizer

        return make_tokenizer(self.text_cleaning, self.token_pattern)


def _check_heldout_fraction(fraction: float) -> None:
    if not 0 < fraction < 1:
        raise ConfigError("hypotheses.heldout_fraction: must be in (0, 1)")


@dataclass(frozen=True)
class FightingWordsSettings(_Bounded):
    """Rule ``hypotheses_fighting_words``: the baseline, the held-out split (``seed``,
    ``heldout_fraction``) and the bounds every set gets."""

    SECTION: ClassVar[str] = "hypotheses"
    max_entries: int
    max_phrase_tokens: int
    seed: int = field(metadata={"key": "seed"})
    heldout_fraction: float
    fighting_words: FightingWordsSection

    def __post_init__(self):
        super().__post_init__()
        _check_heldout_fraction(self.heldout_fraction)


@dataclass(frozen=True)
class RetrievalSettings:
    """``hypotheses.retrieval``: the mode, the BM25 variant (method null: the mode's, robertson
    for project and lucene for release; k1 and b null: the method's), the analyzer and the
    release's list length."""

    SECTION: ClassVar[str] = "hypotheses.retrieval"
    mode: str
    method: str | None
    k1: float | None
    b: float | None
    delta: float
    analyzer: str
    vocab: str | None
    max_tokens: int | None
    doc_count: int

    def __post_init__(self):
        from splits.retrieval.analyzers import WORDPIECE, WORDS
        from splits.retrieval.bm25 import LUCENE, ROBERTSON

        if self.mode not in MODES:
            raise ConfigError(f"hypotheses.retrieval.mode: unknown value {self.mode!r}")
        if self.mode == RELEASE and self.bm25.method != LUCENE:
            raise ConfigError(
                "hypotheses.retrieval.method: release mode scores with Lucene's BM25 (lucene, "
                "or null)"
            )
        if self.doc_count < 1:
            raise ConfigError("hypotheses.retrieval.doc_count: must be at least 1")
        if self.analyzer != WORDS and self.bm25.method == ROBERTSON:
            raise ConfigError(
                "hypotheses.retrieval.analyzer: another analyzer than words needs another BM25 "
                "method than robertson (e.g. lucene)"
            )
        if self.analyzer == WORDPIECE and not self.vocab:
            raise ConfigError(
                "hypotheses.retrieval.vocab: the wordpiece analyzer needs a vocab.txt"
            )

    @property
    def bm25(self):
        """The BM25 variant and its parameters (``splits.retrieval.bm25.BM25Params``)."""
        from splits.retrieval.bm25 import LUCENE, ROBERTSON, BM25Params

        method = self.method or (LUCENE if self.mode == RELEASE else ROBERTSON)
        return BM25Params(method, self.k1, self.b, self.delta)

    @property
    def is_default(self) -> bool:
        """The project's list scored as rank_bm25's BM25Okapi (the pool index's own scoring)."""
        from splits.retrieval.bm25 import ROBERTSON

        return self.mode == PROJECT and self.bm25.method == ROBERTSON

    def make_analyzer(self):
        from splits.retrieval.analyzers import make_analyzer

        return make_analyzer(self.analyzer, self.vocab, self.max_tokens)


@dataclass(frozen=True)
class LiftSettings:
    """Rule ``hypotheses_lift`` (and the sandbox's queries): the k fractions (sorted, each once),
    the list size (null: the whole pool), alpha, the seed of the ranked lists' order and the
    retrieval."""

    SECTION: ClassVar[str] = "hypotheses"
    k_fractions: tuple[float, ...]
    list_size: int | None
    alpha: float
    seed: int = field(metadata={"key": "seed"})
    heldout_fraction: float
    retrieval: RetrievalSettings

    def __post_init__(self):
        _check_heldout_fraction(self.heldout_fraction)
        fractions = _sorted_unique(self.k_fractions)
        if not fractions or not all(0 < f <= 1 for f in fractions):
            raise ConfigError("hypotheses.k_fractions: each must be in (0, 1]")
        object.__setattr__(self, "k_fractions", fractions)
        if self.list_size is not None and self.list_size < 1:
            raise ConfigError("hypotheses.list_size: must be at least 1 (or null: the whole pool)")
        if not 0 < self.alpha < 1:
            raise ConfigError("hypotheses.alpha: must be in (0, 1)")


@dataclass(frozen=True)
class TrivialitySettings:
    """Rule ``hypotheses_triviality``: the encoder (a registry name, or a Hugging Face id or
    path) and the texts it encodes per batch."""

    SECTION: ClassVar[str] = "hypotheses"
    encoder: str
    encoder_batch: int

    def __post_init__(self):
        if self.encoder_batch < 1:
            raise ConfigError("hypotheses.encoder_batch: must be at least 1")


class _Filter:
    """The two-stage filter's keys (the table and the report read them)."""

    alpha: float
    triviality_thresholds: tuple[float, ...]

    def __post_init__(self):
        object.__setattr__(
            self, "triviality_thresholds", _sorted_unique(self.triviality_thresholds)
        )
        if not self.triviality_thresholds:
            raise ConfigError("hypotheses.triviality_thresholds: give at least one")


@dataclass(frozen=True)
class TableSettings(_Filter):
    """Rule ``hypotheses_table``: the false discovery rate, the triviality thresholds and the
    Jaccard index above which a hypothesis repeats a stronger one."""

    SECTION: ClassVar[str] = "hypotheses"
    alpha: float
    triviality_thresholds: tuple[float, ...]
    redundancy_jaccard: float

    def __post_init__(self):
        super().__post_init__()
        if not 0 <= self.redundancy_jaccard <= 1:
            raise ConfigError("hypotheses.redundancy_jaccard: must be in [0, 1]")


@dataclass(frozen=True)
class ReportSettings(_Filter):
    """Rule ``hypotheses_report``: the filter's keys and the k fraction of the scatter plot and
    of the comparison with the counting baseline."""

    SECTION: ClassVar[str] = "hypotheses"
    alpha: float
    triviality_thresholds: tuple[float, ...]
    report_k: float
