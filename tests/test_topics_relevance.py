"""Topic relevance (issue 25): a topic post holds one of its topic's keywords as a phrase, what
each (topic, group) retrieved is written, a topic too small to sample is dropped with a health
finding, and each group's share of topic posts from its own seed subreddits is reported."""

from __future__ import annotations

import dataclasses
import json
import random
import re

import polars as pl
import pytest
from helpers import write_topics_yaml
from splits.config.definitions import Topic
from splits.config.settings import schema_defaults
from splits.health import read_findings
from splits.text import words
from splits.topics import findings as topic_findings
from splits.topics import in_process
from splits.topics.settings import TopicSplitSettings


def settings_argv(**values) -> list[str]:
    """``--settings`` of ``splits topic-splits run``: the schema's defaults, ``values`` replaced."""
    return ["--settings", json.dumps(dataclasses.asdict(split_settings(**values)))]


def split_settings(**values) -> TopicSplitSettings:
    """The topic splits' settings: the schema's defaults, ``values`` replaced."""
    return schema_defaults(TopicSplitSettings, **values)


GARDENING = Topic("Hobbies", "Gardening", ("gardening", "home gardening", "plant care"))
BASKETBALL = Topic("Sports", "Basketball", ("basketball", "three pointer", "free throw"))
# an off-topic topic: its multiword keywords share only common words ("home", "care", "fair",
# "based") with the corpus, never the phrases
OFF_TOPIC = Topic("Education", "Career fairs", ("career fair", "need-based aid", "home care"))
TOPICS = [GARDENING, BASKETBALL, OFF_TOPIC]
GROUPS = ("a", "b")
SEEDS = {"a": ("SeedA",), "b": ("SeedB", "SeedB2")}

COMMON = [
    "I finally got home after work",
    "Take care of yourself out there",
    "Fair enough, that seems based",
    "my home wifi is down again",
    "health care costs keep rising",
    "the plant across the street closed",
    "we need more parking based on the numbers",
]
GARDEN = [
    "home gardening is my weekend hobby",
    "any plant care tips for a fern",
    "gardening in a small flat",
    "basic plant care: water less than you think",
]
HOOPS = [
    "hit a three pointer at the buzzer",
    "basketball practice ran late",
    "missed every free throw tonight",
]


def phrase_in(text: str, phrase: str) -> bool:
    """Brute force: the phrase's words as a consecutive window of the text's words."""
    target, toks = words(phrase), words(text)
    return any(toks[i : i + len(target)] == target for i in range(len(toks) - len(target) + 1))


def corpus(seed: int = 3, n: int = 400) -> pl.DataFrame:
    """(demographic, post) rows: mostly common chatter that shares words with the keywords, some
    on-topic posts; subreddits: each group's own seeds and a shared one."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        group = GROUPS[i % 2]
        pick = rng.random()
        source = COMMON if pick < 0.6 else GARDEN if pick < 0.8 else HOOPS
        text = " ".join(rng.sample(source, 2)) if rng.random() < 0.3 else rng.choice(source)
        seeds = SEEDS[group]
        subreddit = rng.choice(seeds) if rng.random() < 0.5 else "AskReddit"
        rows.append(
            {
                "post_id": f"p{i:05d}",
                "author": f"u{group}{i % 17}",
                "subreddit": subreddit,
                "text": text,
                "demographic": group,
            }
        )
    return pl.DataFrame(rows)


PARAMS = split_settings(top_k=60, drop_fraction=0.25, sample_k=6)


def test_every_topic_post_holds_a_keyword_as_a_phrase():
    posts = corpus()
    table = in_process.topic_splits(posts, TOPICS, split_settings(top_k=1000, drop_fraction=0.0))
    assert table.height
    keywords = {t.topic: t.keywords for t in TOPICS}
    for topic, text in table.select("topic", "text").iter_rows():
        assert any(phrase_in(text, kw) for kw in keywords[topic]), (topic, text)
    # and every such post of the corpus is retrieved (top_k above the corpus size, no cut)
    for topic in TOPICS:
        for key in GROUPS:
            own = posts.filter(pl.col("demographic") == key)
            expected = {
                p
                for p, t in own.select("post_id", "text").iter_rows()
                if any(phrase_in(t, kw) for kw in topic.keywords)
            }
            got = table.filter((pl.col("topic") == topic.topic) & (pl.col("demographic") == key))
            assert set(got.get_column("post_id").to_list()) == expected


def test_home_and_care_alone_do_not_make_a_gardening_post():
    posts = corpus()
    table = in_process.topic_splits(posts, TOPICS, split_settings(top_k=1000, drop_fraction=0.0))
    garden = table.filter(pl.col("topic") == "Gardening").get_column("text").to_list()
    assert garden and not any(t in COMMON for t in garden)
    assert not table.filter(pl.col("topic") == "Career fairs").height


def test_ranking_within_matching_posts_is_still_bm25():
    import rank_bm25
    from splits.text import content_words, query_tokens

    posts = corpus()
    table = in_process.topic_splits(posts, TOPICS, split_settings(top_k=5, drop_fraction=0.0))
    docs = posts.unique(subset="post_id").sort("post_id")
    reference = rank_bm25.BM25Okapi([content_words(t) for t in docs.get_column("text")])
    scores = reference.get_scores(query_tokens(GARDENING.keywords))
    by_id = dict(zip(docs.get_column("post_id"), scores, strict=True))
    text_of = dict(docs.select("post_id", "text").iter_rows())
    for key in GROUPS:
        member = posts.filter(pl.col("demographic") == key).get_column("post_id").to_list()
        matching = [p for p in member if any(phrase_in(text_of[p], k) for k in GARDENING.keywords)]
        expected = sorted(matching, key=lambda p: (-by_id[p], p))[:5]
        got = table.filter((pl.col("topic") == "Gardening") & (pl.col("demographic") == key))
        assert got.get_column("post_id").to_list() == expected
        assert got.get_column("score").to_list() == [by_id[p] for p in expected]


def test_retrieval_table_counts_and_dropped_topic_finding():
    posts = corpus()
    result = in_process.topic_splits_result(posts, TOPICS, PARAMS, SEEDS)
    table = result.retrieval
    assert list(table.schema) == list(topic_findings.RETRIEVAL_SCHEMA)
    assert table.height == len(TOPICS) * len(GROUPS)
    for row in table.iter_rows(named=True):
        topic = next(t for t in TOPICS if t.topic == row["topic"])
        own = posts.filter(pl.col("demographic") == row["demographic"]).get_column("text")
        retrieved = sum(any(phrase_in(t, k) for k in topic.keywords) for t in own)
        assert row["retrieved"] == retrieved
        assert row["pool"] == min(PARAMS.top_k, retrieved)
        assert row["short_of_top_k"] == PARAMS.top_k - row["pool"]
        assert row["dropped_pooled"] == row["pool"] - row["kept"]
    # the pooled cut over the two groups removes about drop_fraction of each kept topic's pool
    for topic in ("Gardening", "Basketball"):
        rows = table.filter(pl.col("topic") == topic)
        pool, dropped = rows["pool"].sum(), rows["dropped_pooled"].sum()
        assert 0 < dropped <= int(pool * PARAMS.drop_fraction)
        assert rows["topic_kept"].all() and (rows["sampled_pairs"] == 1).all()
    off = table.filter(pl.col("topic") == "Career fairs")
    assert off["retrieved"].to_list() == [0, 0] and not off["topic_kept"].any()
    assert off["short_of_top_k"].to_list() == [PARAMS.top_k] * 2
    # the dropped topic does not reach sampling, and one finding names it with its counts
    assert "Career fairs" not in result.topic_posts.get_column("topic").to_list()
    (finding,) = [f for f in result.findings if f.code == "topic_too_few_posts"]
    assert finding.subject == "topic Career fairs" and finding.stage == "topics"
    assert "a 0 retrieved/0 kept" in finding.message and "b 0 retrieved/0 kept" in finding.message
    assert "6 posts each" in finding.message and "lower sampling.k" in finding.fix


def test_topic_with_a_few_posts_below_the_sampling_need_is_dropped():
    posts = corpus()
    # 5 posts of each group hold "three pointer"; one quadruplet at k=6 needs 3 + 3 = 6
    few = Topic("Sports", "Threes", ("three pointer",))
    counts = {
        key: sum(
            phrase_in(t, "three pointer")
            for t in posts.filter(pl.col("demographic") == key)["text"]
        )
        for key in GROUPS
    }
    need = topic_findings.posts_needed(6)
    assert need == 6
    result = in_process.topic_splits_result(
        posts, [few], split_settings(top_k=100, drop_fraction=0.0, sample_k=6), SEEDS
    )
    kept = min(counts.values()) >= need
    assert result.retrieval["topic_kept"].to_list() == [kept, kept]
    big_k = in_process.topic_splits_result(
        posts,
        [few],
        split_settings(top_k=100, drop_fraction=0.0, sample_k=2 * max(counts.values())),
        SEEDS,
    )
    assert not big_k.retrieval["topic_kept"].any() and big_k.topic_posts.height == 0
    assert [f.code for f in big_k.findings] == ["topic_too_few_posts"]


def test_seed_share_per_group_finding_and_exclude_option():
    posts = corpus()
    # group a: every post in its own seed subreddit
    posts = posts.with_columns(
        pl.when(pl.col("demographic") == "a")
        .then(pl.lit("seeda"))
        .otherwise(pl.col("subreddit"))
        .alias("subreddit")
    )
    result = in_process.topic_splits_result(posts, TOPICS, PARAMS, SEEDS)
    share = {r["demographic"]: r for r in result.seed_share.iter_rows(named=True)}
    for key in GROUPS:
        rows = result.topic_posts.filter(pl.col("demographic") == key)
        own = {s.lower() for s in SEEDS[key]}
        n_seed = sum(s.lower() in own for s in rows["subreddit"])
        assert share[key]["topic_posts"] == rows.height
        assert share[key]["from_seed_subreddits"] == n_seed
        assert share[key]["seed_share"] == pytest.approx(n_seed / rows.height)
    assert share["a"]["seed_share"] == 1.0 and 0.2 < share["b"]["seed_share"] < 0.8
    (finding,) = [f for f in result.findings if f.code == "topic_posts_from_seed_subreddits"]
    assert finding.subject == "group a" and "100%" in finding.message
    assert "topics.seed_subreddit_posts: exclude" in finding.fix
    # exclude: a group's own seed-subreddit posts never reach its topic pools
    params = split_settings(
        top_k=60, drop_fraction=0.25, sample_k=6, seed_subreddit_posts="exclude"
    )
    excluded = in_process.topic_splits_result(posts, TOPICS, params, SEEDS)
    for key in GROUPS:
        rows = excluded.topic_posts.filter(pl.col("demographic") == key)
        assert not rows["subreddit"].str.to_lowercase().is_in([s.lower() for s in SEEDS[key]]).any()
    assert excluded.seed_share["from_seed_subreddits"].to_list() == [0, 0]
    assert excluded.seed_share["seed_subreddit_posts"].to_list() == ["exclude", "exclude"]
    assert not [f for f in excluded.findings if f.code == "topic_posts_from_seed_subreddits"]


def cornell_posts(reference_dir) -> pl.DataFrame:
    path = reference_dir / "realdata" / "convokit_cornell" / "utterances.jsonl"
    rows = []
    with open(path, encoding="utf-8") as handle:
        for i, line in enumerate(handle):
            record = json.loads(line)
            rows.append(
                {
                    "post_id": str(record["id"]),
                    "author": str(record.get("speaker") or record.get("user")),
                    "subreddit": "Cornell",
                    "text": record.get("text") or "",
                    "demographic": GROUPS[i % 2],
                }
            )
    return pl.DataFrame(rows)


def test_real_cornell_text_fair_and_based_are_not_topic_posts(reference_dir):
    posts = cornell_posts(reference_dir)
    topics = [
        Topic("Education", "Careers", ("career fair", "career fairs", "internship")),
        Topic("Education", "Financial aid", ("need-based", "financial aid", "scholarship")),
    ]
    table = in_process.topic_splits(posts, topics, split_settings(top_k=3000, drop_fraction=0.0))
    careers = table.filter(pl.col("topic") == "Careers")["text"].to_list()
    aid = table.filter(pl.col("topic") == "Financial aid")["text"].to_list()
    assert careers and aid
    assert not any(
        re.search(r"to be fair", t, re.I)
        and "career" not in t.lower()
        and "intern" not in t.lower()
        for t in careers
    )
    assert all(re.search(r"career[\W_]+fairs?\b|internship", t, re.I) for t in careers)
    assert all(re.search(r"need[\W_]+based|financial[\W_]+aid|scholarship", t, re.I) for t in aid)
    # the real posts with "based" alone (about 20) are not financial-aid posts
    based_only = [
        t
        for t in posts["text"]
        if re.search(r"\bbased\b", t)
        and not re.search(r"need[\W_]+based|financial[\W_]+aid|scholarship", t, re.I)
    ]
    assert len(based_only) >= 10 and not set(based_only) & set(aid)


@pytest.mark.parametrize("mode", ["keep", "exclude"])
def test_cli_run_writes_tables_and_health(tmp_path, mode):
    from splits.cli import main

    posts = corpus()
    paths = []
    for key in GROUPS:
        frame = (
            posts.filter(pl.col("demographic") == key)
            .drop("demographic")
            .sort("post_id")
            .with_columns(pl.lit(90.0).alias("percentile"), pl.lit(1.0).alias("groupness"))
        )
        path = tmp_path / "demographics" / key / "posts.parquet"
        path.parent.mkdir(parents=True)
        frame.write_parquet(path)
        paths.append(str(path))
    (tmp_path / "thresholds.json").write_text(json.dumps({"a": 50, "b": 50}))
    topics_file = tmp_path / "topics.yaml"
    write_topics_yaml(topics_file, TOPICS)
    demographics_file = tmp_path / "demographics.yaml"
    demographics_file.write_text(
        "demographics:\n"
        + "".join(
            f"- {{key: {k}, threshold: 50, seed_subreddits: {list(SEEDS[k])}, "
            f"self_id_phrases: ['I am {k}']}}\n"
            for k in GROUPS
        )
    )
    out = tmp_path / "out"
    argv = ["topic-splits", "run", "--demographic-posts", *paths]
    argv += ["--thresholds", str(tmp_path / "thresholds.json"), "--topics-file", str(topics_file)]
    argv += ["--demographics-file", str(demographics_file)]
    for name in ("topics.parquet", "topic_posts.parquet", "counts.csv"):
        argv += [f"--out-{name.split('.')[0].replace('_', '-')}", str(out / name)]
    argv[argv.index("--out-counts")] = "--out-counts"
    argv += ["--out-retrieval", str(out / "retrieval.csv")]
    argv += ["--out-seed-share", str(out / "seed_share.csv"), "--out-health", str(out / "h.json")]
    argv += settings_argv(top_k=60, sample_k=6, seed_subreddit_posts=mode)
    assert main(argv) == 0
    share = pl.read_csv(out / "seed_share.csv")
    assert share["seed_subreddit_posts"].to_list() == [mode, mode]
    kept = pl.read_parquet(out / "topic_posts.parquet")
    from_seeds = kept.filter(
        ((pl.col("demographic") == "a") & pl.col("subreddit").is_in(["SeedA"]))
        | ((pl.col("demographic") == "b") & pl.col("subreddit").is_in(["SeedB", "SeedB2"]))
    ).height
    assert share["from_seed_subreddits"].sum() == from_seeds
    assert (from_seeds == 0) == (mode == "exclude")
    retrieval = pl.read_csv(out / "retrieval.csv")
    assert retrieval.height == 6
    assert pl.read_csv(out / "seed_share.csv")["demographic"].to_list() == ["a", "b"]
    findings = read_findings([out / "h.json"])
    assert [f.subject for f in findings if f.code == "topic_too_few_posts"] == [
        "topic Career fairs"
    ]
    assert "Career fairs" not in pl.read_parquet(out / "topic_posts.parquet")["topic"].to_list()


def test_posts_of_members_of_both_groups_do_not_count_towards_a_pair():
    rows = [("T", "a", f"p{i}") for i in range(6)] + [("T", "b", f"q{i}") for i in range(6)]
    table = pl.DataFrame(rows, schema=["topic", "demographic", "post_id"], orient="row")
    assert topic_findings.sampled_pairs(table, ["a", "b"], 6) == {"T": 1}
    # p0's author is at or above b's threshold too (the shards list both groups for the post),
    # though p0 was retrieved for a only: a's pool for the pair is 5 posts
    members = {f"p{i}": frozenset({"a"}) for i in range(6)} | {"p0": frozenset({"a", "b"})}
    assert topic_findings.sampled_pairs(table, ["a", "b"], 6, members) == {"T": 0}
    assert topic_findings.sampled_pairs(table, ["a", "b"], 5, members) == {"T": 1}
    # a post listed under both groups counts for neither
    both = pl.concat([table, pl.DataFrame([("T", "b", "p1")], schema=table.schema, orient="row")])
    assert topic_findings.sampled_pairs(both, ["a", "b"], 6) == {"T": 0}
    # post_members reads the groups off the shards' lists
    shards = pl.DataFrame(
        {"post_id": ["p0", "p1", "x"], "demographics": [["a", "b"], ["a"], ["b"]]}
    ).lazy()
    assert topic_findings.post_members(shards, table) == {
        "p0": frozenset({"a", "b"}),
        "p1": frozenset({"a"}),
    }
