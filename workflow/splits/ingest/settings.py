"""Settings of the ingest stage family, one class per rule (defaults in the schema).

- ``SynthSettings``: rule ``synth`` (the ``synth`` section and the base ``seed``);
- ``IngestSettings``: rule ``ingest`` (``ingest.chunk_mb``; the bot list and the inputs are
  paths the rule passes);
- ``IngestBucketsSettings``: rule ``ingest`` with ``ingest.buckets`` > 1 (``chunk_mb`` and
  ``buckets``: the posts table's buckets by author, which the graph's user buckets are too;
  each shard is written as its P bucket files). Two classes, so that the one-table run's
  settings, which Snakemake compares between runs, stay what they were.

Rules ``merge_posts``, ``merge_bucket`` and ``ingest_report`` read no setting (its inputs are the shards' outputs). ``synth.enabled``
and ``ingest.inputs`` choose the jobs (``splits.pipeline.targets``), no job reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class SynthSettings:
    SECTION: ClassVar[str] = "synth"
    seed: int = field(metadata={"key": "seed"})
    posts: int | None
    shards: int
    format: str
    compress: bool
    plant_group_difference: bool
    planted_topics: list[str] | None


@dataclass(frozen=True)
class IngestSettings:
    SECTION: ClassVar[str] = "ingest"
    chunk_mb: float


@dataclass(frozen=True)
class IngestBucketsSettings:
    SECTION: ClassVar[str] = "ingest"
    chunk_mb: float
    buckets: int
