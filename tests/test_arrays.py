"""splits.arrays (polars' radix sort behind the index builders' counting) against numpy's own
np.sort and np.unique, and the positional index's postings from either sort path."""

from __future__ import annotations

import numpy as np
import pytest
from splits import arrays
from splits.retrieval import phrases
from splits.retrieval.phrases import PositionalIndex


@pytest.mark.parametrize("n", [0, 1, 2, 7, 5_000])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64])
def test_unique_counts_equal_numpys(n, dtype):
    rng = np.random.default_rng(n)
    low = 0 if np.dtype(dtype).kind == "u" else -50
    values = rng.integers(low, 60, size=n).astype(dtype)
    expected_values, expected_counts = np.unique(values, return_counts=True)
    got_values, got_counts = arrays.unique_counts(values)
    assert got_values.dtype == values.dtype
    np.testing.assert_array_equal(got_values, expected_values)
    np.testing.assert_array_equal(got_counts, expected_counts)
    assert got_counts.dtype == np.int64
    np.testing.assert_array_equal(arrays.sorted_integers(values), np.sort(values))


def test_sorted_integers_leaves_its_input_alone():
    values = np.array([3, -1, 2], dtype=np.int64)
    ordered = arrays.sorted_integers(values)
    np.testing.assert_array_equal(values, [3, -1, 2])
    np.testing.assert_array_equal(ordered, [-1, 2, 3])
    assert not np.shares_memory(ordered, values)
    single = np.array([5])
    assert not np.shares_memory(arrays.sorted_integers(single), single)


def test_postings_equal_with_either_sort(monkeypatch):
    """The postings by one sort of (term, position) keys equal numpy's stable argsort by term,
    the path taken where the keys would not fit in int64."""
    rng = np.random.default_rng(3)
    vocabulary = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(vocabulary, size=rng.integers(0, 30))) for _ in range(300)]
    radix = PositionalIndex(texts)
    monkeypatch.setattr(phrases, "SORT_KEY_LIMIT", 0)
    stable = PositionalIndex(texts)
    np.testing.assert_array_equal(radix.postings, stable.postings)
    np.testing.assert_array_equal(radix.term_start, stable.term_start)
    # every term's positions hold that term, ascending
    for term in range(len(radix.vocabulary)):
        at = radix.postings[radix.term_start[term] : radix.term_start[term + 1]]
        assert (radix.tokens[at] == term).all() and (np.diff(at) > 0).all()
