"""The evaluation subsample every TM, CM and k shares (``splits theorize subsample``).

Read the pipeline's quadruplets or the public release (version-4 columns), check every row, take a
seeded random subset of N rows. The subset is the first N rows of one seeded permutation, so a
smaller subsample is a subset of a larger one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from splits.errors import ConfigError, InputError
from splits.evaluation.common import REQUIRED_COLUMNS
from splits.evaluation.settings import SubsampleSettings

log = logging.getLogger(__name__)

SUBSAMPLE_STREAM = 0x5E1


def _string_list(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return None
    try:
        items = list(value)
    except TypeError:
        return None
    if not all(isinstance(v, str) for v in items):
        return None
    return items


LAYOUTS = ("auto", "by_group", "by_post_set")


def resolve_layout(frame: pl.DataFrame, layout: str) -> str:
    """``by_group``: ``sample_A`` holds A's posts and Post Set 1 is ``sample_B`` when switched
    (docs/method.md §2.7, the pipeline's quadruplets). ``by_post_set``: ``sample_A`` is Post Set 1, i.e. B's
    posts when switched (the public release, version 4: its DETAILS.md, and its evaluator, which
    always shows ``sample_A`` first). ``auto``: by_group when the table has the pipeline's hidden
    columns (``example_labels`` or ``sample_A_ids``), else by_post_set."""
    if layout not in LAYOUTS:
        raise ConfigError(
            f"evaluation.dataset_layout: {layout!r} is not one of {', '.join(LAYOUTS)}"
        )
    if layout != "auto":
        return layout
    pipeline = "example_labels" in frame.columns or "sample_A_ids" in frame.columns
    return "by_group" if pipeline else "by_post_set"


def normalise_quadruplets(
    frame: pl.DataFrame, topic_categories: Mapping[str, str], where: str, layout: str
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Check and complete a quadruplets table: ids, categories, list columns, and samples in the
    by_group layout (``sample_A`` = A's posts; see :func:`resolve_layout`).

    Rows with malformed lists (not lists of strings, empty samples) are dropped and counted.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ConfigError(f"{where}: missing column(s) {', '.join(missing)} (release v4 columns)")
    layout = resolve_layout(frame, layout)
    counts: dict[str, Any] = {"input_rows": frame.height, "layout": layout}
    if layout == "by_post_set":
        swapped = {
            "sample_A": pl.when(pl.col("switched"))
            .then(pl.col("sample_B"))
            .otherwise(pl.col("sample_A")),
            "sample_B": pl.when(pl.col("switched"))
            .then(pl.col("sample_A"))
            .otherwise(pl.col("sample_B")),
        }
        for ids in ("sample_A_ids", "sample_B_ids"):
            if {"sample_A_ids", "sample_B_ids"} <= set(frame.columns):
                other = "sample_B_ids" if ids == "sample_A_ids" else "sample_A_ids"
                swapped[ids] = (
                    pl.when(pl.col("switched")).then(pl.col(other)).otherwise(pl.col(ids))
                )
        frame = frame.with_columns(**swapped)
        counts["rows_unswapped"] = int(frame["switched"].fill_null(False).sum())
    if "quadruplet_id" not in frame.columns:
        frame = frame.with_row_index("quadruplet_id").with_columns(
            pl.format("row-{}", pl.col("quadruplet_id")).alias("quadruplet_id")
        )
    else:
        frame = frame.with_columns(pl.col("quadruplet_id").cast(pl.String))
    if frame["quadruplet_id"].n_unique() != frame.height:
        raise ConfigError(f"{where}: quadruplet_id is not unique")
    if "category" not in frame.columns:
        frame = frame.with_columns(
            pl.col("description").replace_strict(topic_categories, default=None).alias("category")
        )
        counts["category_from_topics_file"] = frame.height
    unknown = int(frame["category"].is_null().sum())
    counts["category_unknown"] = unknown
    if unknown:
        log.warning(
            "%s: %d rows have a topic not in the topics file (category 'unknown')", where, unknown
        )
        frame = frame.with_columns(pl.col("category").fill_null("unknown"))
    keep = []
    bad = 0
    for row in frame.select("example_posts", "sample_A", "sample_B", "switched").iter_rows():
        examples, sample_a, sample_b = (_string_list(v) for v in row[:3])
        ok = (
            examples is not None
            and sample_a is not None
            and sample_b is not None
            and len(sample_a) > 0
            and len(sample_b) > 0
            and row[3] is not None
        )
        keep.append(ok)
        bad += not ok
    counts["malformed_rows_dropped"] = bad
    if bad:
        log.warning("%s: dropped %d malformed rows", where, bad)
    frame = frame.filter(pl.Series(keep, dtype=pl.Boolean))
    frame = frame.with_columns(pl.col("switched").cast(pl.Boolean))
    return frame, counts


def subsample(frame: pl.DataFrame, rows: int | None, seed: int) -> pl.DataFrame:
    """The first ``rows`` rows (all when None) of a seeded permutation, with ``eval_row``."""
    rng = np.random.default_rng([seed, SUBSAMPLE_STREAM])
    order = rng.permutation(frame.height)
    if rows is not None:
        order = order[:rows]
    return (
        frame.with_row_index("_position")
        .join(
            pl.DataFrame({"_position": order.astype(np.uint32), "eval_row": np.arange(len(order))}),
            on="_position",
        )
        .sort("eval_row")
        .drop("_position")
        .with_columns(pl.col("eval_row").cast(pl.Int64))
    )


def topic_categories(path: str | Path | None) -> dict[str, str]:
    if not path:
        return {}
    from splits.config.definitions import load_topics

    return {t.topic: t.category for t in load_topics(path)}


def parse_rows_arg(value: str) -> int | None:
    if value == "all":
        return None
    try:
        rows = int(value)
    except ValueError as err:
        raise ConfigError(
            f"evaluation rows: {value!r} is neither a positive integer nor 'all'"
        ) from err
    if rows < 1:
        raise ConfigError(f"evaluation rows: {rows} must be positive")
    return rows


def subsample_dataset(
    frame: pl.DataFrame,
    where: str,
    categories: Mapping[str, str],
    rows: int | None,
    settings: SubsampleSettings,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The checked quadruplets' seeded subsample of ``rows`` rows (all when None) and its counts."""
    frame, counts = normalise_quadruplets(frame, categories, where, settings.dataset_layout)
    if frame.height == 0:
        raise InputError(
            f"evaluation.dataset: {where} holds no usable quadruplet "
            f"({counts.get('input_rows', 0)} rows read); nothing to evaluate (for a sweep "
            "dataset: the topic splits hold too few posts per group for its calibration size)"
        )
    if rows is not None and rows > frame.height:
        log.warning("asked for %d rows, the dataset has %d: using all of them", rows, frame.height)
        counts["rows_short_by"] = rows - frame.height
    sample = subsample(frame, rows, settings.seed)
    counts.update(
        rows_requested=rows if rows is not None else "all", rows=sample.height, seed=settings.seed
    )
    return sample, counts
