"""Settings of the sampling stage family, one class per rule (the ``sampling`` and ``export``
config sections; defaults in the schema). Each class holds exactly the keys its rule's job reads,
so that changing a key re-runs only the jobs that read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class SampleSettings:
    """Rule ``sample_quadruplets``: the calibration size and the base seed."""

    SECTION: ClassVar[str] = "sampling"
    k: int
    seed: int = field(metadata={"key": "seed"})


@dataclass(frozen=True)
class ExportSettings:
    """Rule ``export_dataset``: the card's k, where the salt is read from, what becomes of post
    ids, and the card's licence and source. The salt itself never travels in settings: it comes
    from the environment variable ``salt_env``."""

    SECTION: ClassVar[str] = "export"
    k: int = field(metadata={"key": "sampling.k"})
    salt_env: str
    post_ids: str
    license: str | None
    source: str | None
