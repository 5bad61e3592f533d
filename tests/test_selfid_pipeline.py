"""The demographics stage family inside the default pipeline run (``default_run`` fixture):
output contracts, thresholds against the generator's planted change points, the report files."""

from __future__ import annotations

import json

import polars as pl
from splits.config.definitions import load_demographics


def test_outputs_follow_the_contract(default_run):
    results = default_run / "results"
    demographics = load_demographics(default_run / "config" / "demographics.sample.yaml")
    posts_columns = pl.read_parquet_schema(results / "posts" / "posts.parquet")
    for d in demographics:
        base = results / "demographics" / d.key
        users = pl.read_parquet(base / "users.parquet")
        assert users.columns[:7] == [
            "author",
            "demographic",
            "groupness",
            "percentile",
            "n_posts",
            "n_seed_posts",
            "n_seed_subreddits",
        ]
        assert users["author"].is_unique().all()
        assert users["percentile"].min() >= 0 and users["percentile"].max() < 100
        d_posts = pl.read_parquet(base / "posts.parquet")
        assert list(d_posts.columns) == list(posts_columns) + ["groupness", "percentile"]
        assert set(d_posts["author"]) <= set(users["author"])
        kept = pl.read_parquet(results / "graph" / "subreddits.parquet").filter("kept")
        assert set(d_posts["subreddit"]) <= set(kept["subreddit"])
        matches = pl.read_parquet(base / "selfid_matches.parquet")
        assert {"post_id", "author", "phrase", "kind", "context", "start", "end"} <= set(
            matches.columns
        )
        assert set(matches["kind"]) <= {"self", "anti"}
        assert (base / "selfid_curve.png").stat().st_size > 1000
    thresholds = json.loads((results / "demographics" / "thresholds.json").read_text())
    support = thresholds.pop("breakpoint_support")
    assert set(thresholds) == set(support) == {d.key for d in demographics}
    table = pl.read_csv(results / "demographics" / "formula_comparison.csv")
    assert table.height == 3 * len(demographics)
    assert (results / "demographics" / "formula_comparison.md").read_text().count("|") > 50


def test_auto_thresholds_match_the_planted_change_points(default_run):
    results = default_run / "results"
    thresholds = json.loads((results / "demographics" / "thresholds.json").read_text())
    support = thresholds.pop("breakpoint_support")
    meta = json.loads((results / "sample" / "synth_meta.json").read_text())
    for key, value in thresholds.items():
        planted = meta["demographics"][key]["change_point"]
        print(f"{key}: threshold {value}, planted change point {planted}, support {support[key]}")
        assert abs(value - planted) <= 10, key
        # a planted change point is a supported breakpoint
        assert support[key]["source"] == "auto" and support[key]["supported"], key
