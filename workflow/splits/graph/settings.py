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


@dataclass(frozen=True)
class GraphBucketSettings:
    """Rule ``graph_bucket``: one bucket's memberships (users split by a hash of the author; the
    bucket count is the posts table's, ``ingest.buckets``)."""

    SECTION: ClassVar[str] = "ingest"
    buckets: int


@dataclass(frozen=True)
class GraphTopSettings:
    """Rule ``graph_subreddits``: the buckets' counts added up, and the top-N rule."""

    SECTION: ClassVar[str] = "graph"
    top_n: int
    min_posts: int


@dataclass(frozen=True)
class GraphOverlapsSettings:
    """Rule ``graph_overlaps``: one bucket's co-membership counts, in blocks of rows."""

    SECTION: ClassVar[str] = "graph"
    block_mb: float
