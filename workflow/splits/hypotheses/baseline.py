"""The counting baseline as a hypothesis source: Fighting Words lexicons per (topic, pair).

For each pool (a topic's posts of a pair of groups, posts listed under both groups left out, as
in the lift), the posts are split into a discovery and a held-out half by thread
(``splits.hypotheses.heldout``, the same split the lift uses). Fighting Words compares the two
groups' discovery posts; its prior's background is what the pair wrote everywhere else (their
posts on the other topics and the discovery half of this one: never a held-out post). The
n-grams most typical of each side, with |z| at least ``min_z``, make one lexicon per target,
of the median size of the model lexicons (theories, LLM) of the same pool (or ``lexicon_size``). The lift scores them on
the held-out half only.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from splits.hypotheses.fighting_words import informative_prior, top_indices, z_scores
from splits.hypotheses.gram_table import GramTable
from splits.hypotheses.heldout import DISCOVERY, HELDOUT, heldout_mask
from splits.hypotheses.retrieval import pools_of_topic
from splits.hypotheses.settings import FightingWordsSettings

log = logging.getLogger(__name__)

SOURCE = "fighting-words"


def pool_scope(topic: str, group_a: str, group_b: str) -> str:
    """The key of a pool's held-out split (the lift computes the same)."""
    return f"{topic}\x1f{group_a}\x1f{group_b}"


def pool_halves(
    pool_post_ids: Sequence[str], threads: Mapping[str, str], scope: str, seed: int, fraction: float
) -> np.ndarray:
    """``True`` for the pool's held-out posts (in the pool's order): a post's thread, or the
    post itself where its thread is unknown, as ``split_halves`` splits a frame."""
    units = [threads.get(p) for p in pool_post_ids]
    units = [p if unit is None else unit for p, unit in zip(pool_post_ids, units, strict=True)]
    return heldout_mask(units, seed, fraction, scope)


def baseline_records(
    topic_posts: pl.DataFrame,
    threads: Mapping[str, str],
    pairs: Sequence[tuple[str, str]],
    topics: Sequence[str],
    settings: FightingWordsSettings,
    model_sizes: Mapping[tuple[str, str, str], int],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Fighting Words hypotheses of every (topic, pair, target), and a report: per pool the
    discovery and held-out sizes and what was left out (counted, never silent).
    ``model_sizes``: the median lexicon size of the model sets per (topic, a, b)."""
    fw = settings.fighting_words
    records: list[dict[str, Any]] = []
    pools_report: list[dict[str, Any]] = []
    skipped: Counter = Counter()
    tokenizer = fw.tokenizer()
    for a, b in pairs:
        pair_rows = topic_posts.filter(pl.col("demographic").is_in([a, b]))
        pair_texts = pair_rows["text"].cast(pl.String).fill_null("")
        # the pair's distinct texts cut into n-grams once (not once per pool and held-out half);
        # one pair at a time, so that memory holds the n-grams of one pair's posts
        table = GramTable(pair_texts.unique(maintain_order=True).to_list(), fw.ngram_max, tokenizer)
        totals = (
            table.background_counts(pair_texts.to_list()) if fw.prior == "informative" else None
        )
        for topic in topics:
            rows = pair_rows.filter(pl.col("topic") == topic)
            pools, _ = pools_of_topic(rows, topic, [(a, b)])
            pool = pools[(a, b)]
            scope = pool_scope(topic, a, b)
            heldout = pool_halves(
                pool.post_ids, threads, scope, settings.seed, settings.heldout_fraction
            )
            discovery = ~heldout
            texts = np.asarray(pool.texts, dtype=object)
            disc_a = texts[discovery & pool.is_a].tolist()
            disc_b = texts[discovery & ~pool.is_a].tolist()
            entry = {
                "topic": topic,
                "demographic_A": a,
                "demographic_B": b,
                "discovery_A": len(disc_a),
                "discovery_B": len(disc_b),
                "heldout": int(heldout.sum()),
            }
            pools_report.append(entry)
            if not disc_a or not disc_b:
                skipped["pool_without_discovery_posts_of_a_group"] += 2
                continue
            vocabulary, counts_a, counts_b, gram_ids = table.side_counts(disc_a, disc_b, fw)
            if not vocabulary.terms:
                skipped["no_ngram_within_the_document_frequency_bounds"] += 2
                continue
            if fw.prior == "uniform":
                prior = np.full(len(vocabulary.terms), float(fw.uniform_prior))
            else:
                # the pair's counts everywhere less this pool's held-out half
                held = table.heldout_counts(texts[heldout].tolist(), gram_ids)
                background = (totals[gram_ids] - held).astype(np.float64)
                prior = informative_prior(background, fw.prior_scale)
            z = z_scores(counts_a, counts_b, prior)
            for target, sign in ((a, 1.0), (b, -1.0)):
                size = min(
                    settings.max_entries,
                    fw.lexicon_size
                    or model_sizes.get((topic, a, b), fw.lexicon_size_without_models),
                )
                signed = sign * z
                order = top_indices(vocabulary.terms, signed, size, fw.min_z, skip_stop_words=True)
                if not order:
                    skipped["no_ngram_with_z_at_least_min_z"] += 1
                    continue
                records.append(
                    {
                        "id": f"{SOURCE}:{topic}:{a}:{b}:{target}",
                        "topic": topic,
                        "demographic_A": a,
                        "demographic_B": b,
                        "target": target,
                        "lexicon": [vocabulary.terms[i] for i in order],
                        "source": SOURCE,
                        "note": "Fighting Words on the discovery half ("
                        + ", ".join(f"{vocabulary.terms[i]} z={signed[i]:.1f}" for i in order[:5])
                        + ")",
                    }
                )
    report = {
        "prior": fw.prior,
        "heldout_fraction": settings.heldout_fraction,
        "pools": pools_report,
        "skipped": dict(sorted(skipped.items())),
        "halves": {DISCOVERY: "Fighting Words reads these", HELDOUT: "the lift scores these"},
    }
    return records, report


def model_lexicon_sizes(frames: Sequence[pl.DataFrame]) -> dict[tuple[str, str, str], int]:
    """The median lexicon size (rounded half up, at least 1) of the model sets' hypotheses per
    (topic, demographic_A, demographic_B)."""
    if not frames:
        return {}
    rows = pl.concat(
        [f.select("topic", "demographic_A", "demographic_B", "lexicon") for f in frames]
    )
    sizes = rows.group_by("topic", "demographic_A", "demographic_B").agg(
        pl.col("lexicon").list.len().median().alias("size")
    )
    return {(t, a, b): max(1, int(np.floor(size + 0.5))) for t, a, b, size in sizes.iter_rows()}


def read_threads(posts_path: str | list[str] | None, post_ids: pl.Series) -> dict[str, str]:
    """post id -> thread (``conversation_id``) of the given posts from the merged posts table
    (one file or its bucket files); empty without one (each post is its own thread)."""
    if not posts_path:
        return {}
    frame = (
        pl.scan_parquet(
            [str(p) for p in posts_path] if isinstance(posts_path, list) else posts_path
        )
        .select(pl.col("post_id").cast(pl.String), pl.col("conversation_id").cast(pl.String))
        .filter(pl.col("post_id").is_in(post_ids.cast(pl.String).unique().implode()))
        .drop_nulls()
        .collect()
    )
    return dict(zip(frame["post_id"].to_list(), frame["conversation_id"].to_list(), strict=True))
