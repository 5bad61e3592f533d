"""The discovery/held-out split (disjoint, by thread, seeded) and the redundancy marks."""

from __future__ import annotations

import itertools

import polars as pl
import pytest
from splits.hypotheses.heldout import DISCOVERY, HELDOUT, split_halves
from splits.hypotheses.redundancy import jaccard, repeats


def posts(n_threads: int = 400, per_thread: int = 5) -> pl.DataFrame:
    rows = [
        {"post_id": f"p{t}_{i}", "conversation_id": f"t{t}", "text": "x"}
        for t in range(n_threads)
        for i in range(per_thread)
    ]
    return pl.DataFrame(rows)


def test_halves_are_disjoint_cover_the_pool_and_keep_threads_together():
    split = split_halves(posts(), seed=7, fraction=0.5, scope="topic|a|b")
    assert set(split["half"]) == {DISCOVERY, HELDOUT}
    discovery = set(split.filter(pl.col("half") == DISCOVERY)["post_id"])
    heldout = set(split.filter(pl.col("half") == HELDOUT)["post_id"])
    assert not discovery & heldout and len(discovery | heldout) == split.height
    assert split.group_by("conversation_id").agg(pl.col("half").n_unique())["half"].max() == 1
    share = len(heldout) / split.height
    assert 0.4 < share < 0.6  # 400 threads at 0.5: a binomial share within 4 sd


def test_split_is_seeded_scoped_and_independent_of_the_rest_of_the_pool():
    frame = posts()
    first = split_halves(frame, seed=7, fraction=0.5, scope="s")
    assert first.equals(split_halves(frame, seed=7, fraction=0.5, scope="s"))
    assert not first.equals(split_halves(frame, seed=8, fraction=0.5, scope="s"))
    assert not first.equals(split_halves(frame, seed=7, fraction=0.5, scope="other"))
    part = split_halves(frame.head(50), seed=7, fraction=0.5, scope="s")
    assert part["half"].to_list() == first.head(50)["half"].to_list()


def test_posts_without_a_thread_are_split_by_their_own_id():
    frame = posts(200, 1).with_columns(pl.lit(None, dtype=pl.String).alias("conversation_id"))
    split = split_halves(frame, seed=1, fraction=0.3)
    assert 0.2 < (split["half"] == HELDOUT).mean() < 0.4
    assert split_halves(frame.drop("conversation_id"), seed=1, fraction=0.3)["half"].equals(
        split["half"]
    )


def test_pool_halves_split_a_pool_as_split_halves_splits_its_frame():
    """The pools' split (baseline.pool_halves: post ids and a thread map, no frame) is the
    frame's: a thread's posts together, a post without a known thread on its own, an empty
    thread id a thread of its own."""
    from splits.hypotheses.baseline import pool_halves

    frame = posts(60, 3)
    ids = frame["post_id"].to_list()
    threads = {p: t for p, t in zip(ids, frame["conversation_id"], strict=True)}
    for p in ids[::7]:
        del threads[p]  # unknown thread: the post is its own unit
    for p in ids[1::11]:
        threads[p] = ""
    frame = frame.with_columns(
        pl.Series("conversation_id", [threads.get(p) for p in ids], dtype=pl.String)
    )
    for seed, scope in ((7, "t\x1fa\x1fb"), (8, "")):
        expected = split_halves(frame, seed, 0.4, scope)["half"] == HELDOUT
        assert pool_halves(ids, threads, scope, seed, 0.4).tolist() == expected.to_list()


def test_fraction_outside_the_open_interval_is_an_error():
    with pytest.raises(ValueError, match="fraction"):
        split_halves(posts(2, 1), seed=1, fraction=1.0)


def test_repeats_marks_overlapping_retrievals_against_brute_force():
    sets = [
        frozenset(range(0, 10)),
        frozenset(range(1, 11)),
        frozenset(range(50, 60)),
        frozenset(range(2, 12)),
        frozenset(range(51, 61)),
        frozenset(),
    ]
    ids = [f"h{i}" for i in range(len(sets))]
    marks = repeats(ids, sets, threshold=0.6)
    # brute force: visit in order; a set repeats the earlier representative it overlaps most
    representatives = []
    for i, s in enumerate(sets):
        over = [(jaccard(s, sets[j]), j) for j in representatives if jaccard(s, sets[j]) > 0.6]
        if over:
            overlap, j = max(over)
            assert marks[i] == (ids[j], overlap)
        else:
            representatives.append(i)
            assert marks[i] == (None, None)
    assert [m[0] for m in marks] == [None, "h0", None, "h0", "h2", None]
    assert marks[3][1] == pytest.approx(8 / 12)
    for a, b in itertools.combinations(range(len(sets)), 2):
        assert jaccard(sets[a], sets[b]) == jaccard(sets[b], sets[a])
