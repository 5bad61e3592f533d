"""Topic splits, quadruplets and export on the default pipeline run (generated sample corpus)."""

from __future__ import annotations

import polars as pl
import pytest
import yaml
from splits.bm25 import TOPIC_POSTS_COLUMNS
from splits.sampling import validate_quadruplets


@pytest.fixture(scope="module")
def results(default_run):
    return default_run / "results"


def test_planted_topic_posts_retrieved_with_precision(results):
    topic_posts = pl.read_parquet(results / "topics" / "topic_posts.parquet")
    assert topic_posts.columns == TOPIC_POSTS_COLUMNS
    truth = pl.read_parquet(results / "sample" / "post_truth.parquet").select(
        "post_id", pl.col("topic").alias("planted_topic")
    )
    joined = topic_posts.join(truth, on="post_id", how="left")
    assert joined.get_column("planted_topic").null_count() < len(joined)  # the check can fail
    precision = joined.group_by("topic").agg(
        (pl.col("planted_topic") == pl.col("topic")).fill_null(False).mean().alias("precision"),
        pl.len(),
    )
    assert precision.height == 10
    low = precision.filter(pl.col("precision") < 0.9)
    assert low.is_empty(), low
    # and every group has posts on every topic
    counts = topic_posts.group_by("topic", "demographic").len()
    assert counts.height == 10 * 6 and counts.get_column("len").min() >= 50


def test_quadruplets_hold_every_invariant(default_run, results):
    config = yaml.safe_load((default_run / "config" / "config.yaml").read_text())
    k = config["sampling"]["k"]
    quads = pl.read_parquet(results / "dataset" / "quadruplets.parquet")
    topic_posts = pl.read_parquet(results / "topics" / "topic_posts.parquet")
    assert len(quads) >= 400
    assert validate_quadruplets(quads, topic_posts, k) == []
    assert quads.select("demographic_A", "demographic_B").unique().height == 15
    assert abs(quads.get_column("switched").mean() - 0.5) < 0.05


def test_export_has_no_raw_authors(results):
    export_dir = results / "dataset" / "export"
    authors = (
        pl.read_parquet(results / "topics" / "topic_posts.parquet").get_column("author").unique()
    )
    exported = pl.read_parquet(export_dir / "topic_posts.parquet")
    assert "author" not in exported.columns
    assert exported.get_column("author_hash").is_in(authors.implode()).sum() == 0
    assert exported.get_column("author_hash").n_unique() == authors.len()
    card = (export_dir / "README.md").read_text()
    assert "## Limitations" in card and not any(a in card for a in authors.to_list())
