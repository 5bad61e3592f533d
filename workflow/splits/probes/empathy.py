"""Perception probe, empathy gap (docs/method.md §3.1; Hou, Daumé III & Rudinger 2025).

A perceiver persona ("You are {perceiver}.") rates the intensity of an emotion felt by an
experiencer in a narrative. Both sides range over the *names* of a group set; a group may have
several names (the paper's race/ethnicity set has 18 names in 4 groups), and an optional neutral
reference persona ("a person") is asked about too.

- Delta: M[perceiver, experiencer] = mean intensity over the items with a parsed answer in every
  cell of the group names (the neutral row and column do not count), z-scored over those cells;
  delta = mean over the in-group cells (the block of all name pairs within a group) - mean over
  the out-group cells. The neutral persona is shown but never part of delta.
- Tests of delta: rows and columns of M permuted independently (two-sided, the in-group block
  pattern fixed), and an item-level sign-flip test of the per-item deltas. A row/column
  permutation test can reach at best ``min_permutation_p`` (1/n! for n one-name groups: 1/6 with
  3 groups, 1/24 with 4); the primary test is the permutation test when that bound is at most
  the significance level, else the sign-flip test.
- Cells and mask: over the items with a parsed answer in every cell including the neutral ones,
  each cell that is neither a name's own cell nor neutral gets paired t-tests against the
  perceiver's own cell (p, p) and the experiencer's own cell (e, e), Bonferroni over all N^2
  cells of the shown matrix (the paper's threshold). As in the paper's heatmaps, a cell is
  *masked* (greyed out) unless it differs significantly from both of those cells.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import polars as pl
from scipy import stats

from splits.plots import message_figure, save_figure
from splits.probes.empathy_prompts import Persona
from splits.stats import bonferroni, sign_flip_test

# --------------------------------------------------------------------------- statistics


def in_group_mask(groups: list[str]) -> np.ndarray:
    """(n, n) bool: True where perceiver and experiencer names belong to the same group."""
    labels = np.array(groups, dtype=object)
    return labels[:, None] == labels[None, :]


def gap_delta(matrix: np.ndarray, in_group: np.ndarray) -> float:
    """Mean over the in-group cells minus mean over the out-group cells."""
    return float(matrix[in_group].mean() - matrix[~in_group].mean())


def min_permutation_p(groups: list[str]) -> float:
    """The smallest two-sided p-value the row/column permutation test can give.

    Only the (row, column) permutation pairs that move the in-group cells onto themselves give
    the observed in-group set: every block mapped onto a block of the same size, rows and
    columns alike. Their share of all (n!)^2 pairs is s * prod_k(b_k!)^2 / (n!)^2, b_k the
    blocks' sizes and s the number of size-preserving relabellings of the blocks; for n
    one-name groups that is 1/n!."""
    sizes = Counter(groups).values()
    relabel = math.prod(math.factorial(c) for c in Counter(sizes).values())
    within = math.prod(math.factorial(b) for b in sizes)
    return float(Fraction(relabel * within**2, math.factorial(len(groups)) ** 2))


def row_column_permutation_test(
    matrix: np.ndarray, in_group: np.ndarray, n_permutations: int, seed: int, chunk: int = 2000
) -> tuple[float, float, float]:
    """Two-sided test of delta by permuting the rows and the columns of ``matrix``
    independently while the in-group pattern stays. Returns (p, 2.5% and 97.5% quantiles of the
    null); p = (1 + #{|delta*| >= |delta|}) / (1 + n_permutations)."""
    n = matrix.shape[0]
    observed = gap_delta(matrix, in_group)
    rng = np.random.default_rng(seed)
    n_in, n_out = int(in_group.sum()), int((~in_group).sum())
    total = matrix.sum()
    null = []
    done = 0
    while done < n_permutations:
        size = min(chunk, n_permutations - done)
        rows = np.argsort(rng.random((size, n)), axis=1)
        cols = np.argsort(rng.random((size, n)), axis=1)
        permuted = matrix[rows[:, :, None], cols[:, None, :]]
        inside = (permuted * in_group).sum(axis=(1, 2))
        null.append(inside / n_in - (total - inside) / n_out)
        done += size
    values = np.concatenate(null)
    tolerance = 1e-12 * max(1.0, abs(observed))
    p = (1 + int(np.sum(np.abs(values) >= abs(observed) - tolerance))) / (1 + n_permutations)
    low, high = np.quantile(values, [0.025, 0.975])
    return p, float(low), float(high)


def item_tensor(
    responses: pl.DataFrame, names: list[str]
) -> tuple[np.ndarray, list[str], dict[str, int]]:
    """Intensities as an (items, perceivers, experiencers) array over ``names``, for the items
    with a parsed answer in every one of those cells; also the kept item ids and the excluded
    item counts by reason (an item with both a refusal and an unparsable answer counts as a
    refusal)."""
    index = {g: i for i, g in enumerate(names)}
    cells = responses.filter(pl.col("perceiver").is_in(names) & pl.col("experiencer").is_in(names))
    per_item = (
        responses.select("item_id")
        .unique()
        .join(
            cells.group_by("item_id").agg(
                (pl.col("status") == "refusal").any().alias("any_refusal"),
                (pl.col("status") == "unparsable").any().alias("any_unparsable"),
                pl.len().alias("n_cells"),
            ),
            on="item_id",
            how="left",
        )
        .with_columns(
            pl.col("any_refusal", "any_unparsable").fill_null(False),
            pl.col("n_cells").fill_null(0),
        )
    )
    n_cells = len(names) ** 2
    refusal = per_item["any_refusal"]
    unparsable = per_item["any_unparsable"] & ~refusal
    missing = (per_item["n_cells"] < n_cells) & ~per_item["any_refusal"] & ~unparsable
    excluded = {
        "refusal": int(refusal.sum()),
        "unparsable": int(unparsable.sum()),
        "missing_cells": int(missing.sum()),
    }
    kept = sorted(
        per_item.filter(
            ~pl.col("any_refusal") & ~pl.col("any_unparsable") & (pl.col("n_cells") >= n_cells)
        )["item_id"].to_list()
    )
    kept_index = {item: i for i, item in enumerate(kept)}
    tensor = np.full((len(kept), len(names), len(names)), np.nan)
    rows = cells.filter(pl.col("item_id").is_in(kept))
    for item_id, perceiver, experiencer, value in rows.select(
        "item_id", "perceiver", "experiencer", "intensity"
    ).iter_rows():
        tensor[kept_index[item_id], index[perceiver], index[experiencer]] = value
    return tensor, kept, excluded


def _zscore(matrix: np.ndarray) -> tuple[np.ndarray, float]:
    spread = float(matrix.std())
    scale = spread if spread > 0 else 1.0
    return (matrix - matrix.mean()) / scale, scale


def _paired_t(values: np.ndarray, reference: np.ndarray) -> tuple[float | None, float | None]:
    """Paired t-test of two per-item series; constant differences (up to rounding) have no t
    (p 1 if they are all 0, else 0); fewer than two items: no test."""
    if values.size < 2:
        return None, None
    differences = values - reference
    if np.ptp(differences) <= 1e-9 * max(1.0, float(np.abs(differences).max())):
        return None, (1.0 if abs(differences[0]) <= 1e-9 else 0.0)
    result = stats.ttest_rel(values, reference)
    return float(result.statistic), float(result.pvalue)


CELLS_SCHEMA = {
    "perceiver": pl.String,
    "experiencer": pl.String,
    "perceiver_group": pl.String,
    "experiencer_group": pl.String,
    "in_group": pl.Boolean,
    "neutral": pl.Boolean,
    "n_items": pl.Int64,
    "mean": pl.Float64,
    "z": pl.Float64,
    "diff_vs_perceiver": pl.Float64,
    "diff_vs_experiencer": pl.Float64,
    "t_vs_perceiver": pl.Float64,
    "p_vs_perceiver": pl.Float64,
    "p_bonferroni_vs_perceiver": pl.Float64,
    "t_vs_experiencer": pl.Float64,
    "p_vs_experiencer": pl.Float64,
    "p_bonferroni_vs_experiencer": pl.Float64,
    "masked": pl.Boolean,
}


@dataclass
class EmpathyResult:
    personas: list[Persona]
    n_items: int
    # delta over the group names (neutral excluded)
    n_items_kept: int
    excluded: dict[str, int]  # reason -> items
    matrix: np.ndarray  # raw mean intensities over the group names, perceiver x experiencer
    z_matrix: np.ndarray
    in_group: np.ndarray
    delta: float  # in z units
    delta_raw: float
    p_permutation: float
    null_low: float  # 2.5% and 97.5% quantiles of the permutation null of delta
    null_high: float
    min_p_permutation: float
    p_sign_flip: float
    primary_test: str
    alpha: float
    # the shown matrix (all names and the neutral persona) and its cell tests
    n_items_shown: int
    excluded_shown: dict[str, int]
    shown_z: np.ndarray
    masked: np.ndarray
    cells: pl.DataFrame
    notes: list[str] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [p.key for p in self.personas if p.group is not None]

    def summary(self) -> dict:
        groups: dict[str, list[str]] = {}
        for persona in self.personas:
            if persona.group is not None:
                groups.setdefault(persona.group, []).append(persona.key)
        neutral = [p.key for p in self.personas if p.group is None]
        return {
            "groups": groups,
            "neutral": neutral[0] if neutral else None,
            "n_items": self.n_items,
            "n_items_kept": self.n_items_kept,
            "excluded_items": self.excluded,
            "n_items_shown": self.n_items_shown,
            "excluded_items_shown": self.excluded_shown,
            "n_in_group_cells": int(self.in_group.sum()),
            "n_out_group_cells": int((~self.in_group).sum()),
            "delta": self.delta,
            "delta_raw": self.delta_raw,
            "p_permutation": self.p_permutation,
            "null_95": [self.null_low, self.null_high],
            "min_p_permutation": self.min_p_permutation,
            "p_sign_flip": self.p_sign_flip,
            "alpha": self.alpha,
            "primary_test": self.primary_test,
            "p_primary": self.p_permutation
            if self.primary_test == "permutation"
            else self.p_sign_flip,
            "n_masked_cells": int(self.masked.sum()),
            "notes": self.notes,
        }


def empathy_gap(
    responses: pl.DataFrame,
    personas: list[Persona],
    n_permutations: int,
    n_flips: int,
    seed: int,
    alpha: float,
) -> EmpathyResult:
    """The empathy-gap analysis of ``responses`` (item_id, perceiver, experiencer, intensity,
    status) over ``personas`` (the group names and at most one neutral persona)."""
    named = [p for p in personas if p.group is not None]
    names = [p.key for p in named]
    groups = [str(p.group) for p in named]
    shown = [p.key for p in personas]
    in_group = in_group_mask(groups)
    n_items = responses["item_id"].n_unique()
    min_p = min_permutation_p(groups)
    primary = "permutation" if min_p <= alpha else "sign_flip"
    notes = []
    if primary == "sign_flip":
        notes.append(
            f"the row/column permutation test cannot go below p = {min_p:.3g} with these "
            f"{len(set(groups))} groups and {len(names)} names: the item-level sign-flip test "
            "is the primary test"
        )

    tensor, kept, excluded = item_tensor(responses, names)
    nan = float("nan")
    if kept:
        matrix = tensor.mean(axis=0)
        z_matrix, scale = _zscore(matrix)
        delta = gap_delta(z_matrix, in_group)
        p_perm, low, high = row_column_permutation_test(z_matrix, in_group, n_permutations, seed)
        item_deltas = np.array([gap_delta(tensor[i], in_group) for i in range(len(kept))]) / scale
        _, p_flip = sign_flip_test(item_deltas, n_flips, seed + 1)
        delta_raw = gap_delta(matrix, in_group)
    else:
        matrix = z_matrix = np.full((len(names), len(names)), nan)
        delta = delta_raw = p_perm = low = high = p_flip = nan

    full, kept_shown, excluded_shown = item_tensor(responses, shown)
    n_shown = len(shown)
    masked = np.zeros((n_shown, n_shown), dtype=bool)
    if kept_shown:
        shown_matrix = full.mean(axis=0)
        shown_z, _ = _zscore(shown_matrix)
    else:
        shown_matrix = shown_z = np.full((n_shown, n_shown), nan)
    rows = []
    tests = n_shown * n_shown  # the paper's Bonferroni: all cells of the shown matrix
    for p, perceiver in enumerate(personas):
        for e, experiencer in enumerate(personas):
            neutral = perceiver.group is None or experiencer.group is None
            row = {
                "perceiver": perceiver.key,
                "experiencer": experiencer.key,
                "perceiver_group": perceiver.group,
                "experiencer_group": experiencer.group,
                "in_group": (not neutral) and perceiver.group == experiencer.group,
                "neutral": neutral,
                "n_items": len(kept_shown),
                "mean": float(shown_matrix[p, e]),
                "z": float(shown_z[p, e]),
                "diff_vs_perceiver": float(shown_matrix[p, e] - shown_matrix[p, p]),
                "diff_vs_experiencer": float(shown_matrix[p, e] - shown_matrix[e, e]),
                "t_vs_perceiver": None,
                "p_vs_perceiver": None,
                "p_bonferroni_vs_perceiver": None,
                "t_vs_experiencer": None,
                "p_vs_experiencer": None,
                "p_bonferroni_vs_experiencer": None,
                "masked": False,
            }
            if p != e and not neutral and kept_shown:
                t_p, p_p = _paired_t(full[:, p, e], full[:, p, p])
                t_e, p_e = _paired_t(full[:, p, e], full[:, e, e])
                bonf_p = None if p_p is None else float(bonferroni([p_p], m=tests)[0])
                bonf_e = None if p_e is None else float(bonferroni([p_e], m=tests)[0])
                significant = (
                    bonf_p is not None and bonf_e is not None and bonf_p < alpha and bonf_e < alpha
                )
                masked[p, e] = not significant
                row |= {
                    "t_vs_perceiver": t_p,
                    "p_vs_perceiver": p_p,
                    "p_bonferroni_vs_perceiver": bonf_p,
                    "t_vs_experiencer": t_e,
                    "p_vs_experiencer": p_e,
                    "p_bonferroni_vs_experiencer": bonf_e,
                    "masked": bool(masked[p, e]),
                }
            rows.append(row)
    cells = pl.DataFrame(rows, schema=CELLS_SCHEMA).fill_nan(None)
    return EmpathyResult(
        personas=personas,
        n_items=n_items,
        n_items_kept=len(kept),
        excluded=excluded,
        matrix=matrix,
        z_matrix=z_matrix,
        in_group=in_group,
        delta=delta,
        delta_raw=delta_raw,
        p_permutation=p_perm,
        null_low=low,
        null_high=high,
        min_p_permutation=min_p,
        p_sign_flip=p_flip,
        primary_test=primary,
        alpha=alpha,
        n_items_shown=len(kept_shown),
        excluded_shown=excluded_shown,
        shown_z=shown_z,
        masked=masked,
        cells=cells,
        notes=notes,
    )


def heatmap(result: EmpathyResult, path: str, title: str) -> None:
    """The z-scored perceiver x experiencer matrix (all names and the neutral persona) as a
    PNG: masked cells (not significantly different from both the perceiver's and the
    experiencer's own cell) are greyed and hatched, in-group blocks outlined, the neutral row
    and column set off by a white line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    labels = [p.key for p in result.personas]
    n = len(labels)
    if n == 0:
        message_figure(path, title, "no persona to compare (no perceiver x experiencer cell)")
        return
    size = max(4.0, 0.45 * n + 2.5)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    if result.n_items_shown:
        z = result.shown_z
        limit = float(np.nanmax(np.abs(z))) or 1.0
        shown = np.ma.masked_where(result.masked, z)
        image = ax.imshow(shown, cmap="RdBu_r", vmin=-limit, vmax=limit)
        ax.imshow(
            np.ma.masked_where(~result.masked, np.ones_like(z)),
            cmap="Greys",
            vmin=0,
            vmax=4,
        )
        fontsize = 8 if n <= 10 else 5
        for p in range(n):
            for e in range(n):
                if result.masked[p, e]:
                    ax.add_patch(
                        Rectangle(
                            (e - 0.5, p - 0.5), 1, 1, fill=False, hatch="///", lw=0, color="#999"
                        )
                    )
                color = "#777777" if result.masked[p, e] else "black"
                ax.text(
                    e, p, f"{z[p, e]:.2f}", ha="center", va="center", fontsize=fontsize, color=color
                )
        fig.colorbar(image, ax=ax, label="z-scored mean intensity", shrink=0.8)
        # in-group blocks of names that belong to the same group
        groups = [p.group for p in result.personas]
        start = 0
        while start < n:
            end = start
            while end + 1 < n and groups[end + 1] == groups[start]:
                end += 1
            if groups[start] is not None:
                ax.add_patch(
                    Rectangle(
                        (start - 0.5, start - 0.5),
                        end - start + 1,
                        end - start + 1,
                        fill=False,
                        lw=1.5,
                        color="black",
                    )
                )
            start = end + 1
        for index, group in enumerate(groups):
            if group is None:
                ax.axhline(index + 0.5, color="white", lw=3)
                ax.axvline(index + 0.5, color="white", lw=3)
    else:
        ax.text(0.5, 0.5, "no item with a parsed answer in every cell", ha="center", va="center")
    ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(n), labels, fontsize=7)
    ax.set_xlabel("experiencer")
    ax.set_ylabel("perceiver")
    ax.set_title(
        f"{title}\ndelta={result.delta:.3f} (neutral excluded); p_perm={result.p_permutation:.3g} "
        f"(min {result.min_p_permutation:.2g}), p_flip={result.p_sign_flip:.3g}, primary "
        f"{result.primary_test}\nitems {result.n_items_kept}/{result.n_items} (delta), "
        f"{result.n_items_shown} (shown); hatched: not different from both own cells",
        fontsize=8,
    )
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
