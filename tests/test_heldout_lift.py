"""Held-out lift bookkeeping: seen posts leave the list, the list length and the target count."""

from __future__ import annotations

import numpy as np
import pytest
from splits.config.settings import schema_defaults
from splits.hypotheses.heldout_lift import heldout_counts, subpool
from splits.hypotheses.retrieval import Pool, PoolIndex, depth
from splits.hypotheses.settings import LiftSettings


def make_pool(n=200, seed=0):
    rng = np.random.default_rng(seed)
    is_a = rng.random(n) < 0.5
    texts = [
        " ".join(rng.choice(["kosher", "bagel", "game", "team", "ball"], 6))
        + (" shul" if a and rng.random() < 0.6 else "")
        for a in is_a
    ]
    ids = np.array([f"p{i:04d}" for i in range(n)], dtype=object)
    return Pool("T", "a", "b", ids, texts, is_a)


@pytest.mark.parametrize("list_size", [None, 120])
def test_seen_posts_leave_the_list_and_its_counts(list_size):
    pool = make_pool()
    index = PoolIndex(pool, schema_defaults(LiftSettings).retrieval.bm25)
    seen = frozenset(pool.post_ids[[0, 3, 5, 7, 11, 13, 17, 19]])
    fractions = (0.05, 0.1, 0.5)
    counts, docs, _ = heldout_counts(index, ["shul"], "a", seen, fractions, list_size, seed=1)
    full = index.rank(["shul"], 1, None, pool.size).docs
    expected_docs = [d for d in full if pool.post_ids[d] not in seen]
    length = min(pool.size - len(seen), list_size or pool.size)
    expected_docs = expected_docs[:length]
    assert list(docs[: len(expected_docs)]) == expected_docs[: len(docs)]
    assert not {pool.post_ids[d] for d in docs} & seen
    if list_size is None:
        total = int(sum(pool.is_a[i] for i in range(pool.size) if pool.post_ids[i] not in seen))
    else:
        total = int(pool.is_a[expected_docs].sum())
    for fraction, n, hits, big_k, size in counts:
        assert size == length and big_k == total
        assert n == depth(fraction, length)
        assert hits == int(pool.is_a[expected_docs[:n]].sum())


def test_subpool_keeps_order_and_labels():
    pool = make_pool(20)
    keep = np.arange(20) % 3 == 0
    part = subpool(pool, keep)
    assert list(part.post_ids) == list(pool.post_ids[keep])
    assert list(part.is_a) == list(pool.is_a[keep])
    assert part.texts == [t for t, k in zip(pool.texts, keep, strict=True) if k]
