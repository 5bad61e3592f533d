"""Group-ness per posts bucket (ingest.buckets > 1; docs/cluster.md): every bucket's seed-user
table reduced into the users table equals the single job's over all the posts (users, report,
findings, D_d), through the functions, the CLI and the real engine up to self-ID at P = 4
against P = 1."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import yaml
from conftest import copy_repo, run_snakemake
from splits.demographics.groupness import (
    AGGREGATE_COLUMNS,
    bucket_users,
    build_users,
    demographic_posts,
    merge_bucket_users,
    read_bots,
    write_demographic_posts,
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
        users, names = bucket_users(part.lazy(), KEPT, demographic(SEEDS))
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
def test_bucketed_users_and_d_d_equal_the_single_job(tmp_path, buckets, formula):
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
    merged = merge_bucket_users(users_files, names_files, KEPT, demographic(SEEDS), bots, options)
    assert merged.users.equals(single.users)
    assert merged.report == single.report
    assert merged.findings == single.findings
    assert single.users.height > 300

    one, many = tmp_path / "one.parquet", tmp_path / "many.parquet"
    n_one = write_demographic_posts(demographic_posts(posts.lazy(), single.users, KEPT), one)
    files = []
    for b, part in enumerate(parts):
        files.append(tmp_path / f"posts{b}.parquet")
        part.write_parquet(files[-1])
    scan = pl.scan_parquet(files)
    n_many = write_demographic_posts(demographic_posts(scan, merged.users, KEPT), many)
    assert n_one == n_many > 1000
    assert pl.read_parquet(many).equals(pl.read_parquet(one))


def test_an_author_in_two_buckets_is_one_line_error(tmp_path):
    posts = make_posts(60, seed=3)
    users_files, names_files = write_buckets([posts, posts.head(40)], tmp_path)
    with pytest.raises(InputError, match="authors are in more than one bucket") as err:
        merge_bucket_users(
            users_files, names_files, KEPT, demographic(SEEDS), read_bots(None), settings()
        )
    assert "\n" not in str(err.value)


def _demographics_file(path: Path) -> Path:
    entry = {
        "key": "demo",
        "seed_subreddits": list(SEEDS),
        "self_id_phrases": ["I am demo"],
        "anti_self_id_phrases": ["I am not demo"],
    }
    path.write_text(yaml.safe_dump({"demographics": [entry]}))
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
    common += ["--demographic", "demo"]
    buckets = []
    for b, part in enumerate(bucketed(posts, 4)):
        buckets.append(tmp_path / f"posts{b}.parquet")
        part.write_parquet(buckets[-1])
        out = ["--out-users", str(tmp_path / f"{b}.users.parquet")]
        out += ["--out-subreddits", str(tmp_path / f"{b}.subreddits.parquet")]
        assert main(["groupness-bucket", "--posts", str(buckets[-1]), *common, *out]) == 0
    outputs = {}
    for name, extra in (
        ("one", []),
        (
            "four",
            ["--bucket-users", *(str(tmp_path / f"{b}.users.parquet") for b in range(4))]
            + ["--bucket-subreddits"]
            + [str(tmp_path / f"{b}.subreddits.parquet") for b in range(4)],
        ),
    ):
        folder = tmp_path / name
        folder.mkdir()
        files = {k: folder / f"{k}" for k in ("users", "posts", "report", "health")}
        args = ["groupness", "--posts", *map(str, buckets), *common, *settings_args()]
        args += ["--out-users", str(files["users"]), "--out-posts", str(files["posts"])]
        args += ["--out-report", str(files["report"]), "--health", str(files["health"])]
        assert main([*args, *extra]) == 0
        outputs[name] = {k: p.read_bytes() for k, p in files.items()}
    for key in ("report", "health"):
        assert outputs["one"][key] == outputs["four"][key], key
    for key in ("users", "posts"):
        one = pl.read_parquet(tmp_path / "one" / key)
        assert one.height > 100 and one.equals(pl.read_parquet(tmp_path / "four" / key)), key

    # only one of the two bucket flags: one line, no traceback
    capsys.readouterr()
    half = [*args, "--bucket-users", str(tmp_path / "0.users.parquet")]
    assert main(half) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "give both or neither" in err


def _run_outputs(results: Path, keys: list[str]) -> dict[str, object]:
    out = {}
    for key in keys:
        folder = results / "demographics" / key
        for name in ("users", "posts", "selfid_matches", "selfid_curve", "formula_comparison"):
            out[f"{key}/{name}"] = pl.read_parquet(folder / f"{name}.parquet")
        for name in ("groupness_report", "threshold"):
            out[f"{key}/{name}"] = json.loads((folder / f"{name}.json").read_text())
        out[f"{key}/health"] = (results / "health" / f"groupness_{key}.json").read_bytes()
    return out


def test_snakemake_groupness_and_selfid_with_four_buckets_equal_one(tmp_path, monkeypatch):
    """The real engine on the generated corpus (synth): group-ness and self-ID of every
    demographic at ingest.buckets = 4 (a job per demographic and bucket, then the reduce) and
    at 1: the same users, D_d, reports, matches, curves and thresholds."""
    from splits.config.definitions import load_demographics

    monkeypatch.setenv("SPLITS_SALT", "a test's salt, real inputs need one")
    work = copy_repo(tmp_path / "repo")
    keys = [d.key for d in load_demographics(work / "config" / "demographics.sample.yaml")]
    runs = {}
    for buckets in (1, 4):
        outdir = f"results-{buckets}"
        config = [f"ingest={{buckets: {buckets}}}", f"outdir={outdir}"]
        targets = [f"{outdir}/demographics/{key}/threshold.json" for key in keys]
        proc = run_snakemake(work, *targets, "--config", *config, timeout=1500)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[buckets] = _run_outputs(work / outdir, keys)
    for key in keys:
        assert len(list((work / "results-4" / "demographics" / key / "buckets").iterdir())) == 8
        assert (work / "logs" / "groupness_bucket" / key / "3.log").exists()
        assert not (work / "results-1" / "demographics" / key / "buckets").exists()
    one, four = runs[1], runs[4]
    assert set(one) == set(four)
    assert sum(one[f"{key}/selfid_matches"].height for key in keys) > 0
    for name, value in one.items():
        if isinstance(value, pl.DataFrame):
            assert value.height > 0 or name.endswith("selfid_matches"), name
            assert value.equals(four[name]), name
        else:
            assert value == four[name], name
