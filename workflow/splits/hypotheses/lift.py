"""lift@k, its significance, its confidence interval and the release's null band; the lift job of
one hypothesis set.

For a ranked list R of |R| = N posts of which K are the target group's, and k fraction f:
n = floor(f N), x = target posts among the first n, lift = (x / n) / (K / N).

- p: one-sided hypergeometric P(X >= x), X ~ Hypergeom(N, K, n) (``scipy.stats.hypergeom``):
  the chance that n posts drawn at random from R hold x or more target posts.
- Confidence interval (``lift_low``, ``lift_high``, level 1 - alpha): the pool is a sample of the
  posts the two groups write on the topic, and the population lift at depth f is
  pi_top / (f pi_top + (1 - f) pi_rest), where pi_top is the target share of the posts the query
  ranks in its top fraction f and pi_rest the share among the others. x ~ Binomial(n, pi_top) and
  y = K - x ~ Binomial(N - n, pi_rest); each share gets an exact Clopper-Pearson interval at level
  1 - alpha/2, and since the lift rises with pi_top and falls with pi_rest, evaluating it at the
  opposite corners gives an interval that covers with probability at least 1 - alpha (Bonferroni
  over the two exact intervals). ``tests/test_hypotheses_stats.py`` measures its coverage by
  simulation, and shows why the precision's interval divided by the observed K / N is not used:
  K contains x, and at deep k on small lists that interval undercovers.
- Null band (``null_band_low``, ``null_band_high``): what the 2026 release reports as a "95% CI":
  the alpha/2 and 1 - alpha/2 quantiles of X under the null, as lift values. It is the range lift
  takes when the lexicon is unrelated to the groups, not an interval for the lexicon's lift.
  ``null_band_low_hits`` and ``null_band_high_hits`` are the same quantiles as counts of target
  posts among the first n (the release's (L, U)): the lift values are L / n / (K / N) and
  U / n / (K / N).
- ``precision``: x / n, the release's precision@k; ``target_in_list`` is its K.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from scipy import special

from splits.hypotheses.lexicon import Hypothesis
from splits.hypotheses.release import release_counts, release_list
from splits.hypotheses.retrieval import PoolIndex, depth, list_length, pools_of_topic
from splits.hypotheses.settings import RELEASE, LiftSettings, RetrievalSettings
from splits.retrieval.phrases import PositionalIndex
from splits.stats import clopper_pearson, hypergeom_sf

log = logging.getLogger(__name__)

LIFT_COLUMNS = {
    "hypothesis_id": pl.String,
    "topic": pl.String,
    "demographic_A": pl.String,
    "demographic_B": pl.String,
    "target": pl.String,
    "lexicon": pl.List(pl.String),
    "source": pl.String,
    "k_fraction": pl.Float64,
    "n": pl.Int64,
    "hits_at_n": pl.Int64,
    "target_in_list": pl.Int64,
    "list_size": pl.Int64,
    "lift": pl.Float64,
    "lift_low": pl.Float64,
    "lift_high": pl.Float64,
    "p_value": pl.Float64,
    "precision": pl.Float64,
    "null_band_low": pl.Float64,
    "null_band_high": pl.Float64,
    "null_band_low_hits": pl.Int64,
    "null_band_high_hits": pl.Int64,
    "matching_posts": pl.Int64,
    "heldout_n": pl.Int64,
    "heldout_hits_at_n": pl.Int64,
    "heldout_target_in_list": pl.Int64,
    "heldout_list_size": pl.Int64,
    "heldout_lift": pl.Float64,
    "heldout_lift_low": pl.Float64,
    "heldout_lift_high": pl.Float64,
    "heldout_p_value": pl.Float64,
}
#: the statistics computed per side (all posts, held-out)
_STATISTICS = ("lift", "lift_low", "lift_high", "p_value")
HELDOUT_COUNTS = ("heldout_n", "heldout_hits_at_n", "heldout_target_in_list", "heldout_list_size")
#: the counting baseline's hypotheses are scored on held-out posts only: on the whole pool they
#: would count the discovery posts their lexicons were read from
HELDOUT_ONLY_SOURCES = ("fighting-words",)
MATCHES_SCHEMA = {"hypothesis_id": pl.String, "matched_keys": pl.List(pl.UInt64)}


# --------------------------------------------------------------------------- statistics


def hypergeom_p(hits, n, target_in_list, list_size) -> np.ndarray:
    """One-sided P(X >= hits), X ~ Hypergeom(list_size, target_in_list, n)."""
    hits = np.asarray(hits)
    return hypergeom_sf(hits - 1, list_size, target_in_list, n)


def _population_lift(top_share, rest_share, fraction) -> np.ndarray:
    denominator = fraction * top_share + (1 - fraction) * rest_share
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, top_share / denominator, np.nan)


def lift_interval(hits, n, target_in_list, list_size, alpha: float):
    """(low, high) of lift at level 1 - alpha (see the module docstring)."""
    hits = np.asarray(hits, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    big_k = np.asarray(target_in_list, dtype=np.float64)
    big_n = np.asarray(list_size, dtype=np.float64)
    top_low, top_high = clopper_pearson(hits, n, alpha / 2)
    rest_low, rest_high = clopper_pearson(big_k - hits, big_n - n, alpha / 2)
    fraction = n / big_n
    low = _population_lift(top_low, rest_high, fraction)
    high = _population_lift(top_high, rest_low, fraction)
    # a list of n posts only (n = N) has lift 1 whatever the shares
    whole = n >= big_n
    return np.where(whole, 1.0, np.nan_to_num(low, nan=0.0)), np.where(whole, 1.0, high)


def null_band_hits(n, target_in_list, list_size, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The release's acceptance band as counts (its (L, U)): the hypergeometric alpha/2 and
    1 - alpha/2 quantiles of X under the null (``hypergeom.ppf`` and ``hypergeom.isf``)."""
    n = np.asarray(n, dtype=np.int64)
    big_k = np.asarray(target_in_list, dtype=np.int64)
    big_n = np.asarray(list_size, dtype=np.int64)
    return hypergeom_quantiles(n, big_k, big_n, alpha / 2)


def band_lift(hits, n, target_in_list, list_size) -> np.ndarray:
    """A count of target posts among the first n as lift: hits / n / (K / N)."""
    base = np.asarray(target_in_list) / np.asarray(list_size)
    return np.asarray(hits) / np.asarray(n) / base


def null_band(n, target_in_list, list_size, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The release's acceptance band (``null_band_hits``) as lift values: divided by n and by
    the base rate K / N."""
    low, high = null_band_hits(n, target_in_list, list_size, alpha)
    return (
        band_lift(low, n, target_in_list, list_size),
        band_lift(high, n, target_in_list, list_size),
    )


#: the quantile window: mean +- (15 sd + 40) of the matching binomial; by Bernstein's inequality
#: (which holds for the hypergeometric) the mass outside it is below 1e-25
_WINDOW_SD, _WINDOW_ADD = 15.0, 40.0
_SLACK = 1e-9


def hypergeom_quantiles(n, big_k, big_n, tail: float, chunk: int = 256):
    """(smallest x with P(X <= x) >= tail, smallest x with P(X > x) <= tail) for X ~
    Hypergeom(N, K, n) row by row: scipy's ``hypergeom.ppf(tail)`` and ``isf(tail)``, computed
    from the log pmf (``gammaln``) over a window around the mean, many rows at once (scipy's
    discrete quantiles search one row at a time and dominate the stage's time otherwise)."""
    n, big_k, big_n = (np.asarray(v, dtype=np.int64) for v in (n, big_k, big_n))
    low = np.empty(len(n), dtype=np.int64)
    high = np.empty(len(n), dtype=np.int64)
    p = big_k / big_n
    spread = _WINDOW_SD * np.sqrt(n * p * (1 - p)) + _WINDOW_ADD
    start = np.maximum(np.maximum(0, n + big_k - big_n), np.floor(n * p - spread)).astype(np.int64)
    stop = np.minimum(np.minimum(n, big_k), np.ceil(n * p + spread)).astype(np.int64)
    order = np.argsort(stop - start, kind="stable")
    for first in range(0, len(order), chunk):
        rows = order[first : first + chunk]
        nn, kk, nt = n[rows, None], big_k[rows, None], big_n[rows, None]
        x = start[rows, None] + np.arange(int((stop[rows] - start[rows]).max()) + 1)[None, :]
        inside = x <= stop[rows, None]
        xs = np.where(inside, x, start[rows, None])
        log_pmf = (
            special.gammaln(kk + 1)
            - special.gammaln(xs + 1)
            - special.gammaln(kk - xs + 1)
            + special.gammaln(nt - kk + 1)
            - special.gammaln(nn - xs + 1)
            - special.gammaln(nt - kk - nn + xs + 1)
            - special.gammaln(nt + 1)
            + special.gammaln(nn + 1)
            + special.gammaln(nt - nn + 1)
        )
        pmf = np.where(inside, np.exp(log_pmf), 0.0)
        cdf = np.cumsum(pmf, axis=1)
        above = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1] - pmf  # P(X > x) within the window
        # a relative slack so that exact ties (a cdf value equal to the tail) fall as in scipy
        low[rows] = x[np.arange(len(rows)), np.argmax(cdf >= tail * (1 - _SLACK), axis=1)]
        high[rows] = x[
            np.arange(len(rows)), np.argmax((above <= tail * (1 + _SLACK)) & inside, axis=1)
        ]
    return low, high


def lift_statistics(hits, n, target_in_list, list_size, alpha: float) -> dict[str, np.ndarray]:
    """Every statistic of lift rows, vectorised over arrays of equal length."""
    hits = np.asarray(hits, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    big_k = np.asarray(target_in_list, dtype=np.int64)
    big_n = np.asarray(list_size, dtype=np.int64)
    lift = (hits / n) / (big_k / big_n)
    low, high = lift_interval(hits, n, big_k, big_n, alpha)
    band_low, band_high = null_band_hits(n, big_k, big_n, alpha)
    return {
        "lift": lift,
        "lift_low": low,
        "lift_high": high,
        "p_value": hypergeom_p(hits, n, big_k, big_n),
        "precision": hits / n,
        "null_band_low": band_lift(band_low, n, big_k, big_n),
        "null_band_high": band_lift(band_high, n, big_k, big_n),
        "null_band_low_hits": band_low,
        "null_band_high_hits": band_high,
    }


# --------------------------------------------------------------------------- one ranked list


def pool_index(pool, retrieval: RetrievalSettings, analyzer=None, positions=None) -> PoolIndex:
    """The pool's index under the retrieval settings (robertson with words: rank_bm25's BM25
    computed by the index itself; another variant or analyzer: ``splits.retrieval.bm25``);
    ``positions``: its posts' word positions when at hand."""
    if retrieval.is_default:
        return PoolIndex(pool, retrieval.bm25, positions=positions)
    return PoolIndex(pool, retrieval.bm25, analyzer=analyzer, positions=positions)


def depth_counts(
    is_target: np.ndarray,
    ranked: np.ndarray,
    k_fractions: Sequence[float],
    length: int | None = None,
    target_total: int | None = None,
) -> list[tuple[float, int, int, int, int]]:
    """(f, n, hits among the first n, target posts in the list, list length) per k fraction of
    a ranked list; fractions giving n = 0 are left out. ``ranked`` may be the first posts of a
    longer list of ``length`` posts holding ``target_total`` target posts (by default it is the
    whole list)."""
    labels = is_target[ranked]
    cumulative = np.cumsum(labels)
    if length is None:
        length = len(ranked)
    if target_total is None:
        if length != len(ranked):
            raise ValueError("a partial list needs the target count of the whole list")
        target_total = int(cumulative[-1]) if len(ranked) else 0
    out = []
    for fraction in k_fractions:
        n = depth(fraction, length)
        if n > len(ranked):
            raise ValueError(f"k = {fraction} reads {n} posts, the list holds {len(ranked)}")
        if n >= 1:
            out.append((float(fraction), n, int(cumulative[n - 1]), int(target_total), length))
    return out


def ranked_counts(
    index: PoolIndex,
    lexicon,
    target: str,
    settings: LiftSettings,
    at_least: int = 0,
    scored: tuple[np.ndarray, np.ndarray] | None = None,
):
    """The ranking of one hypothesis ordered only as deep as its k fractions read (the whole
    list when a list size is set: its target count needs every post of the list; at least
    ``at_least`` posts) and its depth counts."""
    is_target = index.pool.is_target(target)
    length = list_length(index.n_docs, settings.list_size)
    if settings.list_size is None:
        wanted = max(depth(f, length) for f in settings.k_fractions)
        total = int(is_target.sum())
    else:
        wanted, total = length, None
    ranking = index.rank(
        lexicon, settings.seed, settings.list_size, max(wanted, at_least), scored=scored
    )
    counts = depth_counts(is_target, ranking.docs, settings.k_fractions, length, total)
    return ranking, counts


@dataclass
class SetResult:
    rows: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)
    pools: int = 0
    heldout_pools: int = 0
    posts_in_both_groups: int = 0
    #: (hypothesis id, doc keys of the pool's posts its lexicon matches), for the redundancy marks
    matches: list[tuple[str, np.ndarray]] = field(default_factory=list)


def evaluate_pool(
    index: PoolIndex,
    hypotheses: Iterable[Hypothesis],
    settings: LiftSettings,
    result: SetResult,
    heldout: PoolIndex | None = None,
    keep_matches: bool = False,
) -> None:
    """Append the lift rows of ``hypotheses`` (all on this pool) to ``result``; with the index of
    the pool's held-out half, each row also gets the held-out counts at its k (a hypothesis of
    ``HELDOUT_ONLY_SOURCES`` gets rows from those alone); with ``keep_matches``, the posts each
    lexicon matches go to ``result.matches``."""
    for h in hypotheses:
        held = _heldout(heldout, h, settings, result)
        scored = index.scores(h.lexicon) if keep_matches else None
        if scored is not None:  # the posts the lexicon matches, for the redundancy marks
            result.matches.append((h.hypothesis_id, np.sort(index.doc_keys[scored[1]])))
        if h.source in HELDOUT_ONLY_SOURCES:
            matching = int((scored or index.scores(h.lexicon))[1].sum())
            for fraction in sorted(held):
                result.rows.append(
                    {**lift_row(h, fraction, *[None] * 4, matching), **held[fraction]}
                )
            continue
        rows = (
            release_rows(index, h, settings, result)
            if settings.retrieval.mode == RELEASE
            else project_rows(index, h, settings, result, scored)
        )
        for row in rows:
            result.rows.append({**row, **held.get(row["k_fraction"], {})})


def _heldout(
    heldout: PoolIndex | None, h: Hypothesis, settings: LiftSettings, result: SetResult
) -> dict[float, dict]:
    """The held-out counts per k fraction of one hypothesis (``splits.hypotheses.heldout_lift``:
    the posts its source saw left out)."""
    if heldout is None:
        return {}
    from splits.hypotheses.heldout_lift import heldout_counts

    counts, _, _ = heldout_counts(
        heldout,
        h.lexicon,
        h.target,
        frozenset(h.seen),
        settings.k_fractions,
        settings.list_size,
        settings.seed,
    )
    out = {}
    for fraction, n, hits, big_k, length in counts:
        if big_k == 0:
            result.skipped["heldout_target_absent_from_list"] += 1
            continue
        out[fraction] = dict(zip(HELDOUT_COUNTS, (n, hits, big_k, length), strict=True))
    result.skipped["heldout_k_with_empty_depth"] += len(settings.k_fractions) - len(counts)
    return out


def project_rows(
    index: PoolIndex, h: Hypothesis, settings: LiftSettings, result: SetResult, scored=None
):
    """The rows of one hypothesis on the whole pool (the project's list)."""
    ranking, counts = ranked_counts(index, h.lexicon, h.target, settings, scored=scored)
    short = len(settings.k_fractions) - len(counts)
    if short:
        result.skipped["k_with_empty_depth"] += short
    rows = []
    for fraction, n, hits, big_k, length in counts:
        if big_k == 0:
            result.skipped["target_absent_from_list"] += 1
            continue
        rows.append(lift_row(h, fraction, n, hits, big_k, length, ranking.n_matching))
    return rows


def lift_row(
    h: Hypothesis, fraction: float, n: int, hits: int, big_k: int, length: int, matching: int
) -> dict:
    """One row of the lift table: a hypothesis at one k fraction of its ranked list."""
    return {
        "hypothesis_id": h.hypothesis_id,
        "topic": h.topic,
        "demographic_A": h.demographic_a,
        "demographic_B": h.demographic_b,
        "target": h.target,
        "lexicon": list(h.lexicon),
        "source": h.source,
        "k_fraction": fraction,
        "n": n,
        "hits_at_n": hits,
        "target_in_list": big_k,
        "list_size": length,
        "matching_posts": matching,
    }


def release_rows(index: PoolIndex, h: Hypothesis, settings: LiftSettings, result: SetResult):
    """The release's rows of one hypothesis (``splits.hypotheses.release``): its padded list of
    ``doc_count`` posts and one row per k fraction, undefined ones (K = 0 or n = 0) included
    with their statistics left null."""
    ranked = release_list(index, h.lexicon, settings.retrieval.doc_count)
    counts = release_counts(index.pool.is_target(h.target), ranked.docs, settings.k_fractions)
    rows = []
    for fraction, n, hits, big_k, length in counts:
        if big_k == 0 or n <= 0:
            result.skipped["release_lift_undefined"] += 1
        rows.append(lift_row(h, fraction, n, hits, big_k, length, ranked.n_matching))
    return rows


def evaluate_set(
    hypotheses: Sequence[Hypothesis],
    topic_posts: pl.LazyFrame,
    settings: LiftSettings,
    threads: dict[str, str] | None = None,
    heldout: bool = True,
) -> SetResult:
    """Lift rows of every hypothesis. Topics are read one at a time from the topic posts table
    and each needed (topic, pair) pool is indexed once, so memory holds one topic's posts and one
    pool's index whatever the number of hypotheses. With ``heldout``, each pool's held-out half
    (``threads``: post id -> thread; none: each post its own) gets an index of its own and the
    rows their held-out counts; the posts each lexicon matches in the pool are kept for the
    redundancy marks."""
    from splits.hypotheses.baseline import pool_halves, pool_scope
    from splits.hypotheses.heldout_lift import subpool

    result = SetResult()
    analyzer = settings.retrieval.make_analyzer()
    # the posts' words are splits.text.words (no other analyzer): the pools' indexes are read
    # from one index of their topic's posts, the held-out halves' from their pool's
    plain = settings.retrieval.is_default or analyzer is None
    by_pool: dict[tuple[str, str, str], list[Hypothesis]] = {}
    for h in hypotheses:
        by_pool.setdefault((h.topic, h.demographic_a, h.demographic_b), []).append(h)
    topics = sorted({key[0] for key in by_pool})
    for topic in topics:
        rows = (
            topic_posts.filter(pl.col("topic") == topic)
            .select(
                pl.col("post_id").cast(pl.String),
                pl.col("text").cast(pl.String),
                pl.col("demographic").cast(pl.String),
            )
            .collect()
        )
        pairs = sorted((a, b) for t, a, b in by_pool if t == topic)
        pools, in_both = pools_of_topic(
            rows, topic, pairs, row_order=settings.retrieval.mode == RELEASE
        )
        if plain:  # the topic's posts cut into words once: a post is in a pool of each pair
            texts = list(dict.fromkeys(t for pool in pools.values() for t in pool.texts))
            text_at = {text: i for i, text in enumerate(texts)}
            topic_words = PositionalIndex(texts)
        for pair in pairs:
            todo = by_pool[(topic, *pair)]
            pool = pools[pair]
            result.posts_in_both_groups += in_both[pair]
            if pool.size == 0 or pool.is_a.all() or not pool.is_a.any():
                result.skipped["pool_lacks_a_group"] += len(todo)
                log.warning(
                    "%s %s/%s: %d posts of A, %d of B: %d hypotheses skipped",
                    topic,
                    *pair,
                    int(pool.is_a.sum()),
                    int((~pool.is_a).sum()),
                    len(todo),
                )
                continue
            words = None
            if plain:
                words = topic_words.subset(np.array([text_at[t] for t in pool.texts]))
            index = pool_index(pool, settings.retrieval, analyzer, words)
            result.pools += 1
            held_index = None
            if heldout:
                keep = pool_halves(
                    pool.post_ids,
                    threads or {},
                    pool_scope(topic, *pair),
                    settings.seed,
                    settings.heldout_fraction,
                )
                half = subpool(pool, keep)
                if half.size and half.is_a.any() and not half.is_a.all():
                    words = index.positions.subset(keep) if plain else None
                    held_index = pool_index(half, settings.retrieval, analyzer, words)
                    result.heldout_pools += 1
                else:
                    result.skipped["heldout_half_lacks_a_group"] += len(todo)
            evaluate_pool(index, todo, settings, result, held_index, keep_matches=heldout)
            log.info("%s %s/%s: %d posts, %d hypotheses", topic, *pair, pool.size, len(todo))
    return result


def lift_frame(rows: Sequence[dict], alpha: float) -> pl.DataFrame:
    """The rows with their statistics, in the column order of ``LIFT_COLUMNS``."""
    if not rows:
        return pl.DataFrame(schema=LIFT_COLUMNS)
    counts = {c: LIFT_COLUMNS[c] for c in ("n", "hits_at_n", "target_in_list", "list_size")}
    counts.update({c: pl.Int64 for c in HELDOUT_COUNTS})
    frame = pl.DataFrame(rows, schema_overrides=counts, infer_schema_length=None)
    frame = frame.with_columns(
        [pl.lit(None, dtype=t).alias(c) for c, t in counts.items() if c not in frame.columns]
    )
    for prefix, wanted in (("", None), ("heldout_", _STATISTICS)):
        hits, n, big_k, big_n = (
            frame[f"{prefix}{c}"].fill_null(0).to_numpy()
            for c in ("hits_at_n", "n", "target_in_list", "list_size")
        )
        # lift, p and the intervals are undefined without a target post in the list or a post
        # read (release mode keeps such rows, held-out counts may be missing): null, never 0
        defined = (big_k > 0) & (n > 0)
        computed = lift_statistics(hits[defined], n[defined], big_k[defined], big_n[defined], alpha)
        for name, values in computed.items():
            if wanted is not None and name not in wanted:
                continue
            column = np.full(frame.height, np.nan)
            column[defined] = values
            frame = frame.with_columns(pl.Series(f"{prefix}{name}", column).fill_nan(None))
    return frame.select([pl.col(c).cast(t) for c, t in LIFT_COLUMNS.items()])


def matches_frame(result: SetResult) -> pl.DataFrame:
    """Per hypothesis, the doc keys (``PoolIndex.doc_keys``) of the pool's posts its lexicon
    matches: what ``splits.hypotheses.redundancy`` compares."""
    return pl.DataFrame(
        {
            "hypothesis_id": [h for h, _ in result.matches],
            "matched_keys": [keys.tolist() for _, keys in result.matches],
        },
        schema=MATCHES_SCHEMA,
    )


def lift_report(n_hypotheses: int, result: SetResult, frame: pl.DataFrame, settings) -> dict:
    """The lift job's report: what was scored and skipped, and the retrieval that ranked."""
    retrieval = settings.retrieval
    bm25 = retrieval.bm25
    return {
        "hypotheses": n_hypotheses,
        "hypotheses_with_rows": frame["hypothesis_id"].n_unique() if frame.height else 0,
        "rows": frame.height,
        "pools": result.pools,
        "heldout_pools": result.heldout_pools,
        "heldout_fraction": settings.heldout_fraction,
        "posts_left_out_in_both_groups": result.posts_in_both_groups,
        "skipped": dict(sorted(result.skipped.items())),
        "retrieval": {
            "mode": retrieval.mode,
            "bm25": bm25.method,
            "k1": bm25.k1,
            "b": bm25.b,
            "delta": bm25.delta,
            "analyzer": retrieval.analyzer,
            "max_tokens": retrieval.max_tokens,
            "doc_count": retrieval.doc_count if retrieval.mode == RELEASE else None,
        },
    }
