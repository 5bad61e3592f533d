"""LLM judges as GRASP raters: the conversion of the evaluation's classification tables into a
long ratings table and judge attributes, the CLI on hand-made judgments, and the
probe_grasp_judges rule on the default pipeline (IRR against the krippendorff package)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import krippendorff
import numpy as np
import polars as pl
import pytest
import yaml
from splits import cli
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.probes.judges import judge_attributes, judge_name, judgments_to_ratings
from splits.probes.settings import GraspJudgesSettings


def _judgments() -> pl.DataFrame:
    """Two quadruplets judged by three (TM, CM, k) configurations, one undetected answer."""
    return pl.DataFrame(
        {
            "quadruplet_id": ["q1", "q2", "q1", "q2", "q2", "q1"],
            "eval_row": [0, 1, 0, 1, 1, 0],
            "tm": ["gpt", "gpt", "gpt", "gpt", "no-theory", "no-theory"],
            "k": [4, 4, 16, 16, 4, 4],
            "cm": ["lexical"] * 6,
            "switched": [True, False, True, False, False, True],
            "predicted_switched": [True, False, None, True, False, False],
            "detected": [True, True, False, True, True, True],
            "correct": [True, True, False, False, True, False],
        },
        schema_overrides={"predicted_switched": pl.Boolean},
    )


def test_judgments_to_ratings_exact_long_table():
    ratings = judgments_to_ratings(_judgments())
    expected = pl.DataFrame(
        {
            "item": ["q1", "q2", "q1", "q2", "q1", "q2"],
            "rater": [
                "gpt|lexical|k16",
                "gpt|lexical|k16",
                "gpt|lexical|k4",
                "gpt|lexical|k4",
                "no-theory|lexical|k4",
                "no-theory|lexical|k4",
            ],
            "rating": ["undetected", "switched", "switched", "not_switched"]
            + ["not_switched", "not_switched"],
        }
    )
    assert ratings.equals(expected)
    missing = judgments_to_ratings(_judgments(), undetected="missing")
    assert missing.equals(expected.filter(pl.col("rating") != "undetected"))
    assert judge_name("gpt", "lexical", 16) == "gpt|lexical|k16"


def test_judge_attributes_exact():
    attributes = judge_attributes(_judgments(), {"gpt": "llm", "lexical": "builtin"})
    expected = pl.DataFrame(
        {
            "rater": ["gpt|lexical|k16", "gpt|lexical|k4", "no-theory|lexical|k4"],
            "tm": ["gpt", "gpt", "no-theory"],
            "cm": ["lexical"] * 3,
            "k": ["16", "4", "4"],
            "tm_kind": ["llm", "llm", None],
            "cm_kind": ["builtin"] * 3,
        }
    )
    assert attributes.equals(expected)


def test_bad_judgments_are_config_errors():
    doubled = pl.concat([_judgments(), _judgments().head(1)])
    with pytest.raises(ConfigError, match="more than once"):
        judgments_to_ratings(doubled)
    with pytest.raises(ConfigError, match="predicted_switched"):
        judgments_to_ratings(_judgments().drop("predicted_switched"))
    with pytest.raises(ConfigError, match="undetected"):
        judgments_to_ratings(_judgments(), undetected="drop")


def _oracle_alpha(ratings: pl.DataFrame, raters: list[str]) -> float:
    """krippendorff.alpha (nominal) of the raters' columns of the long table."""
    chosen = ratings.filter(pl.col("rater").is_in(raters))
    categories = sorted(chosen["rating"].unique().to_list())
    wide = chosen.with_columns(
        pl.col("rating").replace_strict(
            {c: float(i) for i, c in enumerate(categories)}, return_dtype=pl.Float64
        )
    ).pivot(on="rater", index="item", values="rating")
    data = wide.select(sorted(raters)).to_numpy().T.astype(float)
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"))


def test_cli_judgments(tmp_path):
    rng = np.random.default_rng(3)
    frames = []
    truth = rng.random(40) < 0.5
    for tm in ("a", "b", "c"):
        for k in (4, 16):
            agree = rng.random(40) < (0.9 if tm == "a" else 0.6)
            answer = np.where(agree, truth, ~truth)
            frames.append(
                pl.DataFrame(
                    {
                        "quadruplet_id": [f"q{i:02d}" for i in range(40)],
                        "tm": tm,
                        "k": k,
                        "cm": "lexical",
                        "predicted_switched": answer,
                    }
                )
            )
    paths = []
    for i, frame in enumerate(frames):
        path = tmp_path / f"judge{i}.parquet"
        frame.write_parquet(path)
        paths.append(str(path))
    out = tmp_path / "out"
    kinds = json.dumps({"a": "llm", "b": "llm", "c": "builtin", "lexical": "builtin"})
    argv = ["probe", "grasp", "--judgments", *paths, "--judge-kinds", kinds]
    settings = dataclasses.asdict(schema_defaults(GraspJudgesSettings, permutations=50, seed=0))
    argv += ["--outdir", str(out), "--settings", json.dumps(settings)]
    assert cli.main(argv) == 0
    ratings = pl.read_parquet(out / "ratings.parquet")
    assert ratings.height == 6 * 40
    groups = pl.read_parquet(out / "groups.parquet")
    raters = pl.read_parquet(out / "raters.parquet")
    assert {"tm=a", "tm_kind=llm", "k=4"} <= set(groups["group"].to_list())
    for row in groups.iter_rows(named=True):
        members = _members(raters, row["group"])
        assert row["irr"] == pytest.approx(_oracle_alpha(ratings, members), abs=1e-10)
    # --raters belongs to the --ratings input; --ratings and --judgments exclude each other
    assert cli.main([*argv, "--raters", paths[0]]) == 2
    with pytest.raises(SystemExit):
        cli.main([*argv, "--ratings", paths[0]])


def _members(raters: pl.DataFrame, group: str) -> list[str]:
    """The raters of a group named "attr=value & attr=value"."""
    condition = pl.lit(True)
    for part in group.split(" & "):
        attribute, value = part.split("=", 1)
        condition = condition & (pl.col(attribute) == value)
    return raters.filter(condition)["rater"].to_list()


def test_default_pipeline_judges(default_run: Path):
    config = yaml.safe_load((default_run / "config" / "config.yaml").read_text())
    experiments = config["evaluation"]["experiments"]
    assert experiments
    for name, experiment in experiments.items():
        base = default_run / "results" / "probes" / "grasp_judges" / name
        ratings = pl.read_parquet(base / "ratings.parquet")
        rows = pl.read_parquet(
            default_run
            / "results"
            / "evaluation"
            / "subsample"
            / f"rows-{experiment['rows']}.parquet"
        )
        judges = {
            f"{tm}|{cm}|k{k}"
            for tm in experiment["tms"]
            for cm in experiment["cms"]
            for k in experiment["ks"]
        }
        # one rating per (row, judge) of the experiment
        assert ratings.height == rows.height * len(judges)
        assert set(ratings["rater"].unique().to_list()) == judges
        assert ratings.select("item", "rater").is_duplicated().sum() == 0
        assert set(ratings["item"].unique().to_list()) == set(rows["quadruplet_id"].to_list())
        assert set(ratings["rating"].unique().to_list()) <= {
            "switched",
            "not_switched",
            "undetected",
        }
        # the ratings are the CM answers of the classification files
        tm, cm, k = experiment["tms"][0], experiment["cms"][0], experiment["ks"][0]
        predictions = pl.read_parquet(
            default_run
            / "results"
            / "evaluation"
            / "predictions"
            / f"rows-{experiment['rows']}"
            / tm
            / f"k-{k}"
            / f"{cm}.parquet"
        )
        joined = predictions.join(
            ratings.filter(pl.col("rater") == f"{tm}|{cm}|k{k}"),
            left_on="quadruplet_id",
            right_on="item",
        )
        assert joined.height == predictions.height
        expected = [
            "undetected" if p is None else ("switched" if p else "not_switched")
            for p in joined["predicted_switched"].to_list()
        ]
        assert joined["rating"].to_list() == expected

        raters = pl.read_parquet(base / "raters.parquet")
        assert set(raters["rater"].to_list()) == judges
        groups = pl.read_parquet(base / "groups.parquet")
        summary = json.loads((base / "summary.json").read_text())
        assert (base / "gai.png").stat().st_size > 0
        assert summary["n_raters"] == len(judges)
        assert summary["alpha_all"] == pytest.approx(
            _oracle_alpha(ratings, sorted(judges)), abs=1e-10
        )
        if len(experiment["tms"]) > 1 or len(experiment["ks"]) > 1:
            assert groups.height > 0
        for row in groups.iter_rows(named=True):
            members = _members(raters, row["group"])
            assert row["n_raters"] == len(members)
            oracle = _oracle_alpha(ratings, members)
            if np.isnan(oracle):
                assert row["irr"] is None or np.isnan(row["irr"])
                continue
            assert -1.0 <= row["irr"] <= 1.0
            assert row["irr"] == pytest.approx(oracle, abs=1e-10)
