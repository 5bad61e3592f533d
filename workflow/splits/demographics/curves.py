"""Self-ID curves and thresholds (docs/method.md §2.5, steps 3-4): users binned by group-ness
percentile, verified occurrences per post per bin, the ``auto`` threshold (breakpoint of a
weighted hinge fit) and how well the data support it (permutations, bootstrap)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

AUTO_FALLBACK = 75.0  # the paper's most common threshold, used when "auto" has no curve to read
SUPPORT_PERMUTATIONS = 999  # shuffles of the users over the percentiles (existence of a rise)
SUPPORT_MAX_P = 0.05  # above: a rise as large comes by chance, warn
SUPPORT_REPLICATES = 200  # bootstrap resamples of the users (location of the breakpoint)
SUPPORT_MIN_AGREEMENT = 0.5  # below: the breakpoint moves with the sample, warn
SUPPORT_MIN_SELF_IDS = 20  # fewer verified self-IDs: no curve to read a threshold from


def bin_expr(bins: int) -> pl.Expr:
    width = 100.0 / bins
    return (pl.col("percentile") / width).floor().cast(pl.Int64).clip(0, bins - 1).alias("bin")


def match_counts(matches: pl.DataFrame) -> pl.DataFrame:
    """Per author with a verified match: verified self-ID and anti-self-ID occurrences."""
    return (
        matches.filter(pl.col("verified"))
        .group_by("author")
        .agg(
            (pl.col("kind") == "self").sum().cast(pl.Int64).alias("n_self"),
            (pl.col("kind") == "anti").sum().cast(pl.Int64).alias("n_anti"),
        )
    )


def with_counts(users: pl.DataFrame, counts: pl.DataFrame) -> pl.DataFrame:
    """``users`` with each user's ``n_self`` and ``n_anti`` from :func:`match_counts` (0 where
    none)."""
    # looked up per user rather than joined: a join copies every column of every user (430 MiB
    # at 3M users) and hands back columns in one piece, which the users table's columns (one
    # piece per Parquet row group) are then copied again to line up with
    return users.with_columns(
        pl.col("author")
        .replace_strict(counts["author"], counts[name], default=0, return_dtype=pl.Int64)
        .alias(name)
        for name in ("n_self", "n_anti")
    )


def user_counts(users: pl.DataFrame, matches: pl.DataFrame) -> pl.DataFrame:
    """Per user: verified self-ID and anti-self-ID occurrences (0 where none)."""
    return with_counts(users, match_counts(matches))


# --------------------------------------------------------------------------- users summed

# What the curve, the rates, the formula comparison and the support tests read of a
# demographic's users: sums over groups of users, never the users one by one, so the stage reads
# the users table in batches and holds per-demographic aggregates only (docs/cluster.md)
SUMS = (
    "users",
    "n_posts",
    "n_self",
    "n_anti",
    "self_users",
    "anti_users",
    "self_only",
    "anti_only",
)
CELL_KEYS = ("bin", "n_posts", "n_self")
SUMMARY_BATCHES = 4  # batches' sums held before they are added up


def group_sums(per_user: pl.DataFrame, by: str) -> pl.DataFrame:
    """The users of ``per_user`` (columns ``by``, n_posts, n_self, n_anti) with equal ``by``
    summed: users, posts, verified self-ID and anti-self-ID occurrences, users with any, users
    with self-IDs only and with anti-self-IDs only (the formula comparison's two classes)."""
    has_self, has_anti = pl.col("n_self") > 0, pl.col("n_anti") > 0
    return per_user.group_by(by).agg(
        pl.len().cast(pl.Int64).alias("users"),
        pl.col("n_posts").sum().cast(pl.Int64),
        pl.col("n_self").sum().cast(pl.Int64),
        pl.col("n_anti").sum().cast(pl.Int64),
        has_self.sum().cast(pl.Int64).alias("self_users"),
        has_anti.sum().cast(pl.Int64).alias("anti_users"),
        (has_self & ~has_anti).sum().cast(pl.Int64).alias("self_only"),
        (has_anti & ~has_self).sum().cast(pl.Int64).alias("anti_only"),
    )


def _add_up(frames: list[pl.DataFrame], keys: list[str], sums: list[str]) -> pl.DataFrame:
    return pl.concat(frames).group_by(keys).agg(pl.col(sums).sum()).sort(keys)


def with_percentiles(sums: pl.DataFrame, by: str) -> pl.DataFrame:
    """``sums`` grouped by a score (:func:`group_sums`, sorted by it) with each score's
    percentile: 100 * (users with a smaller score) / users, the value
    ``groupness.percentile_expr`` gives each user over the whole table."""
    smaller = (pl.col("users").cum_sum() - pl.col("users")).cast(pl.Float64)
    return sums.with_columns((smaller * 100.0 / pl.col("users").sum()).alias("percentile"))


@dataclass(frozen=True)
class UserSummary:
    """A demographic's users as the self-ID stage reads them (:func:`summarise_users`):

    - ``by_percentile``: :func:`group_sums` per percentile of the users table (the curve, the
      rates below and above a threshold);
    - ``by_score``: per group-ness formula, the sums per score value with the value's own
      percentile (the formula comparison);
    - ``cells``: users per (percentile bin, n_posts, n_self) (the support tests)."""

    bins: int
    by_percentile: pl.DataFrame
    by_score: dict[str, pl.DataFrame]
    cells: pl.DataFrame

    @property
    def users(self) -> int:
        return int(self.by_percentile.get_column("users").sum())


def summarise_users(
    batches: Iterable[pl.DataFrame], bins: int, scores: Iterable[str] = ()
) -> UserSummary:
    """The :class:`UserSummary` of the users in ``batches`` (per user: percentile, n_posts,
    n_self, n_anti and the ``scores`` columns), added up batch by batch: the memory it holds is
    a batch and the sums, whatever the number of users."""
    scores = list(scores)
    keys = {"percentile": ["percentile"], **{c: [c] for c in scores}, "cells": list(CELL_KEYS)}
    held: dict[str, list[pl.DataFrame]] = {name: [] for name in keys}

    def add_up(name: str) -> pl.DataFrame:
        sums = list(SUMS) if name != "cells" else ["users"]
        return _add_up(held[name], keys[name], sums)

    def sums_of(batch: pl.DataFrame) -> dict[str, pl.DataFrame]:
        cells = batch.select(bin_expr(bins), "n_posts", "n_self").group_by(CELL_KEYS)
        return {
            "percentile": group_sums(batch, "percentile"),
            **{column: group_sums(batch, column) for column in scores},
            "cells": cells.agg(pl.len().cast(pl.Int64).alias("users")),
        }

    for batch in batches:
        for name, sums in sums_of(batch).items():
            held[name].append(sums)
        if len(held["cells"]) >= SUMMARY_BATCHES:
            held = {name: [add_up(name)] for name in held}
    if not held["cells"]:  # no users: the sums of no rows, with their columns' types
        schema = {"percentile": pl.Float64, "n_posts": pl.Int64, "n_self": pl.Int64}
        schema |= {"n_anti": pl.Int64, **dict.fromkeys(scores, pl.Float64)}
        held = {name: [sums] for name, sums in sums_of(pl.DataFrame(schema=schema)).items()}
    return UserSummary(
        bins,
        add_up("percentile"),
        {column: with_percentiles(add_up(column), column) for column in scores},
        add_up("cells"),
    )


def selfid_curve(per_user: pl.DataFrame, bins: int) -> pl.DataFrame:
    """The self-ID curve of the users of ``per_user`` (one row each: percentile, n_posts,
    n_self, n_anti); see :func:`curve_from_sums`."""
    return curve_from_sums(group_sums(per_user, "percentile"), bins)


def curve_from_sums(sums: pl.DataFrame, bins: int) -> pl.DataFrame:
    """Per percentile bin (all ``bins`` rows, empty ones with zero users) of the users summed
    in ``sums`` (:func:`group_sums` by percentile): users, posts, mean posts per user, verified
    occurrences and users, and the normalised rates."""
    width = 100.0 / bins
    frame = pl.DataFrame({"bin": list(range(bins))}, schema={"bin": pl.Int64})
    agg = (
        sums.select(bin_expr(bins), *SUMS)
        .group_by("bin")
        .agg(
            pl.col("users").sum().cast(pl.Int64).alias("n_users"),
            pl.col("n_posts").sum().cast(pl.Int64).alias("n_posts"),
            pl.col("n_self").sum().cast(pl.Int64).alias("self_occurrences"),
            pl.col("n_anti").sum().cast(pl.Int64).alias("anti_occurrences"),
            pl.col("self_users").sum().cast(pl.Int64),
            pl.col("anti_users").sum().cast(pl.Int64),
        )
    )
    out = frame.join(agg, on="bin", how="left").with_columns(
        pl.col(c).fill_null(0)
        for c in (
            "n_users",
            "n_posts",
            "self_occurrences",
            "anti_occurrences",
            "self_users",
            "anti_users",
        )
    )
    mean_posts = pl.col("n_posts") / pl.col("n_users")
    return out.with_columns(
        (pl.col("bin") * width).alias("percentile_lo"),
        ((pl.col("bin") + 1) * width).alias("percentile_hi"),
        pl.when(pl.col("n_users") > 0).then(mean_posts).alias("mean_posts_per_user"),
        pl.when(pl.col("n_posts") > 0)
        .then((pl.col("self_occurrences") / pl.col("n_users")) / mean_posts)
        .alias("self_rate"),
        pl.when(pl.col("n_posts") > 0)
        .then((pl.col("anti_occurrences") / pl.col("n_users")) / mean_posts)
        .alias("anti_rate"),
    ).sort("bin")


def _split_sse(x: np.ndarray | None, y: np.ndarray, w: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per row of the boolean matrix ``rows`` (which bins a fit takes): the weighted squared
    error of the best constant (``x`` None) or of the best straight line through those bins,
    each computed in its centred two-pass form. A row of no weight has error 0, as has a line
    through two bins or fewer (it fits them exactly)."""
    weights = rows * w  # (rows, bins): the bins a row does not take weigh nothing
    total = weights.sum(axis=1)
    safe = np.where(total > 0, total, 1.0)
    dy = y - ((weights @ y) / safe)[:, None]
    if x is None:
        return np.where(total > 0, (weights * dy**2).sum(axis=1), 0.0)
    dx = x - ((weights @ x) / safe)[:, None]
    spread = (weights * dx**2).sum(axis=1)
    slope = (weights * dx * dy).sum(axis=1) / np.where(spread > 0, spread, 1.0)
    sse = (weights * (dy - slope[:, None] * dx) ** 2).sum(axis=1)
    return np.where(rows.sum(axis=1) > 2, sse, 0.0)


def _hinge_fit(
    lo: np.ndarray, hi: np.ndarray, rate: np.ndarray, posts: np.ndarray, min_bins_each_side: int
) -> tuple[float, float] | None:
    """(breakpoint, its weighted squared error) of the non-empty bins given; None with too few
    bins. Every breakpoint's two fits (a constant below it, a line from it on) are computed at
    once (a fit per breakpoint in a loop was most of the self-ID job: the support test re-fits
    ~1,200 curves); the first breakpoint of least error wins, a later one only when lower by
    more than 1e-15."""
    if len(lo) < 2 * min_bins_each_side:
        return None
    x = (lo + hi) / 2.0
    w = posts / posts.sum()
    splits = np.arange(min_bins_each_side, len(x) - min_bins_each_side + 1)
    if not len(splits):
        return None
    below = np.arange(len(x))[None, :] < splits[:, None]
    sse = _split_sse(None, rate, w, below) + _split_sse(x, rate, w, ~below)
    best = 0
    for i in range(1, len(sse)):  # the first of the least errors, as a loop over the splits
        if sse[i] < sse[best] - 1e-15:
            best = i
    return float(lo[splits[best]]), float(sse[best])


def auto_threshold(curve: pl.DataFrame, min_bins_each_side: int = 2) -> float | None:
    """The breakpoint of a weighted hinge fit of the self-ID rate (see the module docstring);
    None when the curve has too few non-empty bins."""
    data = curve.filter(pl.col("n_posts") > 0).sort("bin")
    fit = _hinge_fit(
        data["percentile_lo"].to_numpy().astype(float),
        data["percentile_hi"].to_numpy().astype(float),
        data["self_rate"].to_numpy().astype(float),
        data["n_posts"].to_numpy().astype(float),
        min_bins_each_side,
    )
    return None if fit is None else fit[0]


def breakpoint_support(
    summary: UserSummary,
    breakpoint: float,
    seed: int = 0,
    permutations: int = SUPPORT_PERMUTATIONS,
    replicates: int = SUPPORT_REPLICATES,
) -> dict:
    """How well the data support the ``auto`` breakpoint, two ways (both seeded):

    - existence: the rise of the self-ID rate (verified self-IDs per post) from below the
      breakpoint to above it, against ``permutations`` shuffles of the users over the
      percentiles, the breakpoint re-fitted on each (``permutation_p``; a curve without a
      change point rises as much by chance);
    - location: the share of ``replicates`` bootstrap resamples of the users whose re-fitted
      breakpoint lies within one bin of it (``bootstrap_agreement``).

    Both draw counts of users, not users: the curve reads each bin's posts and self-IDs only,
    so a shuffle is exactly a draw of how many users of each kind (n_posts, n_self) land in each
    bin, bin after bin a multivariate hypergeometric draw from the users not yet placed, and a
    bootstrap resample of the users is a multinomial draw over the cells (bin, n_posts, n_self)
    with their shares of the users. The distributions are those of shuffling and resampling the
    users one by one, at a cost set by the number of cells rather than of users.

    ``stop_reasons``: why the curve does not support an ``auto`` threshold at all (fewer than
    SUPPORT_MIN_SELF_IDS verified self-IDs, a self-ID rate above the breakpoint not higher than
    below it, or permutation_p > SUPPORT_MAX_P); ``supported``: no stop reason and agreement >=
    SUPPORT_MIN_AGREEMENT."""
    bins = summary.bins
    width = 100.0 / bins
    cells = summary.cells
    cell_bin = cells.get_column("bin").to_numpy()
    cell_posts = cells.get_column("n_posts").to_numpy().astype(float)
    cell_self = cells.get_column("n_self").to_numpy().astype(float)
    cell_users = cells.get_column("users").to_numpy()

    def fit(n_posts: np.ndarray, n_self: np.ndarray) -> tuple[float, float]:
        """(breakpoint or nan, rise of the rate across it) of one curve (per-bin sums)."""
        kept = np.nonzero(n_posts > 0)[0]
        found = _hinge_fit(
            kept * width, (kept + 1) * width, n_self[kept] / n_posts[kept], n_posts[kept], 2
        )
        if found is None:
            return math.nan, 0.0
        above = kept * width >= found[0]
        rise = n_self[kept][above].sum() / n_posts[kept][above].sum() - n_self[kept][
            ~above
        ].sum() / max(n_posts[kept][~above].sum(), 1.0)
        return found[0], float(rise)

    def per_bin(users_of_cell: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.bincount(cell_bin, users_of_cell * cell_posts, minlength=bins),
            np.bincount(cell_bin, users_of_cell * cell_self, minlength=bins),
        )

    bin_posts, bin_self = per_bin(cell_users)
    non_empty = int(np.count_nonzero(bin_posts > 0))
    _, rise = fit(bin_posts, bin_self)
    # sorted: the draws follow the kinds' order, which must not depend on the users' order
    kinds = cells.group_by("n_posts", "n_self").agg(pl.col("users").sum()).sort("n_posts", "n_self")
    kind_posts = kinds.get_column("n_posts").to_numpy().astype(float)
    kind_self = kinds.get_column("n_self").to_numpy().astype(float)
    kind_users = kinds.get_column("users").to_numpy().astype(np.int64)
    bin_users = np.bincount(cell_bin, cell_users, minlength=bins).astype(np.int64)
    rng = np.random.default_rng(seed)
    as_large = 0
    for _ in range(permutations):
        placed = shuffle_draw(kind_users, bin_users, rng)
        as_large += fit(placed @ kind_posts, placed @ kind_self)[1] >= rise - 1e-15
    p_value = (1 + as_large) / (1 + permutations)
    found = [fit(*per_bin(resample_draw(cell_users, rng)))[0] for _ in range(replicates)]
    found_arr = np.asarray(found)
    agreement = float(np.mean(np.abs(found_arr - breakpoint) <= width + 1e-9))
    located = found_arr[np.isfinite(found_arr)]
    rate_below, rate_above = rates_at(summary.by_percentile, breakpoint)
    n_self = int(bin_self.sum())
    stop = stop_reasons(n_self, rate_below, rate_above, p_value)
    return {
        "non_empty_bins": non_empty,
        "verified_self_ids": n_self,
        "self_rate_below_per_1k": rate_below,
        "self_rate_above_per_1k": rate_above,
        "permutations": permutations,
        "permutation_p": round(p_value, 4),
        "bootstrap_replicates": replicates,
        "bootstrap_agreement": round(agreement, 4),
        "bootstrap_breakpoints_p5_p95": (
            [float(np.percentile(located, 5)), float(np.percentile(located, 95))]
            if located.size
            else None
        ),
        "stop_reasons": stop,
        "supported": bool(not stop and agreement >= SUPPORT_MIN_AGREEMENT),
    }


def shuffle_draw(
    kind_users: np.ndarray, bin_users: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One shuffle of the users over the bins, as counts: row b, column k holds how many users
    of kind k land in bin b, when the users (``kind_users`` of each kind) are dealt at random
    to the bins (``bin_users`` places in each). Bin after bin, a multivariate hypergeometric
    draw of its places from the users not yet dealt; the last bin takes the rest."""
    placed = np.zeros((len(bin_users), len(kind_users)), dtype=np.int64)
    left = kind_users.astype(np.int64)
    filled = np.nonzero(bin_users)[0]
    for i, b in enumerate(filled):
        drawn = (
            left if i == len(filled) - 1 else rng.multivariate_hypergeometric(left, bin_users[b])
        )
        placed[b] = drawn
        left = left - drawn
    return placed


def resample_draw(cell_users: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One bootstrap resample of the users, as counts per cell: as many users as there are,
    drawn with replacement, is a multinomial draw over the cells with their shares."""
    n_users = int(cell_users.sum())
    return rng.multinomial(n_users, cell_users / max(n_users, 1))


def stop_reasons(
    n_self: int, rate_below: float | None, rate_above: float | None, p_value: float | None
) -> list[str]:
    """Why a self-ID curve cannot set an ``auto`` threshold (empty: it can)."""
    reasons = []
    if n_self < SUPPORT_MIN_SELF_IDS:
        reasons.append(f"only {n_self} verified self-IDs (fewer than {SUPPORT_MIN_SELF_IDS})")
    if rate_above is None or rate_below is None or rate_above <= rate_below:
        reasons.append("the self-ID rate above the threshold is not higher than below it")
    if p_value is None:
        reasons.append("no breakpoint to test")
    elif p_value > SUPPORT_MAX_P:
        reasons.append(f"permutation p = {p_value:.3g} > {SUPPORT_MAX_P}")
    return reasons


def rates_at(users: pl.DataFrame, threshold: float) -> tuple[float | None, float | None]:
    """Verified self-IDs per 1,000 posts of the users below and at or above ``threshold``
    (``users``: one row per user, or :func:`group_sums` by percentile)."""

    def per_1k(selected: pl.Expr) -> float | None:
        # sums over the rows the mask selects, without a copy of them
        n, n_self = users.select(
            pl.col("n_posts").filter(selected).sum(), pl.col("n_self").filter(selected).sum()
        ).row(0)
        return round(1000.0 * int(n_self) / int(n), 4) if n else None

    percentile = pl.col("percentile")
    return per_1k(percentile < threshold), per_1k(percentile >= threshold)


def unsupported_error(key: str, threshold: dict, demographics_file: str, opt_in: str) -> str | None:
    """The one-line error for an ``auto`` (or ``auto_fallback``) threshold whose self-ID curve
    does not support it, naming the demographic, the rates below and above and the two ways on;
    None for a fixed or supported threshold."""
    support = threshold.get("support") or {}
    reasons = support.get("stop_reasons") or []
    if threshold["source"] == "fixed" or not reasons:
        return None
    below, above = support.get("self_rate_below_per_1k"), support.get("self_rate_above_per_1k")

    def fmt(rate: float | None) -> str:
        return "n/a" if rate is None else f"{rate:g}"

    return (
        f"demographic {key!r}: the auto threshold {threshold['threshold']:g} is not supported by "
        f"its self-ID curve ({'; '.join(reasons)}; verified self-IDs per 1,000 posts: "
        f"{fmt(below)} below, {fmt(above)} above); set a fixed threshold for {key!r} in "
        f"{demographics_file}, or set {opt_in}: true to use it anyway"
    )
