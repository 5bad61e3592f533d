"""Settings of the demographics stage family, one class per rule (the ``demographics`` config
section; defaults in the schema). Each class holds exactly the keys its rule's job reads, so that
changing a key re-runs only the jobs that read it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class GroupnessSettings:
    """Rule ``groupness``: U_d, D_d and group-ness of one demographic."""

    SECTION: ClassVar[str] = "demographics"
    groupness: str
    top_user_fraction: float


@dataclass(frozen=True)
class SelfidSettings:
    """Rule ``selfid``: self-ID search, verification, curve and threshold of one demographic
    (the LLM verifier's model and prompt come as their own flags, only with ``verifier: llm``)."""

    SECTION: ClassVar[str] = "demographics"
    verifier: str
    context_chars: int
    bins: int
    accept_unsupported_thresholds: bool


@dataclass(frozen=True)
class SelfidFindSettings:
    """Rule ``selfid_bucket`` (ingest.buckets > 1): the phrase search of one part of D_d; rule
    ``selfid`` then verifies the parts' matches and makes the curve and threshold."""

    SECTION: ClassVar[str] = "demographics"
    context_chars: int
