"""Reduce 2 of the BM25 topic splits: the shards' top Ks merged into the top K per (demographic,
topic) (the top K of the union is the top K of the shards' top Ks), ranked, and the bottom
``topics.drop_fraction`` of each topic's pooled rows (all demographics) dropped by norm_score;
the topics and counts tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from splits.config.definitions import Topic
from splits.topics.scoring import HIT_SCHEMA

TOPIC_POSTS_COLUMNS = [
    "post_id",
    "author",
    "subreddit",
    "text",
    "demographic",
    "category",
    "topic",
    "score",
    "norm_score",
    "rank",
]


def best_hits(hits: Iterable[pl.DataFrame | pl.LazyFrame], top_k_posts: int) -> pl.DataFrame:
    """The top ``top_k_posts`` rows per (demographic, topic) over the shards' hits (score
    descending, post id ascending among ties), folded one shard at a time: the top K of the
    union is the top K of the shards' top Ks."""
    best = pl.DataFrame(schema=HIT_SCHEMA)
    for frame in hits:
        both = pl.concat([best, frame.lazy().select(list(HIT_SCHEMA)).collect()])
        best = (
            both.sort(["score", "post_id"], descending=[True, False])
            .group_by(["demographic", "topic"], maintain_order=True)
            .head(top_k_posts)
            .select(list(HIT_SCHEMA))
        )
    return best


def drop_bottom(topic_rows: pl.DataFrame, fraction: float) -> pl.DataFrame:
    """Per topic, drop the bottom ``fraction`` of the pooled rows by norm_score (ties with the
    lowest kept score are kept)."""
    if fraction <= 0:
        return topic_rows
    return (
        topic_rows.with_columns(
            pl.col("norm_score")
            .sort()
            .gather((pl.len() * fraction).floor().cast(pl.Int64).clip(0, pl.len() - 1))
            .first()
            .over("topic")
            .alias("_cut")
        )
        .filter(pl.col("norm_score") >= pl.col("_cut"))
        .drop("_cut")
    )


def topic_posts_table(
    best: pl.DataFrame, posts: pl.LazyFrame, topics: Sequence[Topic], drop_fraction: float
) -> pl.DataFrame:
    """The topic_posts table: ``best`` ranked within (demographic, topic), the pooled bottom
    ``drop_fraction`` of each topic dropped, and author, subreddit and text of the kept posts
    looked up in ``posts`` (the shards)."""
    ranked = best.sort(["score", "post_id"], descending=[True, False]).with_columns(
        pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(["demographic", "topic"]).alias("rank")
    )
    kept = drop_bottom(ranked, drop_fraction)
    meta = (
        posts.select("post_id", "author", "subreddit", "text")
        .join(kept.select("post_id").unique().lazy(), on="post_id", how="semi")
        .unique(subset="post_id", keep="first")
        .collect(engine="streaming")
    )
    topic_order = pl.DataFrame({"topic": [t.topic for t in topics]}).with_row_index("_topic_order")
    return (
        kept.join(meta, on="post_id", how="left")
        .join(topic_order, on="topic", how="left")
        .sort("_topic_order", "demographic", "rank")
        .select(TOPIC_POSTS_COLUMNS)
    )


def retrieved_counts(hits: Iterable[pl.DataFrame | pl.LazyFrame]) -> pl.DataFrame:
    """(demographic, topic, retrieved): the posts holding one of the topic's keywords, summed
    over the shards' hits (each shard's count is on every one of its hit rows)."""
    parts = [
        frame.lazy()
        .group_by("demographic", "topic")
        .agg(pl.col("matching").first().cast(pl.Int64))
        .collect()
        for frame in hits
    ]
    if not parts:
        return pl.DataFrame(
            schema={"demographic": pl.String, "topic": pl.String, "retrieved": pl.Int64}
        )
    return (
        pl.concat(parts)
        .group_by("demographic", "topic")
        .agg(pl.col("matching").sum().alias("retrieved"))
    )


def topics_frame(topics: Sequence[Topic]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "category": [t.category for t in topics],
            "topic": [t.topic for t in topics],
            "keywords": [list(t.keywords) for t in topics],
        },
        schema={"category": pl.String, "topic": pl.String, "keywords": pl.List(pl.String)},
    )


def counts_table(
    topic_posts: pl.DataFrame, topics: Sequence[Topic], demographics: Sequence[str]
) -> pl.DataFrame:
    """Posts per topic (rows) and demographic (columns) after the cut, with totals."""
    counts = topic_posts.group_by("topic", "demographic").len()
    table = topics_frame(topics).select("category", "topic")
    for key in demographics:
        table = table.join(
            counts.filter(pl.col("demographic") == key).select("topic", pl.col("len").alias(key)),
            on="topic",
            how="left",
            maintain_order="left",
        )
    table = table.with_columns(pl.col(list(demographics)).fill_null(0).cast(pl.Int64))
    return table.with_columns(pl.sum_horizontal(list(demographics)).alias("total"))
