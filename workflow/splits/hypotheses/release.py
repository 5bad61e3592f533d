"""Release mode of the lift: the 2026 release's retrieval and lift (``core_logic.py``), exactly.

``hypotheses.retrieval.mode: release`` replaces the project's ranked list by the release's:

- one index per (topic, pair): the topic posts of the two groups (posts listed under both are
  left out, as in the project's pools) in the order their rows come in the topic posts table
  (``pools_of_topic`` with ``row_order``), as the release indexed its rows filtered to the topic
  and the pair; the authors' data keeps the released rows' order (``splits.release_data``). That
  order is the index order, which decides which posts pad the list. A post without a token is
  not indexed (Anserini skips empty documents);
- the query ``"kw1" OR "kw2" ...`` of the lexicon's entries as given (order and repeats kept:
  Lucene merges a repeated entry into one clause with a boost), each entry a phrase of the
  analyzer's tokens (``words``, or WordPiece from ``bert-base-uncased``'s vocab.txt as the
  release does), scored by Lucene's BM25 (``splits.retrieval.bm25``, k1 0.9, b 0.4);
- the first ``doc_count`` hits by score, ties by post id (Anserini's order), then, when fewer
  posts match, padding up to ``doc_count`` with the unretrieved posts in index order shuffled
  by ``random.Random(int(md5(query).hexdigest(), 16) % 2**32)``;
- over that list of N posts (N = doc_count, or the pool when it is smaller): n = int(N k),
  x = target posts among the first n, K = target posts in the list; precision = x / n;
  lift = (x / n) / (K / N); p = ``hypergeom.sf(x - 1, N, K, n)``; the band (what the release
  calls the 95% CI of lift): (L, U) = ``hypergeom.ppf`` / ``isf`` at alpha / 2 as counts
  (``null_band_low_hits``, ``null_band_high_hits``), and as lift L / n / (K / N), U / n / (K / N)
  (``null_band_low``, ``null_band_high``).

Where the release returns lift 0 and p 0 (K = 0 or n = 0) the row's lift, p and band are
undefined (null), not 0: a p of 0 would read as significant. The project's real confidence
interval (``lift_low``, ``lift_high``) and BH q (``q_value``, over the run, in the table) stay
beside the release's uncorrected p and band (``null_band_low``, ``null_band_high``).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from splits.retrieval.bm25 import LUCENE, anserini_display, anserini_order


def release_query_string(keywords: Sequence[str]) -> str:
    """The release's query text: every keyword quoted, joined by OR."""
    return " OR ".join(f'"{kw}"' for kw in keywords)


def release_seed(keywords: Sequence[str]) -> int:
    """The padding seed: int(md5(query).hexdigest(), 16) % 2**32."""
    digest = hashlib.md5(release_query_string(keywords).encode("utf-8")).hexdigest()
    return int(digest, 16) % 2**32


@dataclass(frozen=True)
class ReleaseList:
    """The padded list: pool positions, Lucene's float scores of the hits (NaN for padding),
    pyserini's displayed scores, the number of hits in the list and of matching posts."""

    docs: np.ndarray
    scores: np.ndarray
    shown: np.ndarray
    n_hits: int
    n_matching: int


def release_list(index, keywords: Sequence[str], doc_count: int) -> ReleaseList:
    """The release's ranked and padded list over a pool index scored with ``lucene``."""
    if index.scorer is None or index.scorer.method != LUCENE:
        raise ValueError("the release's list needs a pool index scored with lucene")
    scores, matched = index.variant_scores(index.clauses(keywords, merged=True))
    hits = np.flatnonzero(matched)
    ids = index.pool.post_ids
    order = hits[anserini_order(scores[hits], [str(ids[d]) for d in hits])][:doc_count]
    raw = scores[order].astype(np.float32)
    docs = order
    if len(order) < doc_count:
        returned = np.zeros(index.n_docs, dtype=bool)
        returned[order] = True
        indexed = index.doc_len > 0  # Anserini does not index an empty document
        pool = np.flatnonzero(indexed & ~returned).tolist()
        random.Random(release_seed(keywords)).shuffle(pool)
        docs = np.concatenate([order, np.asarray(pool[: doc_count - len(order)], dtype=np.int64)])
    padded = np.full(len(docs), np.nan)
    padded[: len(order)] = raw
    return ReleaseList(
        docs.astype(np.int64), padded, anserini_display(raw), int(len(order)), int(len(hits))
    )


def release_depth(k_fraction: float, length: int) -> int:
    """``_resolve_k``: int(len(df) * k) for a fraction in (0, 1]."""
    return int(length * k_fraction)


def release_counts(
    is_target: np.ndarray, docs: np.ndarray, k_fractions: Sequence[float]
) -> list[tuple[float, int, int, int, int]]:
    """(f, n, x, K, N) of the padded list per k fraction (n = 0 kept: its lift is undefined)."""
    labels = is_target[docs].astype(np.int64)
    big_n = len(labels)
    big_k = int(labels.sum())
    out = []
    for fraction in k_fractions:
        n = release_depth(fraction, big_n)
        out.append((float(fraction), n, int(labels[:n].sum()) if n > 0 else 0, big_k, big_n))
    return out
