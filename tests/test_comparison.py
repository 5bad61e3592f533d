"""The comparison of model lexicons against the Fighting Words lexicon (held-out lift)."""

from __future__ import annotations

import polars as pl
from splits.hypotheses.comparison import compare, comparison_plot, counting_finding


def row(hid, source, target, lift, p=0.01, k=0.05, topic="T"):
    return {
        "hypothesis_id": hid,
        "topic": topic,
        "demographic_A": "a",
        "demographic_B": "b",
        "target": target,
        "lexicon": [hid, "x"],
        "source": source,
        "k_fraction": k,
        "heldout_lift": lift,
        "heldout_lift_low": None if lift is None else lift - 0.5,
        "heldout_lift_high": None if lift is None else lift + 0.5,
        "heldout_p_value": p,
        "heldout_q_value": p,
        "triviality": 0.3,
    }


def table(rows):
    return pl.DataFrame(rows, schema_overrides={"heldout_lift": pl.Float64})


def test_best_model_lexicon_against_counting_per_target(tmp_path):
    rows = [
        row("fw-a", "fighting-words", "a", 2.0),
        row("fw-b", "fighting-words", "b", 1.2),
        row("th1", "theory", "a", 1.5),
        row("th2", "theory", "a", 1.8, p=0.02),
        row("th3", "llm", "a", 1.8, p=0.001),  # same lift as th2, smaller p: the best
        row("pl", "planted", "a", 9.0),  # not a model's lexicon
        row("th4", "theory", "b", 3.0),
        row("th5", "theory", "b", 5.0, k=0.01),  # another k
        row("fw-c", "fighting-words", "a", 1.0, topic="U"),
    ]
    out = compare(table(rows), report_k=0.05)
    by = {(r["topic"], r["target"]): r for r in out.iter_rows(named=True)}
    assert by[("T", "a")]["model_hypothesis_id"] == "th3"
    assert by[("T", "a")]["winner"] == "counting"
    assert by[("T", "b")]["model_hypothesis_id"] == "th4"
    assert by[("T", "b")]["winner"] == "models"
    assert by[("U", "a")]["winner"] == "none" and by[("U", "a")]["model_hypothesis_id"] is None
    assert by[("T", "a")]["counting_lexicon"] == "fw-a; x"
    finding = counting_finding(out, 0.05)
    assert finding is not None and finding.code == "counting_beats_models"
    assert "1 of 2" in finding.message
    assert comparison_plot(out, tmp_path / "p.png", 0.05).stat().st_size > 1000


def test_no_finding_when_models_win_most():
    rows = [
        row("fw-a", "fighting-words", "a", 1.0),
        row("fw-b", "fighting-words", "b", 1.0),
        row("th-a", "theory", "a", 2.0),
        row("th-b", "theory", "b", 2.0),
    ]
    out = compare(table(rows), 0.05)
    assert set(out["winner"]) == {"models"}
    assert counting_finding(out, 0.05) is None
