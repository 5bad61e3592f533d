"""Do a model's hypotheses beat counting words? Per (topic, pair, target), the best lexicon a
model wrote (the theories' and the generator's) against the Fighting Words lexicon, both scored
on held-out posts at the report's k.

``comparison.csv``: one row per (topic, pair, target) with a Fighting Words lexicon, the best
model lexicon by held-out lift (ties: smaller held-out p), both lifts with their intervals, q
values and trivialities, and ``winner``: ``counting`` where the Fighting Words lexicon's held-out
lift is higher, ``models`` where the model's is, ``none`` where no model lexicon was scored there.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from splits.health import Finding
from splits.hypotheses.baseline import SOURCE as COUNTING_SOURCE

#: sources whose lexicons a model wrote: the TMs' theories and the LLM generator
MODEL_SOURCES = ("theory", "llm")
POOL = ["topic", "demographic_A", "demographic_B", "target"]
SIDES = {
    "hypothesis_id": pl.String,
    "source": pl.String,
    "lexicon": pl.String,
    "heldout_lift": pl.Float64,
    "heldout_lift_low": pl.Float64,
    "heldout_lift_high": pl.Float64,
    "heldout_q_value": pl.Float64,
    "triviality": pl.Float64,
}
COMPARISON_SCHEMA = {
    **{c: pl.String for c in POOL},
    **{f"counting_{c}": dtype for c, dtype in SIDES.items()},
    **{f"model_{c}": dtype for c, dtype in SIDES.items()},
    "winner": pl.String,
}


def _side(rows: pl.DataFrame, prefix: str) -> pl.DataFrame:
    return rows.select(
        *POOL,
        *[pl.col(c).alias(f"{prefix}_{c}") for c in SIDES],
    ).with_columns(pl.col(f"{prefix}_lexicon").list.join("; "))


def compare(table: pl.DataFrame, report_k: float) -> pl.DataFrame:
    """The comparison table (module docstring) from the hypotheses table."""
    at_k = table.filter((pl.col("k_fraction") - report_k).abs() < 1e-12)
    counting = at_k.filter(pl.col("source") == COUNTING_SOURCE)
    models = (
        at_k.filter(pl.col("source").is_in(MODEL_SOURCES) & pl.col("heldout_lift").is_not_null())
        .sort(
            [*POOL, "heldout_lift", "heldout_p_value", "hypothesis_id"],
            descending=[False] * len(POOL) + [True, False, False],
        )
        .group_by(POOL, maintain_order=True)
        .first()
    )
    joined = _side(counting, "counting").join(_side(models, "model"), on=POOL, how="left")
    winner = (
        pl.when(pl.col("model_heldout_lift").is_null() | pl.col("counting_heldout_lift").is_null())
        .then(pl.lit("none"))
        .when(pl.col("counting_heldout_lift") > pl.col("model_heldout_lift"))
        .then(pl.lit("counting"))
        .otherwise(pl.lit("models"))
    )
    return (
        joined.with_columns(winner.alias("winner"))
        .select(list(COMPARISON_SCHEMA))
        .cast(COMPARISON_SCHEMA)
        .sort(POOL)
    )


def counting_finding(comparison: pl.DataFrame, report_k: float) -> Finding | None:
    """A run-health finding when counting words beats the models on at least half of the
    (topic, pair, target)s where both were scored."""
    compared = comparison.filter(pl.col("winner") != "none")
    if compared.height == 0:
        return None
    wins = int((compared["winner"] == "counting").sum())
    if wins * 2 < compared.height:
        return None
    return Finding(
        stage="hypotheses",
        code="counting_beats_models",
        subject=f"k={report_k:g}",
        message=(
            f"the Fighting Words lexicon's held-out lift is higher than the best model lexicon's "
            f"on {wins} of {compared.height} topic/pair/targets (median {np.median(compared['counting_heldout_lift']):.2f} "
            f"against {np.median(compared['model_heldout_lift']):.2f}); the models' hypotheses "
            "say no more about these groups' language than counting words"
        ),
        fix=(
            "read hypotheses/comparison.csv before citing a model's lexicons; try other theory "
            "models or prompts (hypotheses.theories, hypotheses.generate)"
        ),
    )


def comparison_plot(comparison: pl.DataFrame, path: str | Path, report_k: float) -> Path:
    """Held-out lift of the best model lexicon (x) against the Fighting Words lexicon (y), one
    point per (topic, pair, target), with the 95% intervals; above the diagonal counting wins."""
    from splits.plots import message_figure, save_figure

    both = comparison.filter(pl.col("winner") != "none")
    if both.height == 0:
        return message_figure(
            path,
            "Model lexicons against Fighting Words",
            "no topic/pair/target has both a model lexicon and a Fighting Words lexicon scored "
            "on held-out posts (hypotheses.fighting_words.enabled is false, or neither "
            "hypotheses.theories nor hypotheses.generate names a model?)",
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = both["model_heldout_lift"].to_numpy()
    y = both["counting_heldout_lift"].to_numpy()
    x_err = np.abs(
        np.vstack([x - both["model_heldout_lift_low"], both["model_heldout_lift_high"] - x])
    )
    y_err = np.abs(
        np.vstack([y - both["counting_heldout_lift_low"], both["counting_heldout_lift_high"] - y])
    )
    fig, ax = plt.subplots(figsize=(6.5, 5))
    colours = np.where(both["winner"].to_numpy() == "counting", "tab:red", "tab:blue")
    ax.errorbar(
        x,
        y,
        xerr=np.nan_to_num(x_err),
        yerr=np.nan_to_num(y_err),
        fmt="none",
        ecolor="0.8",
        lw=0.8,
        zorder=1,
    )
    ax.scatter(x, y, c=colours, s=18, zorder=2)
    top = float(np.nanmax(np.concatenate([x, y, [1.0]]))) * 1.05
    ax.plot([0, top], [0, top], color="0.5", lw=0.8, ls="--")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel(f"best model lexicon: held-out lift@{report_k:g}")
    ax.set_ylabel(f"Fighting Words lexicon: held-out lift@{report_k:g}")
    wins = int((both["winner"] == "counting").sum())
    ax.set_title(f"Counting wins {wins} of {both.height} (red: above the diagonal)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)
