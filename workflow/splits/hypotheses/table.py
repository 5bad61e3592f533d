"""The run's hypotheses table, the two-stage filter and the report plots.

``lift.parquet``: one row per hypothesis x k fraction, the columns of ``TABLE_COLUMNS`` (the
issue's list first, then the release's precision@k and null band, as lift and as counts of target
posts, the number of posts matching the lexicon and the identity words the lexicon covers, then
the held-out columns and the redundancy marks).
``q_value`` is the Benjamini-Hochberg adjustment of ``p_value`` over every row of the run (all
hypotheses of all sets, all k), ``heldout_q_value`` the same of ``heldout_p_value``: the lift on
the pool's held-out half without the posts the hypothesis's source saw
(``splits.hypotheses.lift``). ``repeats`` names the stronger hypothesis of the same topic and pair
whose matched posts overlap this one's with a Jaccard index above
``hypotheses.redundancy_jaccard`` (``repeats_jaccard``); hypotheses are visited strongest first
(smallest held-out q over k, then largest held-out lift, then id).

Two-stage filter: stage 1 keeps rows with q < alpha; stage 2 keeps those whose triviality is
below a threshold (each of ``hypotheses.triviality_thresholds``). ``filtered.csv`` holds the rows
that pass stage 1 and stage 2 at the largest threshold, with one column
``nontrivial_below_<t>`` per threshold; ``stages.csv`` counts hypotheses (and rows) after each
stage per source and k.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.stats import benjamini_hochberg

log = logging.getLogger(__name__)

TABLE_COLUMNS = [
    "hypothesis_id",
    "topic",
    "demographic_A",
    "demographic_B",
    "target",
    "lexicon",
    "source",
    "k_fraction",
    "n",
    "hits_at_n",
    "target_in_list",
    "list_size",
    "lift",
    "lift_low",
    "lift_high",
    "p_value",
    "q_value",
    "triviality",
    "precision",
    "null_band_low",
    "null_band_high",
    "null_band_low_hits",
    "null_band_high_hits",
    "matching_posts",
    "identity_words_covered",
    "heldout_n",
    "heldout_hits_at_n",
    "heldout_target_in_list",
    "heldout_list_size",
    "heldout_lift",
    "heldout_lift_low",
    "heldout_lift_high",
    "heldout_p_value",
    "heldout_q_value",
    "repeats",
    "repeats_jaccard",
]
POOL_COLUMNS = ["topic", "demographic_A", "demographic_B"]
PNG_METADATA = {"Software": None}  # no library version in the file: byte-identical reruns


def build_table(
    lift: pl.DataFrame,
    triviality: pl.DataFrame,
    matches: pl.DataFrame | None = None,
    jaccard: float = 1.0,
) -> pl.DataFrame:
    """Join lift rows with triviality (by hypothesis_id), add the run's BH q of the all-posts and
    of the held-out p values, and the redundancy marks (``repeats``) from the posts each
    hypothesis matches (``matches``: hypothesis_id, matched_keys)."""
    joined = lift.join(
        triviality.select("hypothesis_id", "triviality", "identity_words_covered"),
        on="hypothesis_id",
        how="left",
    )
    for p, q in (("p_value", "q_value"), ("heldout_p_value", "heldout_q_value")):
        values = benjamini_hochberg(joined[p].cast(pl.Float64).fill_null(np.nan).to_numpy())
        joined = joined.with_columns(pl.Series(q, values, dtype=pl.Float64).fill_nan(None))
    marks = redundancy_marks(joined, matches, jaccard)
    return joined.join(marks, on="hypothesis_id", how="left").select(TABLE_COLUMNS)


def strength_order(table: pl.DataFrame) -> pl.DataFrame:
    """One row per hypothesis (with its pool), strongest first within the run: smallest held-out
    q over its k, then largest held-out lift, then id (missing values last)."""
    return (
        table.group_by("hypothesis_id", *POOL_COLUMNS)
        .agg(
            pl.col("heldout_q_value").min().alias("_q"),
            pl.col("heldout_lift").max().alias("_lift"),
        )
        .sort(["_q", "_lift", "hypothesis_id"], descending=[False, True, False], nulls_last=True)
    )


def redundancy_marks(
    table: pl.DataFrame, matches: pl.DataFrame | None, threshold: float
) -> pl.DataFrame:
    """``repeats`` (the id of the stronger hypothesis of the same topic and pair it repeats) and
    ``repeats_jaccard`` per hypothesis (``splits.hypotheses.redundancy``)."""
    from splits.hypotheses.redundancy import repeats

    schema = {"hypothesis_id": pl.String, "repeats": pl.String, "repeats_jaccard": pl.Float64}
    if matches is None or table.is_empty():
        return pl.DataFrame(schema=schema)
    keys = {h: frozenset(k) for h, k in matches.select("hypothesis_id", "matched_keys").iter_rows()}
    ids, marks, overlaps = [], [], []
    for _, part in strength_order(table).group_by(POOL_COLUMNS, maintain_order=True):
        order = part["hypothesis_id"].to_list()
        for hypothesis_id, (mark, overlap) in zip(
            order, repeats(order, [keys.get(h, frozenset()) for h in order], threshold), strict=True
        ):
            ids.append(hypothesis_id)
            marks.append(mark)
            overlaps.append(overlap)
    return pl.DataFrame(
        {"hypothesis_id": ids, "repeats": marks, "repeats_jaccard": overlaps}, schema=schema
    )


def threshold_column(threshold: float) -> str:
    return f"nontrivial_below_{threshold:g}"


def filtered(
    table: pl.DataFrame, notes: pl.DataFrame, alpha: float, thresholds: Sequence[float]
) -> pl.DataFrame:
    """Rows passing stage 1 (q < alpha) and stage 2 at the largest threshold, most significant
    first, with the hypothesis's note (citation, rationale)."""
    largest = max(thresholds)
    flags = [
        (pl.col("triviality") < t).fill_null(False).alias(threshold_column(t)) for t in thresholds
    ]
    return (
        table.filter((pl.col("q_value") < alpha) & (pl.col("triviality") < largest))
        .with_columns(flags)
        .join(notes.select("hypothesis_id", "note"), on="hypothesis_id", how="left")
        .sort("q_value", "hypothesis_id", "k_fraction")
    )


def stage_counts(table: pl.DataFrame, alpha: float, thresholds: Sequence[float]) -> pl.DataFrame:
    """Hypotheses and rows after each stage, per source and k fraction (source "all" too)."""
    stages = [("all", pl.lit(True)), ("significant", pl.col("q_value") < alpha)]
    for t in sorted(thresholds, reverse=True):
        stages.append(
            (
                f"nontrivial_below_{t:g}",
                (pl.col("q_value") < alpha) & (pl.col("triviality") < t).fill_null(False),
            )
        )
    frames = []
    for source_name, part in [("all", table), *table.group_by("source", maintain_order=True)]:
        name = source_name if isinstance(source_name, str) else source_name[0]
        for stage, condition in stages:
            kept = part.filter(condition)
            counts = (
                part.select("k_fraction")
                .unique()
                .join(
                    kept.group_by("k_fraction").agg(
                        pl.col("hypothesis_id").n_unique().alias("hypotheses"),
                        pl.len().alias("rows"),
                    ),
                    on="k_fraction",
                    how="left",
                )
                .with_columns(pl.col("hypotheses", "rows").fill_null(0).cast(pl.Int64))
            )
            frames.append(counts.with_columns(source=pl.lit(name), stage=pl.lit(stage)))
    if not frames:
        return pl.DataFrame(
            schema={
                "source": pl.String,
                "stage": pl.String,
                "k_fraction": pl.Float64,
                "hypotheses": pl.Int64,
                "rows": pl.Int64,
            }
        )
    order = {name: i for i, (name, _) in enumerate(stages)}
    return (
        pl.concat(frames)
        .with_columns(pl.col("stage").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
        .sort("source", "k_fraction", "_o")
        .select("source", "stage", "k_fraction", "hypotheses", "rows")
    )


# --------------------------------------------------------------------------- plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "svg.hashsalt": "splits"})
    return plt


def _save(fig, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120, metadata=PNG_METADATA, bbox_inches="tight")
    os.replace(tmp, path)


def plot_scatter(
    table: pl.DataFrame, k: float, alpha: float, thresholds: Sequence[float], path: Path
) -> None:
    """Lift at k against triviality, one marker per hypothesis, filled when q < alpha (the
    hypotheses with an all-posts lift: not the held-out-only counting baseline)."""
    plt = _pyplot()
    rows = table.filter(((pl.col("k_fraction") - k).abs() < 1e-12) & pl.col("lift").is_not_null())
    fig, ax = plt.subplots(figsize=(7.5, 5))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (source,) in enumerate(sorted(rows.select("source").unique().rows())):
        part = rows.filter(pl.col("source") == source)
        colour = colours[i % len(colours)]
        for significant, fill in ((True, colour), (False, "none")):
            sub = part.filter((pl.col("q_value") < alpha) == significant)
            if sub.height:
                ax.scatter(
                    sub["triviality"].fill_null(np.nan).to_numpy(),
                    sub["lift"].to_numpy(),
                    s=18,
                    facecolors=fill,
                    edgecolors=colour,
                    linewidths=0.8,
                    label=f"{source} ({'q < ' + format(alpha, 'g') if significant else 'n.s.'}, {sub.height})",
                )
    for t in thresholds:
        ax.axvline(t, color="grey", linestyle="--", linewidth=0.8)
        ax.text(t, 1.0, f" {t:g}", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xlabel("triviality (SubspaceBERTScore recall of the target's identity words)")
    ax.set_ylabel(f"lift@{k:g}")
    ax.set_title(f"Lift at k = {k:g} against triviality ({rows.height} hypotheses)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    _save(fig, path)
    plt.close(fig)


def top_hypotheses(table: pl.DataFrame, k: float, alpha: float, count: int) -> list[str]:
    """Ids of ``count`` hypotheses taken in turn from each source, each source's smallest q at
    k first (significant ones first, then larger lift), so every source shows its best (of the
    hypotheses with an all-posts lift: not the held-out-only counting baseline)."""
    ranked = (
        table.filter(((pl.col("k_fraction") - k).abs() < 1e-12) & pl.col("lift").is_not_null())
        .with_columns((pl.col("q_value") < alpha).alias("_significant"))
        .sort(
            ["_significant", "q_value", "lift", "hypothesis_id"],
            descending=[True, False, True, False],
        )
        .with_columns(pl.int_range(pl.len()).over("source").alias("_turn"))
        .sort("_turn", "source", maintain_order=True)
    )
    return ranked["hypothesis_id"].head(count).to_list()


def plot_curves(table: pl.DataFrame, ids: Sequence[str], path: Path) -> None:
    """lift@k against k (log scale) with the confidence interval, one line per hypothesis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for hypothesis_id in ids:
        part = table.filter(pl.col("hypothesis_id") == hypothesis_id).sort("k_fraction")
        if not part.height:
            continue
        first = part.row(0, named=True)
        label = f"{first['target']} vs {first['demographic_B'] if first['target'] == first['demographic_A'] else first['demographic_A']}, {first['topic']} ({first['source']}): {', '.join(first['lexicon'][:3])}{', ...' if len(first['lexicon']) > 3 else ''}"
        lift = part["lift"].to_numpy()
        ax.errorbar(
            part["k_fraction"].to_numpy(),
            lift,
            yerr=[lift - part["lift_low"].to_numpy(), part["lift_high"].to_numpy() - lift],
            marker="o",
            markersize=3,
            capsize=2,
            linewidth=1,
            label=label[:90],
        )
    ax.axhline(1.0, color="black", linewidth=0.6, linestyle=":")
    ax.set_xscale("log")
    ax.set_xlabel("k (fraction of the ranked list)")
    ax.set_ylabel("lift@k (with confidence interval)")
    ax.set_title(f"lift@k of the top {len(ids)} hypotheses")
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    _save(fig, path)
    plt.close(fig)


def plot_stages(counts: pl.DataFrame, k: float, path: Path) -> None:
    """Hypotheses surviving each stage at k, one bar group per source."""
    plt = _pyplot()
    rows = counts.filter((pl.col("k_fraction") - k).abs() < 1e-12)
    stages = list(dict.fromkeys(rows["stage"].to_list()))
    sources = list(dict.fromkeys(rows["source"].to_list()))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(sources) + 2), 4.5))
    width = 0.8 / max(len(stages), 1)
    for i, stage in enumerate(stages):
        values = [
            int(
                rows.filter((pl.col("source") == s) & (pl.col("stage") == stage))[
                    "hypotheses"
                ].sum()
            )
            for s in sources
        ]
        bars = ax.bar(np.arange(len(sources)) + i * width, values, width, label=stage)
        ax.bar_label(bars, fontsize=7)
    ax.set_xticks(np.arange(len(sources)) + width * (len(stages) - 1) / 2, sources)
    ax.set_ylabel(f"hypotheses (at k = {k:g})")
    ax.set_title("Hypotheses surviving each stage of the filter")
    ax.legend(fontsize=8, frameon=False)
    _save(fig, path)
    plt.close(fig)


# --------------------------------------------------------------------------- the run's jobs

#: hypotheses drawn in the lift@k curves
CURVES_TOP = 8


def run_table(lift_paths, triviality_paths, set_paths, settings, matches_paths=()):
    """The run's table, the hypotheses passing both stages (as CSV rows) and the stage counts,
    from every set's lift, triviality, set and matches files (``settings``: ``TableSettings``)."""
    if not len(lift_paths) == len(triviality_paths) == len(set_paths):
        raise ConfigError("hypotheses table: give one --lift, --triviality and --sets per set")
    if matches_paths and len(matches_paths) != len(lift_paths):
        raise ConfigError("hypotheses table: give one --matches per set")
    matches = pl.concat([pl.read_parquet(p) for p in matches_paths]) if matches_paths else None
    thresholds = settings.triviality_thresholds
    lift = pl.concat([pl.read_parquet(p) for p in lift_paths], how="vertical_relaxed")
    triviality = pl.concat([pl.read_parquet(p) for p in triviality_paths])
    notes = pl.concat([pl.read_parquet(p, columns=["hypothesis_id", "note"]) for p in set_paths])
    if lift.is_empty():
        raise ConfigError(
            "hypotheses: no hypothesis could be evaluated (see the lift reports under "
            "results/hypotheses/lift/)"
        )
    table = build_table(lift, triviality, matches, settings.redundancy_jaccard)
    survivors = filtered(table, notes, settings.alpha, thresholds)
    log.info(
        "%d rows of %d hypotheses; %d rows pass both stages (q < %g, triviality < %g)",
        table.height,
        table["hypothesis_id"].n_unique(),
        survivors.height,
        settings.alpha,
        max(thresholds),
    )
    survivors = survivors.with_columns(
        pl.col("lexicon").list.join("; "),
        pl.col("identity_words_covered").list.join("; "),
    )
    return table, survivors, stage_counts(table, settings.alpha, thresholds)


def draw_report(table, counts, settings, scatter: Path, curves: Path, stages: Path) -> None:
    """The three plots of the run's table (``settings``: ``ReportSettings``)."""
    k = settings.report_k
    fractions = sorted(set(table["k_fraction"].to_list()))
    if not any(abs(f - k) < 1e-12 for f in fractions):
        raise ConfigError(f"hypotheses.report_k: {k:g} is not one of the k fractions {fractions}")
    plot_scatter(table, k, settings.alpha, settings.triviality_thresholds, scatter)
    plot_curves(table, top_hypotheses(table, k, settings.alpha, CURVES_TOP), curves)
    plot_stages(counts, k, stages)
