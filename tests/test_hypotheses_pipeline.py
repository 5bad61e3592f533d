"""The hypotheses stage in the default run: planted truth comes out, nulls stay null, the table has
the promised columns, the query engine agrees with the jobs, and adding one hypothesis file
re-runs only its jobs.

Oracles: the generator's planted marker phrases (a known difference), null lexicons (random words
and stop words, independent of the group by construction; their randomised p-values are exactly
uniform under the null, KS test), the identity-word lexicons (triviality 1 by construction), and
Snakemake's own dry run."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import polars as pl
import pytest
import snakemake_fork
import yaml
from scipy import stats
from splits.config.schema import validate_config
from splits.config.settings import settings_from_config
from splits.hypotheses.engine import HypothesisEngine
from splits.hypotheses.settings import LiftSettings

ISSUE_COLUMNS = [
    "hypothesis_id",
    "topic",
    "demographic_A",
    "demographic_B",
    "target",
    "lexicon",
    "source",
    "k_fraction",
    "n",
    "hits_at_n",
    "target_in_list",
    "list_size",
    "lift",
    "lift_low",
    "lift_high",
    "p_value",
    "q_value",
    "triviality",
]


@pytest.fixture(scope="module")
def table(default_run) -> pl.DataFrame:
    return pl.read_parquet(default_run / "results" / "hypotheses" / "lift.parquet")


@pytest.fixture(scope="module")
def config(default_run) -> dict:
    return yaml.safe_load((default_run / "config" / "config.yaml").read_text())


def test_table_columns_and_sources(table):
    assert table.columns[: len(ISSUE_COLUMNS)] == ISSUE_COLUMNS
    assert table.columns[len(ISSUE_COLUMNS) :] == [
        "precision",
        "null_band_low",
        "null_band_high",
        "null_band_low_hits",
        "null_band_high_hits",
        "matching_posts",
        "identity_words_covered",
        "heldout_n",
        "heldout_hits_at_n",
        "heldout_target_in_list",
        "heldout_list_size",
        "heldout_lift",
        "heldout_lift_low",
        "heldout_lift_high",
        "heldout_p_value",
        "heldout_q_value",
        "repeats",
        "repeats_jaccard",
    ]
    assert {"planted", "null", "trivial", "theory", "fighting-words"} <= set(table["source"])
    assert table["triviality"].is_not_null().all()
    # the counting baseline is scored on held-out posts only (tests/test_hypotheses_baselines.py)
    scored = table.filter(pl.col("source") != "fighting-words")
    assert scored["hypothesis_id"].n_unique() * 5 == scored.height  # every k of every hypothesis
    assert scored["q_value"].is_not_null().all()
    assert (scored["q_value"] >= scored["p_value"] - 1e-15).all()


def test_planted_lexicons_are_found(table, default_run):
    meta = json.loads((default_run / "results" / "sample" / "synth_meta.json").read_text())
    planted = table.filter((pl.col("source") == "planted") & (pl.col("k_fraction") == 0.05))
    topics = len(next(iter(meta["demographics"].values()))["markers"])
    groups = len(meta["demographics"])
    assert planted.height == topics * groups * (groups - 1)  # every topic, pair and target
    # the lexicon is the generator's marker list of the target on that topic
    for row in planted.head(20).iter_rows(named=True):
        assert row["lexicon"] == meta["demographics"][row["target"]]["markers"][row["topic"]]
    found = (planted["q_value"] < 0.05) & (planted["lift"] > 1.5)
    assert found.mean() >= 0.9, found.mean()
    # and the interval excludes 1 where q is small
    assert (planted.filter(pl.col("q_value") < 1e-3)["lift_low"] > 1).all()


def _randomised_p(rows: pl.DataFrame, rng: np.random.Generator) -> np.ndarray:
    """P(X > x) + U P(X = x): exactly uniform under the null, whatever the discreteness."""
    x, n = rows["hits_at_n"].to_numpy(), rows["n"].to_numpy()
    big_k, big_n = rows["target_in_list"].to_numpy(), rows["list_size"].to_numpy()
    return stats.hypergeom.sf(x, big_n, big_k, n) + rng.random(len(x)) * stats.hypergeom.pmf(
        x, big_n, big_k, n
    )


def test_null_lexicons_have_uniform_p_values(table):
    rng = np.random.default_rng(2025)
    nulls = table.filter(pl.col("source") == "null")
    assert nulls["hypothesis_id"].n_unique() >= 300
    for k in sorted(set(nulls["k_fraction"])):
        rows = nulls.filter(pl.col("k_fraction") == k)
        result = stats.kstest(_randomised_p(rows, rng), "uniform")
        assert result.pvalue > 0.01, (k, result)
        # the reported (discrete) p-values are conservative: rejections at 5% stay near 5%
        share = (rows["p_value"] < 0.05).mean()
        assert share <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / rows.height), (k, share)


def test_triviality_orders_the_sources(table):
    by_source = table.group_by("source").agg(pl.col("triviality").mean()).rows()
    mean = dict(by_source)
    trivial = table.filter(pl.col("source") == "trivial")["triviality"]
    assert trivial.min() > 0.99  # a group's identity words restate its identity
    assert mean["planted"] < 0.3 and mean["null"] < 0.3
    covered = table.filter(pl.col("source") == "trivial")["identity_words_covered"]
    assert (covered.list.len() > 0).all()


def test_filtered_and_stage_counts(default_run, table, config):
    base = default_run / "results" / "hypotheses"
    filtered = pl.read_csv(base / "filtered.csv")
    alpha = 0.05
    largest = max(config["hypotheses"].get("triviality_thresholds", [0.3, 0.5]))
    assert filtered.height > 0
    assert (filtered["q_value"] < alpha).all() and (filtered["triviality"] < largest).all()
    assert "trivial" not in set(filtered["source"])
    assert (filtered["nontrivial_below_0.3"] == (filtered["triviality"] < 0.3)).all()
    expected = table.filter((pl.col("q_value") < alpha) & (pl.col("triviality") < largest))
    assert filtered.height == expected.height
    stages = pl.read_csv(base / "stages.csv")
    planted = stages.filter((pl.col("source") == "planted") & (pl.col("k_fraction") == 0.05)).sort(
        "stage"
    )
    assert (
        dict(planted.select("stage", "hypotheses").rows())["all"]
        == table.filter(pl.col("source") == "planted")["hypothesis_id"].n_unique()
    )
    for plot in ("lift_vs_triviality", "lift_curves", "stages", "models_vs_counting"):
        assert (base / "plots" / f"{plot}.png").stat().st_size > 10_000


def test_engine_query_equals_the_lift_job(default_run, table, config):
    engine = HypothesisEngine(
        default_run / "results" / "topics" / "topic_posts.parquet",
        settings_from_config(LiftSettings, validate_config(copy.deepcopy(config))),
    )
    for source in ("planted", "null", "theory"):
        row = table.filter(pl.col("source") == source).row(0, named=True)
        result = engine.query(
            row["lexicon"], row["topic"], row["demographic_A"], row["demographic_B"], row["target"]
        )
        job = table.filter(pl.col("hypothesis_id") == row["hypothesis_id"]).sort("k_fraction")
        for column in ("n", "hits_at_n", "target_in_list", "list_size"):
            assert result.rows[column].to_list() == job[column].to_list()
        for column in ("lift", "lift_low", "lift_high", "p_value"):
            assert result.rows[column].to_numpy() == pytest.approx(job[column].to_numpy())
        assert result.matching_posts == job["matching_posts"][0]
        if source == "planted":
            top = result.posts.head(5)
            assert (top["group"] == row["target"]).all() and not top["padding"].any()
            assert all(len(spans) > 0 for spans in top["spans"])


def _dry_run_jobs(workdir) -> dict[str, int]:
    proc = snakemake_fork.run(
        ["--cores", "2", "--dry-run", "--quiet", "rules"], workdir, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout + proc.stderr
    if "Nothing to be done" in text:
        return {}
    counts = {}
    for line in text[text.index("Job stats:") :].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        if parts[0] not in ("total", "all"):
            counts[parts[0]] = int(parts[1])
    return counts


def test_adding_one_hypothesis_file_runs_only_its_jobs(default_run, tmp_path):
    workdir = tmp_path / "repo"
    shutil.copytree(default_run, workdir, symlinks=True)
    mine = workdir / "config" / "hypotheses" / "mine.yaml"
    mine.parent.mkdir(parents=True, exist_ok=True)
    meta = json.loads((workdir / "results" / "sample" / "synth_meta.json").read_text())
    markers = meta["demographics"]["jewish"]["markers"]["Soccer"]
    mine.write_text(
        yaml.safe_dump(
            [
                {
                    "id": "mine-1",
                    "topic": "Soccer",
                    "demographic_A": "jewish",
                    "demographic_B": "*",
                    "target": "jewish",
                    "lexicon": markers[:3],
                },
                {
                    "id": "mine-2",
                    "topic": "Soccer",
                    "demographic_A": "jewish",
                    "demographic_B": "black",
                    "target": "black",
                    "lexicon": ["lol", "gonna"],
                },
            ]
        )
    )
    cfg_path = workdir / "config" / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["hypotheses"]["files"] = {"mine": "config/hypotheses/mine.yaml"}
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert _dry_run_jobs(workdir) == {
        "hypotheses_file": 1,
        "hypotheses_lift": 1,
        "hypotheses_triviality": 1,
        "hypotheses_table": 1,
        "hypotheses_report": 1,
        # the report's HTML page of the hypotheses table, which gained rows
        "report_hypotheses": 1,
    }
    before = {
        p: p.stat().st_mtime_ns for p in (workdir / "results" / "hypotheses").rglob("*.parquet")
    }
    proc = snakemake_fork.run(["--cores", "2", "--quiet", "rules"], workdir, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = pl.read_parquet(workdir / "results" / "hypotheses" / "lift.parquet")
    added = table.filter(pl.col("hypothesis_id").str.starts_with("file/mine:"))
    assert added["hypothesis_id"].n_unique() == 6  # 5 pairs of "*" and one more
    for path, mtime in before.items():
        if path.name != "lift.parquet" or path.parent.name != "hypotheses":
            assert path.stat().st_mtime_ns == mtime, f"{path} was rewritten"
    assert _dry_run_jobs(workdir) == {}
