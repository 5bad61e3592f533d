"""Group Theorization quadruplets (docs/method.md §2.7) and their validator.

For every topic t and unordered pair {A, B} of demographics (A < B alphabetically, as in the
release), the pools are the topic posts of A and of B on t. A post whose author is at or above the
threshold of both groups (a dual member of the pair) is left out of that pair's split, whichever
pool it was found in: it cannot serve as evidence for either group. The members of each group
(its users at or above its threshold percentile) come from the groups' ``users.parquet`` and
``thresholds.json`` (``--users``, ``--thresholds``); for the authors' released posts, which carry
no percentiles, ``--members-from-topic-posts`` makes a group's members the authors of its topic
posts, so an author whose posts were released under both groups is a dual member. With neither,
only the posts found in both pools are left out (a lower bound, logged as a warning). The sampling summary counts the dual
members and their left-out posts per pair (``dual_membership``), and two groups that share more
than half of either group's members are a run-health finding (``groups_overlap``). Each split draws from its own random generator, seeded by the base seed
and the names of (t, A, B), so adding a topic or a group leaves the other splits unchanged.
While both pools hold at least k/2 + 3 posts: draw k/2 posts of A and k/2 of B and shuffle them
(the calibration set ``example_posts``, with hidden labels ``example_labels``, "A"/"B"), draw 3
more of A (``sample_A``) and 3 of B (``sample_B``) and a fair coin ``switched``; drawn posts are
removed from the pools. A split therefore has exactly min(|A|, |B|) // (k/2 + 3) rows.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from splits.config.definitions import SAMPLE_SIZE, THRESHOLDS_SUPPORT_KEY
from splits.errors import ConfigError, InputError
from splits.health import Finding, log_findings, write_findings
from splits.io import read_json, write_json, write_parquet

log = logging.getLogger(__name__)

OVERLAP_WARN_SHARE = 0.5  # two groups sharing more of either group's members: a health finding
STAGE = "sampling"
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


@dataclass(frozen=True)
class Pool:
    post_ids: np.ndarray  # str objects, sorted
    texts: np.ndarray


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


def _pools(topic_posts: pl.DataFrame) -> dict[tuple[str, str], pl.DataFrame]:
    author = (
        pl.col("author").cast(pl.String)
        if "author" in topic_posts.columns
        else pl.lit(None, pl.String).alias("author")
    )
    frame = topic_posts.select("topic", "demographic", "post_id", "text", author).unique(
        subset=["topic", "demographic", "post_id"], keep="first"
    )
    return {
        (str(key[0]), str(key[1])): group.sort("post_id")
        for key, group in frame.group_by("topic", "demographic")
    }


Members = dict[str, frozenset[str]]
EMPTY_POOL = pl.DataFrame(schema={"post_id": pl.String, "text": pl.String, "author": pl.String})


def group_members(users: pl.DataFrame, thresholds: dict) -> Members:
    """Each group's members: its users (``demographic``, ``author``, ``percentile``) at or above
    its threshold percentile; a group without a threshold has none."""
    members: dict[str, frozenset[str]] = {}
    for (key,), part in users.group_by("demographic"):
        threshold = thresholds.get(str(key))
        if threshold is None:
            continue
        members[str(key)] = frozenset(
            part.filter(pl.col("percentile") >= float(threshold)).get_column("author").to_list()
        )
    return members


def read_members(users_files: Sequence[str], thresholds_file: str) -> Members:
    """:func:`group_members` of the groups' users.parquet files and thresholds.json."""
    try:
        thresholds = read_json(thresholds_file)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{thresholds_file}: cannot read thresholds ({err})") from err
    thresholds = {k: v for k, v in thresholds.items() if k != THRESHOLDS_SUPPORT_KEY}
    frames = []
    for path in users_files:
        try:
            frames.append(pl.read_parquet(path, columns=["demographic", "author", "percentile"]))
        except (OSError, pl.exceptions.PolarsError) as err:
            raise ConfigError(f"{path}: cannot read the group's users ({err})") from err
    if not frames:
        return {}
    return group_members(pl.concat(frames, how="vertical_relaxed"), thresholds)


def members_of_topic_posts(topic_posts: pl.DataFrame) -> Members:
    """Each group's members as the authors of its topic posts (data that carries a group per post
    but no group-ness percentiles, such as the authors' released posts)."""
    return {
        str(key): frozenset(part.get_column("author").drop_nulls().to_list())
        for (key,), part in topic_posts.group_by("demographic")
    }


def dual_members(members: Members | None, a: str, b: str) -> frozenset[str]:
    """The authors at or above both groups' thresholds (empty without membership data)."""
    if not members:
        return frozenset()
    return members.get(a, frozenset()) & members.get(b, frozenset())


def _left_out(a: pl.DataFrame, b: pl.DataFrame, dual: frozenset[str]) -> pl.Expr:
    shared = a.join(b, on="post_id", how="semi").get_column("post_id")
    out = pl.col("post_id").is_in(shared.implode())
    if dual:
        out = out | pl.col("author").is_in(pl.Series(sorted(dual), dtype=pl.String).implode())
    return out


def _disjoint(
    a: pl.DataFrame, b: pl.DataFrame, dual: frozenset[str] = frozenset()
) -> tuple[Pool, Pool]:
    """The pools of a pair without the posts found in both and the posts of dual members."""
    only_a = a.filter(~_left_out(a, b, dual))
    only_b = b.filter(~_left_out(b, a, dual))

    def pool(frame: pl.DataFrame) -> Pool:
        return Pool(
            np.array(frame.get_column("post_id").to_list(), dtype=object),
            np.array(frame.get_column("text").to_list(), dtype=object),
        )

    return pool(only_a), pool(only_b)


def topic_order(topic_posts: pl.DataFrame) -> list[tuple[str, str]]:
    """(topic, category) in order of first appearance."""
    pairs = topic_posts.select("topic", "category").unique(
        subset="topic", keep="first", maintain_order=True
    )
    return list(
        zip(
            pairs.get_column("topic").to_list(), pairs.get_column("category").to_list(), strict=True
        )
    )


def sample_quadruplets(
    topic_posts: pl.DataFrame,
    k: int,
    seed: int,
    demographics: Sequence[str] | None = None,
    members: Members | None = None,
) -> pl.DataFrame:
    """All quadruplets of every (topic, A, B) split; columns ``RELEASE_COLUMNS + EXTRA_COLUMNS``.
    ``members``: each group's members (:func:`group_members`); the posts of a pair's dual
    members are left out of its splits."""
    if k < 2 or k % 2:
        raise ConfigError(f"sampling.k: must be an even number >= 2, got {k}")
    keys = sorted(
        demographics if demographics is not None else topic_posts.get_column("demographic").unique()
    )
    pools = _pools(topic_posts)
    rows: list[dict[str, object]] = []
    for topic, category in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                pool_a, pool_b = _disjoint(
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


# --------------------------------------------------------------------------- validation


def validate_quadruplets(
    quadruplets: pl.DataFrame, topic_posts: pl.DataFrame, k: int, members: Members | None = None
) -> list[str]:
    """Every invariant of the sampling; returns the violations (empty when all hold)."""
    problems: list[str] = []
    missing = [c for c in QUADRUPLET_SCHEMA if c not in quadruplets.columns]
    if missing:
        return [f"missing columns {missing}"]
    for column, dtype in QUADRUPLET_SCHEMA.items():
        if quadruplets.schema[column] != dtype:
            problems.append(
                f"column {column} has type {quadruplets.schema[column]}, expected {dtype}"
            )
    if quadruplets.null_count().sum_horizontal().item():
        problems.append("null values")
    half = k // 2
    lengths = quadruplets.select(
        pl.col("example_posts", "example_post_ids", "example_labels").list.len().name.suffix("_n"),
        pl.col("sample_A", "sample_B", "sample_A_ids", "sample_B_ids").list.len().name.suffix("_n"),
        (pl.col("example_labels").list.eval(pl.element() == "A").list.sum()).alias("n_labels_A"),
        (pl.col("example_labels").list.eval(pl.element() == "B").list.sum()).alias("n_labels_B"),
        (pl.col("demographic_A") < pl.col("demographic_B")).alias("ordered"),
    )
    for column in ["example_posts_n", "example_post_ids_n", "example_labels_n"]:
        if (lengths.get_column(column) != k).any():
            problems.append(f"{column.removesuffix('_n')}: a row does not hold k={k} entries")
    for column in ["sample_A_n", "sample_B_n", "sample_A_ids_n", "sample_B_ids_n"]:
        if (lengths.get_column(column) != SAMPLE_SIZE).any():
            problems.append(
                f"{column.removesuffix('_n')}: a row does not hold {SAMPLE_SIZE} entries"
            )
    if (
        (lengths.get_column("n_labels_A") != half) | (lengths.get_column("n_labels_B") != half)
    ).any():
        problems.append("calibration halves are not balanced (k/2 labelled A and k/2 labelled B)")
    if not lengths.get_column("ordered").all():
        problems.append("demographic_A is not alphabetically before demographic_B")
    if problems:
        return problems
    if quadruplets.get_column("quadruplet_id").n_unique() != len(quadruplets):
        problems.append("duplicate quadruplet_id")

    # every drawn post: (split, post_id, text, role)
    split_keys = ["description", "demographic_A", "demographic_B"]
    drawn = pl.concat(
        [
            quadruplets.select(
                *split_keys,
                "category",
                pl.col("example_post_ids").alias("post_id"),
                pl.col("example_posts").alias("text"),
                pl.col("example_labels").alias("side"),
            ).explode("post_id", "text", "side"),
            quadruplets.select(
                *split_keys,
                "category",
                pl.col("sample_A_ids").alias("post_id"),
                pl.col("sample_A").alias("text"),
                pl.col("sample_A").list.eval(pl.lit("A")).alias("side"),
            ).explode("post_id", "text", "side"),
            quadruplets.select(
                *split_keys,
                "category",
                pl.col("sample_B_ids").alias("post_id"),
                pl.col("sample_B").alias("text"),
                pl.col("sample_B").list.eval(pl.lit("B")).alias("side"),
            ).explode("post_id", "text", "side"),
        ]
    ).with_columns(
        pl.when(pl.col("side") == "A")
        .then(pl.col("demographic_A"))
        .otherwise(pl.col("demographic_B"))
        .alias("demographic")
    )
    repeats = drawn.group_by(*split_keys, "post_id").len().filter(pl.col("len") > 1)
    if len(repeats):
        problems.append(f"{len(repeats)} posts drawn twice within one (topic, A, B) split")
    source = topic_posts.select(
        pl.col("topic").cast(pl.String).alias("description"),
        pl.col("demographic").cast(pl.String),
        pl.col("post_id").cast(pl.String),
        pl.col("text").cast(pl.String).alias("source_text"),
        pl.col("category").cast(pl.String).alias("source_category"),
    ).unique(subset=["description", "demographic", "post_id"], keep="first")
    matched = drawn.join(source, on=["description", "demographic", "post_id"], how="left")
    if matched.get_column("source_text").null_count():
        problems.append("a drawn post is not a topic post of its labelled group on the row's topic")
    elif (matched.get_column("source_text") != matched.get_column("text")).any():
        problems.append("a drawn post's text differs from its topic post")
    elif (matched.get_column("source_category") != matched.get_column("category")).any():
        problems.append("a row's category differs from its topic's category")
    other = drawn.with_columns(
        pl.when(pl.col("side") == "A")
        .then(pl.col("demographic_B"))
        .otherwise(pl.col("demographic_A"))
        .alias("demographic")
    ).join(source, on=["description", "demographic", "post_id"], how="semi")
    if len(other):
        problems.append(f"{len(other)} drawn posts are topic posts of both groups of their pair")
    if members and "author" in topic_posts.columns:
        authors = topic_posts.select(
            pl.col("post_id").cast(pl.String), pl.col("author").cast(pl.String)
        ).unique(subset="post_id", keep="first")
        drawn_authors = drawn.join(authors, on="post_id", how="left")
        dual = 0
        for (a, b), part in drawn_authors.group_by("demographic_A", "demographic_B"):
            both = dual_members(members, str(a), str(b))
            if both:
                names = pl.Series(sorted(both), dtype=pl.String).implode()
                dual += part.filter(pl.col("author").is_in(names)).height
        if dual:
            problems.append(
                f"{dual} drawn posts are by authors at or above both groups' thresholds"
            )

    # stop rule: each split has exactly as many rows as its disjoint pools allow
    pools = _pools(topic_posts)
    observed = {
        (r["description"], r["demographic_A"], r["demographic_B"]): r["len"]
        for r in quadruplets.group_by(split_keys).len().iter_rows(named=True)
    }
    keys = sorted(topic_posts.get_column("demographic").unique().to_list())
    for topic, _ in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                pool_a, pool_b = _disjoint(
                    pools.get((topic, a), EMPTY_POOL),
                    pools.get((topic, b), EMPTY_POOL),
                    dual_members(members, a, b),
                )
                expected = rows_possible(len(pool_a.post_ids), len(pool_b.post_ids), k)
                got = observed.pop((topic, a, b), 0)
                if got != expected:
                    problems.append(
                        f"split ({topic!r}, {a}, {b}): {got} rows, the pools allow {expected}"
                    )
    if observed:
        problems.append(f"rows for splits without topic posts: {sorted(observed)[:3]}")
    return problems


def split_pools(
    topic_posts: pl.DataFrame,
    demographics: Sequence[str] | None = None,
    members: Members | None = None,
) -> pl.DataFrame:
    """Per (topic, A, B) split: the sizes of its disjoint pools, the posts found in both pools
    (``shared``) and the posts left out of each pool (``left_out_A``, ``left_out_B``: in both
    pools, or by an author at or above both thresholds); ``left_out`` the distinct posts left
    out of the split."""
    keys = sorted(
        demographics if demographics is not None else topic_posts.get_column("demographic").unique()
    )
    pools = _pools(topic_posts)
    rows = []
    for topic, _ in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                full_a = pools.get((topic, a), EMPTY_POOL)
                full_b = pools.get((topic, b), EMPTY_POOL)
                pool_a, pool_b = _disjoint(full_a, full_b, dual_members(members, a, b))
                shared = full_a.join(full_b, on="post_id", how="semi").height
                out_a = full_a.height - len(pool_a.post_ids)
                out_b = full_b.height - len(pool_b.post_ids)
                rows.append(
                    (
                        topic,
                        a,
                        b,
                        len(pool_a.post_ids),
                        len(pool_b.post_ids),
                        shared,
                        out_a,
                        out_b,
                        out_a + out_b - shared,
                    )
                )
    schema = {
        "description": pl.String,
        "demographic_A": pl.String,
        "demographic_B": pl.String,
        "pool_A": pl.Int64,
        "pool_B": pl.Int64,
        "shared": pl.Int64,
        "left_out_A": pl.Int64,
        "left_out_B": pl.Int64,
        "left_out": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


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


# --------------------------------------------------------------------------- command line


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic-posts", required=True, help="results/topics/topic_posts.parquet")
    parser.add_argument("--k", type=int, default=42, help="calibration-set size (even)")
    parser.add_argument("--seed", type=int, required=True, help="base seed")
    parser.add_argument("--out", required=True, help="quadruplets.parquet")
    parser.add_argument("--summary", help="JSON summary (rows, per pair, switched share)")
    parser.add_argument(
        "--users",
        nargs="+",
        default=[],
        help="each group's users.parquet (demographic, author, percentile): with --thresholds, "
        "the posts of authors at or above both groups' thresholds are left out of the pair",
    )
    parser.add_argument("--thresholds", help="thresholds.json (with --users)")
    parser.add_argument(
        "--members-from-topic-posts",
        action="store_true",
        help="a group's members are the authors of its topic posts (data without group-ness "
        "percentiles, such as the authors' released posts)",
    )
    parser.add_argument("--health", help="run-health findings (JSON; splits.health)")


def run(args: argparse.Namespace) -> int:
    try:
        topic_posts = pl.read_parquet(args.topic_posts)
    except (OSError, pl.exceptions.PolarsError) as err:
        raise ConfigError(f"{args.topic_posts}: cannot read topic posts ({err})") from err
    missing = {"post_id", "text", "demographic", "topic", "category"} - set(topic_posts.columns)
    if missing:
        raise ConfigError(f"{args.topic_posts}: missing columns {sorted(missing)}")
    if bool(args.users) != bool(args.thresholds):
        raise ConfigError("splits sample: --users and --thresholds go together")
    if "author" not in topic_posts.columns:
        raise ConfigError(f"{args.topic_posts}: missing column 'author'")
    if args.users:
        members = read_members(args.users, args.thresholds)
    elif args.members_from_topic_posts:
        members = members_of_topic_posts(topic_posts)
    else:
        members = None
        log.warning(
            "no --users/--thresholds: only posts found in both pools of a pair are left out, not "
            "every post of an author at or above both groups' thresholds"
        )
    quadruplets = sample_quadruplets(topic_posts, args.k, args.seed, members=members)
    pools = split_pools(topic_posts, members=members)
    if quadruplets.height == 0:
        raise no_rows_error(pools, args.k)
    problems = validate_quadruplets(quadruplets, topic_posts, args.k, members)
    if problems:
        for problem in problems:
            log.error("invalid quadruplets: %s", problem)
        return 1
    empty_pairs = warn_empty_pairs(quadruplets, pools, args.k)
    filled = quadruplets.select("description", "demographic_A", "demographic_B").unique()
    empty_splits = pools.join(
        filled, on=["description", "demographic_A", "demographic_B"], how="anti"
    ).height
    keys = sorted(topic_posts.get_column("demographic").unique().to_list())
    dual = dual_membership(members, pools, keys)
    overlaps = overlap_findings(dual)
    log_findings(overlaps, log)
    for pair, d in dual.items():
        if d["posts_left_out"]:
            log.info(
                "pair %s: %s dual members, %d topic posts left out",
                pair,
                d["dual_members"],
                d["posts_left_out"],
            )
    write_parquet(quadruplets, args.out)
    if args.summary:
        write_json(
            {
                **summary(quadruplets),
                "empty_pairs": empty_pairs,
                "empty_splits": empty_splits,
                "dual_membership": dual,
            },
            args.summary,
        )
    if args.health:
        write_findings(args.health, overlaps + empty_pair_findings(empty_pairs, args.k))
    log.info(
        "%d quadruplets (k=%d) in %d of %d (topic, A, B) splits, all invariants hold",
        len(quadruplets),
        args.k,
        pools.height - empty_splits,
        pools.height,
    )
    return 0
