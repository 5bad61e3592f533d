"""Release mode of the lift against the release's own computation on the same inputs: real
Lucene (pyserini) retrieves with the release's query, the test pads as ``core_logic.py`` does and
computes lift, p and the "95% CI" with the release's formulas, written out below; the
project's rows must equal them, with K = 0 rows undefined instead of 0."""

from __future__ import annotations

import hashlib
import random
from typing import Union

import numpy as np
import pandas as pd
import polars as pl
import pytest
from scipy.stats import hypergeom
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.hypotheses.lexicon import Hypothesis
from splits.hypotheses.lift import evaluate_set, lift_frame
from splits.hypotheses.release import release_seed
from splits.hypotheses.settings import LiftSettings, RetrievalSettings
from splits.text import words
from test_bm25_variants import LUCENE_MISSING, run_lucene

# --------------------------------------------------------------------------- the release's code
# core_logic.py (eyloncaplan/splits, 2026), evaluation part, as published (pandas frames whose
# rows are the padded list, column "demographic").


def _resolve_k(df, k):
    if isinstance(k, float) and 0.0 < k <= 1.0:
        return int(len(df) * k)
    return int(k)


def precision_at_k(df, correct_demographic, k):
    rel = (df["demographic"] == correct_demographic).astype(int)
    k_abs = _resolve_k(df, k)
    if k_abs <= 0:
        return 0.0
    return rel.iloc[:k_abs].sum() / float(k_abs)


def lift_at_k(df, correct_demographic, k: Union[int, float]):  # noqa: UP007 - as published
    k_abs = _resolve_k(df, k)
    if k_abs <= 0 or len(df) == 0:
        return 0.0
    precision_k = precision_at_k(df, correct_demographic, k)
    rel = (df["demographic"] == correct_demographic).astype(int)
    overall_proportion = rel.sum() / float(len(df))
    if overall_proportion == 0:
        return 0.0
    return precision_k / overall_proportion


def hypergeometric_significance_test(df, correct_demographic, k, alpha=0.05):
    n = _resolve_k(df, k)
    N = len(df)
    rel = (df["demographic"] == correct_demographic).astype(int)
    K = rel.sum()
    k_obs = rel.iloc[:n].sum()
    if K == 0 or n <= 0:
        return 0.0, (0, 0), (0.0, 0.0)
    p_value = hypergeom.sf(k_obs - 1, N, K, n)
    L = int(hypergeom.ppf(alpha / 2, N, K, n))
    U = int(hypergeom.isf(alpha / 2, N, K, n))
    return p_value, (L, U), (L / n, U / n)


def lift_ci(df, correct_demographic, k, alpha=0.05):
    n = _resolve_k(df, k)
    N = len(df)
    rel = (df["demographic"] == correct_demographic).astype(int)
    K = rel.sum()
    overall_proportion = K / float(N)
    if K == 0 or n <= 0 or overall_proportion == 0:
        return 0.0, 0.0, 0.0
    pval, (L, U), _ = hypergeometric_significance_test(df, correct_demographic, k, alpha)
    return pval, (L / n) / overall_proportion, (U / n) / overall_proportion


def release_padded_list(hit_ids, index_ids, keywords, doc_count):
    """query_bm25_index's padding: unretrieved documents in index order, shuffled by the md5
    of the query string, appended up to doc_count."""
    results = list(hit_ids)
    if len(results) < doc_count:
        needed = doc_count - len(results)
        returned = set(results)
        pool = [i for i in index_ids if i not in returned]
        query_string = " OR ".join([f'"{kw}"' for kw in keywords])
        md5 = hashlib.md5(query_string.encode("utf-8")).hexdigest()
        rng = random.Random(int(md5, 16) % 2**32)
        rng.shuffle(pool)
        results += pool[:needed]
    return results


# --------------------------------------------------------------------------- inputs

K_FRACTIONS = (0.005, 0.01, 0.02, 0.05, 0.10, 0.25)
LEXICONS = [
    ("h1", ["stress", "anxiety", "panic attack"]),
    ("h2", ["i feel", "i m so"]),
    ("h3", ["my boyfriend", "my girlfriend", "my husband", "my wife", "my wife"]),
    ("h4", ["landlord", "eviction"]),  # few hits: mostly padding
    ("h5", ["zzzqqq"]),  # no hit: all padding
    ("h6", ["job", "my boss", "fired", "money"]),
]


def reddit_topic_posts(reference_dir) -> pl.DataFrame:
    """1,200 real Dreaddit posts on one topic: stressed (label 1) posts by group "a", the
    others by group "b"; some texts are emptied (not indexed by Lucene)."""
    frame = pd.read_csv(reference_dir / "realdata" / "dreaddit" / "dreaddit-train.csv").head(1200)
    texts = frame["text"].astype(str).tolist()
    for i in range(0, len(texts), 97):
        texts[i] = "!!!"  # no token
    return pl.DataFrame(
        {
            "post_id": [f"p{i:05d}" for i in frame["id"]],
            "text": texts,
            "demographic": ["a" if label else "b" for label in frame["label"]],
            "topic": ["t"] * len(texts),
        }
    )


def retrieval(**changes) -> RetrievalSettings:
    return schema_defaults(RetrievalSettings, **changes)


def lift_settings(k_fractions, **retrieval_changes) -> LiftSettings:
    """The schema's lift settings (alpha 0.05), seed 0, these k fractions and retrieval."""
    return schema_defaults(
        LiftSettings, k_fractions=k_fractions, seed=0, retrieval=retrieval(**retrieval_changes)
    )


def hypotheses(target: str = "a") -> list[Hypothesis]:
    return [Hypothesis(h, "t", "a", "b", target, tuple(lex), "user") for h, lex in LEXICONS]


@pytest.mark.skipif(bool(LUCENE_MISSING), reason=LUCENE_MISSING or "-")
@pytest.mark.parametrize("doc_count", [300, 1000])
def test_release_lift_equals_release_computation(reference_dir, tmp_path, doc_count):
    posts = reddit_topic_posts(reference_dir).sort("post_id")
    settings = lift_settings(K_FRACTIONS, mode="release", doc_count=doc_count)
    result = evaluate_set(hypotheses(), posts.lazy(), settings)
    ours = lift_frame(result.rows, 0.05)

    # the release's computation: real Lucene over the same pool in the same index order
    ids = posts["post_id"].to_list()
    docs = [
        {"id": i, "contents": " ".join(words(t))}
        for i, t in zip(ids, posts["text"].to_list(), strict=True)
    ]
    lucene = run_lucene(
        tmp_path,
        {
            "docs": docs,
            "queries": [" OR ".join(f'"{kw}"' for kw in lex) for _, lex in LEXICONS],
            "k": doc_count,
            "k1": 0.9,
            "b": 0.4,
        },
    )
    indexed = [d["id"] for d in docs if d["contents"]]
    assert lucene["num_docs"] == len(indexed) < len(ids)
    group = dict(zip(ids, posts["demographic"].to_list(), strict=True))
    compared = 0
    for (hid, lex), found in zip(LEXICONS, lucene["queries"], strict=True):
        padded = release_padded_list(found["ids"], indexed, lex, doc_count)
        df = pd.DataFrame({"id": padded, "demographic": [group[i] for i in padded]})
        rows = ours.filter(pl.col("hypothesis_id") == hid).sort("k_fraction")
        assert rows["k_fraction"].to_list() == list(K_FRACTIONS)
        for row in rows.iter_rows(named=True):
            k = row["k_fraction"]
            n = _resolve_k(df, k)
            assert row["list_size"] == len(df) == min(doc_count, len(indexed))
            assert row["n"] == n
            assert row["target_in_list"] == int((df["demographic"] == "a").sum())
            assert row["hits_at_n"] == int((df["demographic"].iloc[:n] == "a").sum())
            assert row["lift"] == pytest.approx(lift_at_k(df, "a", k), rel=1e-12, abs=0)
            p, low, high = lift_ci(df, "a", k, 0.05)
            assert row["p_value"] == pytest.approx(p, rel=1e-9, abs=1e-300)
            assert row["null_band_low"] == pytest.approx(low, rel=1e-12)
            assert row["null_band_high"] == pytest.approx(high, rel=1e-12)
            # the project's real interval beside them, around the observed lift
            assert row["lift_low"] <= row["lift"] <= row["lift_high"]
            compared += 1
        assert rows["matching_posts"][0] == len(found["ids"]) or len(found["ids"]) == doc_count
    assert compared == len(LEXICONS) * len(K_FRACTIONS)


def test_release_k_zero_is_undefined_not_zero():
    """Where the release returns lift 0 and p 0 (no target post in the list), the row is kept
    with lift, p and band null (the release's 0 would read as significant)."""
    posts = pl.DataFrame(
        {
            "post_id": ["p1", "p2", "p3", "p4", "p5"],
            "text": ["stress here", "stress stress", "calm day", "nothing", "other"],
            "demographic": ["b", "b", "a", "a", "a"],
            "topic": ["t"] * 5,
        }
    )
    h = [Hypothesis("h", "t", "a", "b", "a", ("stress",), "user")]
    settings = lift_settings((0.5, 1.0), mode="release", doc_count=2)
    result = evaluate_set(h, posts.lazy(), settings)
    frame = lift_frame(result.rows, 0.05)
    assert frame.height == 2
    assert frame["target_in_list"].to_list() == [0, 0]  # the two hits are both group b's
    for column in ("lift", "p_value", "null_band_low", "null_band_high", "lift_low"):
        assert frame[column].null_count() == 2, column
    assert result.skipped["release_lift_undefined"] == 2
    # the release itself reports 0 here
    df = pd.DataFrame({"demographic": ["b", "b"]})
    assert lift_at_k(df, "a", 0.5) == 0.0 and lift_ci(df, "a", 0.5)[0] == 0.0


def test_release_seed_is_md5_of_query():
    keywords = ["on god", "finna"]
    digest = hashlib.md5(b'"on god" OR "finna"').hexdigest()
    assert release_seed(keywords) == int(digest, 16) % 2**32


def test_retrieval_settings_errors():
    with pytest.raises(ConfigError, match="release mode"):
        retrieval(mode="release", method="robertson")
    with pytest.raises(ConfigError, match="mode"):
        retrieval(mode="exact")
    with pytest.raises(ConfigError, match="analyzer"):
        retrieval(analyzer="wordpiece", vocab="x")
    with pytest.raises(ConfigError, match="hypotheses.retrieval.vocab"):
        retrieval(analyzer="wordpiece", method="lucene")
    assert retrieval(mode="release").bm25.k1 == 0.9
    assert retrieval().is_default
    assert np.isclose(retrieval(method="bm25+").bm25.delta, 0.5)


def test_lift_command_release_mode(tmp_path, capsys):
    """`splits hypotheses lift` in release mode (``--settings``): the release's list length in
    every row, the settings in the report, and a one-line error for a wrong combination."""
    import dataclasses
    import json

    from splits.cli import main
    from splits.hypotheses.lexicon import hypotheses_frame

    rng = np.random.default_rng(3)
    vocabulary = ["stress", "calm", "day", "work", "sleep", "money", "dog", "rain"]
    texts = [" ".join(rng.choice(vocabulary, size=8)) for _ in range(400)]
    posts = pl.DataFrame(
        {
            "post_id": [f"p{i:04d}" for i in range(400)],
            "text": texts,
            "demographic": ["a" if i % 3 else "b" for i in range(400)],
            "topic": ["t"] * 400,
        }
    )
    posts.write_parquet(tmp_path / "topic_posts.parquet")
    hypotheses_frame([Hypothesis("h", "t", "a", "b", "a", ("stress day",), "user")]).write_parquet(
        tmp_path / "set.parquet"
    )
    common = [
        "hypotheses",
        "lift",
        "--set",
        str(tmp_path / "set.parquet"),
        "--topic-posts",
        str(tmp_path / "topic_posts.parquet"),
        "--out",
        str(tmp_path / "lift.parquet"),
        "--report",
        str(tmp_path / "lift.json"),
    ]

    def settings(**changes) -> str:
        chosen = lift_settings((0.05, 0.1), mode="release", doc_count=150, **changes)
        return json.dumps(dataclasses.asdict(chosen))

    assert main([*common, "--settings", settings()]) == 0
    frame = pl.read_parquet(tmp_path / "lift.parquet")
    assert frame["list_size"].to_list() == [150, 150] and frame["n"].to_list() == [7, 15]
    report = json.loads((tmp_path / "lift.json").read_text())
    assert report["retrieval"]["mode"] == "release" and report["retrieval"]["bm25"] == "lucene"
    wrong = json.loads(settings())
    wrong["retrieval"]["method"] = "atire"
    assert main([*common, "--settings", json.dumps(wrong)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "release mode scores with Lucene's BM25" in err[0]


@pytest.mark.parametrize("mode", ["release", "project"])
def test_engine_gives_the_lift_jobs_numbers(reference_dir, mode):
    """The interactive engine (sandbox) with the same retrieval settings: the lift job's rows."""
    from splits.hypotheses.engine import HypothesisEngine

    posts = reddit_topic_posts(reference_dir)
    settings = lift_settings(K_FRACTIONS, mode=mode, method="lucene", doc_count=400)
    engine = HypothesisEngine(posts, settings)
    for hid, lexicon in LEXICONS[:3]:
        job = lift_frame(
            evaluate_set(
                [Hypothesis(hid, "t", "a", "b", "a", tuple(lexicon), "user")],
                posts.lazy(),
                settings,
            ).rows,
            0.05,
        ).sort("k_fraction")
        result = engine.query(lexicon, "t", "a", "b", "a")
        assert result.rows["n"].to_list() == job["n"].to_list()
        for column in ("hits_at_n", "target_in_list", "list_size"):
            assert result.rows[column].to_list() == job[column].to_list()
        for column in ("lift", "p_value", "lift_low", "null_band_high"):
            np.testing.assert_allclose(result.rows[column].to_numpy(), job[column].to_numpy())
        if mode == "release":
            assert set(job["list_size"].to_list()) == {400}
