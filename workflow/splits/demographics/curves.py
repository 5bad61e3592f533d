"""Self-ID curves and thresholds (docs/method.md §2.5, steps 3-4): users binned by group-ness
percentile, verified occurrences per post per bin, the ``auto`` threshold (breakpoint of a
weighted hinge fit) and how well the data support it (permutations, bootstrap)."""

from __future__ import annotations

import math

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


def user_counts(users: pl.DataFrame, matches: pl.DataFrame) -> pl.DataFrame:
    """Per user: verified self-ID and anti-self-ID occurrences (0 where none)."""
    verified = matches.filter(pl.col("verified"))
    counts = verified.group_by("author").agg(
        (pl.col("kind") == "self").sum().cast(pl.Int64).alias("n_self"),
        (pl.col("kind") == "anti").sum().cast(pl.Int64).alias("n_anti"),
    )
    # looked up per user rather than joined: a join copies every column of every user (430 MiB
    # at 3M users) and hands back columns in one piece, which the users table's columns (one
    # piece per Parquet row group) are then copied again to line up with
    return users.with_columns(
        pl.col("author")
        .replace_strict(counts["author"], counts[name], default=0, return_dtype=pl.Int64)
        .alias(name)
        for name in ("n_self", "n_anti")
    )


def selfid_curve(per_user: pl.DataFrame, bins: int) -> pl.DataFrame:
    """Per percentile bin (all ``bins`` rows, empty ones with zero users): users, posts, mean
    posts per user, verified occurrences and users, and the normalised rates."""
    width = 100.0 / bins
    frame = pl.DataFrame({"bin": list(range(bins))}, schema={"bin": pl.Int64})
    agg = (
        # the columns it counts only (the rest of a large users table is not copied)
        per_user.select(bin_expr(bins), "n_posts", "n_self", "n_anti")
        .group_by("bin")
        .agg(
            pl.len().cast(pl.Int64).alias("n_users"),
            pl.col("n_posts").sum().cast(pl.Int64).alias("n_posts"),
            pl.col("n_self").sum().cast(pl.Int64).alias("self_occurrences"),
            pl.col("n_anti").sum().cast(pl.Int64).alias("anti_occurrences"),
            (pl.col("n_self") > 0).sum().cast(pl.Int64).alias("self_users"),
            (pl.col("n_anti") > 0).sum().cast(pl.Int64).alias("anti_users"),
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


def _weighted_sse_constant(y: np.ndarray, w: np.ndarray) -> float:
    if w.sum() <= 0:
        return 0.0
    mean = float(np.average(y, weights=w))
    return float((w * (y - mean) ** 2).sum())


def _weighted_sse_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    if len(x) <= 2:
        return 0.0
    sw = np.sqrt(w)
    design = np.column_stack([np.ones_like(x), x]) * sw[:, None]
    coef, *_ = np.linalg.lstsq(design, y * sw, rcond=None)
    resid = y - (coef[0] + coef[1] * x)
    return float((w * resid**2).sum())


def _hinge_fit(
    lo: np.ndarray, hi: np.ndarray, rate: np.ndarray, posts: np.ndarray, min_bins_each_side: int
) -> tuple[float, float, float] | None:
    """(breakpoint, its weighted squared error, that of one straight line over all bins) of the
    non-empty bins given; None with too few bins."""
    if len(lo) < 2 * min_bins_each_side:
        return None
    x = (lo + hi) / 2.0
    w = posts / posts.sum()
    best: tuple[float, float] | None = None
    for i in range(min_bins_each_side, len(x) - min_bins_each_side + 1):
        sse = _weighted_sse_constant(rate[:i], w[:i]) + _weighted_sse_line(x[i:], rate[i:], w[i:])
        if best is None or sse < best[0] - 1e-15:
            best = (sse, float(lo[i]))
    if best is None:
        return None
    return best[1], best[0], _weighted_sse_line(x, rate, w)


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
    per_user: pl.DataFrame,
    bins: int,
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

    ``stop_reasons``: why the curve does not support an ``auto`` threshold at all (fewer than
    SUPPORT_MIN_SELF_IDS verified self-IDs, a self-ID rate above the breakpoint not higher than
    below it, or permutation_p > SUPPORT_MAX_P); ``supported``: no stop reason and agreement >=
    SUPPORT_MIN_AGREEMENT."""
    width = 100.0 / bins
    frame = per_user.select(bin_expr(bins), "n_posts", "n_self")
    user_bin = frame["bin"].to_numpy()
    posts = frame["n_posts"].to_numpy().astype(float)
    selfs = frame["n_self"].to_numpy().astype(float)

    def fit(n_posts_of_user: np.ndarray, n_self_of_user: np.ndarray) -> tuple[float, float]:
        """(breakpoint or nan, rise of the rate across it) of one curve."""
        n_posts = np.bincount(user_bin, n_posts_of_user, minlength=bins)
        n_self = np.bincount(user_bin, n_self_of_user, minlength=bins)
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

    n_users = len(posts)
    non_empty = int(np.count_nonzero(np.bincount(user_bin, posts, minlength=bins) > 0))
    _, rise = fit(posts, selfs)
    rng = np.random.default_rng(seed)
    as_large = 0
    for _ in range(permutations):
        order = rng.permutation(n_users)
        as_large += fit(posts[order], selfs[order])[1] >= rise - 1e-15
    p_value = (1 + as_large) / (1 + permutations)
    found = []
    for _ in range(replicates):
        weights = np.bincount(rng.integers(0, n_users, n_users), minlength=n_users)
        found.append(fit(weights * posts, weights * selfs)[0])
    found_arr = np.asarray(found)
    agreement = float(np.mean(np.abs(found_arr - breakpoint) <= width + 1e-9))
    located = found_arr[np.isfinite(found_arr)]
    rate_below, rate_above = rates_at(per_user, breakpoint)
    stop = stop_reasons(int(selfs.sum()), rate_below, rate_above, p_value)
    return {
        "non_empty_bins": non_empty,
        "verified_self_ids": int(selfs.sum()),
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


def rates_at(per_user: pl.DataFrame, threshold: float) -> tuple[float | None, float | None]:
    """Verified self-IDs per 1,000 posts of the users below and at or above ``threshold``."""

    def per_1k(users: pl.Expr) -> float | None:
        # sums over the users the mask selects, without a copy of their rows
        n, n_self = per_user.select(
            pl.col("n_posts").filter(users).sum(), pl.col("n_self").filter(users).sum()
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
