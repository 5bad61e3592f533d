"""Human validation (SPEC 2.11): blinded sheets and the scores on a worked example."""

from __future__ import annotations

import json

import polars as pl
import pytest
from splits.cli import main
from splits.config import ConfigError
from splits.human import blind, read_filled, sheet_score
from splits.io import write_parquet

THEORY = (
    "Group A: Catholic posts mention the parish.\n"
    "Group A: They quote saints.\n"
    "Group A: They talk about Lent.\n"
    "Group A: A fourth statement is never shown.\n"
    "Group B: Teachers mention grading.\n"
    "Group B: They complain about meetings.\n"
    "Group B (teacher): They plan lessons."
)


def test_sheet_score_worked_example():
    # six statements, the first three meant for this post set
    meant = [True, True, True, False, False, False]
    # relevance: 4, 4, 2 | 4, 0, 1 -> counted: +4 +4 -4 = 4 over 3 counted -> 4 / 12
    assert sheet_score([4, 4, 2, 4, 0, 1], meant) == (pytest.approx(1 / 3), 3)
    # only the other group's statements rated 4 -> -1 (sheet lost)
    assert sheet_score([3, 3, 3, 4, 4, None], meant) == (-1.0, 2)
    # nothing rated 4 -> 0, none counted
    assert sheet_score([0, 1, 2, 3, None, 3], meant) == (0.0, 0)


def test_blind_removes_group_labels():
    assert (
        blind("Group A: Catholic posts mention the parish.") == "Catholic posts mention the parish."
    )
    assert blind("B (teacher) - plans lessons") == "plans lessons"
    assert blind("1. A: quotes saints") == "quotes saints"
    assert blind("Apples are red") == "Apples are red"


def _rows_and_theories(tmp_path):
    rows = pl.DataFrame(
        {
            "quadruplet_id": ["q0", "q1", "q2"],
            "eval_row": [0, 1, 2],
            "description": ["Basketball"] * 3,
            "category": ["Sports"] * 3,
            "demographic_A": ["catholic"] * 3,
            "demographic_B": ["teacher"] * 3,
            "example_posts": [["e"]] * 3,
            "sample_A": [["parish post", "saint post", "lent post"]] * 3,
            "sample_B": [["grading post", "meeting post", "lesson post"]] * 3,
            "switched": [False, True, False],
        }
    )
    write_parquet(rows, tmp_path / "rows.parquet")
    for model, theories in (("tm1", [THEORY, THEORY, "Group A: only one"]), ("tm2", [THEORY] * 3)):
        frame = pl.DataFrame(
            {
                "quadruplet_id": ["q0", "q1", "q2"],
                "eval_row": [0, 1, 2],
                "tm": [model] * 3,
                "k": [4] * 3,
                "theory": theories,
            }
        )
        write_parquet(frame, tmp_path / f"{model}.parquet")


def test_export_then_score_end_to_end(tmp_path):
    _rows_and_theories(tmp_path)
    out = tmp_path / "sheets"
    code = main(
        [
            "human",
            "export",
            "--rows",
            str(tmp_path / "rows.parquet"),
            "--theories",
            str(tmp_path / "tm1.parquet"),
            str(tmp_path / "tm2.parquet"),
            "--sheets-per-model",
            "2",
            "--out-dir",
            str(out),
        ]
    )
    assert code == 0
    report = json.loads((out / "export_report.json").read_text())
    assert report["sheets"] == {"tm1": 2, "tm2": 2}
    sheets = pl.read_csv(out / "sheets.csv")
    key = pl.read_csv(out / "key.csv")
    html = (out / "sheets.html").read_text()
    assert sheets.height == 4 * 6 and key.height == 24
    # blinded: no model names or group labels on the sheets
    assert "tm1" not in html and "tm2" not in html and "model" not in sheets.columns
    assert not any(s.startswith("Group") for s in sheets["statement"])
    assert "A fourth statement" not in html
    for _, part in key.group_by("sheet_id"):
        assert part["meant_for_post_set"].sum() == 3
    # the annotator rates relevance 4 exactly on the statements meant for the post set, and on
    # one other statement of the first sheet; centrality 4 only on the wrong ones
    first = sorted(key["sheet_id"].unique())[0]
    filled = sheets.join(
        key.select("sheet_id", "item", "meant_for_post_set"), on=["sheet_id", "item"]
    )
    filled = filled.with_columns(
        pl.when(
            pl.col("meant_for_post_set")
            | (
                (pl.col("sheet_id") == first)
                & (
                    pl.col("item")
                    == filled.filter((pl.col("sheet_id") == first) & ~pl.col("meant_for_post_set"))[
                        "item"
                    ].min()
                )
            )
        )
        .then(4)
        .otherwise(1)
        .alias("relevance"),
        pl.when(pl.col("meant_for_post_set")).then(0).otherwise(4).alias("centrality"),
        pl.lit(2).alias("unexpectedness"),
        pl.when(pl.col("item") == 1).then(None).otherwise(3).alias("specificity"),
    ).drop("meant_for_post_set")
    filled.write_csv(tmp_path / "annotator1.csv")
    code = main(
        [
            "human",
            "score",
            "--key",
            str(out / "key.csv"),
            "--sheets",
            str(tmp_path / "annotator1.csv"),
            "--out",
            str(tmp_path / "scores.json"),
            "--out-csv",
            str(tmp_path / "scores.csv"),
        ]
    )
    assert code == 0
    scores = json.loads((tmp_path / "scores.json").read_text())["models"]
    first_model = key.filter(pl.col("sheet_id") == first)["model"][0]
    other_model = "tm2" if first_model == "tm1" else "tm1"
    # first sheet: +4 +4 +4 -4 over 4 counted = 0.5; every other sheet 1.0
    assert scores[first_model]["relevance"] == pytest.approx((0.5 + 1.0) / 2)
    assert scores[other_model]["relevance"] == pytest.approx(1.0)
    assert scores[first_model]["relevance_sheets_won"] == 2
    assert scores[other_model]["centrality"] == pytest.approx(-1.0)
    assert scores[other_model]["centrality_sheets_won"] == 0
    assert scores[other_model]["unexpectedness"] == pytest.approx(2.0)
    assert scores[other_model]["specificity"] == pytest.approx(3.0)
    assert scores[other_model]["specificity_ratings"] == 2 * 5


def test_bad_ratings_are_config_errors(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("sheet_id,item,relevance,centrality,unexpectedness,specificity\nS001,1,5,,,\n")
    with pytest.raises(ConfigError, match="line 2: relevance must be 0-4"):
        read_filled(path)
    path.write_text("sheet_id,item,relevance,centrality,unexpectedness,specificity\nS001,1,x,,,\n")
    with pytest.raises(ConfigError, match="not a number"):
        read_filled(path)
