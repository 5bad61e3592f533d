"""The subreddit graph as a sum over user buckets (docs/stages.md, subreddit graph): per-bucket
memberships and partial co-membership counts, reduced to the same subreddits and neighbours as
the single job, checked against the single job and a dense brute force."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
import snakemake_fork
from conftest import copy_repo, run_snakemake
from helpers import dry_run_job_counts
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.graph import buckets as by_buckets
from splits.graph import build as graph
from splits.graph.settings import GraphSettings, GraphTopSettings
from splits.io import write_parquet


def planted_posts(seed: int = 3) -> pl.DataFrame:
    """Communities of subreddits whose users overlap (planted neighbours), Zipf background
    traffic, a few tiny subreddits (ties abound) and mixed-case names and null authors."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[str | None, str | None]] = []
    n_communities, per_community = 8, 6
    for c in range(n_communities):
        members = [f"c{c}user{u}" for u in range(rng.integers(20, 60))]
        for s in range(per_community):
            name = f"Comm{c}_{s}" if s % 2 else f"comm{c}_{s}"
            for author in members:
                if rng.random() < 0.7:
                    rows += [(name, author)] * int(rng.integers(1, 3))
    weights = 1.0 / np.arange(1, 121) ** 1.1
    weights /= weights.sum()
    for u in range(900):
        for s in rng.choice(120, size=int(rng.integers(1, 12)), p=weights):
            rows.append((f"bg{s:03d}", f"bguser{u}"))
    for t in range(12):  # tiny subreddits of 1-2 users: many equal similarities
        rows += [(f"tiny{t}", f"bguser{t}"), (f"tiny{t}", f"bguser{t + 1}")]
    rows += [("bg000", None), (None, "bguser1"), ("COMM0_1", "c0user0")]
    order = rng.permutation(len(rows))
    return pl.DataFrame(
        [rows[i] for i in order], schema=["subreddit", "author"], orient="row"
    ).with_row_index("post_id")


def settings_for(top_n: int = 60, min_posts: int = 3, k: int = 7, block_mb: float = 256):
    return schema_defaults(GraphSettings, top_n=top_n, min_posts=min_posts, k=k, block_mb=block_mb)


def run_buckets(posts_path: Path, settings, buckets: int, work: Path, threads: int = 2):
    """The map and reduce steps as the rules chain them: memberships and counts per bucket,
    the subreddit table, partial co-membership counts per bucket, the reduce."""
    work.mkdir(parents=True, exist_ok=True)
    dirs = [work / f"bucket-{b}" for b in range(buckets)]
    for b, folder in enumerate(dirs):
        by_buckets.write_bucket_memberships(pl.scan_parquet(posts_path), b, buckets, folder)
    subreddits = work / "subreddits.parquet"
    top = GraphTopSettings(top_n=settings.top_n, min_posts=settings.min_posts)
    by_buckets.write_bucket_subreddits([d / "counts.parquet" for d in dirs], top, subreddits)
    for folder in dirs:
        by_buckets.write_bucket_overlaps(folder, subreddits, settings.block_mb, folder)
    return by_buckets.reduce_buckets(
        subreddits,
        [d / "overlaps.parquet" for d in dirs],
        [d / "overlaps.json" for d in dirs],
        settings,
        threads,
    )


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[pl.DataFrame, Path]:
    posts = planted_posts()
    path = write_parquet(posts, tmp_path_factory.mktemp("planted") / "posts.parquet")
    return posts, path


@pytest.mark.parametrize("buckets", [1, 2, 4, 7])
def test_bucketed_graph_equals_single_job(planted, tmp_path, buckets):
    posts, path = planted
    settings = settings_for(block_mb=0.02)  # several row blocks in the maps and the reduce
    single = graph.compute_graph(pl.scan_parquet(path), settings, threads=2)
    assert single.subreddits.filter("kept").height == 60
    assert single.neighbours.height > 500
    summed = run_buckets(path, settings, buckets, tmp_path)
    assert summed.subreddits.equals(single.subreddits)
    assert summed.neighbours.equals(single.neighbours)
    assert (summed.n_users, summed.n_memberships) == (single.n_users, single.n_memberships)
    assert graph.summary(summed, settings) == graph.summary(single, settings)
    # every row group of a bucket's overlaps lies in one of the reduce's blocks of rows, so the
    # reduce's filter on a block reads each bucket's file once in all
    n_kept = single.subreddits.filter("kept").height
    height = graph.rows_per_block(n_kept, settings.block_mb)
    assert 5 < -(-n_kept // height), "the test needs several blocks"
    n_groups = 0
    for b in range(buckets):
        meta = pq.ParquetFile(tmp_path / f"bucket-{b}" / "overlaps.parquet").metadata
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(0).statistics
            assert stats.min // height == stats.max // height
            n_groups += 1
    assert n_groups >= buckets * 5


def dense_oracle(posts: pl.DataFrame, top_n: int, min_posts: int, k: int):
    """Dense users x subreddits 0/1 matrix, A^T A by numpy, exact Jaccard and cosine as
    fractions, top k by (value descending, name ascending)."""
    clean = posts.drop_nulls(["subreddit", "author"]).with_columns(
        pl.col("subreddit").str.to_lowercase()
    )
    n_posts = dict(clean.group_by("subreddit").len().iter_rows())
    pairs = clean.select("author", "subreddit").unique()
    n_users = dict(pairs.group_by("subreddit").len().iter_rows())
    eligible = sorted(
        (s for s in n_posts if n_posts[s] >= min_posts), key=lambda s: (-n_users[s], s)
    )
    kept = sorted(eligible[:top_n])
    authors = sorted(set(pairs["author"]))
    a_index = {a: i for i, a in enumerate(authors)}
    s_index = {s: j for j, s in enumerate(kept)}
    dense = np.zeros((len(authors), len(kept)), dtype=np.int64)
    for author, sub in pairs.iter_rows():
        if sub in s_index:
            dense[a_index[author], s_index[sub]] = 1
    product = dense.T @ dense
    sizes = np.diag(product)
    want = {}
    for i, a in enumerate(kept):
        for measure in ("jaccard", "cosine"):
            cands = []
            for j, b in enumerate(kept):
                o = int(product[i, j])
                if i == j or o == 0:
                    continue
                if measure == "jaccard":
                    exact = Fraction(o, int(sizes[i] + sizes[j] - o))
                else:
                    exact = Fraction(o * o, int(sizes[i] * sizes[j]))
                cands.append((-exact, b, o))
            if cands:
                want[(a, measure)] = [(b, o) for _, b, o in sorted(cands)[:k]]
    n_kept_users = int((dense.sum(axis=1) > 0).sum())
    return n_users, n_posts, eligible, want, n_kept_users, int(dense.sum())


@pytest.mark.parametrize("buckets", [2, 7])
def test_bucketed_graph_equals_dense_brute_force(planted, tmp_path, buckets):
    posts, path = planted
    top_n, min_posts, k = 60, 3, 7
    n_users, n_posts, eligible, want, n_kept_users, n_memb = dense_oracle(
        posts, top_n, min_posts, k
    )
    res = run_buckets(path, settings_for(top_n, min_posts, k), buckets, tmp_path)
    table = {r["subreddit"]: r for r in res.subreddits.iter_rows(named=True)}
    assert set(table) == set(n_posts)
    for name, row in table.items():
        assert (row["n_users"], row["n_posts"]) == (n_users[name], n_posts[name])
        assert row["rank"] == (eligible.index(name) + 1 if name in eligible else None)
    got = {}
    for row in res.neighbours.iter_rows(named=True):
        got.setdefault((row["subreddit"], row["measure"]), []).append(
            (row["neighbour"], row["overlap"])
        )
    assert got == want
    n_ties = sum(
        1
        for rows in res.neighbours.partition_by("subreddit", "measure")
        for x, y in zip(rows["value"], rows["value"][1:], strict=False)
        if x == y
    )
    assert n_ties >= 10, "the planted corpus should contain ties, to test the tie-break"
    assert (res.n_users, res.n_memberships) == (n_kept_users, n_memb)


def test_buckets_split_users_with_a_stable_hash(planted, tmp_path):
    """Every author lands in exactly one bucket, the same one in another process (no salted
    hash), and the buckets hold about equal numbers of users."""
    posts, path = planted
    authors = posts.drop_nulls("author")["author"].unique()
    seen = []
    for b in range(4):
        folder = tmp_path / f"b{b}"
        members = by_buckets.write_bucket_memberships(pl.scan_parquet(path), b, 4, folder)
        seen.append(len(members.user_indptr) - 1)
    assert sum(seen) == authors.len()
    assert min(seen) > authors.len() / 4 * 0.8
    code = (
        "import sys, polars as pl; from splits.graph.buckets import bucket_of\n"
        "names = pl.Series('author', sys.argv[1:])\n"
        "print(pl.DataFrame(names).select(bucket_of(7))['author'].to_list())"
    )
    sample = authors.sort().head(50).to_list()
    outs = [
        subprocess.run(
            [sys.executable, "-c", code, *sample], capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    ]
    here = pl.DataFrame(pl.Series("author", sample)).select(by_buckets.bucket_of(7))
    assert outs[0] == outs[1] == f"{here['author'].to_list()}\n"


def test_cli_steps_write_the_single_jobs_bytes(planted, tmp_path):
    """The subcommands the rules run, chained over 3 buckets: byte-identical outputs to
    ``splits graph --posts``; a bucket out of range is one line."""
    _, path = planted
    settings = json.dumps({"top_n": 40, "min_posts": 2, "k": 5, "block_mb": 256})
    cli = [sys.executable, "-m", "splits.cli"]

    def run(*args):
        proc = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc

    run("graph", "--posts", str(path), "--settings", settings, "--out-dir", str(tmp_path / "one"))
    dirs = [tmp_path / "b" / str(b) for b in range(3)]
    for b, folder in enumerate(dirs):
        run("graph-bucket", "--posts", str(path), "--bucket", str(b),
            "--settings", '{"buckets": 3}', "--out-dir", str(folder))  # fmt: skip
    subs = tmp_path / "b" / "subreddits.parquet"
    run("graph-subreddits", "--counts", *[str(d / "counts.parquet") for d in dirs],
        "--settings", '{"top_n": 40, "min_posts": 2}', "--out", str(subs))  # fmt: skip
    for folder in dirs:
        run("graph-overlaps", "--bucket-dir", str(folder), "--subreddits", str(subs),
            "--settings", '{"block_mb": 256}', "--out-dir", str(folder))  # fmt: skip
    run("graph", "--subreddits", str(subs),
        "--overlaps", *[str(d / "overlaps.parquet") for d in dirs],
        "--bucket-stats", *[str(d / "overlaps.json") for d in dirs],
        "--settings", settings, "--threads", "2", "--out-dir", str(tmp_path / "sum"))  # fmt: skip
    for name in ("subreddits.parquet", "neighbours.parquet", "summary.json"):
        one, summed = (tmp_path / "one" / name), (tmp_path / "sum" / name)
        assert one.read_bytes() == summed.read_bytes(), name
    bad = subprocess.run(
        [*cli, "graph-bucket", "--posts", str(path), "--bucket", "3",
         "--settings", '{"buckets": 3}', "--out-dir", str(tmp_path / "bad")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "--bucket" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_bucket_arguments_and_stats_mismatch(planted, tmp_path):
    _, path = planted
    with pytest.raises(ConfigError, match="bucket"):
        by_buckets.write_bucket_memberships(pl.scan_parquet(path), -1, 4, tmp_path / "x")
    with pytest.raises(ConfigError, match="ingest.buckets"):
        by_buckets.write_bucket_memberships(pl.scan_parquet(path), 0, 0, tmp_path / "x")
    with pytest.raises(ConfigError, match="author"):
        by_buckets.write_bucket_memberships(
            pl.DataFrame({"subreddit": ["a"]}).lazy(), 0, 2, tmp_path / "x"
        )
    settings = settings_for()
    run_buckets(path, settings, 2, tmp_path / "w")
    work = tmp_path / "w"
    with pytest.raises(ConfigError, match="one per bucket"):
        by_buckets.reduce_buckets(
            work / "subreddits.parquet",
            [work / "bucket-0" / "overlaps.parquet"],
            [work / f"bucket-{b}" / "overlaps.json" for b in range(2)],
            settings,
            1,
        )


def test_dry_run_with_four_buckets_has_four_maps_and_one_reduce(tmp_path):
    work = copy_repo(tmp_path / "repo")
    proc = snakemake_fork.run(
        ["-n", "--cores", "2", "--config", "ingest={buckets: 4}", "--",
         "results/graph/neighbours.parquet"],
        work, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = {
        rule: n for rule, n in dry_run_job_counts(proc.stdout).items() if rule.startswith("graph")
    }
    assert counts == {"graph": 1, "graph_bucket": 4, "graph_overlaps": 4, "graph_subreddits": 1}
    for b in range(4):
        assert f"results/graph/buckets/{b}/overlaps.parquet" in proc.stdout
    one = snakemake_fork.run(
        ["-n", "--cores", "2", "--", "results/graph/neighbours.parquet"], work, timeout=600
    )
    assert one.returncode == 0, one.stderr[-3000:]
    assert "graph_bucket" not in one.stdout and "rule graph:" in one.stdout


def test_snakemake_run_with_three_buckets_writes_the_one_jobs_graph(default_run, tmp_path):
    """The real engine: the default config's graph with one job (the session's default run),
    then, in a copy of that run, with ingest.buckets = 3 (the changed rule re-runs as the reduce
    of the bucket jobs): byte-identical outputs, and the buckets' scratch files removed."""
    work = tmp_path / "repo"
    shutil.copytree(default_run, work, symlinks=True)
    target = "results/graph/neighbours.parquet"
    graph_dir = work / "results" / "graph"
    names = ("subreddits.parquet", "neighbours.parquet", "summary.json")
    before = {name: (default_run / "results" / "graph" / name).read_bytes() for name in names}
    summed = run_snakemake(work, target, "--config", "ingest={buckets: 3}")
    assert summed.returncode == 0, summed.stderr[-3000:]
    assert (work / "logs" / "graph" / "overlaps-2.log").exists(), "the bucket jobs did not run"
    assert {name: (graph_dir / name).read_bytes() for name in names} == before
    assert not [p for p in (graph_dir / "buckets").rglob("*") if p.is_file()]
