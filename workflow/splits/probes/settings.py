"""Settings of the probes stage family (the ``probes`` config section; defaults in the schema).

One class per rule (and per source where a source reads other keys), holding exactly the keys
that job reads, so that editing a key re-runs only the jobs that read it. Registry entries named
by a setting (``models.<model>``, ``probes.empathy.variants.<variant>``,
``probes.grasp.inputs.<name>``) are passed next to the settings as JSON of that one entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class ProbeTextSettings:
    """What every LLM probe reads of the ``probes`` section: how texts are cut and groups named."""

    SECTION: ClassVar[str] = "probes"
    max_chars: int
    extra_groups: dict
    group_phrases: dict


@dataclass(frozen=True)
class _StressBase:
    SECTION: ClassVar[str] = "probes.stress"
    model: str
    answer_rule: str
    groups: dict | None
    attempts: int
    temperature: float
    max_tokens: int
    probes: ProbeTextSettings
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class StressSettings(_StressBase):
    """``probe_stress`` on the topic posts."""

    max_items: int


@dataclass(frozen=True)
class StressDreadditSettings(_StressBase):
    """``probe_stress`` on Dreaddit (``dreaddit_max_items`` null: every segment)."""

    dreaddit_split: str
    dreaddit_max_items: int | None


STRESS_SETTINGS = {"topics": StressSettings, "dreaddit": StressDreadditSettings}


@dataclass(frozen=True)
class _EmpathyBase:
    SECTION: ClassVar[str] = "probes.empathy"
    model: str
    neutral: str | None
    emotion: str
    permutations: int
    flips: int
    alpha: float
    temperature: float
    max_tokens: int
    probes: ProbeTextSettings
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class EmpathySettings(_EmpathyBase):
    """``probe_empathy`` on the topic posts."""

    max_items: int


@dataclass(frozen=True)
class EmpathyEnventSettings(_EmpathyBase):
    """``probe_empathy`` on crowd-enVent (``envent_max_items`` null: every event)."""

    envent_max_items: int | None


EMPATHY_SETTINGS = {"topics": EmpathySettings, "envent": EmpathyEnventSettings}


@dataclass(frozen=True)
class _GraspBase:
    SECTION: ClassVar[str] = "probes.grasp"
    max_order: int
    permutations: int
    smoothing: float
    fdr: float
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class GraspSettings(_GraspBase):
    """``probe_grasp``: rating tables of human (or stress-probe) raters."""

    min_raters: int


@dataclass(frozen=True)
class GraspJudgesSettings(_GraspBase):
    """``probe_grasp_judges``: the evaluation's LLM judges as raters. Judges are few (TMs x CMs
    x ks), so a group of two judges is analysed (``probes.grasp.min_raters`` is for human rater
    pools): ``JUDGE_MIN_RATERS``."""


JUDGE_MIN_RATERS = 2


@dataclass(frozen=True)
class PersonalizationSettings:
    """``probe_personalization`` without a rewrite judge (``judge_model`` null)."""

    SECTION: ClassVar[str] = "probes.personalization"
    model: str
    tasks: list
    max_items: int
    min_similarity: float
    judge_model: str | None
    tau: float
    flips: int
    temperature: float
    max_tokens: int
    task_max_tokens: int
    probes: ProbeTextSettings
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class PersonalizationJudgedSettings(PersonalizationSettings):
    """``probe_personalization`` with a rewrite judge: also reads the judge's keys."""

    judge_max_tokens: int


def personalization_settings(judge_model: str | None) -> type[PersonalizationSettings]:
    """The class of the keys the personalization job reads, by whether a judge is set."""
    return PersonalizationJudgedSettings if judge_model else PersonalizationSettings
