"""What ``splits llm`` reads from a config (the settings path, :mod:`splits.config.settings`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class LLMBatchSettings:
    """The models registry and the run's seed (the seed of requests that set none)."""

    SECTION: ClassVar[str] = "llm"
    models: dict[str, Any] = field(metadata={"key": "models"})
    seed: int = field(metadata={"key": "seed"})
