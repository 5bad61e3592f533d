"""The counting baseline, held-out scoring, redundancy marks and the comparison in the default run.

Oracles: the generator's planted marker phrases (Fighting Words on the discovery half must find
them, and they must stay significant on the held-out half), null lexicons (independent of the
group by construction: held-out p below 0.05 no more often than 5%), the threads of the merged
posts table (a thread never on both sides), the rows' calibration posts (a theory's held-out list
lacks exactly those of the held-out half), posts matched by brute force (token n-grams of the
texts) and the greedy redundancy marks recomputed from the definition."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
from splits.hypotheses.heldout import HELDOUT, split_halves
from splits.hypotheses.retrieval import hash64
from splits.text import words

SEED = 20250408  # the default config's seed
POOL = ["topic", "demographic_A", "demographic_B"]


@pytest.fixture(scope="module")
def results(default_run):
    return default_run / "results"


@pytest.fixture(scope="module")
def table(results) -> pl.DataFrame:
    return pl.read_parquet(results / "hypotheses" / "lift.parquet")


@pytest.fixture(scope="module")
def topic_posts(results) -> pl.DataFrame:
    return pl.read_parquet(results / "topics" / "topic_posts.parquet")


@pytest.fixture(scope="module")
def threads(results) -> pl.DataFrame:
    return pl.read_parquet(
        results / "posts" / "posts.parquet", columns=["post_id", "conversation_id"]
    )


def pool_frame(topic_posts, threads, topic, a, b) -> pl.DataFrame:
    """The pool's posts (both groups, posts listed under both left out) with their half, split
    here from the posts table's threads."""
    rows = topic_posts.filter((pl.col("topic") == topic) & pl.col("demographic").is_in([a, b]))
    shared = rows.group_by("post_id").len().filter(pl.col("len") > 1)["post_id"]
    rows = rows.filter(~pl.col("post_id").is_in(shared.implode()))
    rows = rows.join(threads, on="post_id", how="left")
    return split_halves(rows, SEED, 0.5, f"{topic}\x1f{a}\x1f{b}")


def test_a_fighting_words_row_per_topic_pair_target_scored_on_heldout(table, results):
    meta = json.loads((results / "sample" / "synth_meta.json").read_text())
    groups = len(meta["demographics"])
    topics = len(next(iter(meta["demographics"].values()))["markers"])
    fw = table.filter(pl.col("source") == "fighting-words")
    report = json.loads((results / "hypotheses" / "sets" / "fighting-words.json").read_text())
    pools = topics * groups * (groups - 1) // 2
    assert len(report["pools"]) == pools
    # every (topic, pair) has a lexicon; a target without an n-gram of z >= min_z is counted
    assert fw.select(POOL).unique().height == pools
    assert fw["hypothesis_id"].n_unique() + sum(report["skipped"].values()) == 2 * pools
    # scored on held-out posts only: the all-posts statistics are null, the held-out ones set
    assert fw["lift"].is_null().all() and fw["p_value"].is_null().all()
    assert fw["heldout_lift"].is_not_null().all() and fw["heldout_q_value"].is_not_null().all()
    # every source has a held-out score
    scored = table.filter(pl.col("heldout_lift").is_not_null())
    assert set(scored["source"]) == set(table["source"])
    # the other sources keep every k of every hypothesis with its all-posts statistics
    others = table.filter(pl.col("source") != "fighting-words")
    assert others["hypothesis_id"].n_unique() * 5 == others.height
    assert others["q_value"].is_not_null().all()


def test_fighting_words_recovers_the_planted_markers(results):
    sets = results / "hypotheses" / "sets"
    planted = pl.read_parquet(sets / "sample.parquet").filter(pl.col("source") == "planted")
    fw = pl.read_parquet(sets / "fighting-words.parquet")
    keys = [*POOL, "target"]
    joined = planted.select(*keys, pl.col("lexicon").alias("markers")).join(
        fw.select(*keys, pl.col("lexicon").alias("fw")), on=keys, how="left"
    )
    recall, precision = [], []
    for markers, found in joined.select("markers", "fw").iter_rows():
        marker_tokens = {t for m in markers for t in words(m)}
        found = found or []
        recall.append(len(set(markers) & set(found)) / len(markers))
        # an entry is right when its words are the target's marker words
        precision.append(np.mean([set(words(e)) <= marker_tokens for e in found]) if found else 0.0)
    recall, precision = np.array(recall), np.array(precision)
    assert (recall > 0).mean() >= 0.95, (recall > 0).mean()
    assert recall.mean() >= 0.4, recall.mean()  # the lexicons are as long as the theories'
    assert precision.mean() >= 0.9, precision.mean()


def test_planted_significant_on_heldout_and_nulls_at_the_null_rate(table):
    planted = table.filter(pl.col("source") == "planted")
    per_hypothesis = planted.group_by("hypothesis_id").agg(
        (pl.col("heldout_q_value") < 0.05).any().alias("significant")
    )
    assert per_hypothesis["significant"].mean() >= 0.9, per_hypothesis["significant"].mean()
    fw = (
        table.filter(pl.col("source") == "fighting-words")
        .group_by("hypothesis_id")
        .agg((pl.col("heldout_q_value") < 0.05).any().alias("significant"))
    )
    assert fw["significant"].mean() >= 0.9, fw["significant"].mean()
    nulls = table.filter((pl.col("source") == "null") & pl.col("heldout_p_value").is_not_null())
    assert nulls.height >= 1000
    for k in sorted(set(nulls["k_fraction"])):
        rows = nulls.filter(pl.col("k_fraction") == k)
        share = (rows["heldout_p_value"] < 0.05).mean()
        assert share <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / rows.height), (k, share)


def test_halves_keep_threads_and_heldout_lists_leave_out_seen_posts(
    table, results, topic_posts, threads
):
    theory_set = pl.read_parquet(
        next((results / "hypotheses" / "sets" / "theory").rglob("*.parquet"))
    )
    rows_file = next((results / "evaluation" / "subsample").glob("rows-*.parquet"))
    rows = pl.read_parquet(rows_file)
    # a theory saw the first k calibration posts of its row (k = 16 in the default run)
    calibration = {p for ids in rows["example_post_ids"] for p in ids[:16]}
    seen = theory_set["seen_post_ids"]
    assert (seen.list.len() == 16).all()
    assert {p for ids in seen for p in ids} <= calibration
    checked = 0
    for topic, a, b in table.select(POOL).unique().sort(POOL).head(6).iter_rows():
        pool = pool_frame(topic_posts, threads, topic, a, b)
        sides = pool.group_by("conversation_id").agg(pl.col("half").n_unique())
        assert (sides["half"] == 1).all()  # no thread on both sides
        held = set(pool.filter(pl.col("half") == HELDOUT)["post_id"])
        assert 0 < len(held) < pool.height
        in_pool = table.filter(
            (pl.col("topic") == topic)
            & (pl.col("demographic_A") == a)
            & (pl.col("demographic_B") == b)
        )
        # a planted or fighting-words list is the whole held-out half
        for source in ("planted", "fighting-words"):
            sizes = in_pool.filter(pl.col("source") == source)["heldout_list_size"]
            assert (sizes == len(held)).all(), (topic, a, b, source)
        # a theory's list is the held-out half less the calibration posts its TM saw
        for h in theory_set.filter(
            (pl.col("topic") == topic)
            & (pl.col("demographic_A") == a)
            & (pl.col("demographic_B") == b)
        ).iter_rows(named=True):
            sizes = in_pool.filter(pl.col("hypothesis_id") == h["hypothesis_id"])[
                "heldout_list_size"
            ]
            assert (sizes == len(held - set(h["seen_post_ids"]))).all()
            checked += 1
    assert checked > 0


def _matches(texts: dict[str, list[str]], lexicon: list[str]) -> set[int]:
    entries = [tuple(words(e)) for e in lexicon]
    out = set()
    for post_id, tokens in texts.items():
        grams = {
            tuple(tokens[i : i + len(e)]) for e in entries for i in range(len(tokens) - len(e) + 1)
        }
        if any(e in grams for e in entries):
            out.add(hash64(post_id))
    return out


def test_redundancy_marks_against_brute_force(table, results, topic_posts, threads):
    matches = pl.concat(
        [pl.read_parquet(p) for p in (results / "hypotheses" / "matches").rglob("*.parquet")]
    )
    keys = {h: frozenset(k) for h, k in matches.iter_rows()}
    assert set(keys) == set(table["hypothesis_id"])
    # the matched posts are the posts holding an entry's tokens consecutively
    for topic, a, b in table.select(POOL).unique().sort(POOL).head(2).iter_rows():
        pool = pool_frame(topic_posts, threads, topic, a, b)
        texts = {p: words(t) for p, t in pool.select("post_id", "text").iter_rows()}
        hyps = (
            table.filter(
                (pl.col("topic") == topic)
                & (pl.col("demographic_A") == a)
                & (pl.col("demographic_B") == b)
            )
            .unique("hypothesis_id")
            .sort("hypothesis_id")
        )
        for h, lexicon in hyps.select("hypothesis_id", "lexicon").head(12).iter_rows():
            assert keys[h] == _matches(texts, lexicon), h
    # the marks: strongest first per pool, each compared with every earlier unmarked one
    hyps = table.group_by("hypothesis_id", *POOL).agg(
        pl.col("heldout_q_value").min().alias("q"),
        pl.col("heldout_lift").max().alias("lift"),
        pl.col("repeats").first(),
        pl.col("repeats_jaccard").first(),
    )
    marked = 0
    for _, part in hyps.group_by(POOL):
        part = part.sort(
            ["q", "lift", "hypothesis_id"], descending=[False, True, False], nulls_last=True
        )
        kept: list[str] = []
        for row in part.iter_rows(named=True):
            best, best_j = None, 0.0
            for other in kept:
                union = keys[row["hypothesis_id"]] | keys[other]
                j = len(keys[row["hypothesis_id"]] & keys[other]) / len(union) if union else 0.0
                if j > 0.5 and j > best_j:
                    best, best_j = other, j
            assert row["repeats"] == best, row["hypothesis_id"]
            if best is None:
                kept.append(row["hypothesis_id"])
                assert row["repeats_jaccard"] is None
            else:
                assert row["repeats_jaccard"] == pytest.approx(best_j)
                marked += 1
    assert marked > 0


def test_comparison_and_its_finding(table, results):
    base = results / "hypotheses"
    comparison = pl.read_csv(base / "comparison.csv")
    assert (base / "plots" / "models_vs_counting.png").stat().st_size > 10_000
    assert (base / "comparison.html").is_file()
    at_k = table.filter(pl.col("k_fraction") == 0.05)
    fw = at_k.filter(pl.col("source") == "fighting-words")
    assert comparison.height == fw.height
    models = at_k.filter(
        pl.col("source").is_in(["theory", "llm"]) & pl.col("heldout_lift").is_not_null()
    )
    wins = 0
    for row in comparison.iter_rows(named=True):
        pool = (
            (pl.col("topic") == row["topic"])
            & (pl.col("demographic_A") == row["demographic_A"])
            & (pl.col("demographic_B") == row["demographic_B"])
            & (pl.col("target") == row["target"])
        )
        counting = fw.filter(pool)["heldout_lift"][0]
        best = models.filter(pool)["heldout_lift"].max()
        assert row["counting_heldout_lift"] == pytest.approx(counting)
        if best is None:
            assert row["winner"] == "none"
            continue
        assert row["model_heldout_lift"] == pytest.approx(best)
        assert row["winner"] == ("counting" if counting > best else "models")
        wins += counting > best
    compared = (comparison["winner"] != "none").sum()
    findings = json.loads((results / "health" / "hypotheses.json").read_text())
    codes = [f["code"] for f in findings]
    assert codes == (["counting_beats_models"] if 2 * wins >= compared else [])


def test_report_job_records_the_finding_when_counting_wins(table, results, tmp_path):
    """The same table with every Fighting Words lexicon's held-out lift raised above the models':
    the report job writes counting_beats_models to its health file and names it in its log."""
    from splits.cli import main
    from splits.config.settings import schema_defaults
    from splits.hypotheses.settings import ReportSettings

    boosted = table.with_columns(
        pl.when(pl.col("source") == "fighting-words")
        .then(pl.lit(50.0))
        .otherwise(pl.col("heldout_lift"))
        .alias("heldout_lift")
    )
    boosted.write_parquet(tmp_path / "lift.parquet")
    out = {
        name: tmp_path / name
        for name in ("s.png", "c.png", "st.png", "cmp.csv", "cmp.png", "h.json")
    }
    settings = dataclasses.asdict(schema_defaults(ReportSettings))
    args = [
        "hypotheses",
        "report",
        "--table",
        str(tmp_path / "lift.parquet"),
        "--stages",
        str(results / "hypotheses" / "stages.csv"),
        "--settings",
        json.dumps(settings),
        "--out-scatter",
        str(out["s.png"]),
        "--out-curves",
        str(out["c.png"]),
        "--out-stages",
        str(out["st.png"]),
        "--out-comparison",
        str(out["cmp.csv"]),
        "--out-comparison-plot",
        str(out["cmp.png"]),
        "--health",
        str(out["h.json"]),
    ]
    assert main(args) == 0
    comparison = pl.read_csv(out["cmp.csv"])
    assert set(comparison["winner"]) <= {"counting", "none"}
    findings = json.loads(out["h.json"].read_text())
    assert [f["code"] for f in findings] == ["counting_beats_models"]
    compared = (comparison["winner"] == "counting").sum()
    assert f"on {compared} of {compared} " in findings[0]["message"]
