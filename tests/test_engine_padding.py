"""The interactive engine's ranked list: padding posts (those no entry matches, after the hits)
carry no score (null, never 0) and are marked as padding, in both retrieval modes."""

from __future__ import annotations

import polars as pl
import pytest
from splits.config.settings import schema_defaults
from splits.hypotheses.engine import HypothesisEngine
from splits.hypotheses.settings import LiftSettings, RetrievalSettings


def _posts() -> pl.DataFrame:
    texts = [f"plain words number {i}" for i in range(40)]
    texts[3] = "we love the goal keeper"
    texts[17] = "goal goal goal"
    texts[25] = "a late goal"
    return pl.DataFrame(
        {
            "post_id": [f"p{i:03d}" for i in range(40)],
            "text": texts,
            "demographic": ["a" if i % 2 else "b" for i in range(40)],
            "topic": ["t"] * 40,
        }
    )


@pytest.mark.parametrize("mode", ["project", "release"])
def test_padding_posts_have_null_scores_and_are_marked(mode):
    retrieval = schema_defaults(RetrievalSettings, mode=mode, doc_count=30)
    settings = schema_defaults(LiftSettings, retrieval=retrieval)
    engine = HypothesisEngine(_posts(), settings)
    result = engine.query(["goal"], "t", "a", "b", "a", top_posts=10)
    posts = result.posts
    assert posts.height == 10
    assert posts["padding"].to_list() == [False] * 3 + [True] * 7
    assert posts["score"].head(3).is_not_null().all() and (posts["score"].head(3) > 0).all()
    assert posts["score"].tail(7).is_null().all()  # no score, not 0
    assert set(posts["post_id"].head(3)) == {"p003", "p017", "p025"}
    assert posts["spans"].tail(7).list.len().sum() == 0
