"""The TM and CM stages end to end with a real (tiny, random-weight, locally built) transformers
model on 5 rows: the outputs are noise, but every row gets a theory and a prediction, undetected
answers are counted, and nothing crashes."""

from __future__ import annotations

import json
import random

import polars as pl
import pytest
from splits.cli import main
from splits.io import write_parquet

pytest.importorskip("transformers")


def _quadruplets(n=8, k=4):
    rng = random.Random(1)
    rows = []
    for i in range(n):
        labels = ["A", "B"] * (k // 2)
        rows.append(
            {
                "quadruplet_id": f"q{i}",
                "description": "Basketball",
                "category": "Sports & Fitness",
                "demographic_A": "catholic",
                "demographic_B": "teacher",
                "example_posts": [f"post {j} of row {i}\nabout hoops" for j in range(k)],
                "example_labels": labels,
                "sample_A": ["We went to Mass.", "Lent again", "parish game"],
                "sample_B": ["Grading tonight", "my students", "school team"],
                "switched": rng.random() < 0.5,
            }
        )
    return pl.DataFrame(rows)


@pytest.fixture(scope="module")
def tiny_spec(tmp_path_factory):
    from splits.testing.tiny_models import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return json.dumps(
        {"backend": "transformers", "model": str(path), "device": "cpu", "cpu_threads": 1}
    )


def test_tiny_model_runs_tm_and_cm_stages(tmp_path, tiny_spec, repo_root):
    write_parquet(_quadruplets(), tmp_path / "quads.parquet")
    # by hand: the stages read their settings from a config file (schema defaults filled)
    config = tmp_path / "config.yaml"
    config.write_text(
        "seed: 3\nevaluation:\n  tm_sampling: {max_tokens: 12}\n  cm_sampling: {max_tokens: 12}\n"
    )
    rows = tmp_path / "rows.parquet"
    assert (
        main(
            [
                "theorize",
                "subsample",
                "--dataset",
                str(tmp_path / "quads.parquet"),
                "--rows",
                "5",
                "--config",
                str(config),
                "--out",
                str(rows),
            ]
        )
        == 0
    )
    theories = tmp_path / "theories.parquet"
    code = main(
        [
            "theorize",
            "generate",
            "--rows",
            str(rows),
            "--k",
            "2",
            "--model",
            "tiny",
            "--model-spec",
            tiny_spec,
            "--template",
            str(repo_root / "resources/prompts/theory.txt"),
            "--config",
            str(config),
            "--cache",
            str(tmp_path / "cache.sqlite"),
            "--out",
            str(theories),
        ]
    )
    assert code == 0
    theory_frame = pl.read_parquet(theories)
    assert theory_frame.height == 5 and set(theory_frame["tm"]) == {"tiny"}
    predictions = tmp_path / "predictions.parquet"
    summary = tmp_path / "summary.json"
    code = main(
        [
            "classify",
            "--rows",
            str(rows),
            "--theories",
            str(theories),
            "--model",
            "tiny",
            "--model-spec",
            tiny_spec,
            "--template",
            str(repo_root / "resources/prompts/classify_llama3.txt"),
            "--config",
            str(config),
            "--cache",
            str(tmp_path / "cache.sqlite"),
            "--out",
            str(predictions),
            "--summary",
            str(summary),
        ]
    )
    assert code == 0
    frame = pl.read_parquet(predictions)
    counts = json.loads(summary.read_text())
    assert frame.height == 5 and counts["rows"] == 5
    assert counts["detected"] + counts["undetected"] == 5
    assert sum(counts["undetected_by_reason"].values()) == counts["undetected"]
    assert frame.filter(~pl.col("detected"))["correct"].sum() == 0
    assert (frame["undetected_reason"].is_null() == frame["detected"]).all()
    metrics_dir = tmp_path / "metrics"
    assert (
        main(
            [
                "metrics",
                "--rows",
                str(rows),
                "--predictions",
                str(predictions),
                "--experiment",
                "tiny",
                "--groups",
                "{}",
                "--config",
                str(config),
                "--out-dir",
                str(metrics_dir),
            ]
        )
        == 0
    )
    table = pl.read_csv(metrics_dir / "summary.csv")
    assert table["n"].to_list() == [5]
    assert table["undetected_rate"][0] == pytest.approx(counts["undetected"] / 5)
