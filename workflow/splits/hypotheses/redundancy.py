"""Hypotheses that repeat another: their retrieved posts overlap heavily.

Two lexicons can differ in words and still retrieve the same posts (``yeshiva, kosher`` and
``kosher, shul``): a table that counts both as findings counts one finding twice. Within one
pool (topic and pair), hypotheses are visited strongest first; one whose retrieved posts have a
Jaccard index above the threshold with an earlier kept hypothesis's is marked as repeating it.
"""

from __future__ import annotations

from collections.abc import Sequence


def jaccard(a: frozenset, b: frozenset) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def repeats(
    ids: Sequence[str], retrieved: Sequence[frozenset], threshold: float
) -> list[tuple[str | None, float | None]]:
    """For each hypothesis in the given order (strongest first), the id of the earlier
    representative it repeats and their Jaccard index, or (None, None)."""
    representatives: list[int] = []
    out: list[tuple[str | None, float | None]] = []
    for i, posts in enumerate(retrieved):
        best, best_overlap = None, 0.0
        for j in representatives:
            overlap = jaccard(posts, retrieved[j])
            if overlap > threshold and overlap > best_overlap:
                best, best_overlap = j, overlap
        if best is None:
            representatives.append(i)
            out.append((None, None))
        else:
            out.append((ids[best], best_overlap))
    return out
