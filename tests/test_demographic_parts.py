"""D_d in parts (ingest.buckets > 1; docs/cluster.md): each demographic's posts as one file per
posts bucket by author, each part sorted by post id. Its readers given the parts give what they
give on the one file: the self-ID search (over the parts, or over each part's phrase matches:
matches in post-id order, curve, threshold), the topic splits' union of the demographics and the
key each path names."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import users_table
from splits.config.settings import schema_defaults
from splits.demographics.settings import SelfidSettings
from splits.errors import ConfigError
from splits.ingest.partition import author_buckets
from splits.topics import shards as topic_shards
from splits.topics.cli import parse_key_paths

BUCKETS = 3


def split_by_author(posts: pl.DataFrame, folder: Path) -> list[str]:
    """``posts`` (sorted by post id) as the parts rule groupness_posts writes: one file per
    author bucket, each sorted by post id."""
    folder.mkdir(parents=True, exist_ok=True)
    bucket = pl.Series(author_buckets(posts["author"], BUCKETS))
    paths = []
    for b in range(BUCKETS):
        paths.append(str(folder / f"{b}.parquet"))
        posts.filter(bucket == b).sort("post_id").write_parquet(paths[-1])
    return paths


def _selfid_corpus(tmp_path: Path) -> tuple[Path, Path]:
    """Users with group-ness rising with their number, members (the top quarter) saying they are
    Catholic and a tenth of the others that they are Jewish, several times in some posts."""
    rng = np.random.default_rng(3)
    n = 200
    g = np.sort(rng.random(n) * 5)
    authors = [f"u{i:03d}" for i in range(n)]
    users_table(authors, g, "catholic").write_parquet(tmp_path / "users.parquet")
    rows = []
    for i, author in enumerate(authors):
        for j in range(10):
            says = j in (0, 7) and (i >= 150 or i % 10 == 0)
            text = "chat"
            if says:
                text = "I'm Catholic, yes I'm Catholic." if i >= 150 else "Honestly I'm Jewish."
            # post ids interleave the authors, so every part holds ids from the whole range
            rows.append((f"p{(j * n + i):05d}", author, text))
    posts = pl.DataFrame(rows, schema=["post_id", "author", "text"], orient="row").sort("post_id")
    posts.write_parquet(tmp_path / "posts.parquet")
    demo = tmp_path / "demo.json"
    demo.write_text(
        json.dumps(
            {
                "catholic": {
                    "seed_set": ["Catholicism"],
                    "self_id_phrases": ["I'm Catholic"],
                    "anti_self_id_phrases": ["I'm Jewish"],
                }
            }
        )
    )
    return posts, demo


def test_selfid_on_the_parts_and_on_their_matches_equals_the_one_file(tmp_path, capsys):
    """``selfid search`` over the one D_d, over its parts, and over the phrase matches that
    ``selfid find`` wrote per part (rule selfid_bucket; given here in reverse order): the same
    matches, curve, threshold and comparison."""
    from splits.cli import main

    posts, demo = _selfid_corpus(tmp_path)
    parts = split_by_author(posts, tmp_path / "posts")
    assert min(pl.read_parquet(p).height for p in parts) > 300
    settings = dataclasses.asdict(schema_defaults(SelfidSettings))
    found = []
    for b, part in enumerate(parts):
        found.append(str(tmp_path / "found" / f"{b}.matches.parquet"))
        argv = ["selfid", "find", "--posts", part, "--demographics", str(demo)]
        argv += ["--demographic", "catholic", "--out", found[-1]]
        assert main([*argv, "--settings", json.dumps({"context_chars": 150})]) == 0
    assert all(pl.read_parquet(f).height for f in found)
    # rule selfid_bucket's form: one command for every demographic's part of a bucket, each
    # part paired with its demographic and output in the flags' order (here one demographic's
    # parts stand in for several demographics' parts)
    together = [str(tmp_path / "together" / f"{b}.matches.parquet") for b in range(len(parts))]
    argv = ["selfid", "find", "--posts", *parts, "--demographics", str(demo)]
    argv += ["--demographic", *["catholic"] * len(parts), "--out", *together]
    assert main([*argv, "--settings", json.dumps({"context_chars": 150})]) == 0
    for alone, joint in zip(found, together, strict=True):
        assert Path(joint).read_bytes() == Path(alone).read_bytes()
    argv = ["selfid", "find", "--posts", *parts, "--demographics", str(demo)]
    argv += ["--demographic", "catholic", "--out", together[0]]
    assert main([*argv, "--settings", json.dumps({"context_chars": 150})]) == 2
    assert f"--posts: {len(parts)} given for 1 --demographic" in capsys.readouterr().err
    # the users table's parts, as rule groupness writes them (each bucket's authors)
    users = pl.read_parquet(tmp_path / "users.parquet")
    user_bucket = pl.Series(author_buckets(users["author"], BUCKETS))
    user_parts = []
    for b in range(BUCKETS):
        user_parts.append(str(tmp_path / "users" / f"{b}.parquet"))
        Path(user_parts[-1]).parent.mkdir(exist_ok=True)
        users.filter(user_bucket == b).write_parquet(user_parts[-1])
    sources = {
        "one": ["--posts", str(tmp_path / "posts.parquet")],
        "parts": ["--posts", *parts],
        "matches": ["--matches", *reversed(found)],
        # rule selfid's form: each part's matches counted in its own users, one part at a time
        "matches with user parts": ["--matches", *found, "--user-parts", *user_parts],
    }
    outputs = {}
    for name, source in sources.items():
        out = tmp_path / name
        argv = ["selfid", "search", "--users", str(tmp_path / "users.parquet"), *source]
        argv += ["--demographics", str(demo), "--demographic", "catholic"]
        for flag, file in (("matches", "m.parquet"), ("curve", "c.parquet")):
            argv += [f"--out-{flag}", str(out / file)]
        argv += ["--out-threshold", str(out / "t.json"), "--out-plot", str(out / "p.png")]
        argv += ["--out-comparison", str(out / "cmp.parquet")]
        assert main([*argv, "--settings", json.dumps(settings)]) == 0
        outputs[name] = {f: (out / f).read_bytes() for f in ("c.parquet", "t.json", "cmp.parquet")}
        outputs[name]["matches"] = pl.read_parquet(out / "m.parquet")
    matches = outputs["one"]["matches"]
    # two matches in one post: the order is (post id, offset), as the one sorted file gives it
    assert matches.height > 100 and matches["post_id"].is_duplicated().any()
    assert matches.select("post_id", "start").equals(matches.select("post_id", "start").sort("*"))
    # 50 members, two posts each saying it twice
    assert json.loads(outputs["one"]["t.json"])["verified_self"] == 50 * 2 * 2
    for other in ("parts", "matches", "matches with user parts"):
        for name, value in outputs["one"].items():
            if isinstance(value, pl.DataFrame):
                assert value.equals(outputs[other][name]), (other, name)
            else:
                assert value == outputs[other][name], (other, name)

    # the search reads the users table's columns it needs only; a table without one of them (a
    # bucket's seed-user table, here one without n_posts) is one line naming it
    lacking = tmp_path / "lacking.parquet"
    pl.read_parquet(tmp_path / "users.parquet").drop("n_posts").write_parquet(lacking)
    capsys.readouterr()
    argv[argv.index("--users") + 1] = str(lacking)
    assert main([*argv, "--settings", json.dumps(settings)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lacking.parquet has no column n_posts" in err, err


def test_selfid_search_takes_posts_or_matches_not_both(tmp_path, capsys):
    from splits.cli import main

    argv = ["selfid", "search", "--users", "u", "--demographics", "d", "--demographic", "k"]
    for flag in ("matches", "curve", "threshold", "comparison", "plot"):
        argv += [f"--out-{flag}", str(tmp_path / flag)]
    argv += ["--settings", "{}"]
    for source in ([], ["--posts", "p", "--matches", "m"]):
        capsys.readouterr()
        with pytest.raises(SystemExit) as stop:  # argparse's own usage error
            main([*argv, *source])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "--posts" in err and "--matches" in err and "Traceback" not in err
    # the users table's parts pair with the matches files, one each
    settings = json.dumps(dataclasses.asdict(schema_defaults(SelfidSettings)))
    argv[argv.index("--settings") + 1] = settings
    users_table(["a"], np.array([1.0]), "catholic").write_parquet(tmp_path / "users.parquet")
    argv[argv.index("--users") + 1] = str(tmp_path / "users.parquet")
    argv[argv.index("--demographics") + 1] = "config/demographics.sample.yaml"
    argv[argv.index("--demographic") + 1] = "catholic"
    assert main([*argv, "--matches", "m1", "m2", "--user-parts", "u1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--user-parts: 1 given for 2 --matches" in err and "\n" not in err, err


def _demographic_rows(rng, ids: list[str], n: int) -> pl.DataFrame:
    """``n`` of the posts ``ids`` as one demographic's D_d rows; a post's author is the same in
    every demographic's rows (one of 40, from the id), as in the corpus."""
    chosen = sorted(rng.choice(len(ids), size=n, replace=False))
    return pl.DataFrame(
        {
            "post_id": [ids[i] for i in chosen],
            "author": [f"u{sum(map(ord, ids[i])) % 40}" for i in chosen],
            "subreddit": "s",
            "text": [f"text of {ids[i]}" for i in chosen],
            "percentile": rng.integers(0, 100, size=n).astype(float),
        }
    )


def test_union_over_the_parts_equals_the_union_over_one_file_each(tmp_path):
    rng = np.random.default_rng(8)
    ids = sorted(f"{i:05x}" for i in rng.choice(10**6, size=400, replace=False))
    one, parts = {}, {}
    for key, n in (("a", 200), ("b", 150), ("c", 0)):
        posts = _demographic_rows(rng, ids, n)
        one[key] = str(tmp_path / key / "posts.parquet")
        (tmp_path / key).mkdir()
        posts.write_parquet(one[key])
        parts[key] = split_by_author(posts, tmp_path / "parts" / key / "posts")
    assert pl.read_parquet(parts["a"][0]).height > 20
    thresholds = {"a": 40, "b": 10.5, "c": 0}
    # the in-memory union of every (demographic, post) row at or above its threshold
    rows = [
        pl.read_parquet(one[key])
        .filter(pl.col("percentile") >= thresholds[key])
        .select("post_id", "author", "subreddit", "text", pl.lit(key).alias("demographic"))
        for key in one
    ]
    expected = topic_shards.union_posts(pl.concat(rows))
    assert expected.height > 150 and expected["demographics"].list.len().max() == 2
    # with parts by posts bucket: each bucket's own union in post-id order, bucket after bucket
    by_bucket = pl.concat(
        topic_shards.union_posts(
            pl.concat(
                pl.read_parquet(parts[key][b])
                .filter(pl.col("percentile") >= thresholds[key])
                .select("post_id", "author", "subreddit", "text", pl.lit(key).alias("demographic"))
                for key in parts
            )
        )
        for b in range(BUCKETS)
    )
    assert not by_bucket.equals(expected) and by_bucket.sort("post_id").equals(expected)
    for batch_rows in (1, 5, 64, 10**6):
        got = pl.concat(list(topic_shards.iter_union(one, thresholds, batch_rows=batch_rows)))
        assert got.equals(expected), batch_rows
        got = pl.concat(list(topic_shards.iter_union(parts, thresholds, batch_rows=batch_rows)))
        assert got.equals(by_bucket), batch_rows


def test_union_over_bucket_parts_opens_one_buckets_files_at_a_time(tmp_path, monkeypatch):
    """With D_d in parts by posts bucket, the merge holds one file per demographic open at a
    time, not one per part (whose number grows with ingest.buckets); parts not named by bucket
    are merged all at once, in post-id order."""
    rng = np.random.default_rng(9)
    ids = sorted(f"{i:05x}" for i in rng.choice(10**6, size=300, replace=False))
    parts = {}
    for key, n in (("a", 120), ("b", 90), ("c", 60)):
        parts[key] = split_by_author(_demographic_rows(rng, ids, n), tmp_path / key / "posts")
    thresholds = {"a": 0, "b": 0, "c": 0}
    opened, most = [], []
    original = topic_shards._SortedPosts.fill

    def fill(stream):
        if stream not in opened:
            opened.append(stream)
        original(stream)
        most.append(sum(not s.exhausted for s in opened))

    monkeypatch.setattr(topic_shards._SortedPosts, "fill", fill)
    bucketed = pl.concat(list(topic_shards.iter_union(parts, thresholds, batch_rows=7)))
    assert len(opened) == 3 * BUCKETS and max(most) == 3
    renamed = {}
    for key, paths in parts.items():  # the same files, not named by bucket
        renamed[key] = []
        for b, path in enumerate(paths):
            target = tmp_path / "other" / key / f"part-{b}.parquet"
            target.parent.mkdir(parents=True, exist_ok=True)
            Path(path).rename(target)
            renamed[key].append(str(target))
    opened.clear()
    most.clear()
    merged = pl.concat(list(topic_shards.iter_union(renamed, thresholds, batch_rows=7)))
    assert max(most) == 3 * BUCKETS
    assert merged["post_id"].is_sorted() and merged.equals(bucketed.sort("post_id"))


def test_a_part_out_of_post_id_order_is_one_line_error(tmp_path):
    good = tmp_path / "a" / "posts" / "0.parquet"
    good.parent.mkdir(parents=True)
    rows = _demographic_rows(np.random.default_rng(1), [f"p{i}" for i in range(10)], 10)
    rows.write_parquet(good)
    bad = good.with_name("1.parquet")
    rows.reverse().write_parquet(bad)
    with pytest.raises(ConfigError, match="1.parquet: post ids are null or not in ascending"):
        list(topic_shards.iter_union({"a": [good, bad]}, {"a": 0}))


def test_paths_name_their_demographic():
    got = parse_key_paths(
        [
            "r/demographics/black/posts.parquet",
            "r/demographics/jewish/posts/0.parquet",
            "r/demographics/jewish/posts/1.parquet",
            "r/demographics/posts/posts.parquet",  # a demographic whose key is "posts"
            "x=elsewhere/a.parquet",
            "x=elsewhere/b.parquet",
        ]
    )
    assert got == {
        "black": ["r/demographics/black/posts.parquet"],
        "jewish": [
            "r/demographics/jewish/posts/0.parquet",
            "r/demographics/jewish/posts/1.parquet",
        ],
        "posts": ["r/demographics/posts/posts.parquet"],
        "x": ["elsewhere/a.parquet", "elsewhere/b.parquet"],
    }
    with pytest.raises(ConfigError, match="given twice") as err:
        parse_key_paths(["d/k/posts/0.parquet", "k=d/k/posts/0.parquet"])
    assert "\n" not in str(err.value)
