"""Subreddit graph (docs/method.md §2.2): exact top-K neighbours against a brute force over Python sets."""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.graph import build as graph
from splits.graph import memberships as memberships_module
from splits.graph.settings import GraphSettings
from splits.io import write_parquet


def random_posts(
    n_subreddits: int = 320, n_users: int = 2500, seed: int = 7, zipf: float = 1.15
) -> pl.DataFrame:
    """Posts with Zipf subreddit popularity and heavy-tailed user activity; many small
    subreddits, so equal similarity values (ties) are common."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, n_subreddits + 1) ** zipf
    weights /= weights.sum()
    activity = np.minimum(rng.pareto(1.3, n_users) * 2 + 1, 150).astype(int)
    authors = np.repeat(np.arange(n_users), activity)
    subs = rng.choice(n_subreddits, size=len(authors), p=weights)
    # scramble names so that name order differs from popularity order; mixed case on input
    names = [f"Sub{(i * 7919) % 10007:05d}" for i in range(n_subreddits)]
    return pl.DataFrame(
        {
            "post_id": [f"p{i}" for i in range(len(authors))],
            "subreddit": [names[s] for s in subs],
            "author": [f"user{a}" for a in authors],
        }
    )


def brute_force(posts: pl.DataFrame, top_n: int, min_posts: int, k: int):
    users: dict[str, set[str]] = {}
    n_posts: dict[str, int] = {}
    for sub, author in posts.select("subreddit", "author").iter_rows():
        sub = sub.lower()
        users.setdefault(sub, set()).add(author)
        n_posts[sub] = n_posts.get(sub, 0) + 1
    eligible = sorted(
        (s for s in users if n_posts[s] >= min_posts), key=lambda s: (-len(users[s]), s)
    )
    kept = eligible[:top_n]
    result: dict[tuple[str, str], list[tuple[str, int, float]]] = {}
    for a in kept:
        for measure in ("jaccard", "cosine"):
            cands = []
            for b in kept:
                if b == a:
                    continue
                o = len(users[a] & users[b])
                if o == 0:
                    continue
                if measure == "jaccard":
                    exact = Fraction(o, len(users[a] | users[b]))
                    value = float(exact)
                else:
                    exact = Fraction(o * o, len(users[a]) * len(users[b]))
                    value = o / math.sqrt(len(users[a]) * len(users[b]))
                cands.append((-exact, b, o, value))
            cands.sort()
            result[(a, measure)] = [(b, o, v) for _, b, o, v in cands[:k]]
    return users, n_posts, eligible, kept, result


@pytest.fixture(scope="module")
def corpus() -> pl.DataFrame:
    return random_posts()


@pytest.mark.parametrize("threads,block_mb", [(1, 256), (2, 0.05)])
def test_neighbours_equal_brute_force(corpus, threads, block_mb):
    top_n, min_posts, k = 300, 3, 10
    users, n_posts, eligible, kept, expected = brute_force(corpus, top_n, min_posts, k)
    assert len(kept) == 300 and len(eligible) > 300, "corpus must exercise both rules"
    if block_mb < 1:
        assert graph.rows_per_block(len(kept), block_mb) < 10, "small budget must mean many blocks"
    result = graph.compute_graph(
        corpus.lazy(),
        schema_defaults(GraphSettings, top_n=top_n, min_posts=min_posts, k=k, block_mb=block_mb),
        threads,
    )
    nb = result.neighbours
    assert nb.schema == pl.Schema(graph.NEIGHBOURS_SCHEMA)
    got: dict[tuple[str, str], list] = {}
    for row in nb.iter_rows(named=True):
        got.setdefault((row["subreddit"], row["measure"]), []).append(row)
    n_ties = 0
    for (a, measure), exp in expected.items():
        rows = got.get((a, measure), [])
        assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
        assert [(r["neighbour"], r["overlap"]) for r in rows] == [(b, o) for b, o, _ in exp], (
            a,
            measure,
        )
        for r, (b, _, v) in zip(rows, exp, strict=True):
            assert r["value"] == pytest.approx(v, rel=1e-12)
            assert r["size"] == len(users[a]) and r["neighbour_size"] == len(users[b])
        values = [v for _, _, v in exp]
        n_ties += sum(1 for x, y in zip(values, values[1:], strict=False) if x == y)
    assert set(got) <= set(expected)
    assert n_ties > 50, "the corpus should contain ties, to test the tie-break"


def test_subreddit_table_min_posts_and_top_n(corpus):
    top_n, min_posts = 120, 5
    users, n_posts, eligible, kept, _ = brute_force(corpus, top_n, min_posts, 1)
    subs = graph.compute_graph(
        corpus.lazy(), schema_defaults(GraphSettings, top_n=top_n, min_posts=min_posts, k=1)
    ).subreddits
    assert subs.schema == pl.Schema(graph.SUBREDDITS_SCHEMA)
    assert subs.height == len(users)
    table = {r["subreddit"]: r for r in subs.iter_rows(named=True)}
    for name, row in table.items():
        assert row["n_users"] == len(users[name])
        assert row["n_posts"] == n_posts[name]
        if n_posts[name] < min_posts:
            assert row["rank"] is None and not row["kept"]
        else:
            assert row["rank"] == eligible.index(name) + 1
        assert row["kept"] == (name in kept)
    assert int(subs["kept"].sum()) == top_n
    # a popular-by-users subreddit with too few posts is dropped even though it would rank high
    assert any(n_posts[s] < min_posts for s in users)


def test_min_posts_drops_large_but_quiet_subreddit():
    rows = []
    # "quiet": 10 users, one post each (10 posts); "busy": 3 users, 20 posts; "mid": 5 users x 4
    rows += [("quiet", f"u{i}") for i in range(10)]
    rows += [("busy", f"u{i % 3}") for i in range(20)]
    rows += [("mid", f"u{i % 5}") for i in range(20)]
    posts = pl.DataFrame(rows, schema=["subreddit", "author"], orient="row")
    res = graph.compute_graph(
        posts.lazy(), schema_defaults(GraphSettings, top_n=1, min_posts=12, k=5)
    )
    table = {r["subreddit"]: r for r in res.subreddits.iter_rows(named=True)}
    assert table["quiet"]["rank"] is None and not table["quiet"]["kept"]
    assert table["mid"]["rank"] == 1 and table["mid"]["kept"]
    assert table["busy"]["rank"] == 2 and not table["busy"]["kept"]
    # a single kept subreddit has no neighbours
    assert res.neighbours.height == 0
    res2 = graph.compute_graph(
        posts.lazy(), schema_defaults(GraphSettings, top_n=5, min_posts=0, k=5)
    )
    assert res2.subreddits["kept"].all()
    quiet = res2.neighbours.filter(subreddit="quiet", measure="jaccard")
    # quiet {u0..u9} vs mid {u0..u4}: 5/10; vs busy {u0,u1,u2}: 3/10
    assert quiet["neighbour"].to_list() == ["mid", "busy"]
    assert quiet["value"].to_list() == pytest.approx([0.5, 0.3])
    cos = res2.neighbours.filter(subreddit="busy", measure="cosine")
    assert cos["neighbour"].to_list() == ["mid", "quiet"]  # 3/sqrt(15) > 3/sqrt(30)
    assert cos["overlap"].to_list() == [3, 3]


def test_tie_break_by_name():
    # a shares exactly one user with each of z, m, b (all of size 2): equal values, name order
    rows = [("a", "x"), ("a", "y"), ("a", "w")]
    for i, name in enumerate(["z", "m", "b"]):
        rows += [(name, ["x", "y", "w"][i]), (name, f"only{name}")]
    posts = pl.DataFrame(rows, schema=["subreddit", "author"], orient="row")
    res = graph.compute_graph(
        posts.lazy(), schema_defaults(GraphSettings, top_n=10, min_posts=0, k=2)
    )
    for measure in ("jaccard", "cosine"):
        got = res.neighbours.filter(subreddit="a", measure=measure)["neighbour"].to_list()
        assert got == ["b", "m"], measure


def test_bad_parameters_and_input(tmp_path):
    posts = pl.DataFrame({"subreddit": ["a"], "author": ["u"]})
    with pytest.raises(ConfigError, match="graph.k"):
        graph.compute_graph(posts.lazy(), schema_defaults(GraphSettings, top_n=5, min_posts=0, k=0))
    with pytest.raises(ConfigError, match="author"):
        graph.compute_graph(
            pl.DataFrame({"subreddit": ["a"]}).lazy(),
            schema_defaults(GraphSettings, top_n=5, min_posts=0, k=5),
        )


def test_cli_writes_contract_outputs(tmp_path, corpus):
    path = write_parquet(corpus, tmp_path / "posts.parquet")
    out = tmp_path / "graph"
    settings = '{"top_n": 50, "min_posts": 2, "k": 5, "block_mb": 256}'
    cmd = [
        sys.executable,
        "-m",
        "splits.cli",
        "graph",
        "--posts",
        str(path),
        "--settings",
        settings,
    ]
    cmd += ["--out-dir", str(out), "--threads", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    subs = pl.read_parquet(out / "subreddits.parquet")
    nb = pl.read_parquet(out / "neighbours.parquet")
    assert int(subs["kept"].sum()) == 50
    assert set(nb["subreddit"]) <= set(subs.filter("kept")["subreddit"])
    assert nb.group_by("subreddit", "measure").len()["len"].max() == 5
    assert set(nb["measure"]) == {"jaccard", "cosine"}
    first = (out / "neighbours.parquet").read_bytes()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0
    assert (out / "neighbours.parquet").read_bytes() == first, "output must be deterministic"
    missing = subprocess.run(
        [*cmd[:5], str(tmp_path / "nope.parquet"), *cmd[6:]], capture_output=True, text=True
    )
    assert missing.returncode == 2
    assert "nope.parquet" in missing.stderr and "Traceback" not in missing.stderr


def test_default_pipeline_graph(default_run: Path):
    import yaml

    results = default_run / "results"
    subs = pl.read_parquet(results / "graph" / "subreddits.parquet")
    nb = pl.read_parquet(results / "graph" / "neighbours.parquet")
    assert subs.schema == pl.Schema(graph.SUBREDDITS_SCHEMA)
    assert nb.schema == pl.Schema(graph.NEIGHBOURS_SCHEMA)
    cfg = yaml.safe_load((default_run / "config" / "config.yaml").read_text())["graph"]
    assert subs["kept"].sum() > 10 and nb["rank"].max() == cfg["k"]
    # the rule ran the stage on the pipeline's posts table with the configured parameters
    posts = [results / "posts" / "posts.parquet"]  # posts_files() of common.smk
    again = graph.compute_graph(
        pl.scan_parquet(posts),
        schema_defaults(GraphSettings, top_n=cfg["top_n"], min_posts=cfg["min_posts"], k=cfg["k"]),
    )
    assert again.subreddits.equals(subs)
    assert again.neighbours.equals(nb)


def test_case_variants_are_one_subreddit_and_empty_input():
    posts = pl.DataFrame(
        {
            "subreddit": ["AskReddit", "askreddit", "ASKREDDIT", "pics", "pics", "pics", None],
            "author": ["u1", "u1", "u2", "u1", "u3", None, "u4"],
        }
    )
    res = graph.compute_graph(
        posts.lazy(), schema_defaults(GraphSettings, top_n=10, min_posts=0, k=5)
    )
    table = {r["subreddit"]: r for r in res.subreddits.iter_rows(named=True)}
    assert set(table) == {"askreddit", "pics"}
    assert (table["askreddit"]["n_users"], table["askreddit"]["n_posts"]) == (2, 3)
    assert (table["pics"]["n_users"], table["pics"]["n_posts"]) == (2, 2)  # null author dropped
    row = res.neighbours.filter(subreddit="askreddit", measure="jaccard").row(0, named=True)
    assert (row["neighbour"], row["overlap"], row["value"]) == ("pics", 1, pytest.approx(1 / 3))
    assert res.n_users == 3 and res.n_memberships == 4
    empty = graph.compute_graph(
        posts.clear().lazy(), schema_defaults(GraphSettings, top_n=10, min_posts=0, k=5)
    )
    assert empty.subreddits.height == 0 and empty.neighbours.height == 0


@settings(max_examples=40, deadline=None)
@given(
    memberships=st.lists(
        st.tuples(st.integers(0, 11), st.integers(0, 25)), min_size=1, max_size=120
    ),
    k=st.integers(1, 6),
    top_n=st.integers(1, 12),
    min_posts=st.integers(0, 4),
    tiny_blocks=st.booleans(),
)
def test_small_random_graphs_equal_brute_force(memberships, k, top_n, min_posts, tiny_blocks):
    posts = pl.DataFrame(
        {
            "subreddit": [f"s{s}" for s, _ in memberships],
            "author": [f"u{u}" for _, u in memberships],
        }
    )
    _, _, _, kept, expected = brute_force(posts, top_n, min_posts, k)
    res = graph.compute_graph(
        posts.lazy(),
        schema_defaults(
            GraphSettings,
            top_n=top_n,
            min_posts=min_posts,
            k=k,
            block_mb=0.0005 if tiny_blocks else 64,
        ),
        2,
    )
    assert sorted(res.subreddits.filter("kept")["subreddit"]) == sorted(kept)
    got = {}
    for row in res.neighbours.iter_rows(named=True):
        got.setdefault((row["subreddit"], row["measure"]), []).append(
            (row["neighbour"], row["overlap"], row["value"])
        )
    want = {key: rows for key, rows in expected.items() if rows}
    assert set(got) == set(want)
    for key, rows in want.items():
        assert [(b, o) for b, o, _ in got[key]] == [(b, o) for b, o, _ in rows], key
        assert [v for _, _, v in got[key]] == pytest.approx([v for _, _, v in rows], rel=1e-12)


@pytest.mark.parametrize(
    "section,key",
    [({"k": "x"}, "graph.k"), ({"block_mb": 0}, "graph.block_mb"), ({"topn": 5}, "graph.topn")],
)
def test_graph_config_errors_name_the_key(section, key):
    from splits.config.schema import validate_config

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config({"graph": section})
    filled = validate_config({"graph": {}})["graph"]
    assert filled == {
        "top_n": 50000,
        "min_posts": 20,
        "k": 20,
        "block_mb": 256,
        "threads": 2,
    }


@settings(max_examples=60, deadline=None)
@given(
    matrix=st.integers(1, 9).flatmap(
        lambda n_subs: st.lists(
            st.lists(st.booleans(), min_size=n_subs, max_size=n_subs), min_size=1, max_size=8
        )
    ),
    k=st.integers(1, 11),
    threads=st.sampled_from([1, 2]),
    tiny_blocks=st.booleans(),
)
def test_fused_top_k_equals_brute_force_on_incidence_matrices(matrix, k, threads, tiny_blocks):
    """The kernel against a dense product and an exact sort (Fractions, then column): few
    users, so equal similarities (ties) abound; K may exceed the number of subreddits."""
    import scipy.sparse as sp

    dense = np.array(matrix, dtype=np.int32)  # users x subreddits
    n_subs = dense.shape[1]
    by_user = sp.csr_matrix(dense)
    by_user.indices = by_user.indices.astype(np.int32)
    incidence = graph.Incidence(
        names=np.array([f"s{j}" for j in range(n_subs)], dtype=object),
        sizes=dense.sum(axis=0).astype(np.int64),
        by_user=by_user,
        by_subreddit=by_user.T.tocsr(),
    )
    table = graph.neighbour_table(incidence, k, threads, 1e-6 if tiny_blocks else 64)
    product = dense.T.astype(np.int64) @ dense  # overlaps, computed independently
    sizes = incidence.sizes
    for i in range(n_subs):
        for measure in ("jaccard", "cosine"):
            candidates = []
            for j in range(n_subs):
                o = int(product[i, j])
                if j == i or o == 0:
                    continue
                if measure == "jaccard":
                    exact = Fraction(o, int(sizes[i] + sizes[j] - o))
                else:
                    exact = Fraction(o * o, int(sizes[i] * sizes[j]))
                candidates.append((-exact, j, o))
            want = [(f"s{j}", o) for _, j, o in sorted(candidates)[:k]]
            rows = table.filter(subreddit=f"s{i}", measure=measure)
            assert list(zip(rows["neighbour"], rows["overlap"], strict=True)) == want
            assert rows["rank"].to_list() == list(range(1, len(want) + 1))


@pytest.mark.parametrize("threads", [1, 2])
def test_memberships_in_small_batches_equal_python_sets(corpus, monkeypatch, threads):
    """Users numbered by the compiled hash tables and their pairs kept in per-table sets, every
    table grown many times from 2 slots here: the same (user, subreddit) sets as Python sets
    over the names."""
    monkeypatch.setattr(graph._NameTable.__init__, "__defaults__", (4,))
    monkeypatch.setattr(graph._AuthorTable.__init__, "__defaults__", (2, 2, 1))
    members = graph.memberships(corpus.lazy(), batch_rows=97, threads=threads)
    expected: dict[str, set[str]] = {}
    for sub, author in corpus.select("subreddit", "author").iter_rows():
        expected.setdefault(author, set()).add(sub.lower())
    got = [
        frozenset(members.names[members.user_codes[a:b]].tolist())
        for a, b in zip(members.user_indptr[:-1], members.user_indptr[1:], strict=True)
    ]
    assert all(
        len(s) == b - a
        for s, a, b in zip(got, members.user_indptr, members.user_indptr[1:], strict=False)
    )
    assert sorted(map(sorted, got)) == sorted(map(sorted, map(frozenset, expected.values())))
    n_users = {name: 0 for name in members.names.tolist()}
    for subs in expected.values():
        for name in subs:
            n_users[name] += 1
    assert members.n_users.tolist() == [n_users[n] for n in members.names.tolist()]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_posts_grouped_by_author_table_as_a_stable_sort(monkeypatch, threads):
    """A batch's posts grouped by their author's table (the hash's top 8 bits), each thread
    placing one part of the batch: numpy's stable sort by table, and the tables' bounds."""
    monkeypatch.setattr(memberships_module, "_SPLIT_ROWS", 1)
    rng = np.random.default_rng(3)
    h1 = rng.integers(0, 2**64, 5000, dtype=np.uint64, endpoint=False)
    h1[:300] = h1[0]  # one author's many posts
    h2 = rng.integers(0, 2**64, 5000, dtype=np.uint64, endpoint=False)
    codes = rng.integers(0, 70, 5000)
    starts, g1, g2, gc = graph._AuthorTable(threads=threads)._group_by_table(h1, h2, codes)
    table = (h1 >> np.uint64(56)).astype(np.int64)
    order = np.argsort(table, kind="stable")
    assert g1.tolist() == h1[order].tolist() and g2.tolist() == h2[order].tolist()
    assert gc.tolist() == codes[order].tolist()
    assert starts.tolist() == [0, *np.cumsum(np.bincount(table, minlength=256)).tolist()]


def test_one_author_of_many_subreddits_grows_only_its_own_pair_set(monkeypatch):
    """Each author table keeps its authors' (user, subreddit) pairs in its own set: an author of
    5,000 subreddits (a bot, a power user) grows its table's set, not the 255 others (grown
    together, they would hold 256 times its subreddits); the memberships stay exact."""
    sizes = []

    class Recorded(graph._AuthorTable):
        def distinct_pairs(self, relabel):
            sizes.append(np.diff(self.pair_start))
            return super().distinct_pairs(relabel)

    monkeypatch.setattr(memberships_module, "_AuthorTable", Recorded)
    hub = [(f"s{i}", "hub") for i in range(5000)]
    others = [(f"s{(7 * u + j) % 5000}", f"u{u}") for u in range(2000) for j in range(2)]
    posts = pl.DataFrame(hub + others, schema=["subreddit", "author"], orient="row")
    members = graph.memberships(posts.lazy(), batch_rows=1000, threads=2)
    rows = sorted(members.user_indptr[1:] - members.user_indptr[:-1], reverse=True)
    assert rows[0] == 5000 and rows[1:] == [2] * 2000
    (table_sizes,) = sizes
    initial = graph._AuthorTable.__init__.__defaults__[1]
    assert table_sizes.max() >= 5000 / 0.7
    assert sorted(table_sizes)[:-1] == [initial] * 255


def test_case_variants_in_different_batches_merge(monkeypatch):
    """Subreddit names are numbered as they first appear, batch by batch: variants of one name
    met in different batches (and a user's repeats across batches) still count once, and the
    counts follow the sorted lower-cased names."""
    monkeypatch.setattr(graph._NameTable.__init__, "__defaults__", (2,))
    monkeypatch.setattr(graph._AuthorTable.__init__, "__defaults__", (1, 1, 1))
    posts = pl.DataFrame(
        {
            "subreddit": ["b", "B", "a", "b", "A", "c", "B", "a", "C", "b"],
            "author": ["u1", "u1", "u2", "u2", "u1", "u3", "u3", "u2", "u1", "u1"],
        }
    )
    members = graph.memberships(posts.lazy(), batch_rows=3)
    assert members.names.tolist() == ["a", "b", "c"]
    assert members.n_posts.tolist() == [3, 5, 2]
    assert members.n_users.tolist() == [2, 3, 2]  # a: u1 u2; b: u1 u2 u3; c: u1 u3
    rows = [
        members.names[members.user_codes[lo:hi]].tolist()
        for lo, hi in zip(members.user_indptr[:-1], members.user_indptr[1:], strict=True)
    ]
    # codes sorted within a user; users in the order of their hash tables
    assert sorted(rows) == [["a", "b"], ["a", "b", "c"], ["b", "c"]]


def test_neighbours_do_not_depend_on_column_order_within_user_rows(corpus):
    """The kernel walks each user's columns in order: an incidence matrix whose rows hold their
    columns unsorted gives the same table."""
    import scipy.sparse as sp

    members = graph.memberships(corpus.lazy())
    subreddits = graph.subreddit_table(members, 200, 1)
    incidence = graph.build_incidence(members, subreddits)
    want = graph.neighbour_table(incidence, 7, 2, 1e-3)
    a = incidence.by_user
    rng = np.random.default_rng(3)
    indices = a.indices.copy()
    for lo, hi in zip(a.indptr[:-1], a.indptr[1:], strict=True):
        indices[lo:hi] = rng.permutation(indices[lo:hi])
    shuffled = sp.csr_matrix((a.data, indices, a.indptr), shape=a.shape)
    assert not shuffled.has_sorted_indices
    got = graph.neighbour_table(
        graph.Incidence(incidence.names, incidence.sizes, shuffled, incidence.by_subreddit),
        7, 2, 1e-3,
    )  # fmt: skip
    assert got.equals(want)


def test_heaps_beyond_the_threads_block_budget_run_on_fewer_workers(corpus, monkeypatch):
    """Each worker holds heaps of every subreddit: with a budget of ``threads`` x ``block_mb``
    too small for two workers' heaps one worker runs, and the table is the same."""
    members = graph.memberships(corpus.lazy())
    incidence = graph.build_incidence(members, graph.subreddit_table(members, 200, 1))
    seen = []
    real_top_k = graph.top_k
    monkeypatch.setattr(
        graph, "top_k", lambda *a: seen.append(a[-1]) or real_top_k(*a)
    )  # fmt: skip
    heaps_mib = 2 * incidence.n_subreddits * (24 * 7 + 16) / 2**20
    roomy = graph.neighbour_table(incidence, 7, 2, heaps_mib)
    tight = graph.neighbour_table(incidence, 7, 2, heaps_mib * 0.75)
    assert seen == [2, 1]
    assert tight.equals(roomy)
