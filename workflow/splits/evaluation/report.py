"""Plots of the Group Theorization evaluation for the Snakemake report (paper Fig. 4).

- ``accuracy_vs_k.png``: accuracy (95% Wilson interval) against the calibration size k, one line
  per (TM, CM) (Fig. 4a);
- ``tm_cm_heatmap.png``: accuracy of every TM x CM at the experiment's largest k (Fig. 4b);
- ``by_pair.png``, ``by_demographic.png``, ``by_category.png``: accuracy with intervals per
  split, one marker per TM (first CM, largest k; all TMs when there is one CM);
- ``group_gaps.png`` (experiments with groups of TMs, written by ``splits group-splits``): the
  gap between two groups per key of every split.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import polars as pl

from splits.plots import message_figure, save_figure

log = logging.getLogger(__name__)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "svg.hashsalt": "splits"})
    return plt


def _save(fig, path: Path) -> None:
    save_figure(fig, path, dpi=120)


def _errors(frame: pl.DataFrame) -> list[list[float]]:
    acc = frame["accuracy"].to_list()
    lo = frame["ci_low"].to_list()
    hi = frame["ci_high"].to_list()
    return [
        [a - low for a, low in zip(acc, lo, strict=True)],
        [h - a for a, h in zip(acc, hi, strict=True)],
    ]


NO_ROWS = "no rows in the experiment's summary (no prediction was scored)"


def plot_accuracy_vs_k(summary: pl.DataFrame, path: Path, title: str) -> None:
    if summary.height == 0:
        message_figure(path, title, NO_ROWS, dpi=120)
        return
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for (tm, cm), part in summary.sort("k").group_by(["tm", "cm"], maintain_order=True):
        ax.errorbar(
            part["k"].to_list(),
            part["accuracy"].to_list(),
            yerr=_errors(part),
            marker="o",
            capsize=3,
            label=f"{tm} / {cm}",
        )
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("calibration posts k")
    ax.set_ylabel("accuracy (undetected = wrong)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=7, title="TM / CM")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_heatmap(summary: pl.DataFrame, path: Path, title: str) -> None:
    if summary.height == 0:
        message_figure(path, title, NO_ROWS, dpi=120)
        return
    plt = _pyplot()
    k = summary["k"].max()
    part = summary.filter(pl.col("k") == k)
    tms = sorted(part["tm"].unique().to_list())
    cms = sorted(part["cm"].unique().to_list())
    value = {(r["tm"], r["cm"]): r["accuracy"] for r in part.iter_rows(named=True)}
    grid = [[value.get((tm, cm), math.nan) for cm in cms] for tm in tms]
    # room for the tick labels, the title and the colour bar with its label, however few cells
    fig, ax = plt.subplots(figsize=(max(6.0, 3.5 + 1.2 * len(cms)), max(4.0, 2.0 + 0.5 * len(tms))))
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(cms)), cms, rotation=30, ha="right")
    ax.set_yticks(range(len(tms)), tms)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(
                    j,
                    i,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    color="white" if v < 0.6 else "black",
                )
    ax.set_xlabel("classification model (CM)")
    ax.set_ylabel("theory model (TM)")
    ax.set_title(f"{title} (k={k})")
    fig.colorbar(image, ax=ax, label="accuracy")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_split(splits: pl.DataFrame, split: str, path: Path, title: str) -> None:
    part = splits.filter(pl.col("split") == split)
    if part.height == 0:
        message_figure(path, f"{title}: by {split}", f"no rows of the {split} split", dpi=120)
        return
    plt = _pyplot()
    k = part["k"].max()
    cm = sorted(part["cm"].unique().to_list())[0]
    part = part.filter((pl.col("k") == k) & (pl.col("cm") == cm))
    keys = sorted(part["key"].unique().to_list())
    tms = sorted(part["tm"].unique().to_list())
    fig, ax = plt.subplots(figsize=(6.5, 1.2 + 0.32 * len(keys) * max(1, len(tms)) ** 0.5))
    step = 0.8 / max(1, len(tms))
    for t, tm in enumerate(tms):
        rows = part.filter(pl.col("tm") == tm).sort("key")
        position = {key: i for i, key in enumerate(keys)}
        y = [position[key] + (t - (len(tms) - 1) / 2) * step for key in rows["key"].to_list()]
        ax.errorbar(rows["accuracy"].to_list(), y, xerr=_errors(rows), fmt="o", capsize=2, label=tm)
    ax.axvline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_yticks(range(len(keys)), keys, fontsize=7)
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("accuracy (95% Wilson interval)")
    ax.set_title(f"{title}: by {split} (CM {cm}, k={k})")
    ax.legend(fontsize=7, title="TM")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_group_gaps(table: pl.DataFrame, path: Path, title: str) -> None:
    """Gap between two groups of TMs (first minus second) per key of every split, one panel per
    split, for the first CM, the largest k and the first pair of groups; filled markers where
    the Benjamini-Hochberg q is below 0.05 (``group_splits.csv`` has every configuration)."""
    plt = _pyplot()
    k = table["k"].max()
    cm = sorted(table["cm"].unique().to_list())[0]
    part = table.filter((pl.col("k") == k) & (pl.col("cm") == cm))
    first, second = part.row(0, named=True)["group_1"], part.row(0, named=True)["group_2"]
    part = part.filter((pl.col("group_1") == first) & (pl.col("group_2") == second))
    splits = [s for s in part["split"].unique(maintain_order=True).to_list()]
    heights = [max(2, part.filter(pl.col("split") == s).height) for s in splits]
    fig, axes = plt.subplots(
        len(splits),
        1,
        figsize=(6.5, 1.2 + 0.2 * sum(heights)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    for ax, split in zip(axes[:, 0], splits, strict=True):
        rows = part.filter(pl.col("split") == split).sort("rank")
        y = list(range(rows.height))
        significant = [q < 0.05 for q in rows["q_bh"].to_list()]
        ax.scatter(
            rows["difference"].to_list(),
            y,
            c=["C3" if s else "white" for s in significant],
            edgecolors="C3",
            zorder=3,
        )
        ax.axvline(0, color="grey", linestyle=":", linewidth=1)
        ax.set_yticks(y, rows["key"].to_list(), fontsize=6)
        ax.set_xlim(-1, 1)
        ax.invert_yaxis()
        ax.set_title(f"by {split.replace('_', ' / ')}", fontsize=8)
    axes[-1, 0].set_xlabel(f"accuracy gap, {first} minus {second} (filled: BH q < 0.05)")
    fig.suptitle(f"{title}: {first} vs {second} (CM {cm}, k={k})", fontsize=9)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_experiment(
    summary: pl.DataFrame, splits: pl.DataFrame, out: Path, experiment: str
) -> None:
    """The experiment's plots (accuracy vs k, the TM x CM heatmap, by pair, demographic and
    category) in folder ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    title = f"experiment {experiment}"
    plot_accuracy_vs_k(summary, out / "accuracy_vs_k.png", title)
    plot_heatmap(summary, out / "tm_cm_heatmap.png", title)
    for split, name in (
        ("pair", "by_pair"),
        ("demographic", "by_demographic"),
        ("category", "by_category"),
    ):
        plot_split(splits, split, out / f"{name}.png", title)
