"""Metrics of the Group Theorization evaluation (docs/method.md §2.10).

- accuracy with undetected answers counted as wrong (the paper's), accuracy over detected answers
  only, and the undetected rate; each with its count and a 95% Wilson interval;
- the category-accuracy geometric mean (geometric mean over categories of per-category accuracy);
- splits by demographic pair, single demographic (rows where it is A or B), category,
  (category, demographic) and topic;
- paired exact McNemar tests between two configurations that differ in one axis (the TM, the
  CM, or the calibration size k) on the same rows, overall and per split, with
  Benjamini-Hochberg across the rows of each table.

``splits metrics`` reads the prediction files of one experiment and writes the summary, split and
comparison tables as CSV and Markdown.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from splits.errors import ConfigError
from splits.io import write_text
from splits.stats import benjamini_hochberg, mcnemar_exact, sign_flip_test, wilson_interval

log = logging.getLogger(__name__)

SPLITS = ("pair", "demographic", "category", "category_demographic", "topic")
CONFIG_COLUMNS = ("tm", "cm", "k")

# --------------------------------------------------------------------------- statistics


def geometric_mean(values: Sequence[float]) -> float:
    """Geometric mean; 0 when any value is 0; nan for no values."""
    values = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not values:
        return math.nan
    if any(v <= 0 for v in values):
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))


# --------------------------------------------------------------------------- tables


def load_predictions(paths: Sequence[str | Path], rows: pl.DataFrame) -> pl.DataFrame:
    """All prediction files, joined with the rows' demographics, category and topic."""
    frames = []
    for path in paths:
        if not Path(path).is_file():
            raise ConfigError(f"predictions {path} do not exist")
        frames.append(pl.read_parquet(path))
    if not frames:
        raise ConfigError("metrics: no prediction files")
    predictions = pl.concat(frames, how="vertical")
    meta = rows.select(
        "quadruplet_id",
        "demographic_A",
        "demographic_B",
        pl.col("category").cast(pl.String),
        pl.col("description").alias("topic"),
    )
    joined = predictions.join(meta, on="quadruplet_id", how="left")
    unmatched = int(joined["demographic_A"].is_null().sum())
    if unmatched:
        raise ConfigError(f"metrics: {unmatched} predictions have no evaluation row")
    duplicated = joined.select(*CONFIG_COLUMNS, "quadruplet_id").is_duplicated().sum()
    if duplicated:
        raise ConfigError(f"metrics: {duplicated} duplicate predictions for one (tm, cm, k, row)")
    return joined


def _accuracy_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """n, correct, detected, accuracies and Wilson bounds from the counts columns."""
    records = []
    for row in frame.iter_rows(named=True):
        n, correct, detected = row["n"], row["correct"], row["detected"]
        lo, hi = wilson_interval(correct, n)
        dlo, dhi = wilson_interval(correct, detected)
        ulo, uhi = wilson_interval(n - detected, n)
        records.append(
            {
                "accuracy": correct / n if n else math.nan,
                "ci_low": lo,
                "ci_high": hi,
                "accuracy_detected": correct / detected if detected else math.nan,
                "ci_low_detected": dlo,
                "ci_high_detected": dhi,
                "undetected_rate": (n - detected) / n if n else math.nan,
                "undetected_ci_low": ulo,
                "undetected_ci_high": uhi,
            }
        )
    schema = {
        key: pl.Float64
        for key in (
            "accuracy",
            "ci_low",
            "ci_high",
            "accuracy_detected",
            "ci_low_detected",
            "ci_high_detected",
            "undetected_rate",
            "undetected_ci_low",
            "undetected_ci_high",
        )
    }
    return pl.concat([frame, pl.DataFrame(records, schema=schema)], how="horizontal")


def _counts(frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    return (
        frame.group_by(list(keys))
        .agg(
            pl.len().cast(pl.Int64).alias("n"),
            pl.col("correct").sum().cast(pl.Int64).alias("correct"),
            pl.col("detected").sum().cast(pl.Int64).alias("detected"),
        )
        .sort(list(keys))
    )


def split_frame(predictions: pl.DataFrame, split: str) -> pl.DataFrame:
    """Predictions with a ``key`` column for one split (a row may appear under two keys for the
    demographic splits: once as A's and once as B's)."""
    pair = pl.format("{} / {}", "demographic_A", "demographic_B")
    if split == "pair":
        return predictions.with_columns(pair.alias("key"))
    if split == "category":
        return predictions.with_columns(pl.col("category").alias("key"))
    if split == "topic":
        return predictions.with_columns(pl.col("topic").alias("key"))
    if split in ("demographic", "category_demographic"):
        both = pl.concat(
            [
                predictions.with_columns(pl.col("demographic_A").alias("demographic")),
                predictions.with_columns(pl.col("demographic_B").alias("demographic")),
            ]
        )
        if split == "demographic":
            return both.with_columns(pl.col("demographic").alias("key"))
        return both.with_columns(pl.format("{} / {}", "category", "demographic").alias("key"))
    raise ConfigError(f"unknown split {split!r} (known: {', '.join(SPLITS)})")


def summary_table(predictions: pl.DataFrame) -> pl.DataFrame:
    """One row per (tm, cm, k): accuracies, intervals, undetected rate, category geometric mean."""
    table = _accuracy_columns(_counts(predictions, CONFIG_COLUMNS))
    by_category = _counts(predictions, (*CONFIG_COLUMNS, "category")).with_columns(
        (pl.col("correct") / pl.col("n")).alias("accuracy")
    )
    geo = []
    for row in table.iter_rows(named=True):
        cats = by_category.filter(
            (pl.col("tm") == row["tm"]) & (pl.col("cm") == row["cm"]) & (pl.col("k") == row["k"])
        )
        geo.append(geometric_mean(cats["accuracy"].to_list()))
    return table.with_columns(
        pl.Series("category_geomean", geo, dtype=pl.Float64),
    )


def splits_table(predictions: pl.DataFrame) -> pl.DataFrame:
    frames = []
    for split in SPLITS:
        counts = _counts(split_frame(predictions, split), (*CONFIG_COLUMNS, "key"))
        frames.append(counts.with_columns(pl.lit(split).alias("split")))
    table = pl.concat(frames).select("split", *CONFIG_COLUMNS, "key", "n", "correct", "detected")
    return _accuracy_columns(table)


def comparison_pairs(predictions: pl.DataFrame) -> list[tuple[tuple, tuple, str]]:
    """Pairs of configurations (tm, cm, k) that differ in exactly the TM, the CM or k."""
    configs = sorted(set(predictions.select(*CONFIG_COLUMNS).iter_rows()))
    pairs = []
    for first, second in itertools.combinations(configs, 2):
        same = [a == b for a, b in zip(first, second, strict=True)]
        if sum(same) == 2:
            pairs.append((first, second, CONFIG_COLUMNS[same.index(False)]))
    return sorted(pairs, key=lambda pair: CONFIG_COLUMNS.index(pair[2]))  # stable: tm, cm, k


COMPARISON_SCHEMA = {
    "axis": pl.String,
    "model_1": pl.String,
    "model_2": pl.String,
    "fixed": pl.String,
    "k": pl.Int64,
    "k_2": pl.Int64,
    "split": pl.String,
    "key": pl.String,
    "n": pl.Int64,
    "accuracy_1": pl.Float64,
    "accuracy_2": pl.Float64,
    "only_1_correct": pl.Int64,
    "only_2_correct": pl.Int64,
    "p_value": pl.Float64,
    "p_bh": pl.Float64,
}


def comparisons_table(predictions: pl.DataFrame) -> pl.DataFrame:
    """Exact McNemar for every pair of configurations differing in one axis, overall and per
    split; BH across the keys of one (pair, split) table. ``model_1``/``model_2`` are the TMs
    (axis tm) or CMs (axis cm) compared, with ``fixed`` the other model; for axis k both are the
    TM, ``fixed`` the CM, and ``k`` / ``k_2`` the two calibration sizes."""
    records = []
    for first, second, axis in comparison_pairs(predictions):
        index = 1 if axis == "cm" else 0
        fixed = first[0] if axis == "cm" else first[1]

        def select(config):
            return predictions.filter(
                (pl.col("tm") == config[0])
                & (pl.col("cm") == config[1])
                & (pl.col("k") == config[2])
            )

        one = select(first)
        two = select(second).select("quadruplet_id", pl.col("correct").alias("correct_2"))
        paired = one.join(two, on="quadruplet_id", how="inner")
        for split in ("overall", *SPLITS):
            frame = (
                paired.with_columns(pl.lit("all").alias("key"))
                if split == "overall"
                else split_frame(paired, split)
            )
            grouped = (
                frame.group_by("key")
                .agg(
                    pl.len().cast(pl.Int64).alias("n"),
                    pl.col("correct").mean().alias("accuracy_1"),
                    pl.col("correct_2").mean().alias("accuracy_2"),
                    (pl.col("correct") & ~pl.col("correct_2")).sum().cast(pl.Int64).alias("b"),
                    (~pl.col("correct") & pl.col("correct_2")).sum().cast(pl.Int64).alias("c"),
                )
                .sort("key")
            )
            p_values = [
                mcnemar_exact(b, c) for b, c in zip(grouped["b"], grouped["c"], strict=True)
            ]
            adjusted = benjamini_hochberg(p_values)
            for row, p, q in zip(grouped.iter_rows(named=True), p_values, adjusted, strict=True):
                records.append(
                    {
                        "axis": axis,
                        "model_1": first[index],
                        "model_2": second[index],
                        "fixed": fixed,
                        "k": first[2],
                        "k_2": second[2],
                        "split": split,
                        "key": row["key"],
                        "n": row["n"],
                        "accuracy_1": row["accuracy_1"],
                        "accuracy_2": row["accuracy_2"],
                        "only_1_correct": row["b"],
                        "only_2_correct": row["c"],
                        "p_value": p,
                        "p_bh": q,
                    }
                )
    return pl.DataFrame(records, schema=COMPARISON_SCHEMA)


GROUP_SCHEMA = {
    "group": pl.String,
    "tms": pl.String,
    "cm": pl.String,
    "k": pl.Int64,
    "rows": pl.Int64,
    "n": pl.Int64,
    "correct": pl.Int64,
    "accuracy": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "versus": pl.String,
    "difference": pl.Float64,
    "p_value": pl.Float64,
}


def groups_table(
    predictions: pl.DataFrame, groups: dict[str, list[str]], seed: int
) -> pl.DataFrame:
    """Pooled accuracy of groups of TMs (e.g. strong vs weak) per (CM, k): every (TM, row) is
    one trial, so the Wilson interval treats a row's TMs as independent (they are not: read it as
    descriptive). Groups are compared with a paired sign-flip test on the per-row difference of
    the groups' mean correctness (rows answered by every TM of both groups)."""
    records = []
    configs = sorted(set(predictions.select("cm", "k").iter_rows()))
    for cm, k in configs:
        part = predictions.filter((pl.col("cm") == cm) & (pl.col("k") == k))
        per_row = {}
        for name, tms in groups.items():
            members = part.filter(pl.col("tm").is_in(tms))
            if members["tm"].n_unique() != len(set(tms)):
                continue
            per_row[name] = members.group_by("quadruplet_id").agg(
                pl.col("correct").cast(pl.Float64).mean().alias(name)
            )
            n = members.height
            correct = int(members["correct"].sum())
            lo, hi = wilson_interval(correct, n)
            base = {
                "group": name,
                "tms": ", ".join(tms),
                "cm": cm,
                "k": k,
                "rows": members["quadruplet_id"].n_unique(),
                "n": n,
                "correct": correct,
                "accuracy": correct / n if n else math.nan,
                "ci_low": lo,
                "ci_high": hi,
            }
            records.append({**base, "versus": None, "difference": None, "p_value": None})
        names = sorted(per_row)
        for first, second in itertools.combinations(names, 2):
            paired = per_row[first].join(per_row[second], on="quadruplet_id", how="inner")
            diff = (paired[first] - paired[second]).to_numpy()
            for record in records:
                if (record["group"], record["cm"], record["k"]) == (first, cm, k) and record[
                    "versus"
                ] is None:
                    records.append(
                        {
                            **record,
                            "versus": second,
                            "difference": float(diff.mean()) if diff.size else math.nan,
                            "p_value": sign_flip_test(diff, seed=seed)[1],
                        }
                    )
                    break
    return pl.DataFrame(records, schema=GROUP_SCHEMA)


# --------------------------------------------------------------------------- output


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.2e}" if 0 < abs(value) < 1e-3 else f"{value:.4f}"
    return str(value).replace("|", "\\|")


def compact_accuracy(frame: pl.DataFrame) -> pl.DataFrame:
    """The columns a reader wants in Markdown: n, accuracy [95% CI], detected-only accuracy,
    undetected rate (the CSV keeps every column)."""

    def interval(acc: str, lo: str, hi: str) -> pl.Expr:
        return pl.format(
            "{} [{}, {}]",
            *(pl.col(c).round(3).cast(pl.String).fill_null("") for c in (acc, lo, hi)),
        )

    keep = [c for c in ("split", "tm", "cm", "k", "key") if c in frame.columns]
    extra = ["category_geomean"] if "category_geomean" in frame.columns else []
    return frame.select(
        *keep,
        "n",
        interval("accuracy", "ci_low", "ci_high").alias("accuracy [95% CI]"),
        interval("accuracy_detected", "ci_low_detected", "ci_high_detected").alias(
            "accuracy over detected [95% CI]"
        ),
        pl.col("undetected_rate").round(4),
        *[pl.col(c).round(4) for c in extra],
    )


def markdown_table(frame: pl.DataFrame, title: str | None = None) -> str:
    lines = [f"## {title}", ""] if title else []
    lines.append("| " + " | ".join(frame.columns) + " |")
    lines.append("|" + "|".join("---" for _ in frame.columns) + "|")
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def write_csv(frame: pl.DataFrame, path: str | Path) -> None:
    write_text(frame.write_csv(float_precision=6), path)


def parse_groups(text: str, tms: set[str]) -> dict[str, list[str]]:
    import json

    try:
        groups = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"evaluation.experiments.*.groups: not JSON ({err.msg})") from err
    if not isinstance(groups, dict):
        raise ConfigError("evaluation.experiments.*.groups: must map group names to TM lists")
    for name, members in groups.items():
        if not isinstance(members, list) or not members:
            raise ConfigError(f"groups.{name}: must be a non-empty list of TMs")
        unknown = sorted(set(members) - tms)
        if unknown:
            raise ConfigError(f"groups.{name}: {unknown[0]!r} is not a TM of this experiment")
    return groups


def tables_markdown(
    experiment: str,
    n_rows: int,
    summary: pl.DataFrame,
    splits: pl.DataFrame,
    comparisons: pl.DataFrame,
    grouped: pl.DataFrame,
) -> str:
    """tables.md: accuracy per configuration and split, the tests between ks, the groups."""
    md = [f"# Experiment {experiment}: {n_rows} rows", ""]
    md.append(markdown_table(compact_accuracy(summary), "Accuracy per TM, CM and k"))
    for split in SPLITS:
        part = compact_accuracy(splits.filter(pl.col("split") == split)).drop("split")
        md.append(markdown_table(part, f"Accuracy by {split.replace('_', ' / ')}"))
    between_ks = comparisons.filter((pl.col("axis") == "k") & (pl.col("split") == "overall"))
    if between_ks.height:
        md.append(
            markdown_table(
                between_ks.select(
                    pl.col("model_1").alias("tm"),
                    pl.col("fixed").alias("cm"),
                    "k",
                    "k_2",
                    "n",
                    "accuracy_1",
                    "accuracy_2",
                    "only_1_correct",
                    "only_2_correct",
                    "p_value",
                ),
                "Calibration size: paired exact McNemar tests between ks (same rows; per split in "
                "comparisons.csv)",
            )
        )
    if grouped.height:
        md.append(
            markdown_table(
                grouped.drop("tms"),
                "Groups of TMs (pooled; versus: paired sign-flip test of the per-row difference)",
            )
        )
    return "\n".join(md)


def comparisons_markdown(experiment: str, comparisons: pl.DataFrame) -> str:
    comparison_md = [f"# Experiment {experiment}: paired exact McNemar tests", ""]
    comparison_md.append(
        "p_bh: Benjamini-Hochberg over the keys of one (model pair, split) table.\n"
    )
    comparison_md.append(markdown_table(comparisons))
    return "\n".join(comparison_md)
