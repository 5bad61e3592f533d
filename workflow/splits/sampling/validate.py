"""The validator of the sampling: every invariant of docs/method.md §2.7 checked on the drawn
quadruplets against the topic posts they were drawn from."""

from __future__ import annotations

import polars as pl

from splits.config.definitions import SAMPLE_SIZE
from splits.sampling.draw import QUADRUPLET_SCHEMA, rows_possible
from splits.sampling.pools import (
    EMPTY_POOL,
    Members,
    disjoint_pools,
    dual_members,
    pools_by_group,
    topic_order,
)


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
    pools = pools_by_group(topic_posts)
    observed = {
        (r["description"], r["demographic_A"], r["demographic_B"]): r["len"]
        for r in quadruplets.group_by(split_keys).len().iter_rows(named=True)
    }
    keys = sorted(topic_posts.get_column("demographic").unique().to_list())
    for topic, _ in topic_order(topic_posts):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                pool_a, pool_b = disjoint_pools(
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
