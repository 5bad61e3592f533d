"""Group Theorization quadruplets (docs/method.md §2.7) and their validator.

For every topic t and unordered pair {A, B} of demographics (A < B alphabetically, as in the
release), the pools are the topic posts of A and of B on t. A post found in both pools (its author
is above the threshold of both groups) is left out of that pair's split: it cannot serve as
evidence for either group. Each split draws from its own random generator, seeded by the base seed
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

from splits.config import ConfigError, InputError
from splits.io import write_json, write_parquet

log = logging.getLogger(__name__)

SAMPLE_SIZE = 3  # posts per evaluation set
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
    frame = topic_posts.select("topic", "demographic", "post_id", "text").unique(
        subset=["topic", "demographic", "post_id"], keep="first"
    )
    return {
        (str(key[0]), str(key[1])): group.sort("post_id")
        for key, group in frame.group_by("topic", "demographic")
    }


def _disjoint(a: pl.DataFrame, b: pl.DataFrame) -> tuple[Pool, Pool]:
    shared = a.join(b, on="post_id", how="semi").get_column("post_id")
    only_a = a.filter(~pl.col("post_id").is_in(shared.implode()))
    only_b = b.filter(~pl.col("post_id").is_in(shared.implode()))

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
    topic_posts: pl.DataFrame, k: int, seed: int, demographics: Sequence[str] | None = None
) -> pl.DataFrame:
    """All quadruplets of every (topic, A, B) split; columns ``RELEASE_COLUMNS + EXTRA_COLUMNS``."""
    if k < 2 or k % 2:
        raise ConfigError(f"sampling.k: must be an even number >= 2, got {k}")
    keys = sorted(
        demographics if demographics is not None else topic_posts.get_column("demographic").unique()
    )
    pools = _pools(topic_posts)
    empty = pl.DataFrame(schema={"post_id": pl.String, "text": pl.String})
    rows: list[dict[str, object]] = []
    for topic, category in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                pool_a, pool_b = _disjoint(
                    pools.get((topic, a), empty), pools.get((topic, b), empty)
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


def validate_quadruplets(quadruplets: pl.DataFrame, topic_posts: pl.DataFrame, k: int) -> list[str]:
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

    # stop rule: each split has exactly as many rows as its disjoint pools allow
    pools = _pools(topic_posts)
    observed = {
        (r["description"], r["demographic_A"], r["demographic_B"]): r["len"]
        for r in quadruplets.group_by(split_keys).len().iter_rows(named=True)
    }
    keys = sorted(topic_posts.get_column("demographic").unique().to_list())
    empty = pl.DataFrame(schema={"post_id": pl.String, "text": pl.String})
    for topic, _ in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                pool_a, pool_b = _disjoint(
                    pools.get((topic, a), empty), pools.get((topic, b), empty)
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
    topic_posts: pl.DataFrame, demographics: Sequence[str] | None = None
) -> pl.DataFrame:
    """Per (topic, A, B) split: the sizes of its disjoint pools and the posts left out because
    they are in both groups' pools (``description, demographic_A, demographic_B, pool_A,
    pool_B, shared``)."""
    keys = sorted(
        demographics if demographics is not None else topic_posts.get_column("demographic").unique()
    )
    pools = _pools(topic_posts)
    empty = pl.DataFrame(schema={"post_id": pl.String, "text": pl.String})
    rows = []
    for topic, _ in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                full_a, full_b = pools.get((topic, a), empty), pools.get((topic, b), empty)
                pool_a, pool_b = _disjoint(full_a, full_b)
                rows.append(
                    (
                        topic,
                        a,
                        b,
                        len(pool_a.post_ids),
                        len(pool_b.post_ids),
                        full_a.height - len(pool_a.post_ids),
                    )
                )
    schema = {
        "description": pl.String,
        "demographic_A": pl.String,
        "demographic_B": pl.String,
        "pool_A": pl.Int64,
        "pool_B": pl.Int64,
        "shared": pl.Int64,
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
    shared = int(pools["shared"].sum())
    left_out = (
        f"; {shared:,} topic posts are in both pools of their pair and left out" if shared else ""
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
            "posts on %r, %d in both pools; each split needs k/2 + 3 = %d per group)",
            a,
            b,
            part.height,
            best["pool_A"],
            best["pool_B"],
            best["description"],
            int(part["shared"].sum()),
            need,
        )
        empty.append(f"{a}/{b}")
    return sorted(empty)


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


def run(args: argparse.Namespace) -> int:
    try:
        topic_posts = pl.read_parquet(args.topic_posts)
    except (OSError, pl.exceptions.PolarsError) as err:
        raise ConfigError(f"{args.topic_posts}: cannot read topic posts ({err})") from err
    missing = {"post_id", "text", "demographic", "topic", "category"} - set(topic_posts.columns)
    if missing:
        raise ConfigError(f"{args.topic_posts}: missing columns {sorted(missing)}")
    quadruplets = sample_quadruplets(topic_posts, args.k, args.seed)
    pools = split_pools(topic_posts)
    if quadruplets.height == 0:
        raise no_rows_error(pools, args.k)
    problems = validate_quadruplets(quadruplets, topic_posts, args.k)
    if problems:
        for problem in problems:
            log.error("invalid quadruplets: %s", problem)
        return 1
    empty_pairs = warn_empty_pairs(quadruplets, pools, args.k)
    filled = quadruplets.select("description", "demographic_A", "demographic_B").unique()
    empty_splits = pools.join(
        filled, on=["description", "demographic_A", "demographic_B"], how="anti"
    ).height
    write_parquet(quadruplets, args.out)
    if args.summary:
        write_json(
            {**summary(quadruplets), "empty_pairs": empty_pairs, "empty_splits": empty_splits},
            args.summary,
        )
    log.info(
        "%d quadruplets (k=%d) in %d of %d (topic, A, B) splits, all invariants hold",
        len(quadruplets),
        args.k,
        pools.height - empty_splits,
        pools.height,
    )
    return 0
