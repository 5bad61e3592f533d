"""Settings of the graph stage (the ``graph`` config section; defaults in the schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class GraphSettings:
    SECTION: ClassVar[str] = "graph"
    top_n: int
    min_posts: int
    k: int
    block_mb: float
