"""Settings of the release_data stage (the ``release_data`` config section; defaults in the
schema). The dataset's path (``release_data.path``) is passed as ``--dataset``, a path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class ReleaseDataSettings:
    """``release_topic_posts`` (and ``splits release-data demographic-posts`` by hand): which
    groups and topics to keep, and where the username-hashing salt is."""

    SECTION: ClassVar[str] = "release_data"
    demographics: list[str] | None
    topics: list[str] | None
    salt_env: str = field(metadata={"key": "export.salt_env"})
