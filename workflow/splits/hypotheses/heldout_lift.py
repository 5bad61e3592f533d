"""Lift on held-out posts: every hypothesis scored again on posts its source never saw.

The pool's held-out half (``splits.hypotheses.heldout``, by thread, the split the Fighting Words
baseline discovers on the other half of) gets an index of its own; a hypothesis's ranked list over
it drops the posts its source saw (a TM's calibration posts, the posts an LLM generator read),
and the lift counts the rest: the list's length and its target posts are those of the held-out
half less the seen posts. The ranking is the project's (the whole held-out pool, BM25 of
``hypotheses.retrieval``) in both retrieval modes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from splits.hypotheses.retrieval import Pool, PoolIndex, depth, list_length


def subpool(pool: Pool, keep: np.ndarray) -> Pool:
    """The posts of ``pool`` where ``keep`` is true, in the pool's order."""
    texts = np.asarray(pool.texts, dtype=object)[keep].tolist()
    return replace(pool, post_ids=pool.post_ids[keep], texts=texts, is_a=pool.is_a[keep])


def heldout_counts(
    index: PoolIndex,
    lexicon: Iterable[str],
    target: str,
    seen: frozenset[str],
    k_fractions: Iterable[float],
    list_size: int | None,
    seed: int,
) -> tuple[list[tuple[float, int, int, int, int]], np.ndarray, int]:
    """(f, n, hits among the first n, target posts in the list, list length) per k fraction on
    the held-out index without the ``seen`` posts, the list's posts (pool positions, best first,
    seen ones dropped) and how many held-out posts match the lexicon."""
    pool = index.pool
    seen_mask = np.isin(pool.post_ids, np.asarray(sorted(seen), dtype=object)) if seen else None
    n_seen = int(seen_mask.sum()) if seen_mask is not None else 0
    is_target = pool.is_target(target)
    available = pool.size - n_seen
    length = list_length(available, list_size)
    fractions = sorted(set(k_fractions))
    wanted = length if list_size is not None else max(depth(f, length) for f in fractions)
    ranking = index.rank(list(lexicon), seed, None, min(pool.size, wanted + n_seen))
    docs = ranking.docs
    if seen_mask is not None:
        docs = docs[~seen_mask[docs]]
    docs = docs[:length] if list_size is not None else docs
    if list_size is None:
        total = int(is_target.sum()) - (int(is_target[seen_mask].sum()) if n_seen else 0)
    else:
        total = int(is_target[docs].sum())
    labels = np.cumsum(is_target[docs]) if len(docs) else np.zeros(0, dtype=np.int64)
    counts = []
    for fraction in fractions:
        n = depth(fraction, length)
        if 1 <= n <= len(docs):
            counts.append((float(fraction), n, int(labels[n - 1]), total, length))
    return counts, docs, ranking.n_matching
