"""The geometric mean by hand (the shared tests are in test_stats.py); the split and comparison tables on a small hand-made frame."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from splits.evaluation.metrics import (
    comparisons_table,
    geometric_mean,
    groups_table,
    splits_table,
    summary_table,
)
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint


def test_geometric_mean_hand_values():
    assert geometric_mean([0.5, 0.8]) == pytest.approx(math.sqrt(0.4))
    assert geometric_mean([0.25, 1.0, 0.5]) == pytest.approx(0.5)
    assert geometric_mean([0.0, 0.9]) == 0.0
    assert math.isnan(geometric_mean([]))


def _predictions():
    """Two TMs on the same 6 rows; catholic/teacher rows in category X, one jewish row in Y."""
    base = {
        "quadruplet_id": [f"q{i}" for i in range(6)],
        "eval_row": list(range(6)),
        "demographic_A": ["catholic"] * 4 + ["catholic", "jewish"],
        "demographic_B": ["teacher"] * 4 + ["jewish", "teacher"],
        "category": ["X", "X", "X", "X", "Y", "Y"],
        "topic": ["t1", "t1", "t2", "t2", "t3", "t3"],
    }
    good = pl.DataFrame(
        {
            **base,
            "tm": ["good"] * 6,
            "cm": ["cm"] * 6,
            "k": [4] * 6,
            "correct": [True, True, True, False, True, True],
            "detected": [True] * 6,
        }
    )
    bad = pl.DataFrame(
        {
            **base,
            "tm": ["bad"] * 6,
            "cm": ["cm"] * 6,
            "k": [4] * 6,
            "correct": [False, True, False, False, False, True],
            "detected": [True, True, False, False, True, True],
        }
    )
    return pl.concat([good, bad])


def test_summary_table_counts_and_geomean():
    summary = summary_table(_predictions()).sort("tm")
    bad, good = summary.row(0, named=True), summary.row(1, named=True)
    assert (good["n"], good["correct"], good["detected"]) == (6, 5, 6)
    assert good["accuracy"] == pytest.approx(5 / 6)
    # category X: 3/4, Y: 2/2
    assert good["category_geomean"] == pytest.approx(math.sqrt(0.75 * 1.0))
    assert bad["accuracy"] == pytest.approx(2 / 6)
    assert bad["accuracy_detected"] == pytest.approx(2 / 4)
    assert bad["undetected_rate"] == pytest.approx(2 / 6)
    lo, hi = proportion_confint(5, 6, method="wilson")
    assert (good["ci_low"], good["ci_high"]) == (pytest.approx(lo), pytest.approx(hi))


def test_splits_count_a_row_under_both_of_its_demographics():
    splits = splits_table(_predictions()).filter(pl.col("tm") == "good")
    demographic = {
        r["key"]: r for r in splits.filter(pl.col("split") == "demographic").iter_rows(named=True)
    }
    assert demographic["catholic"]["n"] == 5
    assert demographic["teacher"]["n"] == 5
    assert demographic["jewish"]["n"] == 2
    assert demographic["teacher"]["correct"] == 4
    pair = {
        r["key"]: r["n"] for r in splits.filter(pl.col("split") == "pair").iter_rows(named=True)
    }
    assert pair == {"catholic / teacher": 4, "catholic / jewish": 1, "jewish / teacher": 1}
    cat_demo = splits.filter(pl.col("split") == "category_demographic")
    assert set(cat_demo["key"]) == {
        "X / catholic",
        "X / teacher",
        "Y / catholic",
        "Y / jewish",
        "Y / teacher",
    }
    topics = splits.filter(pl.col("split") == "topic")
    assert topics["n"].sum() == 6


def test_comparisons_are_paired_and_adjusted():
    table = comparisons_table(_predictions())
    overall = table.filter(pl.col("split") == "overall").row(0, named=True)
    assert (overall["model_1"], overall["model_2"], overall["axis"]) == ("bad", "good", "tm")
    # bad right & good wrong: none; good right & bad wrong: q0, q2, q4
    assert (overall["only_1_correct"], overall["only_2_correct"]) == (0, 3)
    assert overall["p_value"] == pytest.approx(mcnemar([[2, 0], [3, 1]], exact=True).pvalue)
    for _split, part in table.group_by("split"):
        np.testing.assert_allclose(
            part["p_bh"].to_numpy(), multipletests(part["p_value"].to_numpy(), method="fdr_bh")[1]
        )


def test_groups_pool_tms_and_compare_them_paired():
    predictions = _predictions()
    table = groups_table(predictions, {"strong": ["good"], "weak": ["bad"]}, seed=1)
    strong = table.filter((pl.col("group") == "strong") & pl.col("versus").is_null()).row(
        0, named=True
    )
    assert (strong["n"], strong["correct"], strong["rows"]) == (6, 5, 6)
    versus = table.filter(pl.col("versus") == "weak").row(0, named=True)
    assert versus["difference"] == pytest.approx(3 / 6)
    # 3 rows differ by +1, 3 by 0: only 2^3 distinct sign patterns, P(|mean| >= 0.5) = 2/8
    assert versus["p_value"] == pytest.approx(0.25, abs=0.02)
