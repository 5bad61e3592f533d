"""Settings of the evaluation stage family (the ``evaluation`` config section and the run's
``seed``; every default is in the schema).

One class per rule, holding exactly the keys that rule's job reads, so that editing a key re-runs
only the jobs that read it. The batch job of a model and its per-row jobs read the same class (the
batch job builds the exact requests the per-row jobs build, and they meet in the response cache):
``TMSettings`` for ``evaluation_tm_batch`` and ``evaluation_theorize`` (``TMPromptSettings`` for a
TM that takes a prompt template, whose jobs alone read ``tm_raw_prompt``), ``CMSettings`` for
``evaluation_cm_batch`` and ``evaluation_classify``. Per-model and per-experiment values (a model's
registry entry, an experiment's groups) are handed over by their own params
(``splits.pipeline.targets``), paths as paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class SubsampleSettings:
    """``evaluation_subsample``: the seeded subsample of the evaluation dataset."""

    SECTION: ClassVar[str] = "evaluation"
    dataset_layout: str
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class TMSampling:
    SECTION: ClassVar[str] = "evaluation.tm_sampling"
    temperature: float
    max_tokens: int


@dataclass(frozen=True)
class CMSampling:
    SECTION: ClassVar[str] = "evaluation.cm_sampling"
    temperature: float
    max_tokens: int


@dataclass(frozen=True)
class TMSettings:
    """``evaluation_theorize`` and ``evaluation_tm_batch`` of a TM without a prompt template
    (builtin, python, precomputed): it gets the posts as one chat message."""

    SECTION: ClassVar[str] = "evaluation"
    max_post_chars: int
    sampling: TMSampling
    seed: int = field(metadata={"key": "seed"})

    @property
    def raw_prompt(self) -> bool:
        return False


@dataclass(frozen=True)
class TMPromptSettings(TMSettings):
    """The same for a TM with a prompt template (an LLM), which reads ``tm_raw_prompt`` too."""

    tm_raw_prompt: bool

    @property
    def raw_prompt(self) -> bool:
        return self.tm_raw_prompt


@dataclass(frozen=True)
class CMSettings:
    """``evaluation_classify`` and ``evaluation_cm_batch``."""

    SECTION: ClassVar[str] = "evaluation"
    max_post_chars: int
    sampling: CMSampling
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class MetricsSettings:
    """``evaluation_metrics``: the seed of the groups' sign-flip tests."""

    SECTION: ClassVar[str] = "evaluation"
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class GroupSplitsSettings:
    """``evaluation_group_splits``: the seed of the per-split sign-flip tests."""

    SECTION: ClassVar[str] = "evaluation"
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class HumanExportSettings:
    """``splits human export`` (command line only, by hand with ``--config``): the seed of the
    sheets' instances and order."""

    SECTION: ClassVar[str] = "evaluation"
    seed: int = field(metadata={"key": "seed"})
