"""Groups of TMs per split (strong vs weak) and the k sweep beyond the dataset's k.

Unit level: a hand-made experiment whose per-split gaps, sign-flip p (against brute-force
enumeration of the sign flips) and BH q (against statsmodels) are worked out by hand.
Pipeline level: the sample corpus with the group difference planted on half of the topics only,
an experiment with oracle-lexical (strong) vs no-theory (weak) and ks up to 64 (sampling.k is
16): the sweep dataset is built with k = 64, every k runs on the same rows, the paired McNemar
between ks matches statsmodels, and the planted topics (the generator's ground truth) come out
with the largest gaps.
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from helpers import exact_sign_flip_p
from scipy.stats import binomtest
from splits.config.schema import load_config
from splits.errors import ConfigError
from splits.evaluation.group_splits import group_splits_table, parse_ordered_groups
from splits.pipeline.checks import check_evaluation, sweep_calibration_size
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

CORRECT = {  # rows r0-r2 on topic T1, r3-r5 on T2
    "s1": [1, 1, 0, 1, 0, 0],
    "s2": [1, 0, 1, 0, 0, 1],
    "w1": [0, 0, 0, 1, 0, 1],
}
GROUPS = [("strong", ["s1", "s2"]), ("weak", ["w1"])]


def _predictions(correct=CORRECT) -> pl.DataFrame:
    records = []
    for tm, values in correct.items():
        for i, value in enumerate(values):
            if value is None:
                continue
            records.append(
                {
                    "tm": tm,
                    "cm": "cm",
                    "k": 4,
                    "quadruplet_id": f"r{i}",
                    "eval_row": i,
                    "correct": bool(value),
                    "demographic_A": "catholic",
                    "demographic_B": "teacher" if i % 2 else "jewish",
                    "category": "Sports",
                    "topic": "T1" if i < 3 else "T2",
                }
            )
    return pl.DataFrame(records)


def test_per_split_gaps_by_hand():
    table, scores = group_splits_table(_predictions(), GROUPS, seed=1)
    topics = table.filter(pl.col("split") == "topic").sort("rank")
    assert topics["key"].to_list() == ["T1", "T2"]
    first, second = topics.rows(named=True)
    # T1: strong 4 of 6 answers right, weak 0 of 3; T2: strong 2 of 6, weak 2 of 3
    assert (first["n_1"], first["correct_1"], first["n_2"], first["correct_2"]) == (6, 4, 3, 0)
    assert first["difference"] == pytest.approx(4 / 6)
    assert second["difference"] == pytest.approx(2 / 6 - 2 / 3)
    # per-row differences of the groups' mean correctness: T1 [1, .5, .5], T2 [-.5, 0, -.5]
    assert exact_sign_flip_p([1, 0.5, 0.5]) == 0.25
    assert first["p_value"] == pytest.approx(0.25, abs=0.015)
    assert second["p_value"] == pytest.approx(exact_sign_flip_p([-0.5, 0, -0.5]), abs=0.015)
    q = multipletests(topics["p_value"].to_numpy(), method="fdr_bh")[1]
    np.testing.assert_allclose(topics["q_bh"].to_numpy(), q)
    assert (first["rank"], second["rank"]) == (1, 2)
    # every split is there, with the direction of the config (strong minus weak)
    assert set(table["split"]) == {
        "pair",
        "demographic",
        "category",
        "category_demographic",
        "topic",
    }
    assert set(zip(table["group_1"], table["group_2"], strict=True)) == {("strong", "weak")}
    overall = table.filter(pl.col("split") == "category").row(0, named=True)
    assert overall["difference"] == pytest.approx(6 / 12 - 2 / 6)
    assert scores[("cm", 4, "strong", "weak")].height == 6


def test_only_rows_every_tm_answered():
    correct = {**CORRECT, "w1": [0, 0, 0, 1, 0, None]}
    table, _ = group_splits_table(_predictions(correct), GROUPS, seed=1)
    t2 = table.filter((pl.col("split") == "topic") & (pl.col("key") == "T2")).row(0, named=True)
    assert t2["rows"] == 2 and t2["n_1"] == 4 and t2["correct_2"] == 1


def test_group_arguments():
    assert parse_ordered_groups('[["weak", ["w1"]], ["strong", ["s1"]]]', {"s1", "w1"}) == [
        ("weak", ["w1"]),
        ("strong", ["s1"]),
    ]
    with pytest.raises(ConfigError, match="at least two groups"):
        parse_ordered_groups('[["weak", ["w1"]]]', {"w1"})
    with pytest.raises(ConfigError, match="'x' has no predictions"):
        parse_ordered_groups('[["a", ["x"]], ["b", ["w1"]]]', {"w1"})


def test_sweep_calibration_size_and_its_limit(repo_root):
    config = load_config(repo_root / "config" / "config.yaml")
    experiment = config["evaluation"]["experiments"]["sample"]
    assert sweep_calibration_size(config, experiment) is None  # ks within sampling.k = 16
    assert sweep_calibration_size(config, {**experiment, "ks": [4, 63]}) == 64
    experiment["ks"] = [4, 400]
    with pytest.raises(ConfigError) as err:
        check_evaluation(config)
    assert str(err.value) == (
        "evaluation.experiments.sample.ks: k=400 needs 200 calibration + 3 sample posts per group "
        "and topic, more than the topics.top_k=200 posts the topic splits keep"
    )
    config["evaluation"]["dataset"] = "release.parquet"  # not re-sampled: no sweep dataset
    assert sweep_calibration_size(config, experiment) is None
    check_evaluation(config)


# --------------------------------------------------------------------------- the pipeline

PLANTED = [
    "Basketball",
    "Gardening",
    "Budget Travel Tips",
    "Personal Budgeting",
    "PC Building/Hardware",
]
SWEEP = {
    "rows": "all",
    "tms": ["no-theory", "oracle-lexical"],
    "cms": ["lexical"],
    "ks": [4, 16, 64],
    "groups": {"strong": ["oracle-lexical"], "weak": ["no-theory"]},
}


@pytest.fixture(scope="module")
def sweep_run(pipeline_runs):
    overrides = {
        "synth": {"planted_topics": PLANTED},
        "evaluation": {"experiments": {"sweep": SWEEP}},
    }
    # what the tests read (the sweep's tables and plots, the main dataset), not the whole DAG
    sweep = "results/evaluation/experiments/sweep"
    targets = (
        f"{sweep}/comparisons.csv",
        f"{sweep}/tables.md",
        f"{sweep}/group_splits.csv",
        f"{sweep}/group_gaps.md",
        f"{sweep}/plots/group_gaps.png",
        "results/dataset/quadruplets.parquet",
    )
    return pipeline_runs.get(overrides, targets)


def test_sweep_rows_are_built_with_the_largest_k(sweep_run):
    dataset = pl.read_parquet(sweep_run / "results/evaluation/datasets/k-64/quadruplets.parquet")
    assert dataset.height > 0
    assert set(dataset["example_posts"].list.len()) == {64}
    rows = pl.read_parquet(sweep_run / "results/evaluation/subsample/rows-all-k64.parquet")
    assert rows.height == dataset.height
    predictions = pl.read_parquet(
        sweep_run / "results/evaluation/experiments/sweep/predictions.parquet"
    )
    per_config = predictions.group_by("tm", "k").agg(pl.col("quadruplet_id").sort())
    assert per_config.height == 6
    expected = sorted(rows["quadruplet_id"].to_list())
    assert all(ids.to_list() == expected for ids in per_config["quadruplet_id"])
    # the main dataset (sampling.k) and the default experiment are untouched by the sweep
    main = pl.read_parquet(sweep_run / "results/dataset/quadruplets.parquet")
    assert set(main["example_posts"].list.len()) == {16}


def test_sweep_reports_paired_tests_between_ks(sweep_run):
    base = sweep_run / "results/evaluation/experiments/sweep"
    comparisons = pl.read_csv(base / "comparisons.csv")
    between = comparisons.filter((pl.col("axis") == "k") & (pl.col("split") == "overall"))
    assert sorted(between.select("model_1", "k", "k_2").rows()) == [
        (tm, a, b)
        for tm in ("no-theory", "oracle-lexical")
        for a, b in ((4, 16), (4, 64), (16, 64))
    ]
    predictions = pl.read_parquet(base / "predictions.parquet")
    for row in between.iter_rows(named=True):
        one, two = (
            predictions.filter((pl.col("tm") == row["model_1"]) & (pl.col("k") == k))
            .sort("quadruplet_id")["correct"]
            .to_numpy()
            for k in (row["k"], row["k_2"])
        )
        b, c = int((one & ~two).sum()), int((~one & two).sum())
        assert (row["only_1_correct"], row["only_2_correct"]) == (b, c)
        table = [[int((one & two).sum()), b], [c, int((~one & ~two).sum())]]
        assert row["p_value"] == pytest.approx(mcnemar(table, exact=True).pvalue, abs=1e-6)
    oracle = between.filter(
        (pl.col("model_1") == "oracle-lexical") & (pl.col("k") == 4) & (pl.col("k_2") == 64)
    )
    assert oracle["accuracy_2"][0] > oracle["accuracy_1"][0] and oracle["p_value"][0] < 0.001
    assert (
        "Calibration size: paired exact McNemar tests between ks"
        in (base / "tables.md").read_text()
    )


def test_planted_topics_come_out_with_the_largest_gaps(sweep_run):
    meta = json.loads((sweep_run / "results/sample/synth_meta.json").read_text())
    planted = set(meta["planted_topics"])
    assert planted == set(PLANTED)
    base = sweep_run / "results/evaluation/experiments/sweep"
    table = pl.read_csv(base / "group_splits.csv", schema_overrides={"key": pl.String})
    for k in (16, 64):
        topics = table.filter((pl.col("split") == "topic") & (pl.col("k") == k)).sort("rank")
        assert set(topics.head(len(planted))["key"]) == planted, topics.select("key", "difference")
        assert (topics.head(len(planted))["q_bh"] < 0.05).all()
        # the oracle is at chance where nothing is planted: no unplanted topic comes close
        others = topics.tail(topics.height - len(planted))
        margin = topics.head(len(planted))["difference"].min() - others["difference"].max()
        assert margin > 0.1, topics.select("key", "difference")
    # the table against the predictions (independent computation) and the exact sign test
    predictions = pl.read_parquet(base / "predictions.parquet")
    expected = (
        predictions.filter(pl.col("k") == 64)
        .group_by("topic", "tm")
        .agg(pl.col("correct").mean())
        .pivot(on="tm", index="topic", values="correct")
    )
    topics = table.filter((pl.col("split") == "topic") & (pl.col("k") == 64))
    joined = topics.join(expected, left_on="key", right_on="topic")
    # (the CSV keeps 6 decimals)
    np.testing.assert_allclose(joined["accuracy_1"], joined["oracle-lexical"], atol=1e-6)
    np.testing.assert_allclose(
        joined["difference"], joined["oracle-lexical"] - joined["no-theory"], atol=1e-6
    )
    for key in PLANTED[:2]:
        part = predictions.filter((pl.col("k") == 64) & (pl.col("topic") == key))
        wide = part.pivot(on="tm", index="quadruplet_id", values="correct")
        b = int((wide["oracle-lexical"] & ~wide["no-theory"]).sum())
        c = int((~wide["oracle-lexical"] & wide["no-theory"]).sum())
        p = topics.filter(pl.col("key") == key)["p_value"][0]
        exact = binomtest(min(b, c), b + c, 0.5).pvalue
        assert p == pytest.approx(exact, abs=0.01) or (exact < 1e-4 and p <= 2e-4)
    np.testing.assert_allclose(
        topics.sort("p_value")["q_bh"],
        multipletests(topics.sort("p_value")["p_value"], method="fdr_bh")[1],
        atol=1e-5,
    )


def test_gap_list_reads_with_example_theories(sweep_run):
    base = sweep_run / "results/evaluation/experiments/sweep"
    gaps = (base / "group_gaps.md").read_text()
    section = gaps.split("## strong vs weak (CM lexical, k=64)")[1].split("### By topic")[1]
    section = section.split("## ")[0]
    first = section.strip().splitlines()[0]
    assert first.startswith("1. **") and first.split("**")[1] in PLANTED
    entry = section.split("\n2. ")[0]
    assert entry.count("- strong (oracle-lexical") == 3 and entry.count("- weak (no-theory") == 3
    assert entry.count("posts use words like") >= 6 and entry.count("(empty theory)") == 3
    png = (base / "plots/group_gaps.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000
