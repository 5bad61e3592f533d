"""BM25 Okapi on the sparse index against rank_bm25 (the oracle), tokenisation, top-k and the
topic splits on hand-made demographic frames."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import rank_bm25
from helpers import write_topics_yaml
from hypothesis import given, settings
from hypothesis import strategies as hst
from splits import text as splits_text
from splits.config.definitions import Topic, load_topics
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.text import STOP_WORDS, content_words, query_tokens, reference_word_frame, word_frame
from splits.topics import cli as topics_cli
from splits.topics import corpus as topic_corpus
from splits.topics import in_process
from splits.topics import merge as topic_merge
from splits.topics import shards as topic_shards
from splits.topics.index import BM25Index, top_k
from splits.topics.settings import TopicBM25Settings, TopicSplitSettings

ROBERTSON = schema_defaults(TopicBM25Settings).params()  # topics.bm25's defaults: rank_bm25's


def settings_argv(**values) -> list[str]:
    """``--settings`` of ``splits topic-splits run``: the schema's defaults, ``values`` replaced."""
    return ["--settings", json.dumps(dataclasses.asdict(split_settings(**values)))]


def split_settings(**values) -> TopicSplitSettings:
    """The topic splits' settings: the schema's defaults, ``values`` replaced."""
    return schema_defaults(TopicSplitSettings, **values)


def oracle_top_k(scores: np.ndarray, matched: np.ndarray, k: int) -> np.ndarray:
    """Top k of the matched documents: score descending, index ascending (independent of topic_index.top_k)."""
    docs = sorted(np.flatnonzero(matched).tolist(), key=lambda d: (-scores[d], d))
    return np.array(docs[:k], dtype=np.int64)


def assert_same_as_rank_bm25(
    corpus: list[list[str]], queries: list[list[str]], index: BM25Index
) -> None:
    reference = rank_bm25.BM25Okapi(corpus)
    assert index.n_docs == reference.corpus_size
    assert index.avgdl == reference.avgdl
    for query in queries:
        expected = reference.get_scores(query)
        got = index.get_scores(query)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=0)
        assert np.array_equal(got, expected)  # same float operations: bit-identical
        query_set = set(query)
        matched = np.array([bool(query_set & set(doc)) for doc in corpus])
        for k in (1, 5, 50):
            docs, scores = index.search(query, k)
            assert docs.tolist() == oracle_top_k(expected, matched, k).tolist()
            np.testing.assert_array_equal(scores, expected[docs])


@pytest.mark.parametrize("seed", range(12))
def test_random_corpora_match_rank_bm25(seed):
    rng = np.random.default_rng(seed)
    n_docs = int(rng.integers(2, 120))
    vocab = [f"w{i}" for i in range(int(rng.integers(3, 60)))]
    common = vocab[:2]  # in most documents: negative idf, floored to epsilon * mean idf
    corpus = []
    for _ in range(n_docs):
        if rng.random() < 0.1:
            corpus.append([])  # empty documents
            continue
        length = int(rng.integers(1, 25))
        words = [vocab[int(i) % len(vocab)] for i in rng.zipf(1.3, size=length)]
        if rng.random() < 0.8:
            words += list(common)
        corpus.append(words)
    if not any(corpus):
        corpus[0] = ["w0"]
    queries = [
        [vocab[int(i)] for i in rng.integers(0, len(vocab), size=int(rng.integers(1, 12)))],
        common + common + ["never-seen", vocab[-1], vocab[-1]],  # repeated and unknown terms
        ["unknown-only"],
    ]
    index = BM25Index.from_token_lists(corpus, params=ROBERTSON)
    reference = rank_bm25.BM25Okapi(corpus)
    assert any(reference.idf[w] == reference.epsilon * reference.average_idf for w in common)
    assert index.average_idf == pytest.approx(reference.average_idf, rel=1e-12)
    assert_same_as_rank_bm25(corpus, queries, index)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("block_docs", [1, 7, 64])
def test_index_built_in_blocks_matches_rank_bm25(seed, block_docs):
    """The index is built block by block (bounded memory): term order, document lengths,
    postings and the epsilon floor must not depend on where the blocks are cut. Empty
    documents fall at block ends and some terms first appear in late blocks."""
    rng = np.random.default_rng(100 + seed)
    n_docs = int(rng.integers(20, 150))
    vocab = [f"w{i}" for i in range(int(rng.integers(5, 80)))]
    texts: list[str | None] = []
    for i in range(n_docs):
        if rng.random() < 0.15:
            texts.append(rng.choice(["", None, "the and of"]))  # no tokens after stop words
            continue
        late = vocab[: max(2, len(vocab) * (i + 1) // n_docs)]  # the vocabulary grows
        words = [late[int(j) % len(late)] for j in rng.zipf(1.3, size=int(rng.integers(1, 20)))]
        words += ["w0", "w1"] if rng.random() < 0.8 else []  # negative idf, floored
        texts.append(" ".join(words).upper() if rng.random() < 0.2 else " ".join(words))
    corpus = [content_words(t) for t in texts]
    if not any(corpus):
        texts[0], corpus[0] = "w0", ["w0"]
    blocked = BM25Index.from_texts(texts, block_docs=block_docs, params=ROBERTSON)
    whole = BM25Index.from_texts(texts, block_docs=n_docs, params=ROBERTSON)
    assert blocked.vocabulary == whole.vocabulary  # first appearance over the whole corpus
    assert np.array_equal(blocked.doc_len, whole.doc_len)
    assert np.array_equal(blocked.weights.indptr, whole.weights.indptr)
    assert np.array_equal(blocked.weights.indices, whole.weights.indices)
    assert np.array_equal(blocked.weights.data, whole.weights.data)
    assert blocked.average_idf == rank_bm25.BM25Okapi(corpus).average_idf
    queries = [
        [vocab[int(i)] for i in rng.integers(0, len(vocab), size=int(rng.integers(1, 10)))],
        ["w0", "w1", "w0", vocab[-1], "unknown"],
    ]
    assert_same_as_rank_bm25(corpus, queries, blocked)


def test_negative_average_idf_floor_is_reproduced():
    # every term in most documents: the mean idf is negative, so is the "floor"
    corpus = [["a", "b"], ["a", "b", "c"], ["a", "b"], ["a"], ["b", "c"]]
    index = BM25Index.from_token_lists(corpus, params=ROBERTSON)
    reference = rank_bm25.BM25Okapi(corpus)
    assert reference.average_idf < 0
    assert_same_as_rank_bm25(corpus, [["a"], ["c", "a", "a"], ["b", "c"]], index)


@pytest.fixture(scope="module")
def dreaddit(reference_dir) -> list[str]:
    path = reference_dir / "realdata" / "dreaddit" / "dreaddit-train.csv"
    return pl.read_csv(path, columns=["text"], infer_schema_length=0).get_column("text").to_list()


def test_dreaddit_matches_rank_bm25(dreaddit):
    corpus = [content_words(t) for t in dreaddit]
    index = BM25Index.from_texts(
        dreaddit, params=ROBERTSON
    )  # the vectorised (polars) tokenisation path
    assert index.doc_len.tolist() == [len(d) for d in corpus]
    blocked = BM25Index.from_texts(
        dreaddit, block_docs=333, params=ROBERTSON
    )  # 9 blocks, the last one short
    assert blocked.vocabulary == index.vocabulary
    assert np.array_equal(blocked.weights.data, index.weights.data)
    assert np.array_equal(blocked.weights.indices, index.weights.indices)
    topics = load_topics("config/topics.yaml")
    queries = [query_tokens(t.keywords) for t in topics] + [
        content_words("I am so stressed about money and rent and my job"),
        content_words("anxiety anxiety panic attack"),
        ["zzzz-not-a-word"],
    ]
    assert_same_as_rank_bm25(corpus, queries, index)


def test_tokenisation_documented_rules():
    assert content_words("The NBA's Three-Pointer, and a DUNK!") == ["nba", "s", "pointer", "dunk"]
    assert content_words("") == [] and content_words(None) == []
    assert content_words("snake_case C++ café") == ["snake", "case", "c", "café"]
    assert "the" in STOP_WORDS and len(STOP_WORDS) > 300
    # keyword phrases are split into tokens, repetition kept
    assert query_tokens(["basketball", "college basketball", "the hoop"]) == [
        "basketball",
        "college",
        "basketball",
        "hoop",
    ]
    # documents and queries share the tokenisation (vectorised path == python path)
    texts = ["Hello, World! it's 3pm", "", None, "Ünïcode ÉTÉ naïve—dash"]
    frame = topic_corpus._token_frame(pl.Series(texts, dtype=pl.String))
    by_doc = frame.group_by("doc", maintain_order=True).agg("tok")
    as_lists = {d: t for d, t in by_doc.iter_rows()}
    assert [as_lists.get(i, []) for i in range(len(texts))] == [content_words(t) for t in texts]


# --------------------------------------------------------------------------- the fast tokeniser
# splits.text.word_frame (ASCII texts through a byte table and a split, the others through
# polars' regex) against reference_word_frame (polars' lowercase and regex on every text)

UNICODE_SAMPLES = [
    "café", "STRASSE Straße", "İstanbul İİ", "ΣΟΦΙΑ Ελληνικά ΟΔΟΣ", "中文字符 日本語テキスト",
    "emoji 😀 ok👍🏽 ❤️", "e\u0301 combining a\u0308", "ǅemal ǈ", "Ⅻ roman ⅻ", "١٢٣ arabic",
    "ﬁne ligature", "naïve—dash “quotes” it’s", "\u00a0nbsp\u2003em", "Ünïcode ÉTÉ",
]  # fmt: skip
ASCII_SAMPLES = [
    "", "!!! ... --- ???", "0123 456 7.89", "MiXeD CaSe WORDS", "the cat and the",
    "The", "word", "a b c", "don't snake_case C++ e-mail", "\x00\x01\x7f tab\tnew\nline\r",
    "exactly12chr thirteen13chr aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "  leading and trailing  ",
    "x", "A1b2C3", "AFTERWARDS nevertheless Zebra",
]  # fmt: skip


def assert_fast_tokeniser_exact(series: pl.Series) -> None:
    for drop in (False, True):
        reference = reference_word_frame(series, drop_stop_words=drop)
        fast = word_frame(series, drop_stop_words=drop)
        assert fast.schema == reference.schema
        assert fast.equals(reference), (drop, series.to_list()[:20])


@settings(max_examples=150, deadline=None)
@given(
    texts=hst.lists(
        hst.one_of(
            hst.none(),
            hst.text(hst.sampled_from(list("aZq09 ,.'_-\t\n!") + ["é", "ß", "İ", "Σ", "中", "😀",
                                                                   "\u0301", "\x00", "Ⅻ"])),
            hst.lists(hst.sampled_from(sorted(STOP_WORDS)[:40] + ["Cat", "DOG", "x1"]))
            .map(" ".join),
            hst.sampled_from(UNICODE_SAMPLES + ASCII_SAMPLES),
        ),
        max_size=25,
    ),
    cut=hst.tuples(hst.integers(0, 30), hst.integers(0, 30)),
)  # fmt: skip
def test_fast_tokeniser_equals_the_reference_on_random_texts(texts, cut):
    series = pl.Series("text", texts, dtype=pl.String)
    assert_fast_tokeniser_exact(series)
    assert_fast_tokeniser_exact(series.slice(cut[0], cut[1]))  # a slice: offsets not from 0
    chunked = pl.concat([series, series.slice(cut[0])], rechunk=False)
    assert_fast_tokeniser_exact(chunked)


def test_fast_tokeniser_on_tricky_texts():
    long_doc = " ".join(["Word", "the", "x9", "naïve"] * 20_000)
    texts = [*ASCII_SAMPLES, None, *UNICODE_SAMPLES, long_doc, long_doc.replace("naïve", "na"), ""]
    series = pl.Series("text", texts, dtype=pl.String)
    assert_fast_tokeniser_exact(series)
    interleaved = [t for pair in zip(ASCII_SAMPLES, UNICODE_SAMPLES, strict=False) for t in pair]
    assert_fast_tokeniser_exact(pl.Series(interleaved, dtype=pl.String))
    for start in range(len(texts)):
        assert_fast_tokeniser_exact(series.slice(start, 7))
    assert_fast_tokeniser_exact(pl.Series("text", [], dtype=pl.String))
    assert_fast_tokeniser_exact(pl.Series("text", [None, None], dtype=pl.String))
    assert_fast_tokeniser_exact(pl.Series("text", ["only ascii", "here"], dtype=pl.Categorical))
    for arrow_type in (pa.string(), pa.large_string()):  # Arrow texts of either offset width
        arrow = pa.array(texts, type=arrow_type)
        assert_fast_tokeniser_exact(pl.Series("text", arrow))
        assert_fast_tokeniser_exact(pl.Series("text", arrow.slice(3, 20)))
    # the token frame of the BM25 splits is the fast one, stop words dropped
    assert topic_corpus._token_frame(series).equals(reference_word_frame(series, True))


def test_ascii_word_text_maps_bytes_marks_texts_and_blanks_unicode():
    texts = ["Ab,c", "héllo", None, "", "UP down", "中", "tail9"]
    # a null whose Arrow slot holds bytes (Arrow allows it): no words, and not sent to the regex
    offsets = pa.array([0, 2, 4, 6], type=pa.int64()).buffers()[1]
    odd = pa.LargeStringArray.from_buffers(
        3, offsets, pa.py_buffer("abé!x".encode()), pa.py_buffer(bytes([0b101]))
    )
    series = pl.Series("text", texts, dtype=pl.String)
    cases = [
        (series, texts),
        (series.slice(1, 5), texts[1:6]),
        (pl.Series(odd), ["ab", None, "!x"]),
    ]
    for texts_in, expected in cases:
        filled = texts_in.fill_null("")
        lengths = filled.str.len_bytes().cast(pl.Int64).to_numpy()
        joined, unicode_docs = splits_text._ascii_word_text(filled, lengths)
        want = [
            " " * len((t or "").encode()) if t is not None and not t.isascii()
            else "".join(c.lower() if c.isalnum() else " " for c in t or "")
            for t in expected
        ]  # fmt: skip
        assert joined == " \x01 ".join(want)
        assert unicode_docs.tolist() == [
            i for i, t in enumerate(expected) if t is not None and not t.isascii()
        ]


def test_fast_tokeniser_joins_at_most_so_many_bytes(monkeypatch):
    texts = pl.Series("text", [*ASCII_SAMPLES, None, *UNICODE_SAMPLES] * 3, dtype=pl.String)
    expected = {drop: reference_word_frame(texts, drop) for drop in (False, True)}
    monkeypatch.setattr(splits_text, "_MAX_JOINED_BYTES", 40)  # halves down to one text each
    for drop in (False, True):
        got = word_frame(texts, drop)
        assert got.schema == expected[drop].schema and got.equals(expected[drop])


def test_fast_tokeniser_on_real_reddit_text(reference_dir, dreaddit):
    path = reference_dir / "realdata" / "convokit_cornell" / "utterances.jsonl"
    cornell = [json.loads(line).get("text") for line in path.read_text("utf-8").splitlines()]
    for texts in (cornell, dreaddit):
        series = pl.Series("text", texts, dtype=pl.String)
        assert (series.str.len_bytes() != series.str.len_chars()).any()  # both paths are taken
        assert_fast_tokeniser_exact(series)
        assert_fast_tokeniser_exact(series.slice(17, 333))


def test_top_k_ties_break_by_document():
    docs = np.array([9, 3, 5, 1, 7])
    scores = np.array([1.0, 2.0, 2.0, 2.0, 0.5])
    got, got_scores = top_k(docs, scores, 2)
    assert got.tolist() == [1, 3] and got_scores.tolist() == [2.0, 2.0]
    assert top_k(docs, scores, 10)[0].tolist() == [1, 3, 5, 9, 7]
    assert top_k(docs, scores, 0)[0].tolist() == []


# --------------------------------------------------------------------------- topic splits

TOPICS = [
    Topic("Sports", "Basketball", ("basketball", "dunk", "three pointer")),
    Topic("Hobbies", "Gardening", ("garden", "soil", "tomato plants")),
]


def demographic_posts() -> pl.DataFrame:
    rows = []
    texts = {
        "a": [
            "basketball dunk tonight",
            "my garden soil is great",
            "basketball",
            "dunk dunk dunk basketball",
            "nothing here at all",
            "tomato plants in the garden need soil",
        ],
        "b": [
            "three pointer basketball game",
            "watching the dunk contest",
            "cooking pasta",
            "garden",
            "my tomato plants died",
            "basketball basketball three pointer dunk",
        ],
    }
    for key, items in texts.items():
        for i, text in enumerate(items):
            rows.append(
                {
                    "post_id": f"{key}{i}",
                    "author": f"user_{key}{i % 2}",
                    "subreddit": "s",
                    "text": text,
                    "demographic": key,
                }
            )
    # one post by a user above both groups' thresholds
    rows.append(
        {
            "post_id": "ab0",
            "author": "user_both",
            "subreddit": "s",
            "text": "basketball dunk",
            "demographic": "a",
        }
    )
    rows.append(
        {
            "post_id": "ab0",
            "author": "user_both",
            "subreddit": "s",
            "text": "basketball dunk",
            "demographic": "b",
        }
    )
    return pl.DataFrame(rows)


def test_topic_splits_shared_index_against_rank_bm25():
    posts = demographic_posts()
    table = in_process.topic_splits(posts, TOPICS, split_settings(top_k=3, drop_fraction=0.0))
    assert table.columns == topic_merge.TOPIC_POSTS_COLUMNS
    docs = posts.unique(subset="post_id").sort("post_id")
    reference = rank_bm25.BM25Okapi([content_words(t) for t in docs.get_column("text")])
    ids = docs.get_column("post_id").to_list()
    for topic in TOPICS:
        query = query_tokens(topic.keywords)
        scores = dict(zip(ids, reference.get_scores(query), strict=True))
        for key in ("a", "b"):
            member_ids = posts.filter(pl.col("demographic") == key).get_column("post_id").to_list()
            matched = [
                p
                for p in member_ids
                if set(query) & set(content_words(docs.filter(pl.col("post_id") == p)["text"][0]))
            ]
            expected = sorted(matched, key=lambda p: (-scores[p], ids.index(p)))[:3]
            got = table.filter((pl.col("topic") == topic.topic) & (pl.col("demographic") == key))
            assert got.get_column("post_id").to_list() == expected
            assert got.get_column("rank").to_list() == list(range(1, len(expected) + 1))
            assert got.get_column("score").to_list() == [scores[p] for p in expected]
    # post ab0 (a user above both thresholds) is retrieved for both groups, with its author
    both = table.filter(pl.col("post_id") == "ab0")
    assert sorted(both.get_column("demographic").to_list()) == ["a", "b"]
    assert set(both.get_column("author").to_list()) == {"user_both"}


def test_drop_fraction_cuts_pooled_bottom_per_topic():
    posts = demographic_posts()
    full = in_process.topic_splits(posts, TOPICS, split_settings(top_k=10, drop_fraction=0.0))
    cut = in_process.topic_splits(posts, TOPICS, split_settings(top_k=10, drop_fraction=0.25))
    for topic in TOPICS:
        pooled = full.filter(pl.col("topic") == topic.topic).get_column("norm_score").sort()
        kept = cut.filter(pl.col("topic") == topic.topic)
        cut_value = pooled[int(len(pooled) * 0.25)]
        assert len(kept) == int((pooled >= cut_value).sum())
        assert kept.get_column("norm_score").min() >= cut_value
        assert len(kept) <= len(pooled) - 0 and len(kept) >= len(pooled) - int(len(pooled) * 0.25)
    # norm_score is the score over the query's maximal attainable score
    index = BM25Index.from_texts(
        posts.unique(subset="post_id").sort("post_id").get_column("text"), params=ROBERTSON
    )
    row = full.filter(pl.col("topic") == "Basketball").row(0, named=True)
    assert row["norm_score"] == pytest.approx(
        row["score"] / index.max_score(query_tokens(TOPICS[0].keywords))
    )
    assert 0 < row["norm_score"] <= 1


def test_per_demographic_index_scores_each_group_alone():
    posts = demographic_posts()
    table = in_process.topic_splits(
        posts, TOPICS, split_settings(top_k=5, drop_fraction=0.0, index="per_demographic")
    )
    only_b = posts.filter(pl.col("demographic") == "b").sort("post_id")
    reference = rank_bm25.BM25Okapi([content_words(t) for t in only_b.get_column("text")])
    scores = dict(
        zip(
            only_b.get_column("post_id"),
            reference.get_scores(query_tokens(TOPICS[0].keywords)),
            strict=True,
        )
    )
    got = table.filter((pl.col("demographic") == "b") & (pl.col("topic") == "Basketball"))
    assert got.get_column("score").to_list() == [scores[p] for p in got.get_column("post_id")]


def test_cli_filters_by_threshold_and_writes_contract(tmp_path):
    posts = demographic_posts()
    paths = []
    for key in ("a", "b"):
        frame = (
            posts.filter(pl.col("demographic") == key)
            .drop("demographic")
            .sort("post_id")  # D_d files are sorted by post id (the groupness stage's contract)
            .with_columns(
                pl.when(pl.col("author").str.ends_with("1"))
                .then(10.0)
                .otherwise(90.0)
                .alias("percentile"),
                pl.lit(1.0).alias("groupness"),
            )
        )
        path = tmp_path / "demographics" / key / "posts.parquet"
        path.parent.mkdir(parents=True)
        frame.write_parquet(path)
        paths.append(str(path))
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(json.dumps({"a": 50, "b": 50}))
    topics_file = tmp_path / "topics.yaml"
    write_topics_yaml(topics_file, TOPICS)
    out = tmp_path / "out"
    argv = [
        "run",
        "--demographic-posts",
        *paths,
        "--thresholds",
        str(thresholds),
        "--topics-file",
        str(topics_file),
        *settings_argv(top_k=50, drop_fraction=0.0),
        "--out-topics",
        str(out / "topics.parquet"),
        "--out-topic-posts",
        str(out / "topic_posts.parquet"),
        "--out-counts",
        str(out / "counts.csv"),
    ]
    from splits.cli import main

    assert main(["topic-splits", *argv]) == 0
    table = pl.read_parquet(out / "topic_posts.parquet")
    assert not table.get_column("author").str.ends_with("1").any()  # below threshold: excluded
    assert table.schema["rank"] == pl.Int64 and table.schema["score"] == pl.Float64
    topics = pl.read_parquet(out / "topics.parquet")
    assert topics.columns == ["category", "topic", "keywords"] and topics.height == 2
    counts = pl.read_csv(out / "counts.csv")
    assert counts.columns == ["category", "topic", "a", "b", "total"]
    for row in counts.iter_rows(named=True):
        n = table.filter(pl.col("topic") == row["topic"]).group_by("demographic").len()
        assert {r[0]: r[1] for r in n.iter_rows()} == {k: row[k] for k in ("a", "b") if row[k]}
    # settings out of range, or not the subcommand's keys, are one config error line
    at = argv.index("--settings")
    without = argv[:at] + argv[at + 2 :]
    for bad, message in (
        (settings_argv(top_k=0), "topics.top_k: must be at least 1"),
        (settings_argv(sample_k=5), "sampling.k: must be an even number"),
        (["--settings", '{"top_k": 5}'], "settings missing"),
        (["--settings", "[1]"], "--settings: not a JSON object"),
    ):
        with pytest.raises(ConfigError, match=message):
            topics_cli.run(bm25_args(without + bad))
    # a demographic without a threshold is a clear error
    thresholds.write_text(json.dumps({"a": 50}))
    with pytest.raises(ConfigError, match="'b'"):
        topics_cli.run(bm25_args(argv))


def bm25_args(argv):
    import argparse

    parser = argparse.ArgumentParser()
    topics_cli.configure_parser(parser)
    return parser.parse_args(argv)


def test_no_posts_above_thresholds_is_a_clear_error():
    empty = demographic_posts().head(0)
    with pytest.raises(ConfigError, match="no posts of users at or above"):
        in_process.topic_splits(empty, TOPICS, split_settings())


# --------------------------------------------------------------------------- shards


def random_corpus(seed: int, n_docs: int = 160) -> list[list[str]]:
    """Zipf words, ~10% empty documents, two words in most documents (negative idf, so the
    epsilon floor and its mean idf over the whole vocabulary matter) and a run of empty
    documents long enough to fill whole shards."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(int(rng.integers(20, 80)))]
    corpus: list[list[str]] = []
    for i in range(n_docs):
        if rng.random() < 0.1 or 40 <= i < 70:
            corpus.append([])
            continue
        words = [vocab[int(j) % len(vocab)] for j in rng.zipf(1.3, size=int(rng.integers(1, 20)))]
        if rng.random() < 0.8:
            words += ["w0", "w1"]
        corpus.append(words)
    corpus[n_docs - 3].append("late-only")  # a term of the last shard only
    corpus[5] += ["early-only", "early-only"]  # a term of the first shard only
    return corpus


def split_at(corpus: list, n_shards: int) -> list[list]:
    cuts = np.linspace(0, len(corpus), n_shards + 1).astype(int)
    return [corpus[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n_shards", [1, 2, 7])
def test_sharded_index_equals_one_rank_bm25_over_the_union(seed, n_shards):
    corpus = random_corpus(seed)
    shards = split_at(corpus, n_shards)
    if n_shards == 7:
        assert any(not any(shard) for shard in shards), "a shard of empty documents only"
    reference = rank_bm25.BM25Okapi(corpus)
    queries = [
        ["w0", "w1", "w0"],  # floored terms, repeated
        ["late-only", "w3", "early-only", "never-seen"],  # terms of one shard; unknown
        [f"w{i}" for i in range(2, 12)],
    ]
    counts = [topic_corpus.ShardCounts.from_token_lists(s) for s in shards]
    stats = topic_corpus.CorpusStats.combine(counts, {t for q in queries for t in q})
    # grouped in parts of a few vocabulary rows (hash-split terms): the same statistics
    assert (
        topic_corpus.CorpusStats.combine(counts, {t for q in queries for t in q}, part_rows=7)
        == stats
    )
    assert stats.n_docs == reference.corpus_size and stats.n_terms == len(reference.idf)
    assert stats.average_idf == reference.average_idf  # same float sum, same order
    assert stats.avgdl == reference.avgdl
    assert "never-seen" not in stats.doc_freq and stats.doc_freq["late-only"] == 1
    indexes = [BM25Index.from_token_lists(s, stats=stats, params=ROBERTSON) for s in shards]
    offsets = np.cumsum([0] + [len(s) for s in shards])
    for query in queries:
        expected = reference.get_scores(query)
        got = np.concatenate([index.get_scores(query) for index in indexes])
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
        assert np.array_equal(got, expected)  # bit-identical
        matched = np.array([bool(set(query) & set(doc)) for doc in corpus])
        for k in (1, 4, 30):
            docs, scores = [], []
            for index, offset in zip(indexes, offsets, strict=False):
                d, s = index.search(query, k)  # each shard's top k
                docs.append(d + offset)
                scores.append(s)
            merged, _ = top_k(np.concatenate(docs), np.concatenate(scores), k)
            assert merged.tolist() == oracle_top_k(expected, matched, k).tolist()
        top = [index.max_score(query) for index in indexes]
        assert top == [top[0]] * len(top), "the normaliser is the union's in every shard"


def test_sharded_statistics_of_texts_equal_the_whole_index():
    texts = ["The garden soil", "", None, "garden tomato plants", "soil soil", "a an the"] * 7
    whole = BM25Index.from_texts(texts, params=ROBERTSON)
    counts = [
        topic_corpus.ShardCounts.from_texts(texts[i : i + 5], block_docs=2) for i in range(0, 42, 5)
    ]
    stats = topic_corpus.CorpusStats.combine(counts, ["garden", "soil", "tomato", "absent"])
    assert stats.n_terms == len(whole.vocabulary) and stats.average_idf == whole.average_idf
    assert stats.doc_freq == {"garden": 14, "soil": 14, "tomato": 7}
    shard = BM25Index.from_texts(texts[10:20], stats=stats, params=ROBERTSON)
    assert list(shard.vocabulary) == ["garden", "soil", "tomato"]
    for query in (["garden"], ["soil", "tomato", "soil"]):
        assert np.array_equal(shard.get_scores(query), whole.get_scores(query)[10:20])
    with pytest.raises(ValueError, match="zero documents"):
        topic_corpus.CorpusStats.combine([topic_corpus.ShardCounts.from_texts([])], [])


def shard_frames(table: pl.DataFrame, max_posts: int, max_bytes: int) -> list[pl.DataFrame]:
    pieces = list(topic_shards.cut_shards([table.head(5), table.slice(5)], max_posts, max_bytes))
    assert [n for n, _ in pieces] == sorted(n for n, _ in pieces)
    return topic_shards.shard_frames(pieces)


def test_cut_shards_bounds_posts_and_bytes():
    texts = ["x" * n for n in (3, 5, 2, 40, 1, 1, 1, 9, 4, 4, 4)]
    table = pl.DataFrame({"post_id": [f"p{i:02d}" for i in range(len(texts))], "text": texts})
    for max_posts, max_bytes in ((3, 10**6), (100, 10), (2, 8), (1, 1)):
        shards = shard_frames(table, max_posts, max_bytes)
        assert pl.concat(shards).equals(table)  # every post once, in order
        for shard in shards:
            size = int(shard["text"].str.len_bytes().sum())
            assert shard.height <= max_posts
            assert size <= max_bytes or shard.height == 1  # a longer post is a shard alone
        # greedy: each shard is full, i.e. its next post would not have fitted
        for shard, following in zip(shards, shards[1:], strict=False):
            size = int(shard["text"].str.len_bytes().sum()) + len(following["text"][0])
            assert shard.height == max_posts or size > max_bytes
    assert [s.height for s in shard_frames(table, 100, 10)] == [3, 1, 3, 1, 2, 1]


def write_demographic(path, rows: list[tuple[str, float]]) -> str:
    frame = pl.DataFrame(
        {
            "post_id": [p for p, _ in rows],
            "author": [f"u-{p}" for p, _ in rows],
            "subreddit": "s",
            "text": [f"text of {p}" for p, _ in rows],
            "percentile": [q for _, q in rows],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.write_parquet(path)
    return str(path)


def test_union_streams_a_k_way_merge_of_sorted_files(tmp_path):
    rng = np.random.default_rng(5)
    ids = sorted(f"{i:05x}" for i in rng.choice(10**6, size=300, replace=False))
    files, rows_of = {}, {}
    for key in ("a", "b", "c"):
        chosen = sorted(rng.choice(len(ids), size=int(rng.integers(0, 150)), replace=False))
        rows = [(ids[i], float(rng.integers(0, 100))) for i in chosen]
        rows_of[key] = rows
        files[key] = write_demographic(tmp_path / key / "posts.parquet", rows)
    thresholds = {"a": 50, "b": 20.5, "c": 99}
    expected = topic_shards.union_posts(
        pl.DataFrame(
            [
                (p, f"u-{p}", "s", f"text of {p}", key)
                for key, rows in rows_of.items()
                for p, q in rows
                if q >= thresholds[key]
            ],
            schema=["post_id", "author", "subreddit", "text", "demographic"],
            orient="row",
        )
    )
    assert expected.height > 50 and expected["demographics"].list.len().max() >= 2
    for batch_rows in (1, 3, 64, 10**6):
        got = pl.concat(list(topic_shards.iter_union(files, thresholds, batch_rows=batch_rows)))
        assert got.equals(expected), batch_rows


def test_union_rejects_unsorted_or_unthresholded_input(tmp_path):
    good = write_demographic(tmp_path / "a" / "posts.parquet", [("p1", 90), ("p2", 90)])
    bad = write_demographic(tmp_path / "b" / "posts.parquet", [("p2", 90), ("p1", 90)])
    with pytest.raises(ConfigError, match="not in ascending order"):
        list(topic_shards.iter_union({"a": good, "b": bad}, {"a": 50, "b": 50}))
    with pytest.raises(ConfigError, match="no threshold for demographic 'b'"):
        list(topic_shards.iter_union({"a": good, "b": good}, {"a": 50}))
    with pytest.raises(ConfigError, match="not a number"):
        list(topic_shards.iter_union({"a": good}, {"a": "high"}))
    with pytest.raises(ConfigError, match="does not exist"):
        list(topic_shards.iter_union({"a": str(tmp_path / "none.parquet")}, {"a": 50}))


@pytest.mark.parametrize("index", ["shared", "per_demographic"])
def test_topic_splits_do_not_depend_on_the_shards(index):
    posts = demographic_posts()
    one = in_process.topic_splits(
        posts, TOPICS, split_settings(top_k=3, drop_fraction=0.25, index=index)
    )
    assert one.height > 6
    for shard_posts, shard_mb in ((1, 512.0), (2, 512.0), (5, 512.0), (1000, 20 / 2**20)):
        params = split_settings(
            top_k=3, drop_fraction=0.25, index=index, shard_posts=shard_posts, shard_mb=shard_mb
        )
        assert in_process.topic_splits(posts, TOPICS, params).equals(one), (shard_posts, shard_mb)


def test_an_empty_bucket_writes_no_shard_and_all_buckets_empty_is_one_error(tmp_path, capsys):
    """ingest.buckets > 1: topic_shards runs once per posts bucket (``--allow-empty``). A bucket
    with no post at or above the thresholds writes no shard and an empty plan, not an error;
    the global statistics over no shard at all (every bucket empty) stop with the one line the
    one-job cut gives (without ``--allow-empty`` the cut itself stops with it)."""
    from splits.cli import main
    from splits.topics.settings import TopicShardsSettings

    posts = demographic_posts()
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(json.dumps({"a": 50, "b": 50}))
    parts = []
    for key in ("a", "b"):  # every post below the threshold
        path = tmp_path / "demographics" / key / "posts" / "3.parquet"
        path.parent.mkdir(parents=True)
        posts.filter(pl.col("demographic") == key).drop("demographic").sort("post_id").with_columns(
            pl.lit(10.0).alias("percentile"), pl.lit(1.0).alias("groupness")
        ).write_parquet(path)
        parts.append(str(path))
    settings = json.dumps(dataclasses.asdict(schema_defaults(TopicShardsSettings)))
    out = tmp_path / "shards" / "3"
    shard = ["topic-splits", "shard", "--demographic-posts", *parts, "--thresholds",
             str(thresholds), "--out-dir", str(out), "--settings", settings]  # fmt: skip
    assert main(shard) == 2
    assert "no posts of users at or above the demographics' thresholds" in capsys.readouterr().err
    assert main([*shard, "--allow-empty"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["plan.json"]
    assert json.loads((out / "plan.json").read_text()) == {"shards": [], "posts": 0}
    topics_file = tmp_path / "topics.yaml"
    write_topics_yaml(topics_file, TOPICS)
    capsys.readouterr()
    stats = ["topic-splits", "global-stats", "--vocab", "--counts", "--topics-file",
             str(topics_file), "--out", str(tmp_path / "global_stats.json")]  # fmt: skip
    assert main(stats) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "splits topic-splits: config error: topic splits: no posts of users at or above the "
        "demographics' thresholds"
    ], err
