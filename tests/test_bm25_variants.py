"""BM25 variants against independent oracles: real Lucene through pyserini (``lucene``: ranked
ids, raw float scores and pyserini's displayed scores, on real Reddit posts with phrases and
ties), bm25s (``atire``, ``bm25l``, ``bm25+``), and rank_bm25 for the unchanged default."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import rank_bm25
from splits.config.schema import validate_config
from splits.config.settings import schema_defaults, settings_from_config
from splits.errors import ConfigError
from splits.hypotheses.retrieval import Pool, PoolIndex
from splits.retrieval import bm25 as bs
from splits.retrieval.bm25 import BM25Params
from splits.text import words
from splits.topics.index import BM25Index
from splits.topics.settings import TopicBM25Settings


def variant(method: str, **values) -> BM25Params:
    """A BM25 variant: topics.bm25's schema defaults for what ``values`` leaves out."""
    return schema_defaults(TopicBM25Settings, method=method, **values).params()


HERE = Path(__file__).parent

LUCENE_MISSING = (
    "pyserini (the `lucene` extra) is not installed"
    if importlib.util.find_spec("pyserini") is None or importlib.util.find_spec("jnius") is None
    else (
        "java is not on PATH (Debian: openjdk-17-jre-headless)" if not shutil.which("java") else ""
    )
)
needs_lucene = pytest.mark.skipif(bool(LUCENE_MISSING), reason=LUCENE_MISSING or "-")


def run_lucene(tmp_path: Path, request: dict) -> dict:
    """tests/lucene_oracle.py in its own process (JVM)."""
    req, res = tmp_path / "request.json", tmp_path / "result.json"
    req.write_text(json.dumps(request))
    done = subprocess.run(
        [sys.executable, str(HERE / "lucene_oracle.py"), str(req), str(res)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(res.read_text())


# --------------------------------------------------------------------------- the corpus


def dreaddit_posts(reference_dir: Path) -> tuple[list[str], list[str]]:
    """2,838 real Reddit post segments (Dreaddit train), in a shuffled index order, with
    external ids whose string order differs from that order (ties must follow the ids)."""
    frame = pd.read_csv(reference_dir / "realdata" / "dreaddit" / "dreaddit-train.csv")
    ids = [f"{p}_{i}" for p, i in zip(frame["post_id"], frame["id"], strict=True)]
    texts = frame["text"].astype(str).tolist()
    order = np.random.default_rng(7).permutation(len(ids))
    return [ids[i] for i in order], [texts[i] for i in order]


#: release-style queries: keywords quoted and OR-ed; phrases, repeated tokens ("really
#: really": overlapping occurrences), a keyword given twice (Lucene merges it into one clause
#: with boost 2), words absent from the corpus, one-word queries, and rare words (ties)
QUERIES = [
    ["stress"],
    ["anxiety", "panic attack"],
    ["i feel"],
    ["don t", "can t", "won t"],
    ["really really", "very very"],
    ["my boyfriend", "my girlfriend", "my husband", "my wife"],
    ["ptsd", "flashbacks", "therapy"],
    ["landlord", "rent", "eviction"],
    ["psychic", "marijuana", "gaslighting"],
    ["sucked", "drawing", "vibe", "metal"],
    ["stress", "stress"],
    ["zzzqqq", "panic"],
    ["zzzqqq"],
    ["i m so", "i have no idea"],
    ["the the", "to to", "and and"],
    ["url"],
    ["50 50", "etc etc"],
    ["abuse", "abusive relationship", "domestic violence"],
    ["money", "debt", "loan", "credit card"],
    ["school", "college", "university", "exams"],
    ["sleep", "insomnia", "nightmares"],
    ["job", "my boss", "fired"],
    ["i", "a"],
    ["help me", "please help"],
]


def release_query(keywords: list[str]) -> str:
    return " OR ".join(f'"{kw}"' for kw in keywords)


@pytest.fixture(scope="module")
def lucene_run(reference_dir, tmp_path_factory):
    if LUCENE_MISSING:
        pytest.skip(LUCENE_MISSING)
    ids, texts = dreaddit_posts(reference_dir)
    tokens = [words(t) for t in texts]
    docs = [{"id": i, "contents": " ".join(t)} for i, t in zip(ids, tokens, strict=True)]
    result = run_lucene(
        tmp_path_factory.mktemp("lucene"),
        {
            "docs": docs,
            "queries": [release_query(q) for q in QUERIES],
            "k": 3000,
            "k1": 0.9,
            "b": 0.4,
        },
    )
    return ids, texts, tokens, result


def pool_of(ids, texts) -> Pool:
    return Pool(
        topic="t",
        group_a="a",
        group_b="b",
        post_ids=np.array(ids, dtype=object),
        texts=list(texts),
        is_a=np.arange(len(ids)) % 2 == 0,
    )


# --------------------------------------------------------------------------- Lucene


def test_smallfloat_matches_lucene_definition():
    """intToByte4 / byte4ToInt as Lucene defines them (values checked against Lucene 9.4's
    ``SmallFloat`` through pyserini: 1->1, 24->24, 25->25, 30->30, 40->40, 100->96, 1000->984)."""
    for length, stored in [(0, 0), (1, 1), (23, 23), (24, 24), (25, 25), (30, 30), (40, 40)]:
        assert bs.byte4_to_int(bs.int_to_byte4(length)) == stored
    assert bs.byte4_to_int(bs.int_to_byte4(100)) == 96
    assert bs.byte4_to_int(bs.int_to_byte4(1000)) == 984
    lengths = np.arange(0, 200_000)
    vectorised = bs.norm_bytes(lengths)
    assert vectorised.tolist()[:5000] == [bs.int_to_byte4(int(n)) for n in lengths[:5000]]
    decoded = bs.LENGTH_TABLE[vectorised]
    assert (decoded <= lengths).all() and np.all(np.diff(bs.LENGTH_TABLE) > 0)


@needs_lucene
def test_lucene_smallfloat_table_equals_java():
    code = (
        "from pyserini.pyclass import autoclass; import json;"
        "S = autoclass('org.apache.lucene.util.SmallFloat');"
        "print(json.dumps([S.byte4ToInt(S.intToByte4(i)) for i in "
        "list(range(0, 3000)) + [10**5, 10**6, 2**31 - 1]]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    java = json.loads(done.stdout.strip().splitlines()[-1])
    lengths = list(range(0, 3000)) + [10**5, 10**6, 2**31 - 1]
    ours = [bs.byte4_to_int(bs.int_to_byte4(n)) for n in lengths]
    assert ours == java


@needs_lucene
def test_pool_index_lucene_equals_real_lucene(lucene_run):
    """Release settings (k1 0.9, b 0.4, phrases OR-ed) on 2,838 real posts and 24 queries:
    the same ranked ids, raw scores equal as float32 (within 1e-6), and pyserini's displayed
    scores, for every query; the queries really contain exact ties decided by the ids."""
    ids, texts, _, result = lucene_run
    index = PoolIndex(pool_of(ids, texts), params=variant("lucene"))
    tied_rows = compared = 0
    for keywords, expected in zip(QUERIES, result["queries"], strict=True):
        scores, matched = index.variant_scores(index.clauses(keywords, merged=True))
        hits = np.flatnonzero(matched)
        order = hits[bs.anserini_order(scores[hits], [ids[d] for d in hits])]
        assert expected["raw_ids"] == expected["ids"]  # pyserini ranks as the raw searcher
        assert [ids[d] for d in order] == expected["raw_ids"], expected["query"]
        got = scores[order].astype(np.float32)
        want = np.array(expected["raw_scores"], dtype=np.float32)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
        assert np.array_equal(got, want)  # the same float32 operations: bit-identical
        shown = bs.anserini_display(got)
        assert np.array_equal(shown, np.array(expected["scores"], dtype=np.float32))
        tied_rows += int(np.sum(want[1:] == want[:-1]))
        compared += len(want)
    assert compared > 5000 and tied_rows > 500, (compared, tied_rows)


RELEASE_JAR = os.environ.get("SPLITS_RELEASE_ANSERINI_JAR", "")
RELEASE_JAVA = os.environ.get("SPLITS_RELEASE_JAVA_HOME", "")


@pytest.mark.skipif(
    not (RELEASE_JAR and RELEASE_JAVA) or bool(LUCENE_MISSING),
    reason="the release's Lucene (pyserini 0.44.0's Anserini 0.39.0 jar, Java >= 21) is optional: "
    "set SPLITS_RELEASE_ANSERINI_JAR and SPLITS_RELEASE_JAVA_HOME to run it",
)
def test_pool_index_lucene_equals_the_releases_lucene(reference_dir, tmp_path):
    """The same 2,838 posts and 24 queries with the release's own Lucene (9.9.1)."""
    ids, texts = dreaddit_posts(reference_dir)
    result = run_lucene(
        tmp_path,
        {
            "docs": [
                {"id": i, "contents": " ".join(words(t))} for i, t in zip(ids, texts, strict=True)
            ],
            "queries": [release_query(q) for q in QUERIES],
            "k": 3000,
            "k1": 0.9,
            "b": 0.4,
            "release_jar": RELEASE_JAR,
            "java_home": RELEASE_JAVA,
        },
    )
    assert result["lucene"].startswith("9.9")
    index = PoolIndex(pool_of(ids, texts), params=variant("lucene"))
    for keywords, expected in zip(QUERIES, result["queries"], strict=True):
        scores, matched = index.variant_scores(index.clauses(keywords, merged=True))
        hits = np.flatnonzero(matched)
        order = hits[bs.anserini_order(scores[hits], [ids[d] for d in hits])]
        assert [ids[d] for d in order] == expected["raw_ids"] == expected["ids"]
        got = scores[order].astype(np.float32)
        assert np.array_equal(got, np.array(expected["raw_scores"], dtype=np.float32))
        assert np.array_equal(bs.anserini_display(got), np.array(expected["scores"], np.float32))


@needs_lucene
def test_sparse_index_lucene_equals_real_lucene_on_term_queries(lucene_run):
    """The fast sparse index (terms only) with ``lucene``: same ranking and float scores."""
    ids, _, tokens, result = lucene_run
    index = BM25Index.from_token_lists(tokens, params=variant("lucene"))
    checked = 0
    for keywords, expected in zip(QUERIES, result["queries"], strict=True):
        if any(len(words(k)) != 1 for k in keywords):
            continue
        query = [words(k)[0] for k in keywords]
        docs, scores = index.score_matching(index.term_ids(query))
        order = bs.anserini_order(scores, [ids[d] for d in docs])
        assert [ids[d] for d in docs[order]] == expected["raw_ids"]
        assert np.array_equal(
            scores[order].astype(np.float32), np.array(expected["raw_scores"], np.float32)
        )
        checked += 1
    assert checked >= 8


@needs_lucene
def test_plain_float_bm25_is_not_lucene(lucene_run):
    """Why the float32 re-implementation is needed: Lucene's formula in float64 with exact
    document lengths misses Lucene's scores by far more than 1e-6."""
    ids, _, tokens, result = lucene_run
    lengths = np.array([len(t) for t in tokens], dtype=np.float64)
    avgdl = lengths.mean()
    n = len(tokens)
    worst = 0.0
    for keywords, expected in zip(QUERIES, result["queries"], strict=True):
        if any(len(words(k)) != 1 for k in keywords) or not expected["raw_ids"]:
            continue
        terms = Counter(words(k)[0] for k in keywords)
        position = {i: d for d, i in enumerate(ids)}
        for doc_id, score in zip(expected["raw_ids"], expected["raw_scores"], strict=True):
            d = position[doc_id]
            plain = 0.0
            for term, boost in terms.items():
                tf = tokens[d].count(term)
                if tf:
                    df = doc_freq(tokens, term)
                    idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
                    plain += boost * idf * tf / (tf + 0.9 * (0.6 + 0.4 * lengths[d] / avgdl))
            worst = max(worst, abs(plain - score))
    assert worst > 1e-3


_DF_CACHE: dict = {}


def doc_freq(tokens, term) -> int:
    key = (id(tokens), term)
    if key not in _DF_CACHE:
        _DF_CACHE[key] = sum(term in set(t) for t in tokens)
    return _DF_CACHE[key]


def test_anserini_display_rounds_and_perturbs_ties():
    """Anserini's ScoreTiesAdjusterReranker, written out: round to 1e-4, then within a run of
    scores less than 1e-4 apart subtract 1e-6 per rank."""
    raw = np.array([23.439316, 22.087432, 22.087432, 22.08741, 21.602508], dtype=np.float32)
    shown = bs.anserini_display(raw)
    f = np.float32
    expected = [
        f(23.4393),
        f(22.0874),
        f(f(22.0874) - f(1e-6)),
        f(f(22.0874) - f(2e-6)),
        f(21.6025),
    ]
    assert shown.tolist() == [float(e) for e in expected]


def test_anserini_order_breaks_ties_by_external_id():
    scores = np.array([1.0, 2.0, 1.0, 1.0], dtype=np.float32)
    order = bs.anserini_order(scores, ["b", "z", "a", "c"])
    assert order.tolist() == [1, 2, 0, 3]


# --------------------------------------------------------------------------- bm25s


@pytest.mark.parametrize("method", ["atire", "bm25l", "bm25+"])
def test_variants_equal_bm25s(method, reference_dir):
    """The sparse index and the pool index against bm25s (float64) on real posts, term
    queries: same scores for every document (including bm25s's constant for BM25L/BM25+)."""
    bm25s = pytest.importorskip("bm25s")
    _, texts = dreaddit_posts(reference_dir)
    texts = texts[:1500]
    tokens = [words(t) for t in texts]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(t for doc in tokens for t in doc))}
    oracle = bm25s.BM25(method=method, k1=1.2, b=0.7, delta=0.8, dtype="float64")
    oracle.index(
        bm25s.tokenization.Tokenized(ids=[[vocab[t] for t in doc] for doc in tokens], vocab=vocab),
        show_progress=False,
    )
    params = variant(method, k1=1.2, b=0.7, delta=0.8)
    sparse = BM25Index.from_token_lists(tokens, params=params)
    pool = PoolIndex(pool_of([str(i) for i in range(len(texts))], texts), params=params)
    for query in (["stress"], ["anxiety", "panic"], ["i", "feel", "stress"], ["therapy"]):
        expected = oracle.get_scores_from_ids([vocab[t] for t in query])
        np.testing.assert_allclose(sparse.get_scores(query), expected, rtol=1e-10, atol=1e-10)
        scores, matched = pool.variant_scores([((t,), 1) for t in query])
        np.testing.assert_allclose(scores, expected, rtol=1e-10, atol=1e-10)
        assert matched.sum() == sum(any(t in set(d) for t in query) for d in tokens)


def test_robertson_default_unchanged_and_rank_bm25_exact():
    corpus = [["a", "b", "a"], ["b", "c"], ["c", "c", "d"], [], ["a"]]
    for index in (
        BM25Index.from_token_lists(corpus, params=variant("robertson")),  # topics.bm25's default
        BM25Index.from_token_lists(corpus, params=BM25Params("robertson", 1.5, 0.75, 0.5)),
    ):
        assert index.scorer is None
        for query in (["a"], ["c", "d"], ["a", "a", "b"]):
            assert np.array_equal(
                index.get_scores(query), rank_bm25.BM25Okapi(corpus).get_scores(query)
            )


def test_params_defaults_and_errors():
    assert (variant("lucene").k1, variant("lucene").b) == (0.9, 0.4)
    assert (variant("robertson").k1, variant("robertson").b) == (1.5, 0.75)
    assert variant("bm25l", k1=2.0).k1 == 2.0
    with pytest.raises(ConfigError, match="bm25.method"):
        variant("okapi")
    with pytest.raises(ConfigError, match="bm25.b"):
        variant("lucene", b=1.5)
    config = validate_config({"topics": {"bm25": {"method": "bm25+", "delta": 1.0}}})
    assert settings_from_config(TopicBM25Settings, config).params().delta == 1.0
    assert BM25Params("bm25+", None, None, 0.5).k1 == 1.5  # null k1: the method's own


def test_lucene_counts_only_nonempty_documents():
    """Anserini does not index an empty document, so Lucene's N and avgdl leave it out."""
    corpus = [["a", "b"], [], ["b"], ["c", "c", "c"]]
    index = BM25Index.from_token_lists(corpus, params=variant("lucene"))
    assert index.scorer.n_docs == 3
    assert index.scorer.avgdl == np.float32(6 / 3)
    assert index.scorer.idf[index.vocabulary["b"]] == np.float32(np.log(1 + (3 - 2 + 0.5) / 2.5))


def test_pool_index_accepts_null_texts():
    pool = pool_of(["x", "y"], ["Stress stress", None])
    index = PoolIndex(pool, params=variant("lucene"))
    scores, matched = index.variant_scores([(("stress",), 1)])
    assert matched.tolist() == [True, False] and scores[0] > 0 and scores[1] == 0


@pytest.mark.parametrize("method", ["robertson", "lucene", "bm25l"])
def test_term_docs_read_tf_for_every_variant(method):
    """The phrase matcher reads (docs, tf) from the sparse index whatever its variant."""
    corpus = [["a", "b", "a"], ["b"], [], ["a", "a", "a", "c"]]
    index = BM25Index.from_token_lists(corpus, params=variant(method))
    docs, tf = index.term_docs("a")
    assert docs.tolist() == [0, 3] and tf.tolist() == [2, 3]


@pytest.mark.parametrize("method", ["lucene", "atire", "bm25l", "bm25+"])
def test_variants_decompose_over_shards(method):
    """A shard indexed with the whole corpus's statistics scores as the whole index does (the
    topic splits' map-reduce), for the variants too; lucene exactly (the statistics count the
    non-empty documents, its N; the corpus has empty ones)."""
    from splits.topics.corpus import CorpusStats, ShardCounts

    rng = np.random.default_rng(5)
    vocab = [f"w{i}" for i in range(30)]
    corpus = [
        [vocab[int(i) % 30] for i in rng.zipf(1.4, size=int(rng.integers(0, 20)))]
        for _ in range(80)
    ]
    params = variant(method)
    whole = BM25Index.from_token_lists(corpus, params=params)
    parts = [corpus[:33], corpus[33:]]
    stats = CorpusStats.combine([ShardCounts.from_token_lists(p) for p in parts], vocab)
    query = ["w0", "w3", "w7", "w3"]
    expected = whole.get_scores(query)
    assert any(not doc for doc in corpus)
    start = 0
    for part in parts:
        shard = BM25Index.from_token_lists(part, stats=stats, params=params)
        got = shard.get_scores(query)
        if method == "lucene":
            assert np.array_equal(got, expected[start : start + len(part)])
        else:
            np.testing.assert_allclose(got, expected[start : start + len(part)], rtol=1e-12)
        start += len(part)
