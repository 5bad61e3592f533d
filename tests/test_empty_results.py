"""No empty result published as a success, unit level: every plotting function draws a clear
message for an empty table instead of a traceback; the graph summary counts subreddits with no
neighbour; empty datasets stop the export and the evaluation with one line. The same cases
through snakemake are in test_pipeline_faults.py."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np
import polars as pl
from PIL import Image
from splits.cli import main as splits_main

REPO = Path(__file__).resolve().parents[1]
CORNELL = REPO.parent / "shared" / "reference" / "realdata" / "convokit_cornell"

SUMMARY_SCHEMA = {
    "tm": pl.String,
    "cm": pl.String,
    "k": pl.Int64,
    "n": pl.Int64,
    "accuracy": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
}
SPLITS_SCHEMA = {"split": pl.String, "key": pl.String, **SUMMARY_SCHEMA}


def _is_png(path: Path) -> bool:
    with Image.open(path) as image:
        return image.format == "PNG" and image.size[0] > 50


def _warned(caplog, *words: str) -> bool:
    return any(
        r.levelno >= logging.WARNING and all(w in r.getMessage() for w in words)
        for r in caplog.records
    )


# --------------------------------------------------------------------------- plots


def test_evaluation_plots_of_empty_tables_say_so(tmp_path, caplog):
    from splits.evaluation import report

    empty = pl.DataFrame(schema=SUMMARY_SCHEMA)
    with caplog.at_level(logging.WARNING):
        report.plot_accuracy_vs_k(empty, tmp_path / "a.png", "experiment x")
        report.plot_heatmap(empty, tmp_path / "h.png", "experiment x")
        report.plot_split(pl.DataFrame(schema=SPLITS_SCHEMA), "pair", tmp_path / "p.png", "x")
    for name in ("a.png", "h.png", "p.png"):
        assert _is_png(tmp_path / name)
    assert _warned(caplog, "a.png", "no rows")
    assert _warned(caplog, "h.png", "no rows")
    assert _warned(caplog, "p.png", "pair")


def test_report_cli_on_empty_tables_exits_cleanly(tmp_path, caplog):
    pl.DataFrame(schema=SUMMARY_SCHEMA).write_csv(tmp_path / "summary.csv")
    pl.DataFrame(schema=SPLITS_SCHEMA).write_csv(tmp_path / "splits.csv")
    argv = ["report", "--summary", str(tmp_path / "summary.csv")]
    argv += ["--splits", str(tmp_path / "splits.csv"), "--experiment", "x"]
    argv += ["--out-dir", str(tmp_path / "plots")]
    with caplog.at_level(logging.WARNING):
        assert splits_main(argv) == 0
    assert len(list((tmp_path / "plots").glob("*.png"))) == 5


def test_selfid_curve_without_users_says_so(tmp_path, caplog):
    from splits.demographics.curves import selfid_curve

    users = pl.DataFrame(
        schema={
            "author": pl.String,
            "percentile": pl.Float64,
            "n_posts": pl.Int64,
            "n_self": pl.Int64,
            "n_anti": pl.Int64,
        }
    )
    from splits.demographics.selfid import plot_curve

    with caplog.at_level(logging.WARNING):
        plot_curve(selfid_curve(users, 20), 75.0, "Nobody", "auto", tmp_path / "c.png")
    assert _is_png(tmp_path / "c.png")
    assert _warned(caplog, "c.png", "no user")


def test_probe_plots_of_empty_tables_say_so(tmp_path, caplog):
    from splits.probes.cli_common import bar_plot
    from splits.probes.empathy import EmpathyResult, heatmap

    empty = np.zeros((0, 0))
    result = EmpathyResult(
        personas=[],
        n_items=0,
        n_items_kept=0,
        excluded={},
        matrix=empty,
        z_matrix=empty,
        in_group=np.zeros((0, 0), dtype=bool),
        delta=math.nan,
        delta_raw=math.nan,
        p_permutation=math.nan,
        null_low=math.nan,
        null_high=math.nan,
        min_p_permutation=math.nan,
        p_sign_flip=math.nan,
        primary_test="none",
        alpha=0.05,
        n_items_shown=0,
        excluded_shown={},
        shown_z=empty,
        masked=np.zeros((0, 0), dtype=bool),
        cells=pl.DataFrame(),
    )
    with caplog.at_level(logging.WARNING):
        bar_plot([], [], tmp_path / "gai.png", "group association index", "GAI", "attribute")
        heatmap(result, str(tmp_path / "heat.png"), "empathy gap")
    assert _is_png(tmp_path / "gai.png") and _is_png(tmp_path / "heat.png")
    assert _warned(caplog, "gai.png", "no rows") and _warned(caplog, "heat.png", "no persona")


# --------------------------------------------------------------------------- empty tables


def test_graph_summary_counts_subreddits_without_neighbours(tmp_path):
    """One subreddit (or several sharing no user) has 0 neighbours: fewer than k."""
    posts = pl.DataFrame(
        {
            "author": ["u1", "u2", "u3", "u4", "u5"],
            "subreddit": ["cornell", "cornell", "cornell", "ithaca", "ithaca"],
        }
    ).with_columns(post_id=pl.format("p{}", pl.int_range(pl.len())), text=pl.lit("x"))
    path = tmp_path / "posts.parquet"
    posts.write_parquet(path)
    argv = ["graph", "--posts", str(path), "--out-dir", str(tmp_path / "g")]
    argv += ["--settings", '{"top_n": 50000, "min_posts": 1, "k": 3, "block_mb": 256}']
    assert splits_main(argv) == 0
    import json

    summary = json.loads((tmp_path / "g" / "summary.json").read_text())
    assert summary["neighbour_rows"] == 0
    fewer = summary["subreddits_with_fewer_than_k_neighbours"]
    assert fewer == {"jaccard": 2, "cosine": 2}


def test_export_of_no_quadruplets_is_one_line(tmp_path, capsys):
    from splits.sampling.draw import QUADRUPLET_SCHEMA

    pl.DataFrame(schema=QUADRUPLET_SCHEMA).write_parquet(tmp_path / "q.parquet")
    pl.DataFrame({"post_id": ["a"], "author": ["x"], "text": ["t"]}).write_parquet(
        tmp_path / "tp.parquet"
    )
    argv = ["export", "--quadruplets", str(tmp_path / "q.parquet")]
    argv += ["--topic-posts", str(tmp_path / "tp.parquet"), "--out-dir", str(tmp_path / "out")]
    settings = {"k": 4, "salt_env": "SPLITS_TEST_SALT", "post_ids": "keep"}
    argv += ["--settings", json.dumps(settings | {"license": None, "source": None})]
    assert splits_main(argv) != 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "no quadruplets" in err[0] and str(tmp_path / "q.parquet") in err[0]
    assert not (tmp_path / "out" / "README.md").exists()


def test_evaluation_of_an_empty_dataset_is_one_line(tmp_path, capsys):
    from splits.sampling.draw import QUADRUPLET_SCHEMA

    pl.DataFrame(schema=QUADRUPLET_SCHEMA).write_parquet(tmp_path / "q.parquet")
    argv = ["theorize", "subsample", "--dataset", str(tmp_path / "q.parquet"), "--rows", "10"]
    argv += ["--settings", '{"dataset_layout": "auto", "seed": 1}']
    argv += ["--topics", str(REPO / "config" / "topics.yaml")]
    argv += ["--out", str(tmp_path / "rows.parquet"), "--report", str(tmp_path / "r.json")]
    assert splits_main(argv) != 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "evaluation.dataset" in err[0] and "no usable quadruplet" in err[0]
    assert not (tmp_path / "rows.parquet").exists()
