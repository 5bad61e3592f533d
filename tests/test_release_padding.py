"""Release mode's padded lists and lift rows against the release's own computation, on real posts
indexed in the order their rows come (shuffled, not by id).

The release builds one Lucene index per (topic, pair) from its rows in their order, retrieves
``doc_count`` hits of ``"kw1" OR "kw2" ...`` and pads the list with the unretrieved documents in
the index's internal order, shuffled by the md5 of the query (``query_bm25_index`` in
``core_logic.py``, eyloncaplan/splits). Here real Lucene (pyserini, Anserini's ``hgf_tokenizer``
analyzer on a WordPiece vocabulary trained from real posts, as the release indexes) builds that
index from 3,553 real Reddit posts (Dreaddit) whose rows are shuffled and interleaved with rows of
another topic and of a third group; the test pads with the index's own document order (read back
from Lucene, as the release reads it) and computes every statistic with the release's functions,
written out in ``test_hypotheses_release``. The project's padded lists (the interactive engine)
and its lift job's rows, read from a Parquet topic posts table, must equal them at every k of the
release's demo, for both targets, on 18 lexicons (one matching nothing).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import polars as pl
import pytest
from splits.hypotheses.engine import HypothesisEngine
from splits.hypotheses.lexicon import Hypothesis
from splits.hypotheses.lift import evaluate_set, lift_frame
from splits.hypotheses.release import release_list
from test_bm25_variants import LUCENE_MISSING, run_lucene
from test_hypotheses_release import (
    _resolve_k,
    hypergeometric_significance_test,
    lift_at_k,
    lift_ci,
    lift_settings,
    precision_at_k,
    release_padded_list,
)

RELEASE_K = (0.005, 0.01, 0.02, 0.05, 0.10)  # the thresholds of the release's demo notebook
DOC_COUNT = 2000  # the demo's doc_count
LEXICONS = [
    ["stress", "anxiety", "panic attack"],
    ["i feel", "i'm so"],
    ["my boyfriend", "my girlfriend", "my husband", "my wife", "my wife"],  # a repeated entry
    ["landlord", "eviction"],
    ["zzzqqq xyzzy"],  # matches nothing: the list is all padding
    ["job", "my boss", "fired", "money"],
    ["ptsd", "trauma", "therapist"],
    ["help me", "please help"],
    ["thank you", "thanks"],
    ["rent", "bills", "debt", "credit card"],
    ["abuse", "abusive relationship"],
    ["sleep", "tired", "exhausted"],
    ["friends", "my friend"],
    ["mom", "dad", "my parents"],
    ["lol", "haha"],
    ["domestic violence"],
    ["the", "and"],  # matches almost every post: more than doc_count hits, no padding
    ["homeless", "shelter", "food stamps"],
]


@pytest.fixture(scope="module")
def vocabulary(reference_dir, tmp_path_factory):
    """A WordPiece vocabulary (3,000 pieces) trained on Dreaddit's test split: the vocab.txt the
    project's analyzer reads and the tokenizer.json Anserini reads."""
    from tokenizers.implementations import BertWordPieceTokenizer

    folder = tmp_path_factory.mktemp("vocab")
    texts = pd.read_csv(reference_dir / "realdata" / "dreaddit" / "dreaddit-test.csv")["text"]
    trainer = BertWordPieceTokenizer(lowercase=True)
    trainer.train_from_iterator(
        texts.astype(str).tolist(), vocab_size=3000, min_frequency=2, show_progress=False
    )
    trainer.save_model(str(folder))
    trainer.save(str(folder / "tokenizer.json"))
    return folder


def shuffled_rows(reference_dir) -> pl.DataFrame:
    """Dreaddit train and test (3,553 real Reddit post segments) as topic posts rows in a seeded
    shuffled order: stressed posts by group "a", the others by "b"; every 11th row on another
    topic, every 13th by a third group "c" (both outside the pool), every 301st text emptied (a
    document Anserini does not index)."""
    folder = reference_dir / "realdata" / "dreaddit"
    frame = pd.concat(
        [pd.read_csv(folder / f"dreaddit-{split}.csv") for split in ("train", "test")],
        ignore_index=True,
    )
    ids = [f"{p}_{i}" for p, i in zip(frame["post_id"], frame["id"], strict=True)]
    groups = ["a" if label else "b" for label in frame["label"]]
    texts = frame["text"].astype(str).tolist()
    topics = ["t"] * len(ids)
    for i in range(len(ids)):
        if i % 11 == 0:
            topics[i] = "u"
        if i % 13 == 0:
            groups[i] = "c"
        if i % 301 == 0:
            texts[i] = ""
    order = np.random.default_rng(34).permutation(len(ids))
    return pl.DataFrame(
        {
            "post_id": [ids[i] for i in order],
            "text": [texts[i] for i in order],
            "demographic": [groups[i] for i in order],
            "topic": [topics[i] for i in order],
        }
    )


@pytest.mark.skipif(bool(LUCENE_MISSING), reason=LUCENE_MISSING or "-")
def test_release_padding_follows_the_rows_order(reference_dir, vocabulary, tmp_path):
    rows = shuffled_rows(reference_dir)
    assert len(set(rows["post_id"].to_list())) == rows.height == 3553
    path = tmp_path / "topic_posts.parquet"
    rows.write_parquet(path)

    # the release: its per-(topic, pair) index from the rows in their order, real Lucene
    pool_rows = rows.filter((pl.col("topic") == "t") & pl.col("demographic").is_in(["a", "b"]))
    docs = [{"id": i, "contents": t} for i, t in pool_rows.select("post_id", "text").iter_rows()]
    lucene = run_lucene(
        tmp_path,
        {
            "docs": docs,
            "queries": [" OR ".join(f'"{kw}"' for kw in lex) for lex in LEXICONS],
            "k": DOC_COUNT,
            "k1": 0.9,
            "b": 0.4,
            "tokenizer": str(vocabulary / "tokenizer.json"),
            "index_order": True,
        },
    )
    index_ids = lucene["index_ids"]
    assert len(index_ids) == lucene["num_docs"] == sum(1 for d in docs if d["contents"])
    assert DOC_COUNT < len(index_ids) and index_ids != sorted(index_ids)
    group = dict(pool_rows.select("post_id", "demographic").iter_rows())
    padded = {}
    for lexicon, found in zip(LEXICONS, lucene["queries"], strict=True):
        padded[tuple(lexicon)] = release_padded_list(found["ids"], index_ids, lexicon, DOC_COUNT)
    hit_counts = [len(found["ids"]) for found in lucene["queries"]]
    assert 0 in hit_counts and DOC_COUNT in hit_counts and any(0 < h < 200 for h in hit_counts)

    settings = lift_settings(
        RELEASE_K,
        mode="release",
        doc_count=DOC_COUNT,
        analyzer="wordpiece",
        vocab=str(vocabulary / "vocab.txt"),
    )
    # the project's padded lists (the interactive engine's pool index, as the lift job builds it)
    index = HypothesisEngine(path, settings).pool("t", "a", "b")
    equal_lists = 0
    for lexicon in LEXICONS:
        ours = release_list(index, lexicon, DOC_COUNT)
        equal_lists += index.pool.post_ids[ours.docs].tolist() == padded[tuple(lexicon)]
    assert equal_lists == len(LEXICONS)

    # the lift job's rows, read from the Parquet table
    hypotheses = [
        Hypothesis(f"h{j}{target}", "t", "a", "b", target, tuple(lexicon), "user")
        for j, lexicon in enumerate(LEXICONS)
        for target in ("a", "b")
    ]
    result = evaluate_set(hypotheses, pl.scan_parquet(path), settings, heldout=False)
    frame = lift_frame(result.rows, 0.05)
    compared = 0
    for h in hypotheses:
        ids = padded[h.lexicon]
        df = pd.DataFrame({"id": ids, "demographic": [group[i] for i in ids]})
        got = frame.filter(pl.col("hypothesis_id") == h.hypothesis_id).sort("k_fraction")
        assert got["k_fraction"].to_list() == list(RELEASE_K)
        for row in got.iter_rows(named=True):
            k, target = row["k_fraction"], h.target
            n = _resolve_k(df, k)
            assert row["n"] == n and row["list_size"] == len(df) == DOC_COUNT
            assert row["target_in_list"] == int((df["demographic"] == target).sum())
            assert row["hits_at_n"] == int((df["demographic"].iloc[:n] == target).sum())
            assert row["precision"] == pytest.approx(precision_at_k(df, target, k), rel=1e-12)
            assert row["lift"] == pytest.approx(lift_at_k(df, target, k), rel=1e-12)
            p, (low_hits, high_hits), _ = hypergeometric_significance_test(df, target, k)
            assert row["p_value"] == pytest.approx(p, rel=1e-9, abs=1e-300)
            assert (row["null_band_low_hits"], row["null_band_high_hits"]) == (low_hits, high_hits)
            _, band_low, band_high = lift_ci(df, target, k)
            assert row["null_band_low"] == pytest.approx(band_low, rel=1e-12)
            assert row["null_band_high"] == pytest.approx(band_high, rel=1e-12)
            compared += 1
    assert compared == len(hypotheses) * len(RELEASE_K) == 180
