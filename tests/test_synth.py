"""The sample corpus generator: determinism, planted structure, formats."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest
from splits.config.definitions import load_demographics, load_topics
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.ingest.read import ingest_shard
from splits.ingest.settings import IngestSettings, SynthSettings
from splits.ingest.synth.generate import generate
from splits.ingest.synth.world import SynthParams

REPO = Path(__file__).resolve().parents[1]
DEMOGRAPHICS = REPO / "config" / "demographics.sample.yaml"
TOPICS = REPO / "config" / "topics.yaml"


SETTINGS = {f.name for f in dataclasses.fields(SynthSettings)}
INGEST = schema_defaults(IngestSettings)


def _generate(root: Path, **kwargs) -> Path:
    """The corpus of the schema's synth settings, some replaced (keys of SynthSettings) and some
    sizes of the corpus model replaced (the other keys)."""
    settings = schema_defaults(SynthSettings, **{k: v for k, v in kwargs.items() if k in SETTINGS})
    model = {k: v for k, v in kwargs.items() if k not in SETTINGS}
    params = SynthParams.from_settings(settings, **model)
    generate(params, load_demographics(DEMOGRAPHICS), load_topics(TOPICS), root / "corpus", root)
    return root


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    return _generate(tmp_path_factory.mktemp("synth"))


@pytest.fixture(scope="module")
def utterances(sample) -> pl.DataFrame:
    frames = [
        pl.read_ndjson(p) for p in sorted((sample / "corpus").glob("sample-*/utterances.jsonl"))
    ]
    return pl.concat(frames).with_columns(subreddit=pl.col("meta").struct.field("subreddit"))


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_same_seed_gives_identical_files(tmp_path):
    a = _files(
        _generate(
            tmp_path / "a",
            n_general_users=400,
            members_per_demographic=25,
            topic_posts_per_pair=20,
            n_general_subreddits=60,
        )
    )
    b = _files(
        _generate(
            tmp_path / "b",
            n_general_users=400,
            members_per_demographic=25,
            topic_posts_per_pair=20,
            n_general_subreddits=60,
        )
    )
    assert a.keys() == b.keys()
    assert "ground_truth.parquet" in a and "corpus/sample-1/utterances.jsonl" in a
    for name in a:
        assert a[name] == b[name], name
    c = _files(
        _generate(
            tmp_path / "c",
            seed=7,
            n_general_users=400,
            members_per_demographic=25,
            topic_posts_per_pair=20,
            n_general_subreddits=60,
        )
    )
    assert c["corpus/sample-0/utterances.jsonl"] != a["corpus/sample-0/utterances.jsonl"]


def test_convokit_layout_and_sizes(sample, utterances):
    meta = json.loads((sample / "synth_meta.json").read_text())
    assert 45_000 <= meta["n_posts"] <= 60_000
    for shard in ("sample-0", "sample-1"):
        d = sample / "corpus" / shard
        for name in (
            "utterances.jsonl",
            "speakers.json",
            "conversations.json",
            "corpus.json",
            "index.json",
        ):
            assert (d / name).exists(), name
        conversations = json.loads((d / "conversations.json").read_text())
        speakers = json.loads((d / "speakers.json").read_text())
        shard_utt = pl.read_ndjson(d / "utterances.jsonl")
        roots = shard_utt.filter(pl.col("id") == pl.col("conversation_id"))
        assert set(conversations) == set(roots["id"])
        assert all(
            isinstance(c["meta"]["title"], str) and c["meta"]["title"]
            for c in conversations.values()
        )
        assert set(shard_utt["speaker"]) <= set(speakers)
    assert utterances["id"].n_unique() == utterances.height == meta["n_posts"]
    # reply links stay inside their conversation
    by_id = dict(zip(utterances["id"], utterances["conversation_id"], strict=True))
    replies = utterances.filter(pl.col("reply-to").is_not_null())
    assert all(
        by_id[r] == c for r, c in zip(replies["reply-to"], replies["conversation_id"], strict=True)
    )
    # power law: the biggest general subreddit is far bigger than the median one
    sizes = utterances.group_by("subreddit").len()["len"].sort(descending=True)
    assert sizes[0] > 8 * sizes[len(sizes) // 2]
    # dirt like real ConvoKit corpora, and bots named like bots
    texts = Counter(utterances["text"])
    assert 0.01 < texts["[deleted]"] / utterances.height < 0.06
    assert 0.01 < texts["[removed]"] / utterances.height < 0.06
    assert 0.03 < (utterances["speaker"] == "[deleted]").mean() < 0.1
    assert "AutoModerator" in set(utterances["speaker"])


def _seed_user_sets(utterances: pl.DataFrame) -> dict[str, set[str]]:
    valid = utterances.filter(
        (pl.col("speaker") != "[deleted]") & ~pl.col("text").is_in(["[deleted]", "[removed]"])
    )
    users: dict[str, set[str]] = defaultdict(set)
    for sub, speaker in zip(valid["subreddit"], valid["speaker"], strict=True):
        users[sub.lower()].add(speaker)
    return users


def test_seed_subreddits_are_each_others_neighbours(sample, utterances):
    """Brute force with Python sets: each seed subreddit's top 20 neighbours (Jaccard and
    cosine) contain the other seed subreddits of its community."""
    meta = json.loads((sample / "synth_meta.json").read_text())
    users = _seed_user_sets(utterances)
    k = 20
    for key, info in meta["demographics"].items():
        seeds = [s.lower() for s in info["seed_subreddits"]]
        for s in seeds:
            scores = {"jaccard": [], "cosine": []}
            for other, u in users.items():
                if other == s:
                    continue
                inter = len(users[s] & u)
                scores["jaccard"].append((inter / len(users[s] | u), other))
                scores["cosine"].append((inter / math.sqrt(len(users[s]) * len(u)), other))
            for measure, values in scores.items():
                top = {name for _, name in sorted(values, reverse=True)[:k]}
                missing = set(seeds) - {s} - top
                assert not missing, (key, s, measure, missing)


def test_planted_change_points_and_groupness_auc(sample, utterances):
    meta = json.loads((sample / "synth_meta.json").read_text())
    truth = pl.read_parquet(sample / "ground_truth.parquet")
    bots = set(truth.filter(pl.col("account") == "bot")["author"])
    valid = utterances.filter(
        (pl.col("speaker") != "[deleted]")
        & ~pl.col("text").is_in(["[deleted]", "[removed]", ""])
        & ~pl.col("speaker").is_in(sorted(bots))
    )
    for key, info in meta["demographics"].items():
        seeds = info["seed_subreddits"]
        counts = (
            valid.filter(pl.col("subreddit").is_in(seeds)).group_by("speaker", "subreddit").len()
        )
        g = counts.group_by("speaker").agg(g=(pl.col("len") + 1).log().sum())
        g = g.join(
            truth.filter(pl.col("demographic") == key).select("author", "is_member"),
            left_on="speaker",
            right_on="author",
        )
        share = g["is_member"].mean()
        assert abs(100 * (1 - share) - info["change_point"]) < 2.5, (key, share)
        pos = g.filter("is_member")["g"].to_list()
        neg = g.filter(~pl.col("is_member"))["g"].to_list()
        wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
        assert wins / (len(pos) * len(neg)) >= 0.9, key
    assert {k: v["change_point"] for k, v in meta["demographics"].items()} == {
        "catholic": 75,
        "teacher": 75,
        "black": 75,
        "construction": 90,
        "hindu_jain_sikh": 80,
        "jewish": 90,
    }


def test_topic_posts_by_members_per_demographic_and_topic(sample):
    truth = pl.read_parquet(sample / "post_truth.parquet")
    topics = load_topics(TOPICS)
    counts = (
        truth.filter(
            (pl.col("kind_of_text") == "topic")
            & pl.col("demographic").is_not_null()
            & (pl.col("dirt") == "none")
        )
        .group_by("demographic", "topic")
        .len()
    )
    assert counts.height == 6 * len(topics)
    assert counts["len"].min() >= 150


def test_phrase_kinds_follow_membership(sample, utterances):
    truth = pl.read_parquet(sample / "post_truth.parquet").join(
        utterances.select(pl.col("id").alias("post_id"), "text"), on="post_id"
    )
    gt = pl.read_parquet(sample / "ground_truth.parquet")
    demos = {d.key: d for d in load_demographics(DEMOGRAPHICS)}
    kinds = Counter(truth["kind_of_text"])
    for kind in (
        "selfid",
        "anti_selfid",
        "selfid_quoted",
        "selfid_question",
        "selfid_negated",
        "selfid_hypothetical",
    ):
        assert kinds[kind] >= 50, kind
    phrase_posts = truth.filter(
        pl.col("phrase_demographic").is_not_null() & (pl.col("dirt") == "none")
    )
    for row in phrase_posts.head(400).iter_rows(named=True):
        d = demos[row["phrase_demographic"]]
        phrases = (
            d.anti_self_id_phrases if row["kind_of_text"] == "anti_selfid" else d.self_id_phrases
        )
        assert any(re.search(re.escape(p), row["text"], re.I) for p in phrases), row
    quoted = phrase_posts.filter(pl.col("kind_of_text") == "selfid_quoted")["text"]
    assert all(("'" in t or '"' in t) for t in quoted)
    # self-ID comes from members, anti-self-ID mostly from non-members of that demographic
    member = gt.filter("is_member").select(
        "author", pl.col("demographic").alias("phrase_demographic"), "strength"
    )
    sid = phrase_posts.join(member, on=["author", "phrase_demographic"], how="left")
    selfid = sid.filter(pl.col("kind_of_text") == "selfid")
    anti = sid.filter(pl.col("kind_of_text") == "anti_selfid")
    assert selfid["strength"].is_not_null().mean() == 1.0
    assert anti["strength"].is_null().mean() > 0.8
    # the self-ID rate per post rises with strength
    members = gt.filter("is_member")
    posts = (
        truth.filter(pl.col("dirt") == "none")
        .group_by("author")
        .agg(n=pl.len(), s=(pl.col("kind_of_text") == "selfid").sum())
    )
    m = members.join(posts, on="author").with_columns(
        strong=pl.col("strength") > pl.col("strength").median()
    )
    rate = (
        m.group_by("strong")
        .agg(r=pl.col("s").sum() / pl.col("n").sum())
        .sort("strong")["r"]
        .to_list()
    )
    assert rate[1] > 1.5 * rate[0]


def _oracle_accuracy(
    sample: Path, utterances: pl.DataFrame, trials: int = 300, topics: set[str] | None = None
) -> float:
    """Read 8 labelled calibration posts per group, attribute two unlabelled 3-post sets by
    word-bigram overlap; accuracy over random (A, B, topic) draws (topics among ``topics``)."""
    truth = pl.read_parquet(sample / "post_truth.parquet").join(
        utterances.select(pl.col("id").alias("post_id"), "text"), on="post_id"
    )
    topic_posts = truth.filter(
        (pl.col("kind_of_text") == "topic") & pl.col("demographic").is_not_null()
    )
    pools = {
        key: frame["text"].to_list()
        for key, frame in topic_posts.filter(pl.col("dirt") == "none")
        .partition_by(["demographic", "topic"], as_dict=True)
        .items()
    }
    demographics = sorted({k[0] for k in pools})
    topics = sorted({k[1] for k in pools if topics is None or k[1] in topics})
    rng = random.Random(1)

    def bigrams(texts):
        words = [w for t in texts for w in re.findall(r"[a-z]+", t.lower())]
        return Counter(zip(words, words[1:], strict=False))

    correct = 0
    for _ in range(trials):
        a, b = rng.sample(demographics, 2)
        t = rng.choice(topics)
        pa = rng.sample(pools[(a, t)], 11)
        pb = rng.sample(pools[(b, t)], 11)
        ca, cb = bigrams(pa[:8]), bigrams(pb[:8])
        sa, sb = bigrams(pa[8:]), bigrams(pb[8:])

        def affinity(s, c, other):
            return sum(n for g, n in s.items() if c[g] and not other[g])

        score = (
            affinity(sa, ca, cb)
            + affinity(sb, cb, ca)
            - affinity(sa, cb, ca)
            - affinity(sb, ca, cb)
        )
        correct += score > 0 or (score == 0 and rng.random() < 0.5)
    return correct / trials


def test_planted_group_difference_is_attributable_and_switchable(sample, utterances, tmp_path):
    assert _oracle_accuracy(sample, utterances) >= 0.8
    off = _generate(tmp_path / "off", plant_group_difference=False)
    off_utt = pl.concat(
        [pl.read_ndjson(p) for p in sorted((off / "corpus").glob("sample-*/utterances.jsonl"))]
    )
    assert _oracle_accuracy(off, off_utt) <= 0.62


def test_planted_topics_limit_the_difference(tmp_path):
    planted = {"Basketball", "Gardening", "Personal Budgeting"}
    root = _generate(tmp_path / "some", planted_topics=sorted(planted))
    meta = json.loads((root / "synth_meta.json").read_text())
    assert set(meta["planted_topics"]) == planted
    utterances = pl.concat(
        [pl.read_ndjson(p) for p in sorted((root / "corpus").glob("sample-*/utterances.jsonl"))]
    )
    others = {t.topic for t in load_topics(TOPICS)} - planted
    assert _oracle_accuracy(root, utterances, topics=planted) >= 0.8
    assert _oracle_accuracy(root, utterances, topics=others) <= 0.62
    with pytest.raises(ConfigError, match="'Curling' is not a topic of topics.file"):
        _generate(tmp_path / "bad", planted_topics=["Curling"])
    with pytest.raises(ConfigError, match="needs synth.plant_group_difference: true"):
        _generate(tmp_path / "off", planted_topics=["Soccer"], plant_group_difference=False)


def test_default_meta_lists_every_topic_as_planted(sample):
    meta = json.loads((sample / "synth_meta.json").read_text())
    assert meta["planted_topics"] == [t.topic for t in load_topics(TOPICS)]


def test_pushshift_format_ingests_to_the_same_posts(tmp_path):
    kwargs = dict(
        n_general_users=400,
        members_per_demographic=25,
        topic_posts_per_pair=20,
        n_general_subreddits=60,
        shards=1,
    )
    ck = _generate(tmp_path / "ck", **kwargs)
    ps = _generate(tmp_path / "ps", format="pushshift", compress=True, **kwargs)
    assert sorted(p.name for p in (ps / "corpus").iterdir()) == [
        "RC_sample-0.ndjson.zst",
        "RS_sample-0.ndjson.zst",
    ]
    ingest_shard(ck / "corpus" / "sample-0", tmp_path / "ck.parquet", tmp_path / "ck.json", INGEST)
    parts = []
    for name in ("RS_sample-0", "RC_sample-0"):
        ingest_shard(
            ps / "corpus" / f"{name}.ndjson.zst",
            tmp_path / f"{name}.parquet",
            tmp_path / f"{name}.json",
            INGEST,
        )
        parts.append(pl.read_parquet(tmp_path / f"{name}.parquet"))
    a = pl.read_parquet(tmp_path / "ck.parquet").sort("post_id")
    b = pl.concat(parts).sort("post_id")
    assert a.height > 1000
    assert a.equals(b)


def test_synth_by_hand_with_a_config_file_equals_the_rule_settings_run(tmp_path):
    """`splits synth --config FILE` (by hand) reads the synth section and the seed of a config
    file, schema defaults filled, and writes the very files of the `--settings` run the rule
    makes from the same config; another seed in the file gives other files."""
    from splits.cli import main as splits_main
    from splits.config.schema import validate_config
    from splits.config.settings import settings_json

    chosen = {"seed": 11, "synth": {"posts": 2000, "shards": 1, "format": "pushshift"}}
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(chosen))  # JSON is YAML
    common = ["--demographics", str(DEMOGRAPHICS), "--topics", str(TOPICS)]

    def run(name: str, *source: str) -> dict[str, bytes]:
        root = tmp_path / name
        argv = ["synth", *common, "--out", str(root / "corpus"), "--truth-dir", str(root)]
        assert splits_main([*argv, *source]) == 0
        return _files(root)

    by_hand = run("hand", "--config", str(config))
    rule = run("rule", "--settings", settings_json(validate_config(chosen), SynthSettings))
    assert by_hand.keys() == rule.keys()
    assert "corpus/RC_sample-0.ndjson" in by_hand
    assert all(by_hand[name] == rule[name] for name in rule)
    meta = json.loads(by_hand["synth_meta.json"])
    assert meta["parameters"]["seed"] == 11 and meta["parameters"]["format"] == "pushshift"
    assert meta["n_posts"] < 15_000  # synth.posts scaled the corpus down (default ~52,000)
    config.write_text(json.dumps({**chosen, "seed": 12}))
    other = run("other", "--config", str(config))
    assert other["corpus/RC_sample-0.ndjson"] != by_hand["corpus/RC_sample-0.ndjson"]
