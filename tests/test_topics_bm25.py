"""topics.bm25: the sharded topic splits ranked with another BM25 variant.

Oracles: one unsharded ``BM25Index`` with the same BM25 parameters over the union of the posts
(lucene, whose exactness against real Lucene is tested in test_bm25_variants.py), and bm25s
(atire, bm25l, bm25+) over the same tokens, on real Reddit posts (Dreaddit) with planted posts
that hold no token (Lucene's N leaves them out)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import polars as pl
import pytest
import snakemake_fork
import yaml
from conftest import error_lines
from splits.config.definitions import Topic
from splits.config.schema import validate_config
from splits.config.settings import schema_defaults, settings_json
from splits.errors import ConfigError
from splits.retrieval.bm25 import METHODS
from splits.text import content_words, query_tokens
from splits.topics import in_process
from splits.topics import statistics as topic_stats
from splits.topics.corpus import CorpusStats, ShardCounts
from splits.topics.index import BM25Index
from splits.topics.scoring import score_shard
from splits.topics.settings import TopicBM25Settings, TopicSplitSettings

#: one-word keywords, so a post holds a keyword exactly when it holds one of the query's tokens
TOPICS = [
    Topic("health", "stress", ("stress", "anxiety", "panic")),
    Topic("life", "money", ("money", "rent", "job", "money")),
    Topic("life", "family", ("mom", "dad", "sister", "family")),
]
EMPTY_TEXTS = ["", "the and of to", "!!! ...", "I am, I was."]  # no content word


@pytest.fixture(scope="module")
def posts(reference_dir) -> pl.DataFrame:
    """(demographic, post) rows: 600 real posts, each in group a, b or both, and 12 posts
    without tokens spread among them."""
    frame = pd.read_csv(reference_dir / "realdata" / "dreaddit" / "dreaddit-train.csv")
    texts = frame["text"].astype(str).tolist()[:600]
    texts[50:50] = EMPTY_TEXTS
    texts[300:300] = EMPTY_TEXTS
    texts += EMPTY_TEXTS
    rng = np.random.default_rng(11)
    rows = []
    for i, text in enumerate(texts):
        groups = [["a"], ["b"], ["a", "b"]][int(rng.integers(0, 3))]
        for group in groups:
            rows.append(
                {
                    "post_id": f"p{i:05d}",
                    "author": f"u{i % 37}",
                    "subreddit": "s",
                    "text": text,
                    "demographic": group,
                }
            )
    return pl.DataFrame(rows)


def _union(posts: pl.DataFrame) -> pl.DataFrame:
    return posts.unique(subset="post_id", keep="first").sort("post_id")


def _expected(
    posts: pl.DataFrame, scores_of, top: int
) -> dict[tuple[str, str], list[tuple[str, float]]]:
    """Per (topic, group): the top posts holding a keyword, by oracle score descending then
    post id; ``scores_of(query)`` gives the oracle's score of every post of the union."""
    union = _union(posts)
    ids = union.get_column("post_id").to_list()
    tokens = [set(content_words(t)) for t in union.get_column("text")]
    out = {}
    for topic in TOPICS:
        query = query_tokens(topic.keywords)
        scores = scores_of(query)
        for group in ("a", "b"):
            members = set(posts.filter(pl.col("demographic") == group).get_column("post_id"))
            held = [
                i for i, p in enumerate(ids) if p in members and tokens[i] & set(topic.keywords)
            ]
            held.sort(key=lambda i: (-scores[i], ids[i]))
            out[(topic.topic, group)] = [(ids[i], float(scores[i])) for i in held[:top]]
    return out


def _got(table: pl.DataFrame) -> dict[tuple[str, str], list[tuple[str, float]]]:
    out: dict = {}
    for row in table.sort("topic", "demographic", "rank").iter_rows(named=True):
        out.setdefault((row["topic"], row["demographic"]), []).append(
            (row["post_id"], row["score"])
        )
    return out


def bm25_settings(**values) -> TopicBM25Settings:
    """topics.bm25: the schema's defaults, ``values`` replaced."""
    return schema_defaults(TopicBM25Settings, **values)


def _split(posts: pl.DataFrame, bm25: TopicBM25Settings, shard_posts: int) -> pl.DataFrame:
    settings = schema_defaults(
        TopicSplitSettings, top_k=40, drop_fraction=0.0, shard_posts=shard_posts, bm25=bm25
    )
    return in_process.topic_splits(posts, TOPICS, settings)


@pytest.mark.parametrize("shard_posts", [37, 250, 10_000])
def test_sharded_lucene_equals_one_unsharded_index(posts, shard_posts):
    """Ranked ids and scores (bit for bit) of the sharded topic splits with lucene equal one
    BM25Index with lucene over the union, whatever the shards; N is the non-empty posts."""
    params = bm25_settings(method="lucene")
    whole = BM25Index.from_texts(_union(posts).get_column("text"), params=params.params())
    texts = _union(posts).get_column("text")
    assert whole.scorer.n_docs == sum(bool(content_words(t)) for t in texts)
    assert whole.scorer.n_docs <= len(texts) - 3 * len(EMPTY_TEXTS)
    expected = _expected(posts, whole.get_scores, 40)
    got = _got(_split(posts, params, shard_posts))
    assert got == expected
    assert sum(len(v) for v in got.values()) > 150


@pytest.mark.parametrize("method", ["atire", "bm25l", "bm25+"])
def test_sharded_variants_equal_bm25s(posts, method):
    bm25s = pytest.importorskip("bm25s")
    union = _union(posts)
    tokens = [content_words(t) for t in union.get_column("text")]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(t for doc in tokens for t in doc))}
    oracle = bm25s.BM25(method=method, k1=1.2, b=0.7, delta=0.8, dtype="float64")
    oracle.index(
        bm25s.tokenization.Tokenized(ids=[[vocab[t] for t in doc] for doc in tokens], vocab=vocab),
        show_progress=False,
    )

    def scores_of(query):
        return oracle.get_scores_from_ids([vocab[t] for t in query if t in vocab])

    expected = _expected(posts, scores_of, 40)
    got = _got(_split(posts, bm25_settings(method=method, k1=1.2, b=0.7, delta=0.8), 53))
    assert got.keys() == expected.keys()
    for key, rows in expected.items():
        assert [p for p, _ in got[key]] == [p for p, _ in rows], key
        np.testing.assert_allclose(
            [s for _, s in got[key]], [s for _, s in rows], rtol=1e-10, atol=1e-12
        )


def test_robertson_params_give_the_default_table(posts):
    def split(**values):
        settings = schema_defaults(TopicSplitSettings, top_k=40, shard_posts=97, **values)
        return in_process.topic_splits(posts, TOPICS, settings)

    default = split()
    explicit = bm25_settings(method="robertson", k1=1.5, b=0.75)  # rank_bm25's own, spelled out
    assert split(bm25=explicit).equals(default)
    other = split(bm25=bm25_settings(k1=0.5))
    assert not other.get_column("score").equals(default.get_column("score"))


def test_statistics_count_nonempty_documents_and_old_ones_refuse_lucene(tmp_path):
    corpus = [["a", "b"], [], ["b"], [], ["c"]]
    counts = [ShardCounts.from_token_lists(corpus[:2]), ShardCounts.from_token_lists(corpus[2:])]
    assert [c.n_nonempty for c in counts] == [1, 2]
    stats = CorpusStats.combine(counts, ["a", "b", "c"])
    assert (stats.n_docs, stats.n_nonempty) == (5, 3)
    assert CorpusStats.from_json(stats.to_json()) == stats
    topic_stats.write_counts(
        {"shared": counts[1]}, "shared", tmp_path / "v.parquet", tmp_path / "c.json"
    )
    _, read = topic_stats.read_counts(tmp_path / "v.parquet", tmp_path / "c.json")
    assert read["shared"].n_nonempty == 2
    old = CorpusStats.from_json({k: v for k, v in stats.to_json().items() if k != "n_nonempty"})
    with pytest.raises(ConfigError, match="non-empty documents"):
        BM25Index.from_token_lists(
            corpus[:2], stats=old, params=bm25_settings(method="lucene").params()
        )


def test_cli_run_passes_the_variant_and_reads_a_config_by_hand(posts, tmp_path):
    """``splits topic-splits run`` with topics.bm25 lucene writes the in-process lucene table,
    whether its settings come as the rule's ``--settings`` value or, by hand, from ``--config``
    (a config file, schema defaults filled): the two runs write the same files."""
    files = []
    for group in ("a", "b"):
        path = tmp_path / f"{group}.parquet"
        rows = posts.filter(pl.col("demographic") == group).drop("demographic")
        rows.with_columns(percentile=pl.lit(99.0)).sort("post_id").write_parquet(path)
        files.append(f"{group}={path}")
    (tmp_path / "thresholds.json").write_text('{"a": 90, "b": 90}')
    (tmp_path / "topics.yaml").write_text(
        yaml.safe_dump(
            {
                "topics": [
                    {"category": t.category, "topic": t.topic, "keywords": list(t.keywords)}
                    for t in TOPICS
                ]
            }
        )
    )
    config = {
        "topics": {"top_k": 40, "drop_fraction": 0.0, "bm25": {"method": "lucene", "k1": 1.1}},
        "sampling": {"k": 2},
    }
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    settings = settings_json(validate_config(config), TopicSplitSettings)
    assert '"k1":1.1' in settings and '"sample_k":2' in settings
    tables = {}
    for name, source in (
        ("json", ["--settings", settings]),
        ("config", ["--config", str(config_file)]),
    ):
        out = tmp_path / name
        cmd = [sys.executable, "-m", "splits.cli", "topic-splits", "run"]
        cmd += ["--demographic-posts", *files, "--thresholds", str(tmp_path / "thresholds.json")]
        cmd += ["--topics-file", str(tmp_path / "topics.yaml"), *source]
        for output in ("topics", "topic-posts", "counts", "retrieval"):
            cmd += [f"--out-{output}", str(out / f"{output}.out")]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        tables[name] = pl.read_parquet(out / "topic-posts.out")
        for output in ("topics", "counts", "retrieval"):
            assert (out / f"{output}.out").read_bytes() == (
                tmp_path / "json" / f"{output}.out"
            ).read_bytes(), output
    assert tables["config"].equals(tables["json"])
    expected = _split(posts, bm25_settings(method="lucene", k1=1.1), 1_000_000)
    assert _got(tables["json"]) == _got(expected)
    assert tables["json"].height > 100


def test_unknown_method_is_one_config_error_line(repo_root):
    proc = snakemake_fork.run(
        ["-n", "--config", "topics={bm25: {method: okapi}}"], repo_root, timeout=120
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1, lines
    assert lines[0].startswith("config error: topics.bm25.method: 'okapi' is not one of")


def test_schema_spells_topics_bm25_as_hypotheses_retrieval(repo_root):
    """One spelling: topics.bm25's keys are hypotheses.retrieval's (same types, bounds and
    defaults for k1, b and delta; method the same variants, robertson by default)."""
    schema = yaml.safe_load((repo_root / "workflow/schemas/config.schema.yaml").read_text())
    topics = schema["properties"]["topics"]["properties"]["bm25"]["properties"]
    retrieval = schema["properties"]["hypotheses"]["properties"]["retrieval"]["properties"]
    strip = lambda d: {k: v for k, v in d.items() if k != "description"}  # noqa: E731
    for key in ("k1", "b", "delta"):
        assert strip(topics[key]) == strip(retrieval[key]), key
    assert topics["method"]["enum"] == [m for m in retrieval["method"]["enum"] if m is not None]
    assert topics["method"]["default"] == "robertson"
    assert tuple(topics["method"]["enum"]) == METHODS


@pytest.mark.parametrize("method", ["robertson", *METHODS])
def test_index_from_postings_is_the_index_from_texts(posts, method, tmp_path):
    """The scoring job's index, built from the postings and lengths its shard's statistics job
    wrote (through their files), equals the index built from the shard's texts with the same
    corpus statistics, bit for bit: weights, idf and lengths, so every score and tie is the
    same; the postings hold only the topics' terms."""
    union = _union(posts)
    shards = [union.slice(0, 250), union.slice(250, 10_000)]
    terms = topic_stats.topic_terms(TOPICS)
    counts = [topic_stats.shard_counts(s, "shared", terms) for s in shards]
    stats = topic_stats.global_statistics(counts, terms)["shared"]
    params = bm25_settings(method=method, k1=1.2, b=0.7, delta=0.8).params()
    for i, (shard, shard_counts) in enumerate(zip(shards, counts, strict=True)):
        paths = (tmp_path / f"{i}.postings.parquet", tmp_path / f"{i}.lengths.parquet")
        topic_stats.write_postings(shard_counts, *paths)
        postings = topic_stats.read_postings(*paths)["shared"]
        assert postings.terms == tuple(sorted(terms))
        assert postings.n_docs == shard.height and len(postings.term) > 100
        from_postings = BM25Index.from_postings(postings, params=params, stats=stats)
        from_texts = BM25Index.from_texts(shard.get_column("text"), params=params, stats=stats)
        assert from_postings.vocabulary == from_texts.vocabulary
        for name in ("idf", "doc_len"):
            np.testing.assert_array_equal(getattr(from_postings, name), getattr(from_texts, name))
        for name in ("data", "indices", "indptr"):
            got, want = getattr(from_postings.weights, name), getattr(from_texts.weights, name)
            assert got.dtype == want.dtype and np.array_equal(got, want), name
        assert from_postings.weights.nnz > 100
        for topic in TOPICS:
            query = query_tokens(topic.keywords)
            assert np.array_equal(from_postings.get_scores(query), from_texts.get_scores(query))


def _score(shard, stats, topics, bm25, postings):
    shard = shard.with_columns(demographics=pl.concat_list(pl.col("demographic")))
    return score_shard(shard, stats, "shared", topics, 10, bm25, postings)


def test_postings_of_other_topics_or_another_shard_are_one_error_line(posts, tmp_path):
    """Postings counted for other topics, or for another shard, are refused with one line
    saying to re-run the statistics, not scored into wrong results."""
    union = _union(posts)
    shard = union.slice(0, 300)
    fewer = topic_stats.topic_terms(TOPICS[:1])
    counts = topic_stats.shard_counts(shard, "shared", fewer)
    terms = topic_stats.topic_terms(TOPICS)
    stats = topic_stats.global_statistics([topic_stats.shard_counts(shard, "shared")], terms)
    bm25 = bm25_settings().params()
    postings = {group: c.postings for group, c in counts.items()}
    with pytest.raises(ConfigError, match="counted for other topics; re-run the topic stat"):
        _score(shard, stats, TOPICS, bm25, postings)
    other = topic_stats.shard_counts(union.slice(300, 200), "shared", terms)
    with pytest.raises(ConfigError, match="not this shard's .200 documents, the shard 300.; re-"):
        _score(shard, stats, TOPICS, bm25, {g: c.postings for g, c in other.items()})
