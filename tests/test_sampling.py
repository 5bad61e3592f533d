"""Quadruplet sampling (docs/method.md §2.7): property-based tests with hypothesis and the validator."""

from __future__ import annotations

import argparse
import json
from collections import Counter

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.sampling import draw
from splits.sampling.cli import configure_sample, run_sample
from splits.sampling.diagnostics import dual_membership, overlap_findings
from splits.sampling.draw import RELEASE_COLUMNS
from splits.sampling.pools import group_members, split_pools
from splits.sampling.settings import SampleSettings
from splits.sampling.validate import validate_quadruplets


def sample_quadruplets(topic_posts, k, seed, **kwargs):
    """The draw with sampling.k = k and seed = seed (the schema's other settings)."""
    settings = schema_defaults(SampleSettings, k=k, seed=seed)
    return draw.sample_quadruplets(topic_posts, settings, **kwargs)


def settings_args(k: int, seed: int) -> list[str]:
    """``--settings`` of ``splits sample`` (what the rule passes)."""
    return ["--settings", json.dumps({"k": k, "seed": seed})]


def topic_posts_frame(
    pool_sizes: dict[tuple[str, str], int], shared: dict[tuple[str, str, str], int] | None = None
):
    """Topic posts with given pool sizes per (topic, demographic); ``shared[(topic, a, b)]`` extra
    posts appear in both a's and b's pools."""
    rows = []
    for (topic, key), n in pool_sizes.items():
        for i in range(n):
            pid = f"{topic}-{key}-{i}"
            rows.append((pid, f"text of {pid}", key, f"cat-{topic}", topic))
    for (topic, a, b), n in (shared or {}).items():
        for i in range(n):
            pid = f"{topic}-{a}{b}-shared-{i}"
            rows += [
                (pid, f"text of {pid}", a, f"cat-{topic}", topic),
                (pid, f"text of {pid}", b, f"cat-{topic}", topic),
            ]
    return pl.DataFrame(
        rows,
        schema={c: pl.String for c in ["post_id", "text", "demographic", "category", "topic"]},
        orient="row",
    ).with_columns(pl.lit("someone").alias("author"))


pools_strategy = st.dictionaries(
    keys=st.tuples(
        st.sampled_from(["t1", "t2"]), st.sampled_from(["black", "catholic", "jewish", "teacher"])
    ),
    values=st.integers(min_value=0, max_value=45),
    min_size=2,
    max_size=8,
)
shared_strategy = st.dictionaries(
    keys=st.sampled_from(
        [("t1", "black", "catholic"), ("t2", "jewish", "teacher"), ("t1", "catholic", "teacher")]
    ),
    values=st.integers(min_value=0, max_value=8),
    max_size=2,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pools=pools_strategy,
    shared=shared_strategy,
    k=st.sampled_from([2, 4, 8, 16]),
    seed=st.integers(0, 2**40),
)
def test_sampling_properties(pools, shared, k, seed):
    topic_posts = topic_posts_frame(pools, shared)
    quads = sample_quadruplets(topic_posts, k, seed)
    assert validate_quadruplets(quads, topic_posts, k) == []
    assert quads.columns[: len(RELEASE_COLUMNS)] == RELEASE_COLUMNS
    pool = {}
    for topic, key, pid in topic_posts.select("topic", "demographic", "post_id").iter_rows():
        pool.setdefault((topic, key), set()).add(pid)
    need = k // 2 + 3
    keys = sorted(set(topic_posts["demographic"]))
    counts = Counter(
        zip(quads["description"], quads["demographic_A"], quads["demographic_B"], strict=True)
    )
    for topic in set(topic_posts["topic"]):
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                both = pool.get((topic, a), set()) & pool.get((topic, b), set())
                only_a = pool.get((topic, a), set()) - both
                only_b = pool.get((topic, b), set()) - both
                rows = quads.filter(
                    (pl.col("description") == topic)
                    & (pl.col("demographic_A") == a)
                    & (pl.col("demographic_B") == b)
                )
                ids = [
                    p
                    for r in rows.iter_rows(named=True)
                    for p in r["example_post_ids"] + r["sample_A_ids"] + r["sample_B_ids"]
                ]
                assert len(ids) == len(set(ids)), "a post drawn twice within one split"
                assert not set(ids) & both, "a post of both pools was drawn"
                for r in rows.iter_rows(named=True):
                    assert Counter(r["example_labels"]) == {"A": k // 2, "B": k // 2}
                    for pid, label in zip(r["example_post_ids"], r["example_labels"], strict=True):
                        assert pid in (only_a if label == "A" else only_b)
                    assert set(r["sample_A_ids"]) <= only_a and set(r["sample_B_ids"]) <= only_b
                    assert r["example_posts"] == [f"text of {p}" for p in r["example_post_ids"]]
                # stops exactly when a pool runs short: rows = min(|A|, |B|) // (k/2 + 3)
                expected = min(len(only_a), len(only_b)) // need
                assert counts.get((topic, a, b), 0) == expected
                assert min(len(only_a), len(only_b)) - expected * need < need


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**40), k=st.sampled_from([4, 16, 42]))
def test_deterministic_by_seed(seed, k):
    topic_posts = topic_posts_frame(
        {("t", "a"): 120, ("t", "b"): 100, ("u", "a"): 60, ("u", "c"): 70}
    )
    first = sample_quadruplets(topic_posts, k, seed)
    again = sample_quadruplets(
        topic_posts.sample(fraction=1.0, shuffle=True, seed=seed % 1000), k, seed
    )
    assert first.equals(sample_quadruplets(topic_posts, k, seed))
    # the rows do not depend on the input order (only the topic order follows first appearance)
    assert first.sort("quadruplet_id").equals(again.sort("quadruplet_id"))
    other = sample_quadruplets(topic_posts, k, seed + 1)
    assert not first.equals(other)


def test_adding_a_topic_leaves_other_splits_unchanged():
    base = {("t", "a"): 80, ("t", "b"): 80}
    one = sample_quadruplets(topic_posts_frame(base), 8, 7)
    two = sample_quadruplets(topic_posts_frame({**base, ("u", "a"): 40, ("u", "b"): 40}), 8, 7)
    assert two.filter(pl.col("description") == "t").equals(one)


def test_switched_is_a_fair_coin_and_calibration_positions_are_shuffled():
    topic_posts = topic_posts_frame(
        {(f"t{i}", key): 1300 for i in range(4) for key in ("a", "b", "c")}
    )
    quads = sample_quadruplets(topic_posts, 4, 12345)
    assert len(quads) == 4 * 3 * (1300 // 5)
    assert abs(quads["switched"].mean() - 0.5) < 0.05
    first_is_a = quads["example_labels"].list.first() == "A"
    assert abs(first_is_a.mean() - 0.5) < 0.05


def test_validator_detects_broken_invariants():
    topic_posts = topic_posts_frame(
        {("t", "a"): 40, ("t", "b"): 33, ("u", "a"): 20, ("u", "b"): 20}
    )
    quads = sample_quadruplets(topic_posts, 8, 3)
    assert validate_quadruplets(quads, topic_posts, 8) == []
    broken = {
        "duplicate": pl.concat([quads, quads.head(1)]),
        "unbalanced": quads.with_columns(pl.col("example_labels").list.eval(pl.lit("A"))),
        "short": quads.with_columns(
            pl.col("sample_A").list.head(2), pl.col("sample_A_ids").list.head(2)
        ),
        "stopped early": quads.tail(len(quads) - 1),
        "wrong group": quads.with_columns(
            pl.col("sample_A_ids").alias("sample_B_ids"), pl.col("sample_A").alias("sample_B")
        ),
        "unordered": quads.with_columns(
            pl.col("demographic_B").alias("demographic_A"),
            pl.col("demographic_A").alias("demographic_B"),
        ),
        "text": quads.with_columns(pl.col("sample_B").list.eval(pl.element() + "!")),
    }
    for name, frame in broken.items():
        assert validate_quadruplets(frame, topic_posts, 8), name


def test_bad_k_and_bad_input_are_clear_errors(tmp_path):
    topic_posts = topic_posts_frame({("t", "a"): 10, ("t", "b"): 10})
    with pytest.raises(ConfigError, match="sampling.k"):
        sample_quadruplets(topic_posts, 5, 0)
    path = tmp_path / "tp.parquet"
    topic_posts.drop("category").write_parquet(path)
    parser = argparse.ArgumentParser()
    configure_sample(parser)
    args = parser.parse_args(
        ["--topic-posts", str(path), "--out", str(tmp_path / "q.parquet"), *settings_args(4, 1)]
    )
    with pytest.raises(ConfigError, match="category"):
        run_sample(args)


def test_cli_writes_quadruplets_and_summary(tmp_path):
    topic_posts = topic_posts_frame({("t", "a"): 50, ("t", "b"): 50, ("t", "c"): 12})
    path = tmp_path / "tp.parquet"
    topic_posts.write_parquet(path)
    from splits.cli import main
    from splits.io import read_json

    out = tmp_path / "q.parquet"
    assert (
        main(
            [
                "sample",
                "--topic-posts",
                str(path),
                *settings_args(4, 9),
                "--out",
                str(out),
                "--summary",
                str(tmp_path / "s.json"),
            ]
        )
        == 0
    )
    quads = pl.read_parquet(out)
    summary = read_json(tmp_path / "s.json")
    assert summary["rows"] == len(quads) == 10 + 2 + 2
    assert summary["rows_per_pair"] == {"a/b": 10, "a/c": 2, "b/c": 2}
    assert np.isclose(summary["switched_share"], quads["switched"].mean())


def _run_sample(tmp_path, topic_posts, k, capsys=None):
    from splits.cli import main

    path = tmp_path / "tp.parquet"
    topic_posts.write_parquet(path)
    argv = ["sample", "--topic-posts", str(path), *settings_args(k, 3)]
    argv += ["--out", str(tmp_path / "q.parquet"), "--summary", str(tmp_path / "s.json")]
    return main(argv)


def test_k_too_large_for_every_pool_is_one_error_naming_k_and_pools(tmp_path, capsys):
    """No split can hold one row: nothing is written and one line says why (k, pool sizes)."""
    topic_posts = topic_posts_frame(
        {("t1", "a"): 30, ("t1", "b"): 25, ("t2", "a"): 12, ("t2", "b"): 40}
    )
    assert _run_sample(tmp_path, topic_posts, 400) != 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "sampling.k" in err[0] and "400" in err[0] and "203" in err[0]
    # the largest pair of disjoint pools is named with its sizes
    assert "'t1'" in err[0] and "30" in err[0] and "25" in err[0]
    assert not (tmp_path / "q.parquet").exists() and not (tmp_path / "s.json").exists()


def test_identical_groups_leave_no_disjoint_posts_and_say_so(tmp_path, capsys):
    """Two groups whose pools are the same posts (one seed subreddit for both): every post is
    in both pools, so every split is empty; the error gives the shared count."""
    topic_posts = topic_posts_frame({}, shared={("t1", "a", "b"): 60})
    assert _run_sample(tmp_path, topic_posts, 4) != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "in both pools" in err and "60" in err


def test_empty_pairs_are_warned_with_their_counts(tmp_path, caplog):
    topic_posts = topic_posts_frame(
        {("t", "a"): 50, ("t", "b"): 50, ("t", "c"): 4, ("u", "a"): 9, ("u", "b"): 9}
    )
    with caplog.at_level("WARNING", logger="splits.sampling.diagnostics"):
        assert _run_sample(tmp_path, topic_posts, 4) == 0
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelname == "WARNING" and r.getMessage().startswith("pair ")
    ]
    # a/c and b/c have no row on any topic; a/b has rows (on t and u)
    assert len(warnings) == 2
    assert any("a/c" in w and "50" in w and " 4 " in w for w in warnings)
    assert any("b/c" in w for w in warnings)
    from splits.io import read_json

    summary = read_json(tmp_path / "s.json")
    assert summary["empty_pairs"] == ["a/c", "b/c"]
    assert summary["empty_splits"] == 4  # (t, a, c), (t, b, c), (u, a, c), (u, b, c)


# --------------------------------------------------------------------------- dual membership


def _dual_corpus(n_a=60, n_b=60, n_dual=40, dual_posts=2):
    """Groups a and b on topic t: 30 a-only and 30 b-only authors, and ``n_dual`` authors at
    or above both thresholds whose posts were found in ONE pool only (a's for even, b's for
    odd authors), as when the other group's truncated topic pool missed them. Returns the topic
    posts, the users table and the thresholds (percentile 50)."""
    rows, users = [], []
    for key, n in (("a", n_a), ("b", n_b)):
        for i in range(n):
            author = f"{key}-only-{i % 30}"
            rows.append((f"{key}-{i}", f"text {key} {i}", key, "cat", "t", author))
    for j in range(n_dual):
        key = "a" if j % 2 == 0 else "b"
        for p in range(dual_posts):
            pid = f"dual-{j}-{p}"
            rows.append((pid, f"text {pid}", key, "cat", "t", f"dual-{j}"))
    for key in ("a", "b"):
        users += [(key, f"{key}-only-{i}", 90.0) for i in range(30)]
        users += [(key, f"dual-{j}", 80.0) for j in range(n_dual)]
        users += [(key, f"{key}-below-{i}", 10.0) for i in range(5)]  # not members
    topic_posts = pl.DataFrame(
        rows,
        schema=["post_id", "text", "demographic", "category", "topic", "author"],
        orient="row",
    )
    users_frame = pl.DataFrame(users, schema=["demographic", "author", "percentile"], orient="row")
    return topic_posts, users_frame, {"a": 50.0, "b": 50.0}


def test_posts_of_authors_above_both_thresholds_are_left_out():
    """docs/method.md §2.7: a post whose author is at or above both groups' thresholds is left
    out of the pair, even when only one group's (truncated) pool found it."""
    topic_posts, users, thresholds = _dual_corpus()
    members = group_members(users, thresholds)
    assert members["a"] == {f"a-only-{i}" for i in range(30)} | {f"dual-{j}" for j in range(40)}
    quads = sample_quadruplets(topic_posts, 4, 7, members=members)
    assert validate_quadruplets(quads, topic_posts, 4, members) == []
    drawn = set()
    for column in ("example_post_ids", "sample_A_ids", "sample_B_ids"):
        drawn |= {pid for ids in quads[column] for pid in ids}
    assert drawn and not any(pid.startswith("dual-") for pid in drawn)
    # pools after the rule: 60 posts each, so 60 // (2 + 3) rows
    assert quads.height == 12
    # the validator catches a dataset sampled without the rule
    unfiltered = sample_quadruplets(topic_posts, 4, 7)
    assert any(
        "both groups' thresholds" in p
        for p in validate_quadruplets(unfiltered, topic_posts, 4, members)
    )
    pools = split_pools(topic_posts, members=members)
    row = pools.row(0, named=True)
    assert (row["pool_A"], row["pool_B"], row["left_out"]) == (60, 60, 80)


def test_cli_counts_dual_members_and_warns_when_groups_overlap(tmp_path):
    """The summary counts dual members and left-out posts per pair; 40 of 70 members shared
    (57%) is more than half: one groups_overlap finding naming both groups and the share."""
    from splits.cli import main
    from splits.io import read_json

    topic_posts, users, thresholds = _dual_corpus()
    topic_posts.write_parquet(tmp_path / "tp.parquet")
    files = []
    for key in ("a", "b"):
        path = tmp_path / key / "users.parquet"
        path.parent.mkdir()
        users.filter(pl.col("demographic") == key).write_parquet(path)
        files.append(str(path))
    (tmp_path / "thresholds.json").write_text('{"a": 50.0, "b": 50.0, "breakpoint_support": {}}')
    argv = ["sample", "--topic-posts", str(tmp_path / "tp.parquet"), *settings_args(4, 3)]
    argv += ["--out", str(tmp_path / "q.parquet"), "--summary", str(tmp_path / "s.json")]
    argv += ["--users", *files, "--thresholds", str(tmp_path / "thresholds.json")]
    argv += ["--health", str(tmp_path / "health" / "sampling.json")]
    assert main(argv) == 0
    dual = read_json(tmp_path / "s.json")["dual_membership"]["a/b"]
    assert dual == {
        "members_A": 70,
        "members_B": 70,
        "dual_members": 40,
        "dual_share_of_A": round(40 / 70, 4),
        "dual_share_of_B": round(40 / 70, 4),
        "posts_left_out": 80,
    }
    findings = read_json(tmp_path / "health" / "sampling.json")
    assert [f["code"] for f in findings] == ["groups_overlap"]
    assert "a" in findings[0]["subject"] and "b" in findings[0]["subject"]
    assert "57%" in findings[0]["message"]
    # below half: no finding (10 of 40 shared)
    topic_posts, users, thresholds = _dual_corpus(n_dual=10)
    members = group_members(users, thresholds)
    pools = split_pools(topic_posts, members=members)
    assert overlap_findings(dual_membership(members, pools, ["a", "b"])) == []
