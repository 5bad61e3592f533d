"""Group-ness per posts bucket (ingest.buckets > 1; docs/cluster.md): every bucket's seed-user
table reduced into the users table equals the single job's over all the posts (users, report,
findings), and D_d's parts, one per bucket, together equal the single D_d; through the
functions, the CLI and the real engine up to self-ID, the topic splits and the export at P = 4
against P = 1."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
import splits.demographics.groupness as groupness
import splits.io as sio
import yaml
from conftest import run_snakemake
from splits.config.definitions import load_demographics
from splits.demographics.d_posts import demographic_posts, write_demographic_posts
from splits.demographics.groupness import (
    AGGREGATE_COLUMNS,
    bucket_users,
    build_users,
    merge_bucket_users,
    read_bots,
)
from splits.errors import InputError
from splits.ingest.partition import author_buckets
from test_groupness import demographic, make_posts, settings, settings_args

# seedd occurs in no post (a missing-seed finding with suggestions), seedc is not kept
SEEDS = ("SeedA", "seedb", "SeedC", "Seedd")
KEPT = ["seeda", "seedb", "general1", "general2"]


def bucketed(posts: pl.DataFrame, buckets: int) -> list[pl.DataFrame]:
    """The posts split by the ingest stage's author hash, in the posts' order."""
    index = pl.Series("bucket", author_buckets(posts["author"], buckets))
    tagged = posts.with_columns(index)
    return [tagged.filter(pl.col("bucket") == b).drop("bucket") for b in range(buckets)]


def write_buckets(parts: list[pl.DataFrame], folder: Path) -> tuple[list[Path], list[Path]]:
    """Each bucket's seed-user table and subreddit names, as rule groupness_bucket writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    users_files, names_files = [], []
    for b, part in enumerate(parts):
        (users,), names = bucket_users(part.lazy(), KEPT, [demographic(SEEDS)])
        assert users.columns == AGGREGATE_COLUMNS
        # a bucket's table holds its own authors only (users are local to a bucket)
        assert set(users["author"]) <= set(part["author"])
        users_files.append(folder / f"{b}.users.parquet")
        names_files.append(folder / f"{b}.subreddits.parquet")
        users.write_parquet(users_files[-1])
        names.write_parquet(names_files[-1])
    return users_files, names_files


@pytest.mark.parametrize("buckets", [3, 4])
@pytest.mark.parametrize("formula", ["sum_log", "entropy"])
@pytest.mark.parametrize("window", ["whole", "small"])
def test_bucketed_users_and_d_d_equal_the_single_job(
    tmp_path, monkeypatch, buckets, formula, window
):
    if window == "small":  # the users table merged a few dozen users at a time
        monkeypatch.setattr(sio, "MERGE_MIN_BATCH_ROWS", 4)
        monkeypatch.setattr(groupness, "MERGE_ROWS", 40)
    posts = make_posts(400, seed=11)
    # ties at the top-user cut: users with the same n_posts cut by name, across buckets
    options = settings(groupness=formula, top_user_fraction=0.05)
    bots = read_bots(None) | {"helper_bot"}
    single = build_users(posts.lazy(), KEPT, demographic(SEEDS), bots, options)
    assert single.report["dropped_top_users"] >= 10 and single.report["dropped_known_bots"] == 2
    codes = sorted(f.code for f in single.findings)
    assert codes == ["seed_subreddit_missing", "seed_subreddit_not_kept"]

    # plus an empty bucket and one without any seed post: nothing there, nothing lost
    parts = bucketed(posts, buckets)
    parts += [posts.head(0), posts.filter(pl.col("subreddit") == "general1").head(5)]
    parts[-1] = parts[-1].with_columns(pl.lit("only_general").alias("author"))
    assert min(p.height for p in parts[:buckets]) > 100
    users_files, names_files = write_buckets(parts, tmp_path / "buckets")
    out = tmp_path / "users.parquet"
    merged = merge_bucket_users(
        users_files, names_files, KEPT, demographic(SEEDS), bots, options, out
    )
    assert merged.users is None
    if window == "small":  # written piece by piece as the merge goes
        import pyarrow.parquet as pq

        assert pq.ParquetFile(out).num_row_groups > 5
    merged_users = pl.read_parquet(out)
    assert merged_users.equals(single.users)
    posts_of_users = int(single.users["n_posts"].sum())
    assert merged.report == {**single.report, "posts": posts_of_users}
    assert merged.findings == single.findings
    assert single.users.height > 300

    one, many = tmp_path / "one.parquet", tmp_path / "many.parquet"
    n_one = write_demographic_posts(demographic_posts(posts.lazy(), single.users, KEPT), one)
    files = []
    for b, part in enumerate(parts):
        files.append(tmp_path / f"posts{b}.parquet")
        part.write_parquet(files[-1])
    scan = pl.scan_parquet(files)
    n_many = write_demographic_posts(demographic_posts(scan, merged_users, KEPT), many)
    assert n_one == n_many == posts_of_users > 1000
    assert pl.read_parquet(many).equals(pl.read_parquet(one))


def test_one_bucket_job_for_every_demographic_equals_one_job_each():
    """The bucket job reads its bucket once for all demographics (the seed counts of all their
    seeds, the kept posts of all their seed users), then cuts each demographic's table: each
    equals the table of a job over that demographic alone, seeds overlapping or not, a
    demographic with no seed user in the bucket an empty table."""
    posts = make_posts(300, seed=17)
    demographics = [
        demographic(SEEDS),
        replace(demographic(("seedb", "general1")), key="other"),
        replace(demographic(("SeedC",)), key="third"),
        replace(demographic(("nowhere",)), key="absent"),
    ]
    tables, names = bucket_users(posts.lazy(), KEPT, demographics)
    assert len(tables) == len(demographics)
    for d, table in zip(demographics, tables, strict=True):
        (alone,), alone_names = bucket_users(posts.lazy(), KEPT, [d])
        assert table.equals(alone), d.key
        assert names.equals(alone_names)
    heights = [t.height for t in tables]
    assert min(heights[:3]) > 20 and heights[3] == 0
    # the shared seed seedb: its users are in both tables, with each demographic's own scores
    both = tables[0].join(tables[1], on="author", suffix="_other")
    assert both.height > 10
    assert (both["n_posts"] == both["n_posts_other"]).all()
    assert (both["n_seed_posts"] != both["n_seed_posts_other"]).any()


@pytest.mark.parametrize("window", ["whole", "small"])
def test_an_author_in_two_buckets_is_one_line_error(tmp_path, monkeypatch, window):
    if window == "small":  # repeated authors met across the merge's windows are counted too
        monkeypatch.setattr(sio, "MERGE_MIN_BATCH_ROWS", 1)
        monkeypatch.setattr(groupness, "MERGE_ROWS", 2)
    posts = make_posts(60, seed=3)
    users_files, names_files = write_buckets([posts, posts.head(40)], tmp_path)
    out = tmp_path / "users.parquet"
    with pytest.raises(InputError, match="authors are in more than one bucket") as err:
        merge_bucket_users(
            users_files, names_files, KEPT, demographic(SEEDS), read_bots(None), settings(), out
        )
    assert "\n" not in str(err.value)
    # every repeated author counted, none of the table written
    twice = pl.read_parquet(users_files[1])["author"]
    assert f"{twice.len()} authors" in str(err.value) and twice.len() >= 3
    assert not out.exists() and not list(tmp_path.glob(".users.parquet*"))


def _demographics_file(path: Path) -> Path:
    entries = [
        {
            "key": key,
            "seed_subreddits": seeds,
            "self_id_phrases": [f"I am {key}"],
            "anti_self_id_phrases": [f"I am not {key}"],
        }
        for key, seeds in (("demo", list(SEEDS)), ("other", ["seedb", "general1"]))
    ]
    path.write_text(yaml.safe_dump({"demographics": entries}))
    return path


def test_cli_bucket_jobs_and_reduce_write_the_single_jobs_files(tmp_path, capsys):
    from splits.cli import main

    posts = make_posts(200, seed=5)
    subreddits = sorted(set(posts["subreddit"]))
    pl.DataFrame(
        {
            "subreddit": subreddits,
            "n_users": [1] * len(subreddits),
            "n_posts": [1] * len(subreddits),
            "kept": [s in KEPT for s in subreddits],
            "rank": list(range(1, len(subreddits) + 1)),
        }
    ).write_parquet(tmp_path / "subreddits.parquet")
    demo = _demographics_file(tmp_path / "demo.yaml")
    common = ["--subreddits", str(tmp_path / "subreddits.parquet"), "--demographics", str(demo)]
    # a bucket's job writes every demographic's table (demo's, then other's, in the flags' order)
    bucket_job = [*common, "--demographic", "demo", "other"]
    common += ["--demographic", "demo"]
    buckets = []
    for b, part in enumerate(bucketed(posts, 4)):
        buckets.append(tmp_path / f"posts{b}.parquet")
        part.write_parquet(buckets[-1])
        out = ["--out-users", str(tmp_path / f"{b}.users.parquet"), str(tmp_path / f"{b}.o.pq")]
        out += ["--out-subreddits", str(tmp_path / f"{b}.subreddits.parquet"), str(tmp_path / "n")]
        assert main(["groupness-bucket", "--posts", str(buckets[-1]), *bucket_job, *out]) == 0
        demo_alone, other_alone = (
            bucket_users(pl.scan_parquet(buckets[-1]), KEPT, [d])[0][0]
            for d in load_demographics(demo)
        )
        assert pl.read_parquet(tmp_path / f"{b}.users.parquet").equals(demo_alone)
        assert pl.read_parquet(tmp_path / f"{b}.o.pq").equals(other_alone)
        assert other_alone.height > 0
        names = tmp_path / f"{b}.subreddits.parquet"
        assert names.read_bytes() == (tmp_path / "n").read_bytes()
    one = tmp_path / "one"
    one.mkdir()
    files = {k: one / k for k in ("users", "posts", "report", "health")}
    args = ["groupness", *common, *settings_args()]
    outs = ["--out-users", str(files["users"]), "--out-report", str(files["report"])]
    outs += ["--health", str(files["health"])]
    assert (
        main([*args, "--posts", *map(str, buckets), *outs, "--out-posts", str(files["posts"])]) == 0
    )

    # the reduce reads no post: users, report and health from the bucket tables only
    four = tmp_path / "four"
    four.mkdir()
    flags = ["--bucket-users", *(str(tmp_path / f"{b}.users.parquet") for b in range(4))]
    flags += ["--bucket-subreddits", *(str(tmp_path / f"{b}.subreddits.parquet") for b in range(4))]
    user_parts = [str(four / f"users.{b}.parquet") for b in range(4)]
    reduced = [*args, *(a.replace(str(one), str(four)) for a in outs), *flags]
    assert main([*reduced, "--out-user-parts", *user_parts]) == 0
    for key in ("report", "health"):
        assert (one / key).read_bytes() == (four / key).read_bytes(), key
    users = pl.read_parquet(one / "users")
    assert users.height > 100 and users.equals(pl.read_parquet(four / "users"))
    # each bucket's rows of the users table: its own authors, sorted, and together the table
    for b, part in enumerate(user_parts):
        rows = pl.read_parquet(part)
        assert rows.height and rows["author"].is_sorted()
        assert set(rows["author"]) <= set(pl.read_parquet(buckets[b])["author"])
    assert pl.read_parquet(user_parts).sort("author").equals(users)

    # then each bucket's part of D_d from the reduced users: the parts hold their bucket's
    # authors, each part sorted by post id, and together D_d row for row; the report's count
    # (from the users' n_posts) is their rows
    parts = []
    for b, bucket in enumerate(buckets):
        parts.append(four / f"posts{b}.parquet")
        cmd = ["groupness-posts", "--posts", str(bucket), "--users", str(four / "users")]
        cmd += ["--subreddits", str(tmp_path / "subreddits.parquet"), "--out", str(parts[-1])]
        assert main(cmd) == 0
        # from the bucket's users only (what the pipeline passes): the same part, byte for byte
        from_part = four / f"posts{b}.from_part.parquet"
        cmd[cmd.index("--users") + 1] = user_parts[b]
        cmd[-1] = str(from_part)
        assert main(cmd) == 0
        assert from_part.read_bytes() == parts[-1].read_bytes()
        part = pl.read_parquet(parts[-1])
        assert part["post_id"].is_sorted()
        assert set(part["author"]) <= set(pl.read_parquet(bucket)["author"])
    d_d = pl.read_parquet(one / "posts")
    together = pl.read_parquet(parts)
    assert d_d.height > 100 and min(pl.read_parquet(p).height for p in parts) > 0
    assert together.sort("post_id", "author").equals(d_d.sort("post_id", "author"))
    assert json.loads((four / "report").read_text())["posts"] == together.height

    # bad combinations of flags: one line, no traceback
    capsys.readouterr()
    one_output_for_two = ["--out-users", str(tmp_path / "x.parquet"), "--out-subreddits", "y", "z"]
    for bad, message in (
        (
            ["groupness-bucket", "--posts", str(buckets[0]), *bucket_job, *one_output_for_two],
            "--out-users: 1 given for 2 --demographic",
        ),
        ([*reduced, "--posts", str(buckets[0])], "not with --bucket-users"),
        ([*args, *outs, "--posts", str(buckets[0])], "required without --bucket-users"),
        ([*args, *outs, flags[0], flags[1]], "give both or neither"),
        ([*reduced, "--out-user-parts", user_parts[0]], "--out-user-parts: 1 given for 4"),
        (
            [*args, *outs, "--posts", str(buckets[0]), "--out-user-parts", user_parts[0]],
            "only with --bucket-users",
        ),
        # a bucket's seed-user table is not the reduced users table
        (
            ["groupness-posts", "--posts", str(buckets[0]), "--users", flags[1]]
            + ["--subreddits", str(tmp_path / "subreddits.parquet"), "--out", str(parts[0])],
            "has no column groupness, percentile",
        ),
    ):
        assert main(bad) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and message in err, err


def _run_outputs(results: Path, keys: list[str]) -> dict[str, object]:
    out = {}
    for key in keys:
        folder = results / "demographics" / key
        for name in ("users", "selfid_matches", "selfid_curve", "formula_comparison"):
            out[f"{key}/{name}"] = pl.read_parquet(folder / f"{name}.parquet")
        # D_d: one file, or its parts (one per posts bucket), compared row for row
        parts = sorted((folder / "posts").glob("*.parquet")) or [folder / "posts.parquet"]
        posts = pl.read_parquet(parts)
        out[f"{key}/posts"] = posts.sort(posts.columns)
        for name in ("groupness_report", "threshold"):
            out[f"{key}/{name}"] = json.loads((folder / f"{name}.json").read_text())
        out[f"{key}/health"] = (results / "health" / f"groupness_{key}.json").read_bytes()
    for name in ("topics/topic_posts.parquet", "topics/topics.parquet"):
        out[name] = pl.read_parquet(results / name)
    for name in (
        "topics/topic_counts.csv",
        "topics/topic_retrieval.csv",
        "topics/seed_share.csv",
        "health/topics.json",
    ):
        out[name] = (results / name).read_bytes()
    export = results / "dataset" / "export"
    for name in ("quadruplets.parquet", "topic_posts.parquet"):
        out[f"export/{name}"] = pl.read_parquet(export / name)
    for name in ("counts_by_topic.csv", "counts_by_category.csv"):
        out[f"export/{name}"] = (export / name).read_bytes()
    return out


def test_snakemake_groupness_selfid_topics_and_export_with_four_buckets_equal_one(
    default_run, tmp_path
):
    """The real engine on the generated corpus (synth): group-ness and self-ID of every
    demographic at ingest.buckets = 4 (a job per demographic and bucket, the reduce, then jobs
    per demographic and bucket writing D_d's part and finding its self-ID phrases) and at 1 (the
    session's default run; the P = 4 run goes on from a copy of it, so its synth and ingest
    shards are reused and everything from the buckets on re-runs), on to the topic splits and
    the exported dataset: the same users, D_d (its parts together, row for row), reports,
    matches, curves, thresholds, topic splits (tables row for row, CSV and JSON byte for byte)
    and export. The topic cut is one topic_shards job per posts bucket, each writing its own
    shards (here at most a sixth of the posts each, so some bucket holds more than one), read
    bucket by bucket, then in shard order."""
    work = tmp_path / "repo"
    shutil.copytree(default_run, work, symlinks=True)
    keys = [d.key for d in load_demographics(work / "config" / "demographics.sample.yaml")]
    for key in keys:  # the one-bucket D_d, which a P = 4 run must not write
        (work / "results" / "demographics" / key / "posts.parquet").unlink()
    shards = work / "results" / "topics" / "shards"
    plan = json.loads((shards / "posts" / "plan.json").read_text())
    shard_posts = -(-plan["posts"] // 6)
    targets = [f"results/demographics/{key}/threshold.json" for key in keys]
    targets += ["results/dataset/export/README.md", "results/topics/topic_posts.parquet"]
    config = ["ingest={buckets: 4}", f"topics={{shard_posts: {shard_posts}}}"]
    proc = run_snakemake(work, *targets, "--config", *config, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (work / "logs" / "topic_shards").iterdir()) == [
        f"{b}.log" for b in range(4)
    ] + ["topic_shards.log"]  # the default run's, copied
    plans = [json.loads((shards / "posts" / str(b) / "plan.json").read_text()) for b in range(4)]
    assert sum(p["posts"] for p in plans) == plan["posts"]
    assert all(s["posts"] <= shard_posts for p in plans for s in p["shards"])
    assert sum(len(p["shards"]) for p in plans) > 4  # a bucket of more than one shard
    for b, bucket_plan in enumerate(plans):
        names = [s["shard"] for s in bucket_plan["shards"]]
        assert sorted(p.stem for p in (shards / "hits" / str(b)).glob("*.parquet")) == names
    runs = {1: _run_outputs(default_run / "results", keys), 4: _run_outputs(work / "results", keys)}
    # one job per bucket for every demographic: its log, a users table and the bucket's
    # subreddit names per demographic
    for rule in ("groupness_bucket", "groupness_posts", "selfid_bucket"):
        assert sorted(p.name for p in (work / "logs" / rule).iterdir()) == [
            f"{b}.log" for b in range(4)
        ]
    for key in keys:
        folder = work / "results" / "demographics" / key
        assert len(list((folder / "buckets").iterdir())) == 8
        assert sorted(p.name for p in (folder / "posts").iterdir()) == [
            f"{b}.parquet" for b in range(4)
        ]
        assert not (folder / "posts.parquet").exists()
        assert not (default_run / "results" / "demographics" / key / "buckets").exists()
        assert not (default_run / "results" / "demographics" / key / "posts").exists()
    one, four = runs[1], runs[4]
    assert set(one) == set(four)
    assert sum(one[f"{key}/selfid_matches"].height for key in keys) > 0
    assert one["export/quadruplets.parquet"].height > 0
    for name, value in one.items():
        if isinstance(value, pl.DataFrame):
            assert value.height > 0 or name.endswith("selfid_matches"), name
            assert value.equals(four[name]), name
        else:
            assert value == four[name], name
