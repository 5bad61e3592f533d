"""Group Theorization quadruplets (docs/method.md §2.7).

For every topic t and unordered pair {A, B} of demographics (A < B alphabetically, as in the
release), the pools are the topic posts of A and of B on t. A post whose author is at or above the
threshold of both groups (a dual member of the pair) is left out of that pair's split, whichever
pool it was found in: it cannot serve as evidence for either group. The members of each group
(its users at or above its threshold percentile) come from the groups' ``users.parquet`` and
``thresholds.json`` (``--users``, ``--thresholds``); for the authors' released posts, which carry
no percentiles, ``--members-from-topic-posts`` makes a group's members the authors of its topic
posts, so an author whose posts were released under both groups is a dual member. With neither,
only the posts found in both pools are left out (a lower bound, logged as a warning). The
sampling summary counts the dual members and their left-out posts per pair
(``dual_membership``), and two groups that share more than half of either group's members are a
run-health finding (``groups_overlap``). Each split draws from its own random generator, seeded
by the base seed and the names of (t, A, B), so adding a topic or a group leaves the other
splits unchanged.
While both pools hold at least k/2 + 3 posts: draw k/2 posts of A and k/2 of B and shuffle them
(the calibration set ``example_posts``, with hidden labels ``example_labels``, "A"/"B"), draw 3
more of A (``sample_A``) and 3 of B (``sample_B``) and a fair coin ``switched``; drawn posts are
removed from the pools. A split therefore has exactly min(|A|, |B|) // (k/2 + 3) rows.

Modules: ``pools`` (pools, members, the dual-member rule), this one (the draw), ``validate``
(every invariant checked), ``diagnostics`` (errors, warnings, findings, the summary), ``export``
(the released files), ``cli`` (``splits sample``, ``splits export``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np
import polars as pl

from splits.config.definitions import SAMPLE_SIZE
from splits.errors import ConfigError
from splits.sampling.pools import (
    EMPTY_POOL,
    Members,
    Pool,
    disjoint_pools,
    dual_members,
    pools_by_group,
    topic_order,
)
from splits.sampling.settings import SampleSettings

RELEASE_COLUMNS = [
    "description",
    "demographic_A",
    "demographic_B",
    "example_posts",
    "sample_A",
    "sample_B",
    "switched",
]
EXTRA_COLUMNS = [
    "quadruplet_id",
    "category",
    "example_post_ids",
    "example_labels",
    "sample_A_ids",
    "sample_B_ids",
]
QUADRUPLET_SCHEMA = {
    "description": pl.String,
    "demographic_A": pl.String,
    "demographic_B": pl.String,
    "example_posts": pl.List(pl.String),
    "sample_A": pl.List(pl.String),
    "sample_B": pl.List(pl.String),
    "switched": pl.Boolean,
    "quadruplet_id": pl.String,
    "category": pl.String,
    "example_post_ids": pl.List(pl.String),
    "example_labels": pl.List(pl.String),
    "sample_A_ids": pl.List(pl.String),
    "sample_B_ids": pl.List(pl.String),
}


def split_rng(seed: int, topic: str, demographic_a: str, demographic_b: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{topic}\x00{demographic_a}\x00{demographic_b}".encode()).digest()
    words = [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]
    return np.random.default_rng(np.random.SeedSequence([seed & 0xFFFFFFFF, seed >> 32, *words]))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "topic"


def rows_possible(n_a: int, n_b: int, k: int) -> int:
    """Rows a split yields from disjoint pools of n_a and n_b posts."""
    need = k // 2 + SAMPLE_SIZE
    return min(n_a // need, n_b // need)


def sample_split(
    pool_a: Pool, pool_b: Pool, k: int, rng: np.random.Generator
) -> list[dict[str, object]]:
    """Quadruplets of one (topic, A, B) split from disjoint pools (fields without the names)."""
    half = k // 2
    need = half + SAMPLE_SIZE
    order_a = rng.permutation(len(pool_a.post_ids))
    order_b = rng.permutation(len(pool_b.post_ids))
    rows = []
    left_a, left_b = len(order_a), len(order_b)
    used = 0
    while left_a >= need and left_b >= need:
        take_a = order_a[used : used + need]
        take_b = order_b[used : used + need]
        used += need
        left_a -= need
        left_b -= need
        example_ids = np.concatenate(
            [pool_a.post_ids[take_a[:half]], pool_b.post_ids[take_b[:half]]]
        )
        example_texts = np.concatenate([pool_a.texts[take_a[:half]], pool_b.texts[take_b[:half]]])
        labels = np.array(["A"] * half + ["B"] * half, dtype=object)
        shuffle = rng.permutation(k)
        rows.append(
            {
                "example_posts": example_texts[shuffle].tolist(),
                "example_post_ids": example_ids[shuffle].tolist(),
                "example_labels": labels[shuffle].tolist(),
                "sample_A": pool_a.texts[take_a[half:]].tolist(),
                "sample_A_ids": pool_a.post_ids[take_a[half:]].tolist(),
                "sample_B": pool_b.texts[take_b[half:]].tolist(),
                "sample_B_ids": pool_b.post_ids[take_b[half:]].tolist(),
                "switched": bool(rng.integers(2)),
            }
        )
    return rows


def sample_quadruplets(
    topic_posts: pl.DataFrame,
    settings: SampleSettings,
    demographics: Sequence[str] | None = None,
    members: Members | None = None,
) -> pl.DataFrame:
    """All quadruplets of every (topic, A, B) split; columns ``RELEASE_COLUMNS + EXTRA_COLUMNS``.
    ``members``: each group's members (:func:`splits.sampling.pools.group_members`); the posts of
    a pair's dual members are left out of its splits."""
    k, seed = settings.k, settings.seed
    if k < 2 or k % 2:
        raise ConfigError(f"sampling.k: must be an even number >= 2, got {k}")
    keys = sorted(
        demographics if demographics is not None else topic_posts.get_column("demographic").unique()
    )
    pools = pools_by_group(topic_posts)
    rows: list[dict[str, object]] = []
    for topic, category in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                pool_a, pool_b = disjoint_pools(
                    pools.get((topic, a), EMPTY_POOL),
                    pools.get((topic, b), EMPTY_POOL),
                    dual_members(members, a, b),
                )
                split = sample_split(pool_a, pool_b, k, split_rng(seed, topic, a, b))
                for n, row in enumerate(split):
                    row.update(
                        description=topic,
                        demographic_A=a,
                        demographic_B=b,
                        category=category,
                        quadruplet_id=f"{slug(topic)}.{a}.{b}.{n:05d}",
                    )
                rows.extend(split)
    return pl.DataFrame(rows, schema=QUADRUPLET_SCHEMA).select(RELEASE_COLUMNS + EXTRA_COLUMNS)
