"""Group-ness stage (docs/method.md §2.4) on hand-made posts, against plain-Python oracles."""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections import Counter, defaultdict

import polars as pl
import pytest
import yaml
from splits.config.definitions import Demographic, load_demographics
from splits.config.settings import schema_defaults
from splits.demographics.d_posts import demographic_posts
from splits.demographics.groupness import (
    FORMULAS,
    build_users,
    groupness_column,
    read_bots,
)
from splits.demographics.settings import GroupnessSettings
from splits.errors import ConfigError


def settings(**overrides) -> GroupnessSettings:
    """The group-ness settings: the schema's defaults, some replaced."""
    return schema_defaults(GroupnessSettings, **overrides)


def settings_args(**overrides) -> list[str]:
    """``--settings`` of ``splits groupness`` (what the rule passes)."""
    return ["--settings", json.dumps(dataclasses.asdict(settings(**overrides)))]


SEEDS = ("SeedA", "seedb", "SeedC")


def make_posts(n_users: int = 150, seed: int = 1) -> pl.DataFrame:
    rng = random.Random(seed)
    subreddits = ["seeda", "seedb", "seedc", "general1", "general2", "tiny"]
    rows = []
    pid = 0
    for u in range(n_users):
        author = f"user{u:03d}"
        for _ in range(rng.randint(1, 30)):
            sub = rng.choices(subreddits, weights=[2, 1, 1, 6, 4, 1])[0]
            rows.append((f"p{pid:06d}", sub, author))
            pid += 1
    # a known bot and AutoModerator posting in a seed subreddit
    for author in ("helper_bot", "AutoModerator"):
        for _ in range(3):
            rows.append((f"p{pid:06d}", "seeda", author))
            pid += 1
    return pl.DataFrame(
        {
            "post_id": [r[0] for r in rows],
            "kind": ["comment"] * len(rows),
            "subreddit": [r[1] for r in rows],
            "author": [r[2] for r in rows],
            "created_utc": list(range(len(rows))),
            "text": [f"text {i}" for i in range(len(rows))],
            "score": [1] * len(rows),
            "conversation_id": [r[0] for r in rows],
            "reply_to": [None] * len(rows),
        },
        schema_overrides={"created_utc": pl.Int64, "score": pl.Int64, "reply_to": pl.String},
    )


def demographic(seeds=SEEDS) -> Demographic:
    return Demographic("demo", "Demo", tuple(seeds), ("I am demo",), ("I am not demo",))


def oracle(posts: pl.DataFrame, kept: set[str], seeds, bots, fraction):
    """Plain-Python U_d, filters, scores and percentiles."""
    seeds = {s.lower() for s in seeds}
    c: dict[str, Counter] = defaultdict(Counter)
    n_posts: Counter = Counter()
    for sub, author in posts.select("subreddit", "author").iter_rows():
        if sub in seeds:
            c[author][sub] += 1
    users = [a for a in c if a.lower() not in bots]
    for sub, author in posts.select("subreddit", "author").iter_rows():
        if sub in kept and author in c:
            n_posts[author] += 1
    n_top = math.floor(fraction * len(users))
    top = sorted(users, key=lambda a: (-n_posts[a], a))[:n_top]
    users = sorted(set(users) - set(top))
    scores = {}
    for a in users:
        counts = list(c[a].values())
        total = sum(counts)
        entropy = -sum((x / total) * math.log(x / total) for x in counts)
        scores[a] = {
            "sum_log": sum(math.log1p(x) for x in counts),
            "breadth_x_volume": len(counts) * math.log1p(total),
            "entropy": math.log1p(total) * math.exp(entropy),
            "n_posts": n_posts[a],
            "n_seed_posts": total,
            "n_seed_subreddits": len(counts),
        }
    return scores, set(top)


@pytest.mark.parametrize("formula", FORMULAS)
def test_scores_percentiles_and_filters_match_python_oracle(formula):
    posts = make_posts()
    kept = {"seeda", "seedb", "seedc", "general1", "general2"}
    bots = read_bots(None) | {"helper_bot"}
    result = build_users(
        posts.lazy(),
        sorted(kept),
        demographic(),
        bots,
        settings(groupness=formula, top_user_fraction=0.02),
    )
    expected, top = oracle(posts, kept, SEEDS, bots, 0.02)
    users = result.users
    assert sorted(users["author"].to_list()) == sorted(expected)
    assert len(top) == 2 and not top & set(users["author"])
    assert result.report["dropped_top_users"] == 2
    assert result.report["dropped_known_bots"] == 2  # helper_bot and AutoModerator
    values = {a: expected[a][formula] for a in expected}
    n = len(values)
    for row in users.iter_rows(named=True):
        exp = expected[row["author"]]
        for f in FORMULAS:
            assert row[groupness_column(f)] == pytest.approx(exp[f], abs=1e-8)
        assert row["groupness"] == pytest.approx(exp[formula], abs=1e-8)
        for key in ("n_posts", "n_seed_posts", "n_seed_subreddits"):
            assert row[key] == exp[key]
        smaller = sum(v < values[row["author"]] - 1e-8 for v in values.values())
        assert row["percentile"] == pytest.approx(100.0 * smaller / n)
    assert users["demographic"].unique().to_list() == ["demo"]
    assert users["percentile"].min() == 0.0 and users["percentile"].max() < 100.0


def test_demographic_posts_are_all_posts_of_users_in_kept_subreddits():
    posts = make_posts(60, seed=3)
    kept = ["seeda", "seedb", "general1"]  # seedc, general2 and tiny are not kept
    result = build_users(
        posts.lazy(),
        kept,
        demographic(),
        read_bots(None),
        settings(groupness="sum_log", top_user_fraction=0.0),
    )
    d_posts = demographic_posts(posts.lazy(), result.users, kept).collect()
    users = set(result.users["author"])
    expected = {
        pid
        for pid, sub, author in posts.select("post_id", "subreddit", "author").iter_rows()
        if author in users and sub in kept
    }
    assert set(d_posts["post_id"]) == expected
    assert d_posts.height == len(expected)
    assert {"groupness", "percentile", "text", "created_utc"} <= set(d_posts.columns)
    # seed posts in an unkept seed subreddit still count for group-ness, not for D_d
    assert result.report["seed_subreddits_not_kept"] == ["seedc"]
    by_user = d_posts.group_by("author").len()
    merged = result.users.join(by_user, on="author", how="left").with_columns(
        pl.col("len").fill_null(0)
    )
    assert (merged["len"] == merged["n_posts"]).all()


def test_seed_names_compare_case_insensitively_and_missing_seeds_are_reported():
    posts = make_posts(40, seed=5)
    result = build_users(
        posts.lazy(),
        ["seeda"],
        demographic(("SEEDA", "NoSuchSub")),
        read_bots(None),
        settings(groupness="sum_log"),
    )
    assert result.report["seed_subreddits_without_posts"] == ["nosuchsub"]
    assert result.users.height > 0
    with pytest.raises(ConfigError, match="none of its seed subreddits"):
        build_users(posts.lazy(), ["seeda"], demographic(("nothere",)), read_bots(None), settings())


def test_a_scanned_table_with_mixed_case_names_gives_what_the_lowercased_frame_gives(tmp_path):
    """The subreddit filters run on a Parquet scan (where the reader tests them on each column
    chunk's distinct names) exactly as on the lowercased posts in memory: the users table, its
    report and D_d, with seeds, kept names and posts in mixed case."""
    posts = make_posts(120, seed=7)
    spelled = posts.with_columns(
        pl.when(pl.int_range(pl.len()) % 3 == 0)
        .then(pl.col("subreddit").str.to_uppercase())
        .when(pl.int_range(pl.len()) % 3 == 1)
        .then(pl.col("subreddit").str.to_titlecase())
        .otherwise(pl.col("subreddit"))
    )
    assert spelled["subreddit"].n_unique() > posts["subreddit"].n_unique()
    path = tmp_path / "posts.parquet"
    spelled.write_parquet(path)
    kept = ["SeedA", "seedb", "GENERAL1", "general2"]
    args = (demographic(("SEEDA", "SeedB", "seedc", "NoSuchSub")), read_bots(None), settings())
    scanned = build_users(pl.scan_parquet(path), kept, *args)
    in_memory = build_users(posts.lazy(), [k.lower() for k in kept], *args)
    assert scanned.users.equals(in_memory.users) and scanned.users.height > 50
    assert scanned.report == in_memory.report
    assert scanned.report["seed_subreddits_without_posts"] == ["nosuchsub"]
    d_scanned = demographic_posts(pl.scan_parquet(path), scanned.users, kept).collect()
    d_memory = demographic_posts(posts.lazy(), in_memory.users, kept).collect()
    key = ["post_id"]
    assert d_scanned.drop("subreddit").sort(key).equals(d_memory.drop("subreddit").sort(key))
    assert d_scanned.height > 100


def test_bad_formula_and_fraction_are_config_errors():
    posts = make_posts(10)
    with pytest.raises(ConfigError, match="demographics.groupness"):
        build_users(
            posts.lazy(), ["seeda"], demographic(), read_bots(None), settings(groupness="nope")
        )
    with pytest.raises(ConfigError, match="top_user_fraction"):
        build_users(
            posts.lazy(),
            ["seeda"],
            demographic(),
            read_bots(None),
            settings(top_user_fraction=1.5),
        )


def test_bots_file(tmp_path):
    path = tmp_path / "bots.txt"
    path.write_text("# known bots\nRemindMeBot\n\nsome_bot  # comment\n")
    assert read_bots(path) >= {"remindmebot", "some_bot", "automoderator"}
    with pytest.raises(ConfigError, match="bots_file"):
        read_bots(tmp_path / "missing.txt")


def test_cli_writes_the_contract(tmp_path):
    from splits.cli import main

    posts = make_posts(80, seed=7)
    posts.write_parquet(tmp_path / "posts.parquet")
    pl.DataFrame(
        {
            "subreddit": ["seeda", "seedb", "seedc", "general1", "general2", "tiny"],
            "n_users": [1] * 6,
            "n_posts": [1] * 6,
            "kept": [True, True, True, True, True, False],
            "rank": list(range(1, 7)),
        }
    ).write_parquet(tmp_path / "subreddits.parquet")
    demo = tmp_path / "demo.yaml"
    demo.write_text(
        yaml.safe_dump(
            {
                "demographics": [
                    {
                        "key": "demo",
                        "seed_subreddits": list(SEEDS),
                        "self_id_phrases": ["I am demo"],
                        "anti_self_id_phrases": ["I am not demo"],
                    }
                ]
            }
        )
    )
    out = tmp_path / "out"
    args = [
        "groupness",
        "--posts",
        str(tmp_path / "posts.parquet"),
        "--subreddits",
        str(tmp_path / "subreddits.parquet"),
        "--demographics",
        str(demo),
        "--demographic",
        "demo",
        "--out-users",
        str(out / "users.parquet"),
        "--out-posts",
        str(out / "posts.parquet"),
        "--out-report",
        str(out / "report.json"),
        *settings_args(),
    ]
    assert main(args) == 0
    users = pl.read_parquet(out / "users.parquet")
    assert users.columns[:7] == [
        "author",
        "demographic",
        "groupness",
        "percentile",
        "n_posts",
        "n_seed_posts",
        "n_seed_subreddits",
    ]
    d_posts = pl.read_parquet(out / "posts.parquet")
    assert d_posts.columns == posts.columns + ["groupness", "percentile"]
    assert "tiny" not in set(d_posts["subreddit"])
    report = json.loads((out / "report.json").read_text())
    assert report["users"] == users.height and report["posts"] == d_posts.height
    first = (out / "users.parquet").read_bytes()
    assert main(args) == 0
    assert (out / "users.parquet").read_bytes() == first  # deterministic
    # a demographic that is not in the file is a one-line config error (exit 2)
    assert main(args[:8] + ["nope"] + args[9:]) == 2
    # by hand, a config file gives the same settings as the rule's --settings
    config = tmp_path / "config.yaml"
    config.write_text("demographics:\n  groupness: entropy\n  top_user_fraction: 0.05\n")
    rule = [*args[:-2], *settings_args(groupness="entropy", top_user_fraction=0.05)]
    assert main(rule) == 0
    by_rule = {name: (out / name).read_bytes() for name in ("users.parquet", "report.json")}
    assert main([*args[:-2], "--config", str(config)]) == 0
    assert {name: (out / name).read_bytes() for name in by_rule} == by_rule
    report = json.loads((out / "report.json").read_text())
    assert report["formula"] == "entropy" and report["top_user_fraction"] == 0.05


def test_release_json_and_paper_yaml_load_the_same_facts(reference_dir, repo_root):
    release = load_demographics(reference_dir / "splits-upstream" / "demographics.json")
    paper = load_demographics(repo_root / "config" / "demographics.yaml")
    assert [d.key for d in release] and {d.key for d in release} == {d.key for d in paper}
    by_key = {d.key: d for d in paper}
    counts = {"catholic": 29, "teacher": 12, "black": 19, "construction": 14}
    counts |= {"hindu_jain_sikh": 12, "jewish": 19}
    for d in release:
        mine = by_key[d.key]
        assert sorted(mine.seed_subreddits) == sorted(d.seed_subreddits)
        assert len(d.seed_subreddits) == counts[d.key]
        assert list(mine.self_id_phrases) == list(d.self_id_phrases)
        assert list(mine.anti_self_id_phrases) == list(d.anti_self_id_phrases)
        assert d.display_name == mine.display_name
    thresholds = {d.key: d.threshold for d in paper}
    assert thresholds == {
        "teacher": 75,
        "catholic": 75,
        "black": 75,
        "construction": 90,
        "jewish": 90,
        "hindu_jain_sikh": 80,
    }


def test_d_d_is_written_sorted_in_parts(tmp_path, monkeypatch):
    """D_d is sorted by post id while holding at most SORT_ROWS posts: the file equals an
    in-memory sort whatever the part size (one pass per part), and the CLI writes it so."""
    from splits.demographics import d_posts as d_posts_module
    from splits.io import write_sorted_parquet

    posts = make_posts(60, seed=3).sample(fraction=1.0, shuffle=True, seed=1)
    kept = ["seeda", "seedb", "general1"]
    users = build_users(
        posts.lazy(),
        kept,
        demographic(),
        read_bots(None),
        settings(groupness="sum_log", top_user_fraction=0.0),
    ).users
    d_posts = demographic_posts(posts.lazy(), users, kept)
    expected = d_posts.collect().sort("post_id")
    assert not d_posts.collect()["post_id"].is_sorted()  # the check below can fail
    for max_rows in (1, 7, expected.height - 1, expected.height, 10**6):
        path = tmp_path / f"d_{max_rows}.parquet"
        assert write_sorted_parquet(d_posts, "post_id", path, max_rows) == expected.height
        assert pl.read_parquet(path).equals(expected), max_rows
    monkeypatch.setattr(d_posts_module, "SORT_ROWS", 5)
    path = tmp_path / "cli.parquet"
    assert d_posts_module.write_demographic_posts(d_posts, path) == expected.height
    assert pl.read_parquet(path).equals(expected)


@pytest.mark.parametrize("from_scan", [True, False])
def test_d_d_parts_read_straight_from_the_posts_scan_or_from_a_copy_are_the_same(
    tmp_path, monkeypatch, from_scan
):
    """Given the posts' row count, D_d's parts are read straight from the posts scan where the
    cost model says so (no unsorted copy written), else from the copy: the same sorted file
    either way, at every part size."""
    from splits import io

    posts = make_posts(60, seed=4).sample(fraction=1.0, shuffle=True, seed=3)
    source = tmp_path / "posts.parquet"
    posts.write_parquet(source, row_group_size=50)
    scan = pl.scan_parquet(source)
    kept = ["seeda", "seedb", "general1"]
    users = build_users(
        scan, kept, demographic(), read_bots(None), settings(top_user_fraction=0.0)
    ).users
    d_posts = demographic_posts(scan, users, kept)
    expected = d_posts.collect().sort("post_id")
    assert not d_posts.collect()["post_id"].is_sorted()
    copies = []
    staged = io.temporary_beside
    monkeypatch.setattr(io, "_scan_passes_cheaper", lambda *args: from_scan)

    def beside(path, *suffix):
        if suffix == (io.STAGED_SUFFIX,):  # the unsorted copy (not a writer's .tmp file)
            copies.append(path)
        return staged(path, *suffix)

    monkeypatch.setattr(io, "temporary_beside", beside)
    rows = posts.height
    for max_rows in (1, 7, expected.height - 1, expected.height, 10**6):
        path = tmp_path / f"d_{max_rows}.parquet"
        written = io.write_sorted_parquet(d_posts, "post_id", path, max_rows, source_rows=rows)
        assert written == expected.height
        assert pl.read_parquet(path).equals(expected), max_rows
    assert bool(copies) != from_scan
    assert not list(tmp_path.glob("*.unsorted*"))


def test_the_parts_come_from_the_scan_where_it_is_in_key_order_or_cheaper_and_else_a_copy():
    """The choice at the sizes it was measured at: D_d of 3.0M rows from 9.6M posts in four
    parts straight from the scan where the rows arrive in ten sorted runs (ingest's shards of
    the generated corpus), from a copy where they are shuffled; one part of a shuffled source
    straight from the scan (the keys, read from it either way, leave one pass to make), two parts
    of a 60x larger shuffled source by a copy."""
    from splits.io import _scan_passes_cheaper, _sorted_runs

    assert _sorted_runs(pl.Series(["a", "b", "c", "b", "c", "a", "a"])) == 3
    assert _sorted_runs(pl.Series([], dtype=pl.String)) == 1
    assert _scan_passes_cheaper(3_041_651, 9_647_052, 1_000_000, runs=10)
    assert not _scan_passes_cheaper(3_041_651, 9_647_052, 1_000_000, runs=1_520_000)
    assert _scan_passes_cheaper(900_000, 89_000_000, 1_000_000, runs=450_000)
    assert not _scan_passes_cheaper(1_500_000, 89_000_000, 1_000_000, runs=750_000)


def test_every_demographics_d_d_from_one_read_equals_one_pass_each(tmp_path, monkeypatch):
    """The bucket job's writer of every demographic's D_d (one read and one sort of the
    bucket) writes the files the per-demographic writer does: sorted by post id, only kept
    subreddits (case-insensitive), a post in two demographics' files, a demographic without
    posts; and where the posts exceed SORT_ROWS it writes them one pass each, the same."""
    from splits.demographics import d_posts

    posts = make_posts(80, seed=7).sample(fraction=1.0, shuffle=True, seed=2)
    posts = posts.with_columns(
        pl.when(pl.col("subreddit") == "seedb")
        .then(pl.lit("SeedB"))
        .otherwise(pl.col("subreddit"))
        .alias("subreddit")
    )
    kept = ["seeda", "seedb", "general1"]
    authors = posts["author"].unique().sort()
    # overlapping demographics, one with no users
    users = [
        pl.DataFrame(
            {
                "author": authors.gather_every(step, offset),
                "groupness": [float(i) for i in range(len(authors.gather_every(step, offset)))],
                "percentile": [50.0] * len(authors.gather_every(step, offset)),
            }
        )
        for step, offset in ((2, 0), (3, 1), (5, 0))
    ]
    users.append(users[0].head(0))
    expected = [demographic_posts(posts.lazy(), u, kept).collect().sort("post_id") for u in users]
    assert not demographic_posts(posts.lazy(), users[0], kept).collect()["post_id"].is_sorted()
    assert set(expected[0]["post_id"]) & set(expected[1]["post_id"])  # a post in two files
    assert "SeedB" in expected[0]["subreddit"].to_list()
    for sort_rows in (10**6, 5):
        monkeypatch.setattr(d_posts, "SORT_ROWS", sort_rows)
        paths = [tmp_path / f"{sort_rows}_{i}.parquet" for i in range(len(users))]
        counts = d_posts.write_demographic_parts(posts.lazy(), users, kept, paths)
        assert counts == [e.height for e in expected]
        for path, want in zip(paths, expected, strict=True):
            assert pl.read_parquet(path).equals(want), (sort_rows, path)


def _college_posts() -> pl.DataFrame:
    """make_posts with the subreddits renamed after the issue's college corpus."""
    names = {"seeda": "emory", "seedb": "cornell", "seedc": "duke", "general1": "memory"}
    return make_posts(40, seed=5).with_columns(pl.col("subreddit").replace(names))


def test_misspelt_seed_subreddit_is_named_with_the_closest_real_names():
    """Issue 25: a seed spelt "Emroy" stops with one line naming it and the closest subreddit
    names of the posts (difflib, an independent ratio computed here too)."""
    import difflib

    posts = _college_posts()
    with pytest.raises(ConfigError) as err:
        build_users(posts.lazy(), ["emory"], demographic(("Emroy",)), read_bots(None), settings())
    line = str(err.value)
    assert "\n" not in line and "'emory'" in line and "none of its seed subreddits" in line
    assert "'Emroy' (closest: 'emory'" in line
    names = sorted(set(posts["subreddit"]))
    assert difflib.SequenceMatcher(None, "emroy", "emory").ratio() >= 0.6
    expected = difflib.get_close_matches("emroy", names, n=3, cutoff=0.6)
    assert f"(closest: {', '.join(repr(n) for n in expected)})" in line


def test_partly_misspelt_seeds_are_a_run_health_finding(tmp_path):
    from splits.cli import main

    posts = _college_posts()
    result = build_users(
        posts.lazy(),
        ["emory", "cornell"],
        demographic(("Emory", "Cornel", "Duke")),
        read_bots(None),
        settings(),
    )
    codes = sorted(f.code for f in result.findings)
    assert codes == ["seed_subreddit_missing", "seed_subreddit_not_kept"]
    missing = next(f for f in result.findings if f.code == "seed_subreddit_missing")
    assert "'Cornel' (closest: 'cornell'" in missing.message and "1 of its 3" in missing.message
    not_kept = next(f for f in result.findings if f.code == "seed_subreddit_not_kept")
    assert "duke" in not_kept.message
    # the CLI writes them to its health file
    posts.write_parquet(tmp_path / "posts.parquet")
    pl.DataFrame(
        {"subreddit": ["emory", "cornell", "duke"], "kept": [True, True, True]}
    ).write_parquet(tmp_path / "subreddits.parquet")
    (tmp_path / "d.yaml").write_text(
        yaml.safe_dump(
            {
                "demographics": [
                    {
                        "key": "demo",
                        "display_name": "Demo",
                        "threshold": "auto",
                        "seed_subreddits": ["Emory", "Cornel"],
                        "self_id_phrases": ["I am demo"],
                        "anti_self_id_phrases": ["I am not demo"],
                    }
                ]
            }
        )
    )
    argv = ["groupness", "--posts", str(tmp_path / "posts.parquet"), "--subreddits"]
    argv += [str(tmp_path / "subreddits.parquet"), "--demographics", str(tmp_path / "d.yaml")]
    argv += ["--demographic", "demo", "--out-users", str(tmp_path / "u.parquet"), "--out-posts"]
    argv += [str(tmp_path / "p.parquet"), "--out-report", str(tmp_path / "r.json")]
    argv += ["--health", str(tmp_path / "health" / "groupness_demo.json"), *settings_args()]
    assert main(argv) == 0
    health = json.loads((tmp_path / "health" / "groupness_demo.json").read_text())
    assert [f["code"] for f in health] == ["seed_subreddit_missing"]


def test_find_demographics_keeps_the_keys_order_and_names_a_missing_key():
    """Several demographics from one read of the file, in the order asked; a key the file lacks
    is a config error naming it (as one key alone)."""
    from pathlib import Path

    from splits.demographics.groupness import find_demographic, find_demographics
    from splits.errors import ConfigError

    path = Path(__file__).resolve().parents[1] / "config" / "demographics.sample.yaml"
    keys = [d.key for d in load_demographics(path)]
    asked = list(reversed(keys))
    assert [d.key for d in find_demographics(path, asked)] == asked
    assert find_demographic(path, keys[1]).key == keys[1]
    with pytest.raises(ConfigError, match="no demographic 'nobody'"):
        find_demographics(path, [keys[0], "nobody"])
    with pytest.raises(ConfigError, match="no demographic 'nobody'"):
        find_demographic(path, "nobody")
