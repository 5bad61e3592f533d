"""GRASP agreement analysis (docs/method.md §3.2, Prabhakaran et al.): how much a rater group's ratings
hang together (in-group cohesion) and how much they agree with everyone else's (cross-group
cohesion), with permutation tests of the rater attributes.

In-group metrics, over the items with at least two of the group's ratings:
- IRR: Krippendorff's alpha (nominal) among the group's raters;
- plurality size: the share of the group's ratings that equal the group's most frequent rating;
- negentropy: ln(n) - H(group's rating distribution on the item), n = number of categories.
Cross-group metrics (the group against all other raters), over the items both sides rated:
- XRR: Wong, Paritosh & Aroyo's cross-replication kappa;
- plurality agreement: Krippendorff's alpha between the two sides' plurality ratings (an item
  whose plurality is tied on a side has no plurality rating on that side);
- cross-negentropy: ln(n) - H(p, q), H(p, q) = -sum_c p(c) ln q(c), p the group's and q the
  others' rating distribution on the item, q smoothed by adding ``smoothing`` to every
  category's count (q is never 0, so H(p, q) is finite).
GAI = IRR / XRR (1 = no association). A dimension's DSI (diversity sensitivity index) is the
largest GAI among the groups of that attribute or intersection of attributes.

Input is any long ratings table (item, rater, rating; missing ratings are simply absent) plus an
optional rater attributes table (rater + one column per attribute), or rating rows that carry
the rater's attributes (DICES-style). Everything is computed from per-item category counts, so
one matrix product gives the counts of a rater group for many permutations at once.
"""

from __future__ import annotations

import itertools
import logging
import textwrap
from dataclasses import dataclass

import numpy as np
import polars as pl

from splits.agreement import (
    RatingMatrix,
    alpha_from_counts,
    krippendorff_alpha_nominal,
)
from splits.errors import ConfigError
from splits.stats import benjamini_hochberg, one_sided_permutation_p

log = logging.getLogger(__name__)


def xrr_from_counts(counts_x: np.ndarray, counts_y: np.ndarray) -> np.ndarray:
    """Cross-replication reliability kappa_x = 1 - d_o / d_e (nominal distance) between two rater
    groups, from their per-item category counts (shape (..., items, categories)); Wong, Paritosh
    & Aroyo (2021), as their reference implementation computes it with missing ratings.

    Only items rated by both groups count. d_o: each item's share of disagreeing (x, y) cross
    pairs, weighted by the item's number of ratings R_xu + R_yu (an item rated by many raters
    weighs more than one rated by few; with the same number of ratings on every item this is the
    plain mean over items). d_e: the share of disagreeing cross pairs over all ratings of those
    items regardless of item, 1 - sum_c p_x(c) p_y(c).
    """
    counts_x = np.asarray(counts_x, dtype=float)
    counts_y = np.asarray(counts_y, dtype=float)
    total_x = counts_x.sum(axis=-1)
    total_y = counts_y.sum(axis=-1)
    both = (total_x > 0) & (total_y > 0)
    weight = np.where(both, total_x + total_y, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        agree = (counts_x * counts_y).sum(axis=-1) / np.where(both, total_x * total_y, 1.0)
        d_o = (weight * np.where(both, 1.0 - agree, 0.0)).sum(axis=-1) / weight.sum(axis=-1)
        marg_x = (counts_x * both[..., None]).sum(axis=-2)
        marg_y = (counts_y * both[..., None]).sum(axis=-2)
        p_x = marg_x / marg_x.sum(axis=-1, keepdims=True)
        p_y = marg_y / marg_y.sum(axis=-1, keepdims=True)
        d_e = 1.0 - (p_x * p_y).sum(axis=-1)
        kappa = 1.0 - d_o / d_e
    return np.where(both.any(axis=-1) & (d_e > 0), kappa, np.nan)


def _mean_over(values: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Mean of ``values`` over the last axis where ``where`` holds; NaN where nothing does."""
    count = where.sum(axis=-1)
    total = np.where(where, values, 0.0).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def plurality_size_from_counts(counts: np.ndarray) -> np.ndarray:
    """Mean over items (with at least two ratings) of the share of ratings equal to the most
    frequent rating. ``counts``: (..., items, categories)."""
    counts = np.asarray(counts, dtype=float)
    m = counts.sum(axis=-1)
    rated = m >= 2
    with np.errstate(invalid="ignore", divide="ignore"):
        share = counts.max(axis=-1) / np.where(rated, m, 1.0)
    return _mean_over(share, rated)


def _entropy(p: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=-1)


def negentropy_from_counts(counts: np.ndarray) -> np.ndarray:
    """Mean over items (with at least two ratings) of ln(n) - H(p), p the item's rating
    distribution and n the number of categories (the last axis)."""
    counts = np.asarray(counts, dtype=float)
    m = counts.sum(axis=-1)
    rated = m >= 2
    p = counts / np.where(rated, m, 1.0)[..., None]
    return _mean_over(np.log(counts.shape[-1]) - _entropy(p), rated)


def _unique_plurality(counts: np.ndarray) -> np.ndarray:
    """One-hot of each item's most frequent rating; all zeros where the item is unrated or the
    largest count is shared by several categories (a tie has no plurality)."""
    top = counts.max(axis=-1, keepdims=True)
    at_top = (counts == top) & (top > 0)
    unique = at_top.sum(axis=-1, keepdims=True) == 1
    return (at_top & unique).astype(float)


def plurality_agreement_from_counts(counts_x: np.ndarray, counts_y: np.ndarray) -> np.ndarray:
    """Krippendorff's alpha (nominal) between the two sides' plurality ratings over items (GRASP's
    plurality or voting agreement). Ties leave that side's plurality missing on the item."""
    combined = _unique_plurality(np.asarray(counts_x, dtype=float)) + _unique_plurality(
        np.asarray(counts_y, dtype=float)
    )
    return alpha_from_counts(combined)


def cross_negentropy_from_counts(
    counts_x: np.ndarray, counts_y: np.ndarray, smoothing: float
) -> np.ndarray:
    """Mean over the items rated by both sides of ln(n) - H(p, q), H(p, q) = -sum_c p(c) ln q(c),
    p the x side's rating distribution and q the y side's with ``smoothing`` (> 0) added to
    every category's count, so that q is never 0 and H(p, q) is finite."""
    if smoothing <= 0:
        raise ConfigError("probes.grasp.smoothing: must be above 0 (q must not be 0)")
    counts_x = np.asarray(counts_x, dtype=float)
    counts_y = np.asarray(counts_y, dtype=float)
    n_cat = counts_x.shape[-1]
    m_x = counts_x.sum(axis=-1)
    m_y = counts_y.sum(axis=-1)
    both = (m_x > 0) & (m_y > 0)
    p = counts_x / np.where(both, m_x, 1.0)[..., None]
    q = (counts_y + smoothing) / np.where(both, m_y + smoothing * n_cat, 1.0)[..., None]
    cross = -np.where(p > 0, p * np.log(q), 0.0).sum(axis=-1)
    return _mean_over(np.log(n_cat) - cross, both)


# --------------------------------------------------------------------------- groups and GAI


@dataclass(frozen=True)
class RaterGroup:
    name: str  # "gender=female & race=Black"
    attributes: tuple[str, ...]
    members: np.ndarray  # bool over matrix.raters


def rater_groups(
    raters: tuple[str, ...],
    attributes: pl.DataFrame,
    min_raters: int,
    max_order: int,
    rater_column: str = "rater",
) -> tuple[list[RaterGroup], list[dict]]:
    """Every attribute value and every intersection of up to ``max_order`` attributes with at
    least ``min_raters`` raters (and at least one rater outside). Returns the groups and the
    skipped ones (name, n_raters, reason) so that nothing is dropped silently."""
    if rater_column not in attributes.columns:
        raise ConfigError(f"rater attributes table: column {rater_column!r} is missing")
    table = attributes.with_columns(pl.col(rater_column).cast(pl.String))
    if table[rater_column].is_duplicated().any():
        raise ConfigError("rater attributes table: a rater appears more than once")
    attribute_columns = [c for c in table.columns if c != rater_column]
    lookup = {row[rater_column]: row for row in table.iter_rows(named=True)}
    missing = [r for r in raters if r not in lookup]
    if missing:
        raise ConfigError(
            f"rater attributes table: {len(missing)} raters have no attributes (e.g. {missing[0]!r})"
        )
    groups: list[RaterGroup] = []
    skipped: list[dict] = []
    for order in range(1, min(max_order, len(attribute_columns)) + 1):
        for columns in itertools.combinations(attribute_columns, order):
            values = [tuple(str(lookup[r][c]) for c in columns) for r in raters]
            for combination in sorted(set(values)):
                if any(v == "None" for v in combination):
                    continue
                members = np.array([v == combination for v in values])
                name = " & ".join(f"{c}={v}" for c, v in zip(columns, combination, strict=True))
                n_in = int(members.sum())
                duplicate = next(
                    (g.name for g in groups if np.array_equal(g.members, members)), None
                )
                if duplicate is not None:
                    skipped.append(
                        {"group": name, "n_raters": n_in, "reason": f"same raters as {duplicate}"}
                    )
                elif n_in < min_raters:
                    skipped.append({"group": name, "n_raters": n_in, "reason": "too few raters"})
                elif n_in == len(raters):
                    skipped.append({"group": name, "n_raters": n_in, "reason": "no raters outside"})
                else:
                    groups.append(RaterGroup(name, columns, members))
    return groups, skipped


#: the metrics of one rater group, in the order of the output table
METRICS = (
    "irr",
    "xrr",
    "gai",
    "plurality_size",
    "negentropy",
    "plurality_agreement",
    "cross_negentropy",
)


def group_scores(
    one_hot: np.ndarray, membership: np.ndarray, smoothing: float
) -> dict[str, np.ndarray]:
    """Every metric of METRICS for membership vectors (raters,) or matrices (raters, P)."""
    membership = membership.astype(float)
    n_items, n_raters, n_cat = one_hot.shape
    # one BLAS product: (P, raters) @ (raters, items * categories)
    by_rater = one_hot.transpose(1, 0, 2).reshape(n_raters, n_items * n_cat)
    total = by_rater.sum(axis=0).reshape(n_items, n_cat)
    counts_in = (membership.T @ by_rater).reshape(*membership.shape[1:], n_items, n_cat)
    counts_out = total - counts_in
    irr = alpha_from_counts(counts_in)
    xrr = xrr_from_counts(counts_in, counts_out)
    with np.errstate(invalid="ignore", divide="ignore"):
        gai = irr / xrr
    return {
        "irr": irr,
        "xrr": xrr,
        "gai": gai,
        "plurality_size": plurality_size_from_counts(counts_in),
        "negentropy": negentropy_from_counts(counts_in),
        "plurality_agreement": plurality_agreement_from_counts(counts_in, counts_out),
        "cross_negentropy": cross_negentropy_from_counts(counts_in, counts_out, smoothing),
    }


def _nan_median(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(np.median(finite)) if finite.size else float("nan")


def _direction(observed: float, null_median: float) -> str | None:
    """Which side of the null median the observed value lies on (docs/method.md §3.2's one-sided rule)."""
    if np.isnan(observed) or np.isnan(null_median):
        return None
    return "above" if observed >= null_median else "below"


@dataclass
class GraspResult:
    groups: pl.DataFrame  # one row per group: n_raters, n_items, per metric value/p/q/direction
    nulls: pl.DataFrame  # group, metric, permutation, value: the permutation distributions


def grasp(
    matrix: RatingMatrix,
    groups: list[RaterGroup],
    n_permutations: int,
    seed: int,
    smoothing: float,
    chunk: int = 256,
) -> GraspResult:
    """Every metric per group with its permutation p-value (rater attributes permuted, i.e. a
    random rater set of the group's size; docs/method.md §3.2's one-sided rule: the share of permuted
    values beyond the observed one on the observed side of the null median), the side of the
    null median the observed value lies on, and Benjamini-Hochberg q-values across groups, per
    metric."""
    one_hot = matrix.one_hot()
    n_raters = len(matrix.raters)
    rows = []
    null_frames = []
    rng = np.random.default_rng(seed)
    for group in groups:
        observed = {k: float(v) for k, v in group_scores(one_hot, group.members, smoothing).items()}
        parts: dict[str, list[np.ndarray]] = {k: [] for k in METRICS}
        done = 0
        while done < n_permutations:
            size = min(chunk, n_permutations - done)
            order = np.argsort(rng.random((size, n_raters)), axis=1)
            permuted = group.members[order].T  # (raters, size)
            for key, values in group_scores(one_hot, permuted, smoothing).items():
                parts[key].append(np.atleast_1d(values))
            done += size
        null = {k: np.concatenate(v) if v else np.array([]) for k, v in parts.items()}
        members = group.members
        rated = (matrix.codes[:, members] >= 0).any(axis=1)
        row: dict = {
            "group": group.name,
            "attributes": ",".join(group.attributes),
            "n_raters": int(members.sum()),
            "n_items": int(rated.sum()),
        }
        for key in METRICS:
            median = _nan_median(null[key])
            row[key] = observed[key]
            row[f"p_{key}"] = one_sided_permutation_p(observed[key], null[key])
            row[f"dir_{key}"] = _direction(observed[key], median)
            row[f"null_median_{key}"] = median
        rows.append(row)
        null_frames.append(
            pl.DataFrame(
                {
                    "group": [group.name] * (len(METRICS) * n_permutations),
                    "metric": np.repeat(METRICS, n_permutations).tolist(),
                    "permutation": np.tile(np.arange(n_permutations), len(METRICS)),
                    "value": np.concatenate([null[k] for k in METRICS]),
                },
                schema=NULLS_SCHEMA,
            )
        )
    frame = pl.DataFrame(rows, schema=GROUPS_SCHEMA)
    for key in METRICS:
        frame = frame.with_columns(
            pl.Series(
                f"q_{key}", benjamini_hochberg(frame[f"p_{key}"].to_numpy()), dtype=pl.Float64
            )
        )
    order = ["group", "attributes", "n_raters", "n_items"]
    for key in METRICS:
        order += [key, f"p_{key}", f"q_{key}", f"dir_{key}", f"null_median_{key}"]
    nulls = pl.concat(null_frames) if null_frames else pl.DataFrame(schema=NULLS_SCHEMA)
    return GraspResult(frame.select(order), nulls.fill_nan(None))


GROUPS_SCHEMA = {
    "group": pl.String,
    "attributes": pl.String,
    "n_raters": pl.Int64,
    "n_items": pl.Int64,
    **{
        name: dtype
        for key in METRICS
        for name, dtype in (
            (key, pl.Float64),
            (f"p_{key}", pl.Float64),
            (f"dir_{key}", pl.String),
            (f"null_median_{key}", pl.Float64),
        )
    },
}
NULLS_SCHEMA = {
    "group": pl.String,
    "metric": pl.String,
    "permutation": pl.Int64,
    "value": pl.Float64,
}


def dsi_table(groups: pl.DataFrame, fdr: float) -> pl.DataFrame:
    """DSI (diversity sensitivity index) per dimension (an attribute or an intersection of
    attributes): the largest GAI among the dimension's groups, with that group, its p and q;
    ``significant`` when that GAI's q-value is below ``fdr``."""
    schema = {
        "dimension": pl.String,
        "n_groups": pl.Int64,
        "dsi": pl.Float64,
        "group": pl.String,
        "p_gai": pl.Float64,
        "q_gai": pl.Float64,
        "significant": pl.Boolean,
    }
    rows = []
    for (dimension,), table in groups.group_by(["attributes"], maintain_order=True):
        finite = table.filter(pl.col("gai").is_not_nan() & pl.col("gai").is_not_null())
        row = {"dimension": dimension, "n_groups": table.height}
        if finite.height:
            best = finite.sort("gai", descending=True).row(0, named=True)
            q = best["q_gai"]
            row |= {
                "dsi": best["gai"],
                "group": best["group"],
                "p_gai": best["p_gai"],
                "q_gai": q,
                "significant": bool(q is not None and not np.isnan(q) and q < fdr),
            }
        else:
            row |= {"dsi": None, "group": None, "p_gai": None, "q_gai": None, "significant": False}
        rows.append(row)
    return pl.DataFrame(rows, schema=schema).sort("dimension")


def null_histograms(result: GraspResult, path: str, title: str) -> None:
    """The permutation null distribution of every metric (columns) for every group (rows), the
    observed value as a red line and the null median as a dashed grey one (GRASP's Figs. 1-8)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = result.groups["group"].to_list()
    if not names:
        fig, ax = plt.subplots(figsize=(6, 2))
        ax.axis("off")
        ax.text(0.5, 0.5, "no rater groups analysed", ha="center", va="center")
        fig.savefig(path, dpi=100, metadata={"Software": None})
        plt.close(fig)
        return
    fig, axes = plt.subplots(
        len(names),
        len(METRICS),
        figsize=(2.3 * len(METRICS), 1.7 * len(names) + 0.8),
        squeeze=False,
    )
    nulls = result.nulls.partition_by(["group", "metric"], as_dict=True)
    for r, (name, row) in enumerate(zip(names, result.groups.iter_rows(named=True), strict=True)):
        for c, metric in enumerate(METRICS):
            ax = axes[r, c]
            values = nulls.get((name, metric))
            finite = values["value"].drop_nulls().to_numpy() if values is not None else np.array([])
            finite = finite[np.isfinite(finite)]
            if finite.size:
                # one filled outline, not hist's 30 bar patches: the same PNG, byte for byte,
                # drawn and laid out in a fraction of the time (the plot of 40+ panels took
                # most of the job)
                counts, edges = np.histogram(finite, bins=30)
                ax.stairs(counts, edges, fill=True, color="#9bb7d4")
                ax.axvline(row[f"null_median_{metric}"], color="#555555", ls="--", lw=1)
            observed = row[metric]
            if observed is not None and np.isfinite(observed):
                ax.axvline(observed, color="#c44e52", lw=1.5)
            p = row[f"p_{metric}"]
            ax.set_title(
                f"{metric} p={p:.3g}" if p is not None and np.isfinite(p) else f"{metric} p=n/a",
                fontsize=7,
            )
            ax.tick_params(labelsize=6)
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(textwrap.fill(name, 22), fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(fig)


def overall_summary(matrix: RatingMatrix) -> dict:
    """Alpha over all raters plus the table's shape."""
    observed = matrix.codes >= 0
    return {
        "n_items": len(matrix.items),
        "n_raters": len(matrix.raters),
        "n_ratings": int(observed.sum()),
        "categories": list(matrix.categories),
        "alpha_all": krippendorff_alpha_nominal(matrix.codes, len(matrix.categories)),
    }
