"""``splits hypotheses fighting-words``: the counting baseline's set job on a small corpus.

Oracles: a word only group A uses (it must lead A's lexicon with the informative prior; under
ConvoKit's uniform prior its z stays below 1.96, the issue's finding on real Reddit posts), a
function word both groups use (never an entry); the split written out by hand (threads from the posts table); the
median written in the test."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import polars as pl
import pytest
from splits.cli import main
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.hypotheses.heldout import HELDOUT, split_halves
from splits.hypotheses.settings import FightingWordsSettings, LiftSettings

CONTEXT = [
    "--topics-file",
    "config/topics.yaml",
    "--demographics",
    "config/demographics.sample.yaml",
]
FILLER = [f"filler{i}" for i in range(40)]


@pytest.fixture
def corpus(tmp_path):
    """200 posts per group on Soccer (and 100 on Basketball, the background), 40 threads a group:
    A's posts hold "zork" (30%, A only) and "they" four times (45%), B's "they" once (45%)."""
    rng = np.random.default_rng(3)
    posts, threads = [], []
    for topic, count in (("Soccer", 200), ("Basketball", 100)):
        for group in ("black", "jewish"):
            for i in range(count):
                words = list(rng.choice(FILLER, size=12))
                if rng.random() < 0.45:
                    words += ["they"] * (4 if group == "black" else 1)
                if group == "black" and rng.random() < 0.3:
                    words.append("zork")
                post_id = f"{topic[:3]}-{group}-{i:03d}"
                posts.append(
                    {
                        "post_id": post_id,
                        "text": " ".join(words),
                        "demographic": group,
                        "topic": topic,
                    }
                )
                threads.append({"post_id": post_id, "conversation_id": f"{topic}-{group}-{i % 40}"})
    topic_posts = tmp_path / "topic_posts.parquet"
    pl.DataFrame(posts).write_parquet(topic_posts)
    posts_table = tmp_path / "posts.parquet"
    pl.DataFrame(threads).write_parquet(posts_table)
    return topic_posts, posts_table


def run(tmp_path, corpus, name, with_threads=True, model_sets=(), **fighting_words):
    topic_posts, posts_table = corpus
    defaults = schema_defaults(FightingWordsSettings)
    fw = dataclasses.replace(defaults.fighting_words, **fighting_words)
    settings = dataclasses.replace(defaults, fighting_words=fw)
    out, report = tmp_path / f"{name}.parquet", tmp_path / f"{name}.json"
    args = [
        "hypotheses",
        "fighting-words",
        "--topic-posts",
        str(topic_posts),
        *(["--posts", str(posts_table)] if with_threads else []),
        "--model-sets",
        *[str(p) for p in model_sets],
        *CONTEXT,
        "--settings",
        json.dumps(dataclasses.asdict(settings)),
        "--out",
        str(out),
        "--report",
        str(report),
    ]
    assert main(args) == 0
    frame = pl.read_parquet(out).filter(pl.col("topic") == "Soccer")
    return {r["target"]: r for r in frame.iter_rows(named=True)}, json.loads(report.read_text())


def test_informative_prior_finds_the_groups_own_word_the_uniform_prior_does_not(tmp_path, corpus):
    informative, report = run(tmp_path, corpus, "informative")
    assert report["prior"] == "informative"
    assert informative["black"]["source"] == "fighting-words"
    assert informative["black"]["lexicon"][0] == "zork"
    assert all("they" not in r["lexicon"] for r in informative.values())  # stop words only: never
    # ConvoKit's uniform prior 0.1: the variance of a word B never uses is dominated by 1/0.1,
    # so A's own word stays below z = 1.96 and A gets no lexicon (counted, not silent)
    uniform, uniform_report = run(tmp_path, corpus, "uniform", prior="uniform")
    assert "black" not in uniform
    assert uniform_report["skipped"]["no_ngram_with_z_at_least_min_z"] >= 1
    # with no z bound the word is there, behind nothing but its z
    loose, _ = run(tmp_path, corpus, "loose", prior="uniform", min_z=0.0)
    assert "zork" in loose["black"]["lexicon"]
    # every lexicon entry is typical of its target (z >= min_z): none of B's is A's word
    assert "zork" not in informative.get("jewish", {"lexicon": []})["lexicon"]


def test_discovery_half_by_thread_and_lexicon_size_from_the_model_sets(tmp_path, corpus):
    topic_posts, posts_table = corpus
    models = tmp_path / "models.parquet"
    pl.DataFrame(
        {
            "topic": ["Soccer"] * 3,
            "demographic_A": ["black"] * 3,
            "demographic_B": ["jewish"] * 3,
            "lexicon": [["a"] * 1, ["a"] * 2, ["a"] * 6],
        }
    ).write_parquet(models)
    by_target, report = run(tmp_path, corpus, "sized", model_sets=[models], min_z=0.0)
    assert len(by_target["black"]["lexicon"]) == 2  # the median of 1, 2 and 6
    # the pool's halves: a seeded hash of the thread, as written out here
    pool = report["pools"][
        next(
            i
            for i, p in enumerate(report["pools"])
            if (p["topic"], p["demographic_A"], p["demographic_B"]) == ("Soccer", "black", "jewish")
        )
    ]
    posts = pl.read_parquet(topic_posts).filter(pl.col("topic") == "Soccer")
    posts = posts.join(pl.read_parquet(posts_table), on="post_id")
    seed = schema_defaults(LiftSettings).seed
    halves = split_halves(posts, seed, 0.5, "Soccer\x1fblack\x1fjewish")
    assert pool["heldout"] == (halves["half"] == HELDOUT).sum()
    assert (
        pool["discovery_A"]
        == ((halves["half"] != HELDOUT) & (halves["demographic"] == "black")).sum()
    )
    assert report["threads"] == "conversation_id" and report["posts_with_thread"] == 600
    # 40 threads a group: the held-out half is a whole number of threads of 5 posts each
    assert pool["heldout"] % 5 == 0
    # without the posts table each post is its own thread (release data)
    _, alone = run(tmp_path, corpus, "alone", with_threads=False)
    assert alone["threads"].startswith("none") and alone["posts_with_thread"] == 0


def test_settings_are_checked():
    defaults = schema_defaults(FightingWordsSettings)
    with pytest.raises(ConfigError, match="fighting_words.prior"):
        dataclasses.replace(defaults.fighting_words, prior="flat")
    with pytest.raises(ConfigError, match="heldout_fraction"):
        dataclasses.replace(defaults, heldout_fraction=1.0)
    with pytest.raises(ConfigError, match="heldout_fraction"):
        schema_defaults(LiftSettings, heldout_fraction=0.0)
