"""Exact top-K neighbours of every subreddit from the incidence matrix (docs/method.md §2.2):
the compiled kernels of splits.graph.build.

The co-membership counts are the entries of ``At @ A``, a symmetric matrix, so the kernel
computes only its upper triangle: for each row i it accumulates, over the users of i, the
columns j > i of their (ascending) membership rows in one dense counter of the subreddits (the
classic sparse-product accumulator), and offers every touched pair (i, j) to the bounded heaps
of the K best of both rows, per measure. Neither the product nor a dense block of it is ever
materialised, and each pair's multiply-adds and ranking keys are computed once instead of twice.

Blocks of rows run in a thread pool (the kernel releases the GIL); since a pair updates the
heaps of two rows, each worker keeps its own heaps of every row, and the workers' heaps of a row
are merged at the end. Memory: per worker, one counter of the subreddits and K entries per
subreddit and measure.

Ordering is exact and deterministic: candidates are ranked by value (descending), ties by
neighbour column (ascending; the columns are in name order). Ranking keys are single correctly
rounded divisions of exact integers (Jaccard ``o / (a + b - o)``, cosine squared
``o^2 / (a b)``), symmetric in the two subreddits, so pairs whose similarity is equal as a
rational number tie exactly, and a top K is a function of the candidates alone, not of the
order in which they were offered.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

N_MEASURES = 2  # measure 0: Jaccard, 1: cosine


@numba.njit(nogil=True, cache=True)
def _worse(key_a: float, col_a: int, key_b: float, col_b: int) -> bool:
    """Whether candidate a ranks below candidate b (smaller key; larger column among ties)."""
    return key_a < key_b or (key_a == key_b and col_a > col_b)


@numba.njit(nogil=True, cache=True)
def _sift_down(keys: np.ndarray, cols: np.ndarray, overlaps: np.ndarray, n: int, i: int) -> None:
    """Restore the heap (worst candidate at the root) below position i."""
    while True:
        worst = i
        for child in (2 * i + 1, 2 * i + 2):
            if child < n and _worse(keys[child], cols[child], keys[worst], cols[worst]):
                worst = child
        if worst == i:
            return
        keys[i], keys[worst] = keys[worst], keys[i]
        cols[i], cols[worst] = cols[worst], cols[i]
        overlaps[i], overlaps[worst] = overlaps[worst], overlaps[i]
        i = worst


@numba.njit(nogil=True, cache=True)
def _ranking_key(o, size_row, size_col, measure):
    """The key a pair is ranked by under ``measure`` (0: Jaccard, 1: cosine). The one-job graph
    and the buckets' reduce both rank by it, so their ties and scores cannot drift apart."""
    if measure == 0:
        return o / (size_row + size_col - o)
    return (o * o) / (size_row * size_col)


@numba.njit(nogil=True, cache=True)
def _push(heap_keys, heap_cols, heap_overlaps, n, k, key, col, o):
    """Offer a candidate (its key, column and overlap) to a top-k heap of n entries; returns
    the heap's new size."""
    if n < k:  # fill the heap, then heapify once
        heap_keys[n] = key
        heap_cols[n] = col
        heap_overlaps[n] = o
        n += 1
        if n == k:
            for i in range(k // 2 - 1, -1, -1):
                _sift_down(heap_keys, heap_cols, heap_overlaps, k, i)
    elif _worse(heap_keys[0], heap_cols[0], key, col):
        heap_keys[0] = key
        heap_cols[0] = col
        heap_overlaps[0] = o
        _sift_down(heap_keys, heap_cols, heap_overlaps, k, 0)
    return n


@numba.njit(nogil=True, cache=True)
def _pop_sorted(heap_keys, heap_cols, heap_overlaps, n, out_cols, out_overlap):
    """Empty a heap of n entries (heapified when n < k) into ``out_*[:n]``, best first."""
    for last in range(n - 1, -1, -1):  # pop the worst to the back: the best ends up first
        out_cols[last] = heap_cols[0]
        out_overlap[last] = heap_overlaps[0]
        heap_keys[0] = heap_keys[last]
        heap_cols[0] = heap_cols[last]
        heap_overlaps[0] = heap_overlaps[last]
        _sift_down(heap_keys, heap_cols, heap_overlaps, last, 0)


@numba.njit(nogil=True, cache=True)
def _offer_pair(keys, cols, overlaps, counts, floor, k, row, col, key, o):
    """Offer the pair (row, col) to row's heap (``keys[row]`` etc. of ``counts[row]``
    entries); ``floor[row]`` is the heap's worst key once full (-1 before: keys are >= 0), so
    that most candidates are turned down by one comparison with a compact array."""
    if key < floor[row]:
        return
    n = counts[row]
    if n < k:  # fill the heap, then heapify once
        keys[row, n] = key
        cols[row, n] = col
        overlaps[row, n] = o
        n += 1
        counts[row] = n
        if n == k:
            for i in range(k // 2 - 1, -1, -1):
                _sift_down_row(keys, cols, overlaps, row, k, i)
            floor[row] = keys[row, 0]
    elif _worse(keys[row, 0], cols[row, 0], key, col):
        keys[row, 0] = key
        cols[row, 0] = col
        overlaps[row, 0] = o
        _sift_down_row(keys, cols, overlaps, row, k, 0)
        floor[row] = keys[row, 0]


@numba.njit(nogil=True, cache=True)
def _sift_down_row(keys, cols, overlaps, row, n, i):
    """``_sift_down`` of the heap in row ``row`` of 2-d arrays (no slices: no reference counts)."""
    while True:
        worst = i
        for child in (2 * i + 1, 2 * i + 2):
            if child < n and _worse(
                keys[row, child], cols[row, child], keys[row, worst], cols[row, worst]
            ):
                worst = child
        if worst == i:
            return
        keys[row, i], keys[row, worst] = keys[row, worst], keys[row, i]
        cols[row, i], cols[row, worst] = cols[row, worst], cols[row, i]
        overlaps[row, i], overlaps[row, worst] = overlaps[row, worst], overlaps[row, i]
        i = worst


@numba.njit(nogil=True, cache=True)
def _upper_top_k(
    start, stop, at_indptr, at_indices, a_indptr, a_indices, sizes, k,
    keys, cols, overlaps, counts, floor, counter, touched,
):  # fmt: skip
    """Offer every pair (i, j), i in [start, stop), j > i, sharing a user to the heaps of i and
    j (``keys[m, i]`` etc. for measure m; a worker's own heaps). ``a_indices`` ascend within a
    row; ``counter`` is all zeros (and is left so)."""
    # the measures' heaps as separate arrays: slicing inside the loops costs reference counts
    j_keys, j_cols, j_overlaps, j_counts, j_floor = (
        keys[0],
        cols[0],
        overlaps[0],
        counts[0],
        floor[0],
    )
    c_keys, c_cols, c_overlaps, c_counts, c_floor = (
        keys[1],
        cols[1],
        overlaps[1],
        counts[1],
        floor[1],
    )
    for row in range(start, stop):
        n_touched = 0
        for p in range(at_indptr[row], at_indptr[row + 1]):
            user = at_indices[p]
            lo, hi = a_indptr[user], a_indptr[user + 1]
            while lo < hi:  # the first membership of the user in a column after row
                mid = (lo + hi) >> 1
                if a_indices[mid] <= row:
                    lo = mid + 1
                else:
                    hi = mid
            for q in range(lo, a_indptr[user + 1]):
                col = a_indices[q]
                if counter[col] == 0:
                    touched[n_touched] = col
                    n_touched += 1
                counter[col] += 1
        size_row = float(sizes[row])
        for t in range(n_touched):
            col = touched[t]
            o = counter[col]
            counter[col] = 0
            size_col = float(sizes[col])
            # the calls are made only past the floors: a call costs reference counts
            key = _ranking_key(float(o), size_row, size_col, 0)
            if key >= j_floor[row]:
                _offer_pair(j_keys, j_cols, j_overlaps, j_counts, j_floor, k, row, col, key, o)
            if key >= j_floor[col]:
                _offer_pair(j_keys, j_cols, j_overlaps, j_counts, j_floor, k, col, row, key, o)
            key = _ranking_key(float(o), size_row, size_col, 1)
            if key >= c_floor[row]:
                _offer_pair(c_keys, c_cols, c_overlaps, c_counts, c_floor, k, row, col, key, o)
            if key >= c_floor[col]:
                _offer_pair(c_keys, c_cols, c_overlaps, c_counts, c_floor, k, col, row, key, o)


@numba.njit(nogil=True, cache=True)
def _merge_heaps(keys, cols, overlaps, counts, k, out_cols, out_overlap, out_count):
    """The top k of every row and measure over the workers' heaps (axis 0), best first."""
    heap_keys = np.empty(k, dtype=np.float64)
    heap_cols = np.empty(k, dtype=np.int64)
    heap_overlaps = np.empty(k, dtype=np.int64)
    for measure in range(N_MEASURES):
        for row in range(keys.shape[2]):
            n = 0
            for w in range(keys.shape[0]):
                for i in range(counts[w, measure, row]):
                    n = _push(
                        heap_keys, heap_cols, heap_overlaps, n, k,
                        keys[w, measure, row, i], cols[w, measure, row, i],
                        overlaps[w, measure, row, i],
                    )  # fmt: skip
            if n < k:
                for i in range(n // 2 - 1, -1, -1):
                    _sift_down(heap_keys, heap_cols, heap_overlaps, n, i)
            out_count[measure, row] = n
            _pop_sorted(
                heap_keys, heap_cols, heap_overlaps, n,
                out_cols[measure, row], out_overlap[measure, row],
            )  # fmt: skip


def top_k(
    by_user, by_subreddit, sizes: np.ndarray, k: int, blocks: list[tuple[int, int]], threads: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cols, overlaps, count): ``cols[m, i, :count[m, i]]`` (and their overlaps) are the top-k
    neighbours of subreddit i under measure m (0 Jaccard, 1 cosine), best first. ``by_user``
    is the users x subreddits CSR matrix (its rows' columns ascending), ``by_subreddit`` its
    transpose; ``blocks`` are the row ranges handed to the ``threads`` workers in turn."""
    n = len(sizes)
    workers = max(1, min(threads, len(blocks)))
    keys = np.empty((workers, N_MEASURES, n, k), dtype=np.float64)
    cols = np.empty((workers, N_MEASURES, n, k), dtype=np.int64)
    overlaps = np.empty((workers, N_MEASURES, n, k), dtype=np.int64)
    counts = np.zeros((workers, N_MEASURES, n), dtype=np.int64)
    floor = np.full((workers, N_MEASURES, n), -1.0)
    pending = iter(blocks)
    lock = threading.Lock()

    def work(w: int) -> None:
        counter, touched = np.zeros(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        while True:
            with lock:
                block = next(pending, None)
            if block is None:
                return
            _upper_top_k(
                block[0], block[1], by_subreddit.indptr, by_subreddit.indices, by_user.indptr,
                by_user.indices, sizes, k, keys[w], cols[w], overlaps[w], counts[w], floor[w],
                counter, touched,
            )  # fmt: skip

    if workers == 1:
        work(0)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(work, range(workers)))
    out_cols = np.empty((N_MEASURES, n, k), dtype=np.int64)
    out_overlap = np.empty((N_MEASURES, n, k), dtype=np.int64)
    out_count = np.zeros((N_MEASURES, n), dtype=np.int64)
    _merge_heaps(keys, cols, overlaps, counts, k, out_cols, out_overlap, out_count)
    return out_cols, out_overlap, out_count
