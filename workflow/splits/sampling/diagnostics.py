"""What the sampling tells its user: why no quadruplet was drawn, the pairs left without rows,
the dual membership per pair, the run-health findings and the sampling summary."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import polars as pl

from splits.config.definitions import SAMPLE_SIZE
from splits.errors import InputError
from splits.health import Finding
from splits.sampling.pools import Members, dual_members

log = logging.getLogger(__name__)

OVERLAP_WARN_SHARE = 0.5  # two groups sharing more of either group's members: a health finding
STAGE = "sampling"


def _largest(pools: pl.DataFrame) -> dict:
    """The split whose smaller disjoint pool is largest."""
    return pools.sort(
        pl.min_horizontal("pool_A", "pool_B"),
        pl.max_horizontal("pool_A", "pool_B"),
        descending=True,
        maintain_order=True,
    ).row(0, named=True)


def no_rows_error(pools: pl.DataFrame, k: int) -> InputError:
    """Why no split holds a single quadruplet, in one line: k, the pool sizes, shared posts."""
    need = k // 2 + SAMPLE_SIZE
    if pools.height == 0:
        return InputError(
            "no quadruplets: the topic posts hold fewer than two demographics on any topic"
        )
    best = _largest(pools)
    shared = int(pools["left_out"].sum())
    left_out = (
        f"; {shared:,} topic posts are by members of both groups of their pair (in both pools or "
        "by an author at or above both thresholds) and left out"
        if shared
        else ""
    )
    return InputError(
        f"no quadruplets: sampling.k = {k} needs two disjoint pools of k/2 + 3 = {need} posts "
        f"in a (topic, A, B) split; the largest are {best['pool_A']} and {best['pool_B']} posts "
        f"({best['description']!r}, {best['demographic_A']}/{best['demographic_B']}){left_out}; "
        "lower sampling.k, raise topics.top_k or give the groups more distinct users"
    )


def warn_empty_pairs(quadruplets: pl.DataFrame, pools: pl.DataFrame, k: int) -> list[str]:
    """Log a warning for each demographic pair without a row on any topic (with the sizes of
    its largest pools); return those pairs as ``A/B``."""
    need = k // 2 + SAMPLE_SIZE
    filled = set(quadruplets.select("demographic_A", "demographic_B").unique().iter_rows())
    empty = []
    for (a, b), part in pools.group_by("demographic_A", "demographic_B", maintain_order=True):
        if (a, b) in filled:
            continue
        best = _largest(part)
        log.warning(
            "pair %s/%s: no quadruplet on any of its %d topics (largest disjoint pools %d and %d "
            "posts on %r, %d left out as posts of dual members; each split needs k/2 + 3 = %d "
            "per group)",
            a,
            b,
            part.height,
            best["pool_A"],
            best["pool_B"],
            best["description"],
            int(part["left_out"].sum()),
            need,
        )
        empty.append(f"{a}/{b}")
    return sorted(empty)


def dual_membership(
    members: Members | None, pools: pl.DataFrame, keys: Sequence[str]
) -> dict[str, dict[str, object]]:
    """Per pair ``A/B``: the members of each group, the dual members (at or above both
    thresholds), their share of each group, and the topic posts left out of the pair's splits
    (distinct posts over all topics)."""
    left = {
        (a, b): int(n)
        for a, b, n in pools.group_by("demographic_A", "demographic_B")
        .agg(pl.col("left_out").sum())
        .iter_rows()
    }
    keys = sorted(keys)
    out = {}
    for i, a in enumerate(keys):
        for b in keys[i + 1 :]:
            n_a = len(members.get(a, ())) if members else None
            n_b = len(members.get(b, ())) if members else None
            both = len(dual_members(members, a, b)) if members else None
            out[f"{a}/{b}"] = {
                "members_A": n_a,
                "members_B": n_b,
                "dual_members": both,
                "dual_share_of_A": round(both / n_a, 4) if n_a else None,
                "dual_share_of_B": round(both / n_b, 4) if n_b else None,
                "posts_left_out": left.get((a, b), 0),
            }
    return out


def overlap_findings(dual: dict[str, dict[str, object]]) -> list[Finding]:
    """One finding per pair whose dual members are more than OVERLAP_WARN_SHARE of either
    group's members: the two groups are largely the same people."""
    findings = []
    for pair, d in dual.items():
        shares = [s for s in (d["dual_share_of_A"], d["dual_share_of_B"]) if s is not None]
        if not shares or max(shares) <= OVERLAP_WARN_SHARE:
            continue
        a, b = pair.split("/")
        findings.append(
            Finding(
                STAGE,
                "groups_overlap",
                f"groups {a} and {b}",
                f"{d['dual_members']:,} users are members of both ({d['dual_share_of_A']:.0%} of "
                f"{a}'s {d['members_A']:,} members, {d['dual_share_of_B']:.0%} of {b}'s "
                f"{d['members_B']:,}); their {d['posts_left_out']:,} topic posts are left out of "
                "the pair, and the rest compares two near-identical groups",
                "give the groups distinct seed subreddits, raise their thresholds in the "
                "demographics file, or drop one of the two groups",
            )
        )
    return findings


def empty_pair_findings(empty_pairs: Sequence[str], k: int) -> list[Finding]:
    return [
        Finding(
            STAGE,
            "pair_without_rows",
            f"pair {pair}",
            f"no quadruplet on any topic (each split needs k/2 + 3 = {k // 2 + SAMPLE_SIZE} "
            "posts per group after the posts of dual members are left out)",
            "lower sampling.k, raise topics.top_k, or give the groups more distinct members",
        )
        for pair in empty_pairs
    ]


def summary(quadruplets: pl.DataFrame) -> dict[str, object]:
    pairs = (
        quadruplets.group_by("demographic_A", "demographic_B")
        .len()
        .sort("demographic_A", "demographic_B")
    )
    return {
        "rows": len(quadruplets),
        "topics": quadruplets.get_column("description").n_unique(),
        "switched_share": float(quadruplets.get_column("switched").mean() or 0.0),
        "rows_per_pair": {f"{r[0]}/{r[1]}": r[2] for r in pairs.iter_rows()},
    }
