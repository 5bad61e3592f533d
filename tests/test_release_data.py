"""The authors' Hugging Face dataset (``ecaplan/splits``) from a local copy: a small fixture with
exactly the release's configs and fields (DETAILS.md), real Reddit texts, written as a
``save_to_disk`` folder and as Parquet / JSON Lines files; mapped onto the pipeline's tables with
usernames hashed, then run through the lift and the evaluation's sampling."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pandas as pd
import polars as pl
import pytest
from splits.cli import main
from splits.config.definitions import load_topics
from splits.config.schema import validate_config
from splits.config.settings import settings_json
from splits.errors import InputError
from splits.privacy import hash_author
from splits.release_data import load as rd
from splits.release_data.settings import ReleaseDataSettings

SALT = "test-salt"
#: the release_data settings of the default config (what the rule passes as --settings)
RELEASE_SETTINGS = settings_json(validate_config({}), ReleaseDataSettings)
GROUPS = ["black", "jewish", "teacher"]


@pytest.fixture(scope="module")
def release_copy(reference_dir, tmp_path_factory):
    """Three configs over 600 real Dreaddit texts; topics from the release's topics.json."""
    root = tmp_path_factory.mktemp("ecaplan_splits")
    texts = pd.read_csv(reference_dir / "realdata" / "dreaddit" / "dreaddit-train.csv")["text"]
    texts = texts.astype(str).tolist()[:600]
    topics = load_topics(reference_dir / "splits-upstream" / "topics.json")[:4]
    rng = np.random.default_rng(0)
    group_index = rng.integers(0, 3, size=600)
    group = [GROUPS[int(i)] for i in group_index]
    # each group has its own 15 users; user 0 of each group also posts under the next group (a
    # dual member, as an author high in two groups' group-ness is in the release)
    user = [f"reddit_user_{int(g) * 15 + int(rng.integers(0, 15))}" for g in group_index]
    for i in range(0, 600, 50):
        user[i] = f"reddit_user_{((int(group_index[i]) + 2) % 3) * 15}"
    ms = (1_500_000_000_000 + rng.integers(0, 10**10, size=600)).tolist()
    subreddit = [str(s) for s in rng.choice(["ptsd", "relationships", "anxiety"], size=600)]
    v1 = {
        "id": [f"t3_{i:05d}" for i in range(600)][::-1],  # not in id order
        "user": user,
        "timestamp": ms,
        "text": texts,
        "demographic": group,
        "subreddit": subreddit,
    }
    v2 = {**v1, "metric_percentile": rng.uniform(0, 100, size=600).round(2).tolist()}
    v3 = {
        # rows not in id order: the table keeps the released rows' order (release mode indexes
        # a pool in it)
        "id": [f"t1_{i:05d}" for i in np.random.default_rng(1).permutation(600)],
        "description": [topics[i % 4].topic for i in range(600)],
        "demographic": group,
        "content": texts,
        "metadata": [
            {
                "timestamp": ms[i],
                "score": int(rng.integers(-5, 50)),
                "subreddit": subreddit[i],
                "user": user[i],
            }
            for i in range(600)
        ],
        "score": rng.uniform(1, 30, size=600).round(3).tolist(),
    }
    copies = {}
    for name, columns in ((rd.V1, v1), (rd.V2, v2), (rd.V3, v3)):
        data = datasets.Dataset.from_dict(columns)
        data.save_to_disk(str(root / "disk" / name))
        (root / "files" / name).mkdir(parents=True)
        data.to_parquet(str(root / "files" / name / "train-00000.parquet"))
        (root / "jsonl" / name).mkdir(parents=True)
        data.to_json(str(root / "jsonl" / name / "train.jsonl"))
        copies[name] = columns
    return root, copies, topics


def test_v3_topic_posts_from_saved_and_file_copies(release_copy, tmp_path):
    root, copies, topics = release_copy
    categories = {t.topic: t.category for t in topics}
    wanted = [topics[0].topic, topics[2].topic]
    frames = []
    for source, batch in ((root / "disk", 1000), (root / "files", 37), (root / "jsonl", 64)):
        out = tmp_path / f"{source.name}.parquet"
        counts = rd.topic_posts(source, out, SALT, ["black", "jewish"], wanted, categories, batch)
        frames.append(pl.read_parquet(out))
        assert counts["read"] == 600
    first = frames[0]
    for other in frames[1:]:  # streaming in any batch size, from any copy: the same table
        assert other.equals(first)
    assert first.columns == list(rd.TOPIC_POSTS_SCHEMA)
    v3 = pd.DataFrame(copies[rd.V3])
    expected = v3[v3.demographic.isin(["black", "jewish"]) & v3.description.isin(wanted)]
    assert first.height == len(expected) > 50
    assert first["post_id"].to_list() == expected.id.tolist()  # the released rows' order
    row = first.filter(pl.col("post_id") == expected.id.iloc[0]).row(0, named=True)
    source_row = expected.iloc[0]
    assert row["text"] == source_row.content and row["topic"] == source_row.description
    assert row["author"] == hash_author(source_row.metadata["user"], SALT)
    assert row["subreddit"] == source_row.metadata["subreddit"]
    assert row["category"] == categories[source_row.description]
    assert row["score"] == source_row.score and row["norm_score"] is None
    # ranks: by the release's score within (demographic, topic), from 1
    for (_, _), part in first.group_by(["demographic", "topic"]):
        part = part.sort("rank")
        assert part["rank"].to_list() == list(range(1, part.height + 1))
        assert part["score"].is_sorted(descending=True)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("*.parquet"))
    assert b"reddit_user_" not in raw  # no username reaches the file


def test_v2_group_posts_with_percentile_cut(release_copy, tmp_path):
    root, copies, _ = release_copy
    counts = rd.demographic_posts(
        root / "files", rd.V2, tmp_path, SALT, None, min_percentile=75.0, batch_rows=50
    )
    v2 = pd.DataFrame(copies[rd.V2])
    for group in GROUPS:
        posts = pl.read_parquet(tmp_path / group / "posts.parquet")
        expected = v2[(v2.demographic == group) & (v2.metric_percentile >= 75.0)]
        assert posts.height == len(expected) == counts[f"kept:{group}"]
        assert posts["post_id"].is_sorted()  # what the topic splits read
        assert (posts["percentile"] >= 75.0).all()
        assert set(posts.columns) >= {"post_id", "author", "subreddit", "text", "percentile"}
        first = expected.sort_values("id").iloc[0]
        row = posts.row(0, named=True)
        assert row["post_id"] == first.id and row["created_utc"] == first.timestamp // 1000
        assert row["author"] == hash_author(first.user, SALT)
    assert counts["below_percentile"] == int((v2.metric_percentile < 75.0).sum())


def test_v1_has_no_percentile_cut(release_copy, tmp_path):
    root, _, _ = release_copy
    with pytest.raises(Exception, match="only high_groupness_user_posts"):
        rd.demographic_posts(root / "disk", rd.V1, tmp_path, SALT, None, min_percentile=50.0)
    counts = rd.demographic_posts(root / "disk", rd.V1, tmp_path, SALT, ["teacher"])
    assert list(p.name for p in tmp_path.iterdir()) == ["teacher"]
    assert counts["kept:teacher"] == pl.read_parquet(tmp_path / "teacher" / "posts.parquet").height


def test_missing_field_is_one_line_error(tmp_path):
    data = datasets.Dataset.from_dict({"id": ["a"], "description": ["t"], "content": ["x"]})
    data.save_to_disk(str(tmp_path / "copy"))
    with pytest.raises(InputError, match="missing field"):
        rd.topic_posts(tmp_path / "copy", tmp_path / "out.parquet", SALT, None, None)


def test_lift_and_evaluation_sampling_run_on_release_posts(release_copy, tmp_path, monkeypatch):
    """`splits release-data topic-posts`, then the lift job and the evaluation's sampling read
    the table as they read the topic splits."""
    root, _, topics = release_copy
    monkeypatch.setenv("SPLITS_SALT", SALT)
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"Cat": {t.topic: list(t.keywords) for t in topics}}))
    out = tmp_path / "topic_posts.parquet"
    assert (
        main(
            [
                "release-data",
                "topic-posts",
                "--settings",
                RELEASE_SETTINGS,
                "--dataset",
                str(root / "disk"),
                "--topics-file",
                str(topics_file),
                "--out",
                str(out),
                "--report",
                str(tmp_path / "r.json"),
            ]
        )
        == 0
    )
    table = pl.read_parquet(out)
    assert table["category"].unique().to_list() == ["Cat"]

    from dataclasses import asdict

    from splits.config.settings import schema_defaults
    from splits.hypotheses.lexicon import Hypothesis, hypotheses_frame
    from splits.hypotheses.settings import LiftSettings

    hypotheses_frame(
        [
            Hypothesis(
                "h", topics[0].topic, "black", "jewish", "black", ("i feel", "anxiety"), "user"
            )
        ]
    ).write_parquet(tmp_path / "set.parquet")
    assert (
        main(
            [
                "hypotheses",
                "lift",
                "--set",
                str(tmp_path / "set.parquet"),
                "--topic-posts",
                str(out),
                "--settings",
                json.dumps(asdict(schema_defaults(LiftSettings, k_fractions=(0.1, 0.25)))),
                "--out",
                str(tmp_path / "lift.parquet"),
                "--report",
                str(tmp_path / "lift.json"),
            ]
        )
        == 0
    )
    lift = pl.read_parquet(tmp_path / "lift.parquet")
    pool = table.filter(
        (pl.col("topic") == topics[0].topic) & pl.col("demographic").is_in(["black", "jewish"])
    )
    assert lift.height == 2 and lift["list_size"].to_list() == [pool.height] * 2

    assert (
        main(
            [
                "sample",
                "--topic-posts",
                str(out),
                "--settings",
                json.dumps({"k": 4, "seed": 1}),
                "--members-from-topic-posts",
                "--out",
                str(tmp_path / "quadruplets.parquet"),
            ]
        )
        == 0
    )
    quadruplets = pl.read_parquet(tmp_path / "quadruplets.parquet")
    assert quadruplets.height > 0
    # an author released under both groups of a pair is in none of the pair's rows
    groups_of = table.group_by("author").agg(pl.col("demographic").unique())
    groups_of = {r["author"]: set(r["demographic"]) for r in groups_of.iter_rows(named=True)}
    author_of = dict(zip(table["post_id"], table["author"], strict=True))
    assert any(len(g) > 1 for g in groups_of.values())
    for row in quadruplets.iter_rows(named=True):
        pair = {row["demographic_A"], row["demographic_B"]}
        for post in row["example_post_ids"] + row["sample_A_ids"] + row["sample_B_ids"]:
            assert not pair <= groups_of[author_of[post]], (post, pair)


def test_release_data_replaces_upstream_targets():
    """With release_data.path the default target starts from the released topic posts: no
    ingest, graph, demographics or topic-splits output is asked for."""
    from splits.config.schema import validate_config
    from splits.pipeline.targets import final_targets

    config = validate_config({"release_data": {"path": "copy"}})
    targets = final_targets(config, {"topics": [], "envent": []})
    outdir = config["outdir"]
    assert f"{outdir}/release_data/topic_posts.parquet" in targets
    assert not [t for t in targets if t.startswith((f"{outdir}/posts/", f"{outdir}/topics/"))]
    default = final_targets(validate_config({}), {"topics": [], "envent": []})
    assert f"{outdir}/topics/topic_posts.parquet" in default


def test_import_health_names_development_salt_and_unknown_topics(
    release_copy, tmp_path, monkeypatch
):
    """Without a salt, and with a topic list that lacks the released topics, the import says
    so in its health file (one finding each, with what to change)."""
    from splits.health import read_findings

    root, _, _ = release_copy
    monkeypatch.delenv("SPLITS_SALT", raising=False)
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"C": {"Something else": ["x"]}}))
    health = tmp_path / "health.json"
    assert (
        main(
            [
                "release-data",
                "topic-posts",
                "--settings",
                RELEASE_SETTINGS,
                "--dataset",
                str(root / "disk"),
                "--topics-file",
                str(topics_file),
                "--out",
                str(tmp_path / "t.parquet"),
                "--health",
                str(health),
            ]
        )
        == 0
    )
    codes = sorted(f.code for f in read_findings([health]))
    assert codes == ["development_salt", "topics_not_in_topic_list"]
    monkeypatch.setenv("SPLITS_SALT", SALT)
    assert (
        main(
            [
                "release-data",
                "topic-posts",
                "--settings",
                RELEASE_SETTINGS,
                "--dataset",
                str(root / "disk"),
                "--out",
                str(tmp_path / "t.parquet"),
                "--health",
                str(health),
            ]
        )
        == 0
    )
    assert read_findings([health]) == []


def test_topic_posts_by_hand_with_config_equals_settings_run(release_copy, tmp_path, monkeypatch):
    """`splits release-data topic-posts --config FILE` reads release_data and export.salt_env
    from a config file (schema defaults filled) exactly as the rule's --settings value does."""
    import yaml

    root, _, topics = release_copy
    monkeypatch.setenv("OTHER_SALT", SALT)
    config = {
        "release_data": {"demographics": ["black", "teacher"], "topics": [topics[1].topic]},
        "export": {"salt_env": "OTHER_SALT"},
    }
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    settings = settings_json(validate_config(config), ReleaseDataSettings)
    outs = {}
    for name, source in (
        ("config", ["--config", str(config_file)]),
        ("json", ["--settings", settings]),
    ):
        outs[name] = tmp_path / f"{name}.parquet"
        argv = ["release-data", "topic-posts", "--dataset", str(root / "disk")]
        assert main([*argv, *source, "--out", str(outs[name])]) == 0
    by_hand, by_rule = pl.read_parquet(outs["config"]), pl.read_parquet(outs["json"])
    assert by_hand.height > 0 and by_hand.equals(by_rule)
    assert set(by_hand["demographic"]) == {"black", "teacher"}
    assert set(by_hand["topic"]) == {topics[1].topic}
    # the salt came from OTHER_SALT (export.salt_env), not the default SPLITS_SALT
    assert by_hand["author"].is_in([hash_author(f"reddit_user_{i}", SALT) for i in range(45)]).all()
