"""Human validation (docs/method.md §2.11, paper Appendix C): instance selection, the two-part sheet
layout, and the scores and agreement of a filled fixture of three simulated annotators, worked
out by hand (alpha: the krippendorff package as the oracle)."""

from __future__ import annotations

import json

import krippendorff
import numpy as np
import polars as pl
import pytest
from splits.cli import main
from splits.errors import ConfigError
from splits.evaluation.human import MEASURES, blind, select_instances
from splits.evaluation.human_scores import combine_files, read_filled, score_sheets, sheet_score
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


# --------------------------------------------------------------------------- selection, export

# correctness of the CM per row with each TM's theory: rows 0, 2, 4 have the strong TM right and
# both weaker ones wrong; row 1 has a weak TM right too; row 3 the strong one wrong
CORRECT = {
    "strong": [1, 1, 1, 0, 1, 1],
    "weak1": [0, 1, 0, 0, 0, 0],
    "weak2": [0, 0, 0, 0, 0, 1],
}


def _experiment(tmp_path, short_theory_rows=(), correct=CORRECT):
    n = len(correct["strong"])
    rows = pl.DataFrame(
        {
            "quadruplet_id": [f"q{i}" for i in range(n)],
            "eval_row": list(range(n)),
            "description": ["Basketball"] * n,
            "category": ["Sports"] * n,
            "demographic_A": ["catholic"] * n,
            "demographic_B": ["teacher"] * n,
            "example_posts": [["e"]] * n,
            "sample_A": [[f"parish post {i}", "saint post", "lent post"] for i in range(n)],
            "sample_B": [[f"grading post {i}", "meeting post", "lesson post"] for i in range(n)],
            "switched": [False, True] * (n // 2),
        }
    )
    write_parquet(rows, tmp_path / "rows.parquet")
    predictions = []
    for tm, values in correct.items():
        theories = [
            "Group A: only one" if i in short_theory_rows and tm == "weak1" else THEORY
            for i in range(n)
        ]
        frame = pl.DataFrame(
            {
                "quadruplet_id": rows["quadruplet_id"],
                "eval_row": rows["eval_row"],
                "tm": [tm] * n,
                "k": [4] * n,
                "theory": theories,
            }
        )
        write_parquet(frame, tmp_path / f"{tm}.parquet")
        predictions.append(
            frame.select("quadruplet_id", "eval_row", "tm", "k").with_columns(
                pl.lit("cm").alias("cm"), pl.Series("correct", [bool(v) for v in values])
            )
        )
    write_parquet(pl.concat(predictions), tmp_path / "predictions.parquet")


def _export(tmp_path, *extra):
    out = tmp_path / "sheets"
    args = ["human", "export", "--rows", str(tmp_path / "rows.parquet"), "--theories"]
    args += [str(tmp_path / f"{tm}.parquet") for tm in CORRECT]
    args += ["--predictions", str(tmp_path / "predictions.parquet"), "--out-dir", str(out)]
    args += ["--settings", '{"seed": 0}']
    return main([*args, *extra]), out


def test_instances_are_rows_where_only_the_strongest_is_right():
    frames = [
        pl.DataFrame(
            {
                "quadruplet_id": [f"q{i}" for i in range(6)],
                "eval_row": list(range(6)),
                "tm": tm,
                "correct": [bool(v) for v in values],
            }
        )
        for tm, values in CORRECT.items()
    ]
    predictions = pl.concat(frames)
    assert select_instances(predictions, "strong", ["weak1", "weak2"]) == ["q0", "q2", "q4"]
    assert select_instances(predictions, "strong", ["weak2"]) == ["q0", "q1", "q2", "q4"]


def test_export_layout(tmp_path):
    _experiment(tmp_path, short_theory_rows=(2,))
    code, out = _export(tmp_path, "--sheets-per-model", "5")
    assert code == 0
    report = json.loads((out / "export_report.json").read_text())
    # strongest by accuracy; q2 is skipped (weak1's theory there has one statement)
    assert report["strong"] == "strong" and report["weak"] == ["weak1", "weak2"]
    assert report["instances"] == 3 and report["selected"] == 2
    assert report["skipped_too_few_statements"] == 1
    part1, part2 = pl.read_csv(out / "part1.csv"), pl.read_csv(out / "part2.csv")
    key = pl.read_csv(out / "key.csv")
    assert part1.height == part2.height == key.height == 2 * 3 * 6  # 2 rows x 3 TMs x 6
    assert set(key["quadruplet_id"]) == {"q0", "q4"}
    # one post set per row, the same for every TM's sheet of it
    assert key.group_by("quadruplet_id").agg(pl.col("post_set_group").n_unique())[
        "post_set_group"
    ].to_list() == [1, 1]
    for _, part in key.group_by("sheet_id"):
        assert part["meant_for_post_set"].sum() == 3 and part["model"].n_unique() == 1
    # part 1: the pair is told, not which statement is meant for which group, nor the model
    assert set(part1["groups"]) == {"Catholic / teacher"}
    assert set(part1.columns) == {
        "sheet_id",
        "item",
        "groups",
        "topic",
        "posts",
        "statement",
        "relevance",
        "centrality",
    }
    assert not any(s.startswith("Group") for s in part1["statement"])
    assert "A fourth statement" not in (out / "sheets.html").read_text()
    html = (out / "sheets.html").read_text()
    assert not any(model in html for model in CORRECT)
    # part 2: every statement with the group it is about
    about = part2.join(key, on=["sheet_id", "item"]).select("about", "statement_group")
    names = {"catholic": "Catholic", "teacher": "teacher"}
    assert all(names[g] == a for a, g in about.iter_rows())
    assert part1["statement"].to_list() == part2["statement"].to_list()


def test_export_errors(tmp_path):
    _experiment(tmp_path)
    code, _ = _export(tmp_path, "--strong", "nobody")
    assert code == 2
    # weak1 is right wherever the strong TM is: no instance to annotate
    _experiment(tmp_path, correct={**CORRECT, "weak1": [1] * 6})
    code, _ = _export(tmp_path, "--strong", "strong")
    assert code == 2


# --------------------------------------------------------------------------- scores, agreement

MEANT = [True, False, True, False, True, False]
SHEETS = {"S001": "m1", "S002": "m2", "S003": "m1", "S004": "m2"}
# relevance per annotator and sheet (items 1-6); a3 leaves one statement of S003 blank
RELEVANCE = {
    "a1": {
        "S001": [4, 4, 4, 0, 1, 2],  # +4 -4 +4 over 3 -> 1/3
        "S002": [4, 0, 0, 0, 4, 0],  # +4 +4 over 2 -> 1
        "S003": [0, 4, 0, 4, 0, 0],  # -4 -4 over 2 -> -1
        "S004": [1, 1, 1, 1, 1, 1],  # none rated 4 -> 0
    },
    "a2": {
        "S001": [4, 0, 4, 0, 4, 0],  # 1
        "S002": [4, 4, 0, 0, 0, 0],  # 0
        "S003": [3, 4, 3, 4, 3, 4],  # -1
        "S004": [4, 3, 3, 3, 3, 3],  # 1
    },
    "a3": {
        "S001": [4, 4, 4, 0, 1, 2],  # 1/3
        "S002": [4, 0, 4, 0, 4, 4],  # +4 +4 +4 -4 over 4 -> 1/2
        "S003": [0, 4, None, 4, 0, 0],  # incomplete: not scored
        "S004": [0, 0, 0, 0, 0, 0],  # 0
    },
}
# centrality: a1 and a2 only (a3 leaves it blank)
CENTRALITY = {
    "a1": {sheet: [4] * 6 for sheet in SHEETS},  # 3 meant, 3 not -> 0 everywhere
    "a2": {
        "S001": [4, 0, 0, 0, 0, 0],  # 1
        "S002": [0, 4, 0, 0, 0, 0],  # -1
        "S003": [0, 0, 0, 0, 0, 0],  # 0
        "S004": [0, 0, 4, 0, 0, 0],  # 1
    },
}
# part 2: a1 and a2 only
UNEXPECTEDNESS = {"a1": 2, "a2": 3}
SPECIFICITY = {"a1": [1, 2, 3, 4, 0, 1], "a2": [4] * 6}


def _fixture(tmp_path):
    key = pl.DataFrame(
        {
            "sheet_id": [s for s in SHEETS for _ in range(6)],
            "item": [i for _ in SHEETS for i in range(1, 7)],
            "model": [m for m in SHEETS.values() for _ in range(6)],
            "quadruplet_id": [f"q-{s}" for s in SHEETS for _ in range(6)],
            "post_set_group": "catholic",
            "statement_group": [("catholic" if m else "teacher") for _ in SHEETS for m in MEANT],
            "meant_for_post_set": [m for _ in SHEETS for m in MEANT],
        }
    )
    key.write_csv(tmp_path / "key.csv")
    files = []
    for annotator in ("a1", "a2", "a3"):
        part1 = key.select("sheet_id", "item").with_columns(
            pl.Series("relevance", [v for s in SHEETS for v in RELEVANCE[annotator][s]]),
            pl.Series(
                "centrality",
                [v for s in SHEETS for v in CENTRALITY[annotator][s]]
                if annotator in CENTRALITY
                else [None] * key.height,
                dtype=pl.Int64,
            ),
        )
        part1.write_csv(tmp_path / f"{annotator}_part1.csv")
        files.append(f"{annotator}={tmp_path / f'{annotator}_part1.csv'}")
        if annotator in UNEXPECTEDNESS:
            part2 = key.select("sheet_id", "item").with_columns(
                pl.lit(UNEXPECTEDNESS[annotator]).alias("unexpectedness"),
                pl.Series("specificity", SPECIFICITY[annotator] * len(SHEETS)),
            )
            part2.write_csv(tmp_path / f"{annotator}_part2.csv")
            files.append(f"{annotator}={tmp_path / f'{annotator}_part2.csv'}")
    return key, files


def test_three_annotators_hand_computed_scores(tmp_path):
    _, files = _fixture(tmp_path)
    out = tmp_path / "scores.json"
    args = ["human", "score", "--key", str(tmp_path / "key.csv"), "--sheets", *files]
    assert main([*args, "--out", str(out), "--out-csv", str(tmp_path / "scores.csv")]) == 0
    summary = json.loads(out.read_text())
    m1, m2 = summary["models"]["m1"], summary["models"]["m2"]
    # relevance, m1: a1 1/3, -1; a2 1, -1; a3 1/3 (its S003 is incomplete) -> (-1/3) / 5
    assert m1["relevance"] == pytest.approx(-1 / 15)
    assert (m1["relevance_sheets"], m1["relevance_sheets_won"]) == (5, 3)
    # m2: a1 1, 0; a2 0, 1; a3 1/2, 0 -> 2.5 / 6
    assert m2["relevance"] == pytest.approx(5 / 12)
    assert (m2["relevance_sheets"], m2["relevance_sheets_won"]) == (6, 3)
    # centrality: m1 a1 0, 0; a2 1, 0 -> 1/4; m2 a1 0, 0; a2 -1, 1 -> 0; a3 rated none
    assert m1["centrality"] == pytest.approx(0.25) and m2["centrality"] == pytest.approx(0.0)
    assert m1["centrality_sheets"] == 4 and m2["centrality_sheets_won"] == 1
    # unexpectedness: 12 ratings of 2 and 12 of 3 per model; specificity (2*11 + 2*24) / 24
    assert m1["unexpectedness"] == pytest.approx(2.5) and m1["unexpectedness_ratings"] == 24
    assert m2["specificity"] == pytest.approx(70 / 24)
    status = summary["sheets_by_status"]
    assert status["relevance"] == {"complete": 11, "incomplete": 1, "unrated": 0}
    assert status["centrality"] == {"complete": 8, "incomplete": 0, "unrated": 4}
    per_sheet = pl.read_csv(tmp_path / "scores.csv")
    assert per_sheet.height == 12


def _reliability(values_by_annotator: dict[str, dict[str, list]]) -> np.ndarray:
    """annotators x statements, nan where missing (the krippendorff package's layout)."""
    return np.array(
        [
            [np.nan if v is None else float(v) for s in SHEETS for v in values_by_annotator[a][s]]
            for a in sorted(values_by_annotator)
        ]
    )


def test_three_annotators_agreement_matches_krippendorff(tmp_path):
    _, files = _fixture(tmp_path)
    out = tmp_path / "scores.json"
    main(
        [
            "human",
            "score",
            "--key",
            str(tmp_path / "key.csv"),
            "--sheets",
            *files,
            "--out",
            str(out),
        ]
    )
    agreement = json.loads(out.read_text())["agreement"]
    assert agreement["annotators"] == 3
    relevance = _reliability(RELEVANCE)
    expected = krippendorff.alpha(reliability_data=relevance, level_of_measurement="nominal")
    assert agreement["relevance"]["alpha"] == pytest.approx(expected, abs=1e-12)
    assert agreement["relevance"]["statements"] == 24 and agreement["relevance"]["ratings"] == 71
    is_4 = np.where(np.isnan(relevance), np.nan, (relevance == 4).astype(float))
    expected = krippendorff.alpha(reliability_data=is_4, level_of_measurement="nominal")
    assert agreement["relevance_is_4"]["alpha"] == pytest.approx(expected, abs=1e-12)
    expected = krippendorff.alpha(
        reliability_data=_reliability(CENTRALITY), level_of_measurement="nominal"
    )
    assert agreement["centrality"]["alpha"] == pytest.approx(expected, abs=1e-12)
    specificity = np.array([SPECIFICITY[a] * len(SHEETS) for a in ("a1", "a2")], dtype=float)
    expected = krippendorff.alpha(reliability_data=specificity, level_of_measurement="nominal")
    assert agreement["specificity"]["alpha"] == pytest.approx(expected, abs=1e-12)
    # a1 says 2 and a2 says 3 everywhere: they never agree
    assert agreement["unexpectedness"]["alpha"] < -0.9


def test_one_annotator_has_no_agreement(tmp_path):
    _, files = _fixture(tmp_path)
    table, summary = score_sheets(
        pl.read_csv(tmp_path / "key.csv"), {"a1": read_filled(tmp_path / "a1_part1.csv")}
    )
    assert summary["agreement"]["relevance"]["alpha"] is None
    assert "two annotators" in summary["agreement"]["relevance"]["why_none"]
    assert table.height == 4


def test_export_then_score_end_to_end(tmp_path):
    """Sheets from export, filled by an annotator who rates 4 exactly the statements meant for
    the post set: every scored sheet is won with 1."""
    _experiment(tmp_path)
    code, out = _export(tmp_path, "--sheets-per-model", "3")
    assert code == 0
    key = pl.read_csv(out / "key.csv")
    part1 = pl.read_csv(out / "part1.csv").join(
        key.select("sheet_id", "item", "meant_for_post_set"), on=["sheet_id", "item"]
    )
    filled = part1.with_columns(
        pl.when(pl.col("meant_for_post_set")).then(4).otherwise(0).alias("relevance"),
        pl.lit(2).alias("centrality"),
    ).drop("meant_for_post_set")
    filled.write_csv(tmp_path / "ann_part1.csv")
    scores = tmp_path / "scores.json"
    args = ["human", "score", "--key", str(out / "key.csv"), "--sheets"]
    assert main([*args, f"ann={tmp_path / 'ann_part1.csv'}", "--out", str(scores)]) == 0
    models = json.loads(scores.read_text())["models"]
    assert set(models) == set(CORRECT)
    for entry in models.values():
        assert entry["relevance"] == 1.0 and entry["relevance_sheets_won"] == 3
        assert entry["centrality"] == 0.0 and entry["unexpectedness"] is None


def test_bad_ratings_are_config_errors(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("sheet_id,item,relevance,centrality\nS001,1,5,\n")
    with pytest.raises(ConfigError, match="line 2: relevance must be 0-4"):
        read_filled(path)
    path.write_text("sheet_id,item,relevance,centrality\nS001,1,x,\n")
    with pytest.raises(ConfigError, match="not a number"):
        read_filled(path)
    path.write_text("sheet_id,item,comment\nS001,1,x\n")
    with pytest.raises(ConfigError, match="needs the columns sheet_id, item and some of"):
        read_filled(path)
    one = tmp_path / "one.csv"
    one.write_text("sheet_id,item,relevance\nS001,1,4\n")
    with pytest.raises(ConfigError, match="relevance of sheet S001 rated in two files"):
        combine_files([("one.csv", read_filled(one)), ("again.csv", read_filled(one))], "a1")
    assert set(MEASURES) <= set(read_filled(one).columns)
