"""TM stage: the evaluation subsample, prompt building, the log-odds oracle and builtin TMs."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest
from splits.config.settings import schema_defaults
from splits.config.templates import CM_SLOTS, TM_SLOTS
from splits.errors import ConfigError
from splits.evaluation.common import parse_template
from splits.evaluation.settings import TMPromptSettings, TMSettings
from splits.evaluation.subsample import normalise_quadruplets, subsample
from splits.evaluation.theorize import (
    TM_REQUIRED,
    build_tm_requests,
    distinctive_words,
    log_odds_dirichlet,
    oracle_theory,
    theorize_rows,
)
from splits.llm import load_model

NAMES = {"catholic": "Catholic", "teacher": "teacher"}
REGISTRY = {
    "no-theory": {"backend": "builtin", "kind": "no-theory"},
    "oracle-lexical": {"backend": "builtin", "kind": "oracle-lexical", "n_words": 3},
}


def quadruplets(n=50, k=8, seed=0, with_labels=True):
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        labels = ["A", "B"] * (k // 2)
        rng.shuffle(labels)
        posts = [
            (f"rosary parish post {i}-{j}" if label == "A" else f"grading students post {i}-{j}")
            for j, label in enumerate(labels)
        ]
        row = {
            "quadruplet_id": f"q{i}",
            "description": "Basketball",
            "category": "Sports & Fitness",
            "demographic_A": "catholic",
            "demographic_B": "teacher",
            "example_posts": posts,
            "sample_A": ["rosary a", "parish b", "mass c"],
            "sample_B": ["grading a", "students b", "class c"],
            "switched": rng.random() < 0.5,
        }
        if with_labels:
            row["example_labels"] = labels
        rows.append(row)
    return pl.DataFrame(rows)


def test_subsample_is_seeded_and_nested():
    frame = quadruplets(100)
    a = subsample(frame, 30, seed=7)
    b = subsample(frame, 30, seed=7)
    c = subsample(frame, 60, seed=7)
    d = subsample(frame, 30, seed=8)
    assert a.equals(b)
    assert a["eval_row"].to_list() == list(range(30))
    assert c.head(30).equals(a)  # a smaller subsample is the start of a larger one
    assert set(a["quadruplet_id"]) != set(d["quadruplet_id"])
    assert subsample(frame, None, seed=7).height == 100
    assert a["quadruplet_id"].n_unique() == 30


def test_release_rows_get_ids_and_categories_and_bad_rows_are_counted():
    frame = quadruplets(5, with_labels=False).drop("quadruplet_id", "category")
    frame = pl.concat(
        [
            frame,
            frame.head(1).with_columns(
                pl.lit("Curling").alias("description"),
                pl.lit([], dtype=pl.List(pl.String)).alias("sample_A"),
            ),
        ]
    )
    out, counts = normalise_quadruplets(
        frame, {"Basketball": "Sports & Fitness"}, "release", "by_group"
    )
    assert out["quadruplet_id"].to_list() == [f"row-{i}" for i in range(5)]
    assert set(out["category"]) == {"Sports & Fitness"}
    assert counts["malformed_rows_dropped"] == 1
    assert counts["category_unknown"] == 1
    with pytest.raises(ConfigError, match="switched"):
        normalise_quadruplets(frame.drop("switched"), {}, "release", "by_group")


def test_tm_prompt_posts_are_one_line_and_cut(repo_root):
    template = parse_template(
        (repo_root / "resources/prompts/theory.txt").read_text(),
        "theory.txt",
        TM_SLOTS,
        TM_REQUIRED,
    )
    frame = quadruplets(2).with_columns(
        pl.lit(["first\nline " + "z" * 3000, "second\r\npost", "3", "4"]).alias("example_posts")
    )
    rows = subsample(frame, None, 0)
    requests = build_tm_requests(rows, 2, template, NAMES, schema_defaults(TMPromptSettings))
    prompt = requests[0].messages[0]["content"]
    assert "1. first line " + "z" * (2000 - len("first\nline ")) + "\n2. second post\n" in prompt
    assert "z" * 1990 not in prompt.replace("z" * 1989, "", 1)  # cut to 2,000 characters
    assert "3. 3" not in prompt  # only the first k=2 posts
    assert "Group A: Catholic" in prompt and "Topic: Basketball" in prompt
    assert requests[0].payload["labels"] == rows["example_labels"][0].to_list()[:2]
    with pytest.raises(ConfigError, match="k=5 exceeds"):
        build_tm_requests(rows, 5, template, NAMES, schema_defaults(TMPromptSettings))


def test_log_odds_hand_value():
    counts_a = {"x": 3, "y": 1}
    counts_b = {"x": 1, "y": 3}
    prior = {"x": 4.0, "y": 4.0}
    z = log_odds_dirichlet(counts_a, counts_b, prior)
    # n_a = n_b = 4, a_0 = 8: delta_x = log(7/5) - log(5/7) = 2 log 1.4; var = 1/7 + 1/5
    assert z["x"] == pytest.approx(2 * math.log(1.4) / math.sqrt(1 / 7 + 1 / 5))
    assert z["y"] == pytest.approx(-z["x"])


def test_distinctive_words_finds_planted_words():
    posts = [
        "rosary parish today",
        "parish fair rosary",
        "grading students today",
        "students grading",
    ]
    words = distinctive_words(posts, ["A", "A", "B", "B"], n_words=2)
    assert set(words["A"]) == {"rosary", "parish"}
    assert set(words["B"]) == {"grading", "students"}


def test_oracle_theory_format_and_missing_labels():
    payload = {
        "group_a": "Catholic",
        "group_b": "teacher",
        "posts": ["rosary parish", "grading students"],
        "labels": ["A", "B"],
    }
    theory = oracle_theory(payload, 5, 1.0)
    lines = theory.split("\n")
    assert lines[0].startswith("Group A (Catholic) posts use words like: ")
    assert lines[1].startswith("Group B (teacher) posts use words like: ")
    assert "rosary" in lines[0] and "grading" in lines[1]
    with pytest.raises(ConfigError, match="example_labels"):
        oracle_theory({**payload, "labels": None}, 5, 1.0)


def test_builtin_tms_through_the_registry():
    settings = schema_defaults(TMSettings)
    rows = subsample(quadruplets(10), None, 0)
    oracle = load_model("oracle-lexical", REGISTRY)
    theories = theorize_rows(rows, 8, oracle, None, NAMES, "oracle-lexical", settings)
    assert theories.height == 10 and set(theories["k"]) == {8}
    first = theories["theory"][0]
    assert "rosary" in first.split("\n")[0] and "grading" in first.split("\n")[1]
    empty = theorize_rows(
        rows, 0, load_model("no-theory", REGISTRY), None, NAMES, "no-theory", settings
    )
    assert set(empty["theory"]) == {""}
    with pytest.raises(ConfigError, match="unknown key"):
        load_model("x", {"x": {"backend": "builtin", "kind": "no-theory", "bogus": 1}})
    assert CM_SLOTS  # the CM and TM slot sets are distinct names
    assert not set(CM_SLOTS) & set(TM_SLOTS)
