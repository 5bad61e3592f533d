"""Topic splits, quadruplets and export on the default pipeline run (generated sample corpus)."""

from __future__ import annotations

import polars as pl
import pytest
import yaml
from splits.sampling.validate import validate_quadruplets
from splits.topics.merge import TOPIC_POSTS_COLUMNS


@pytest.fixture(scope="module")
def results(default_run):
    return default_run / "results"


def test_planted_topic_posts_retrieved_with_precision(results):
    topic_posts = pl.read_parquet(results / "topics" / "topic_posts.parquet")
    assert topic_posts.columns == TOPIC_POSTS_COLUMNS
    truth = pl.read_parquet(results / "sample" / "post_truth.parquet").select(
        "post_id", pl.col("topic").alias("planted_topic")
    )
    joined = topic_posts.join(truth, on="post_id", how="left")
    assert joined.get_column("planted_topic").null_count() < len(joined)  # the check can fail
    precision = joined.group_by("topic").agg(
        (pl.col("planted_topic") == pl.col("topic")).fill_null(False).mean().alias("precision"),
        pl.len(),
    )
    assert precision.height == 10
    low = precision.filter(pl.col("precision") < 0.9)
    assert low.is_empty(), low
    # and every group has posts on every topic
    counts = topic_posts.group_by("topic", "demographic").len()
    assert counts.height == 10 * 6 and counts.get_column("len").min() >= 50


def test_quadruplets_hold_every_invariant(default_run, results):
    config = yaml.safe_load((default_run / "config" / "config.yaml").read_text())
    k = config["sampling"]["k"]
    quads = pl.read_parquet(results / "dataset" / "quadruplets.parquet")
    topic_posts = pl.read_parquet(results / "topics" / "topic_posts.parquet")
    assert len(quads) >= 400
    assert validate_quadruplets(quads, topic_posts, k) == []
    assert quads.select("demographic_A", "demographic_B").unique().height == 15
    assert abs(quads.get_column("switched").mean() - 0.5) < 0.05


def test_export_has_no_raw_authors(results):
    export_dir = results / "dataset" / "export"
    authors = (
        pl.read_parquet(results / "topics" / "topic_posts.parquet").get_column("author").unique()
    )
    exported = pl.read_parquet(export_dir / "topic_posts.parquet")
    assert "author" not in exported.columns
    assert exported.get_column("author_hash").is_in(authors.implode()).sum() == 0
    assert exported.get_column("author_hash").n_unique() == authors.len()
    card = (export_dir / "README.md").read_text()
    assert "## Limitations" in card and not any(a in card for a in authors.to_list())


def test_topic_posts_equal_one_rank_bm25_index_over_the_union(default_run, results):
    """The pipeline's sharded BM25 stage against rank_bm25.BM25Okapi over the union of every
    demographic's posts above its threshold (one index, post-id order), then the top K per
    (demographic, topic) with ties by post id and the pooled cut, written here from docs/method.md §2.6.
    Only posts holding one of the topic's keywords as a phrase (a window of consecutive words,
    brute force here) are retrieved (issue 25)."""
    import json
    import math

    import rank_bm25
    from splits.config.definitions import THRESHOLDS_SUPPORT_KEY, load_topics
    from splits.text import content_words, query_tokens, words

    config = yaml.safe_load((default_run / "config" / "config.yaml").read_text())["topics"]
    assert config["index"] == "shared"
    thresholds = json.loads((results / "demographics" / "thresholds.json").read_text())
    thresholds.pop(THRESHOLDS_SUPPORT_KEY)  # how well each auto threshold is supported
    rows = pl.concat(
        pl.read_parquet(results / "demographics" / key / "posts.parquet")
        .filter(pl.col("percentile") >= value)
        .select("post_id", pl.lit(key).alias("demographic"), "text")
        for key, value in thresholds.items()
    )
    union = rows.unique("post_id").sort("post_id")
    ids = union["post_id"].to_list()
    corpus = [content_words(t) for t in union["text"].to_list()]
    word_lists = [words(t) for t in union["text"].to_list()]

    def holds(doc: list[str], phrase: str) -> bool:
        target = words(phrase)
        return any(doc[i : i + len(target)] == target for i in range(len(doc) - len(target) + 1))

    oracle = rank_bm25.BM25Okapi(corpus)
    members = {
        key: set(rows.filter(pl.col("demographic") == key)["post_id"].to_list())
        for key in thresholds
    }
    expected = []
    retrieved = {}
    for topic in load_topics(default_run / config["file"]):
        query = query_tokens(topic.keywords)
        scores = oracle.get_scores(query)
        top = (oracle.k1 + 1) * sum(oracle.idf[t] for t in query if t in oracle.idf)
        pooled = []
        for key in sorted(thresholds):
            hits = [
                i
                for i, doc in enumerate(word_lists)
                if ids[i] in members[key] and any(holds(doc, kw) for kw in topic.keywords)
            ]
            retrieved[(topic.topic, key)] = len(hits)
            hits.sort(key=lambda i: (-scores[i], ids[i]))
            for rank, i in enumerate(hits[: config["top_k"]], start=1):
                pooled.append((topic.topic, key, ids[i], scores[i], scores[i] / top, rank))
        norms = sorted(row[4] for row in pooled)
        cut = norms[min(math.floor(len(norms) * config["drop_fraction"]), len(norms) - 1)]
        expected += [row for row in pooled if row[4] >= cut]
    got = pl.read_parquet(results / "topics" / "topic_posts.parquet")
    assert got.height == len(expected) > 1000
    got_rows = got.select("topic", "demographic", "post_id", "score", "rank").rows()
    assert [(t, d, p, s, r) for t, d, p, s, _, r in expected] == got_rows  # exact scores
    assert got["norm_score"].to_list() == pytest.approx([row[4] for row in expected], rel=1e-12)
    table = pl.read_csv(results / "topics" / "topic_retrieval.csv")
    assert {
        (r["topic"], r["demographic"]): r["retrieved"] for r in table.iter_rows(named=True)
    } == (retrieved)
    assert table["topic_kept"].all()  # every default topic has posts for sampling


def test_topic_posts_identical_with_one_and_five_shards(pipeline_runs, default_run, results):
    import json

    plan = json.loads((results / "topics" / "shards" / "posts" / "plan.json").read_text())
    assert len(plan["shards"]) == 1
    shard_posts = -(-plan["posts"] // 5)  # ceil: five shards
    root = pipeline_runs.get(
        {"topics": {"shard_posts": shard_posts}},
        targets=("results/topics/topic_posts.parquet",),
        from_default=True,  # the topic stage's jobs re-run, nothing before them
    )
    five = root / "results" / "topics"
    plan5 = json.loads((five / "shards" / "posts" / "plan.json").read_text())
    assert [s["posts"] for s in plan5["shards"]][:4] == [shard_posts] * 4
    assert len(plan5["shards"]) == 5 and plan5["posts"] == plan["posts"]
    assert len(list((five / "shards" / "hits").glob("*.parquet"))) == 5
    assert pl.read_parquet(five / "topic_posts.parquet").equals(
        pl.read_parquet(results / "topics" / "topic_posts.parquet")
    )
    assert (five / "topic_counts.csv").read_text() == (
        results / "topics" / "topic_counts.csv"
    ).read_text()


def test_off_topic_topic_on_the_sample_corpus_is_named_and_left_out(default_run, results, tmp_path):
    """Issue 25: a topic whose multiword keywords share only common words with the corpus got
    posts as bags of words; now it retrieves none, is left out, and one run-health line names it."""
    import io
    import json

    from splits.cli import main
    from splits.health import print_run_health
    from splits.text import words

    keywords = ["advice home", "care plant", "thing happened garden"]  # words in, phrases never
    topic_posts = pl.read_parquet(results / "topics" / "topic_posts.parquet")
    texts = topic_posts.unique("post_id")["text"].to_list()
    word_sets = [set(words(t)) for t in texts]
    for kw in keywords:
        assert sum(set(words(kw)) <= ws for ws in word_sets) >= 20  # a bag of words matches
    topics_file = tmp_path / "topics.yaml"
    base = yaml.safe_load((default_run / "config" / "topics.yaml").read_text())
    base["topics"].append({"category": "Odd", "topic": "Home care", "keywords": keywords})
    topics_file.write_text(yaml.safe_dump(base))
    thresholds = json.loads((results / "demographics" / "thresholds.json").read_text())
    keys = [k for k in thresholds if (results / "demographics" / k / "posts.parquet").exists()]
    config = yaml.safe_load((default_run / "config" / "config.yaml").read_text())
    out = tmp_path / "out"
    argv = ["topic-splits", "run", "--demographic-posts"]
    argv += [str(results / "demographics" / k / "posts.parquet") for k in keys]
    argv += ["--thresholds", str(results / "demographics" / "thresholds.json")]
    argv += ["--topics-file", str(topics_file)]
    argv += ["--config", str(default_run / "config" / "config.yaml")]  # by hand: the run's config
    argv += ["--demographics-file", str(default_run / config["demographics"]["file"])]
    argv += ["--out-topics", str(out / "topics.parquet")]
    argv += ["--out-topic-posts", str(out / "topic_posts.parquet")]
    argv += ["--out-counts", str(out / "counts.csv"), "--out-retrieval", str(out / "r.csv")]
    argv += ["--out-seed-share", str(out / "s.csv")]
    argv += ["--out-health", str(tmp_path / "health" / "topics.json")]
    assert main(argv) == 0
    got = pl.read_parquet(out / "topic_posts.parquet")
    assert "Home care" not in got["topic"].to_list()
    # the other topics are exactly those of the pipeline's own run
    assert got.equals(topic_posts)
    retrieval = pl.read_csv(out / "r.csv").filter(pl.col("topic") == "Home care")
    assert retrieval["retrieved"].to_list() == [0] * len(keys)
    stream = io.StringIO()
    assert print_run_health(tmp_path, stream=stream) == 1
    (line,) = [x for x in stream.getvalue().splitlines() if "Home care" in x]
    assert line.strip().startswith("WARNING [topics] topic Home care: left out of the dataset")
    assert "To change:" in line
