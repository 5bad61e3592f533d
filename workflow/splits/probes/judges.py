"""LLM judges as GRASP raters (docs/method.md §3.2 on the evaluation's CM judgments, docs/method.md §2.9).

Every (TM, CM, k) configuration of an evaluation experiment judges the same quadruplets: for
each row the CM says which post set is which group's. Each configuration is taken as one rater
(a *judge*) named ``"<tm>|<cm>|k<k>"``; the item is the quadruplet (``quadruplet_id``); the
rating is the judge's answer, not its correctness:

- ``switched``: the CM says Post Set 1 is B's (``predicted_switched`` true),
- ``not_switched``: the CM says Post Set 1 is A's,
- ``undetected``: no answer could be read; a category of its own by default (an unreadable
  answer is part of a judge's behaviour), or left out as a missing rating with
  ``undetected="missing"``.

The answer rather than correct/incorrect: agreement between judges is then agreement on what
they say about the quadruplet, and "undetected" is not merged into "incorrect". Per-item
correctness is a function of the answer and the row's fixed ``switched``, so nothing is lost.

The rater attributes are ``tm``, ``cm``, ``k`` and the kinds of the TM and the CM (``builtin``
or ``llm``, from the model registry), so IRR, XRR and GAI come out per TM, per CM, per k and per
intersection of these.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from splits.errors import ConfigError

JUDGMENT_COLUMNS = ("quadruplet_id", "tm", "k", "cm", "predicted_switched")
RATING_SWITCHED = "switched"
RATING_NOT_SWITCHED = "not_switched"
RATING_UNDETECTED = "undetected"
UNDETECTED_MODES = ("category", "missing")
RATINGS_SCHEMA = {"item": pl.String, "rater": pl.String, "rating": pl.String}
ATTRIBUTES_SCHEMA = {
    "rater": pl.String,
    "tm": pl.String,
    "cm": pl.String,
    "k": pl.String,
    "tm_kind": pl.String,
    "cm_kind": pl.String,
}


def judge_name(tm: str, cm: str, k: int) -> str:
    """The rater id of one (TM, CM, k) configuration."""
    return f"{tm}|{cm}|k{k}"


def _judge_expr() -> pl.Expr:
    return pl.concat_str(
        pl.col("tm"), pl.lit("|"), pl.col("cm"), pl.lit("|k"), pl.col("k").cast(pl.String)
    )


def check_judgments(judgments: pl.DataFrame, where: str = "judgments") -> None:
    """ConfigError (naming ``where``) when a column is missing or a judge rates a quadruplet
    twice (e.g. the same classification file given twice)."""
    missing = [c for c in JUDGMENT_COLUMNS if c not in judgments.columns]
    if missing:
        raise ConfigError(
            f"{where}: missing column(s) {', '.join(missing)} (not a classification table)"
        )
    keys = judgments.select("quadruplet_id", "tm", "cm", "k")
    duplicated = keys.is_duplicated()
    if duplicated.any():
        q, tm, cm, k = keys.filter(duplicated).row(0)
        raise ConfigError(
            f"{where}: judge {judge_name(tm, cm, k)!r} judges quadruplet {q!r} more than once"
        )


def judgments_to_ratings(judgments: pl.DataFrame, undetected: str = "category") -> pl.DataFrame:
    """The long ratings table GRASP reads (``item, rater, rating``), one row per (quadruplet,
    judge), sorted by rater then item. ``undetected``: ``category`` (rating ``undetected``) or
    ``missing`` (the row is left out)."""
    if undetected not in UNDETECTED_MODES:
        raise ConfigError(f"undetected: must be one of {', '.join(UNDETECTED_MODES)}")
    check_judgments(judgments)
    rating = (
        pl.when(pl.col("predicted_switched").is_null())
        .then(pl.lit(RATING_UNDETECTED))
        .when(pl.col("predicted_switched"))
        .then(pl.lit(RATING_SWITCHED))
        .otherwise(pl.lit(RATING_NOT_SWITCHED))
    )
    table = judgments.select(
        pl.col("quadruplet_id").cast(pl.String).alias("item"),
        _judge_expr().alias("rater"),
        rating.alias("rating"),
    )
    if undetected == "missing":
        table = table.filter(pl.col("rating") != RATING_UNDETECTED)
    return table.sort("rater", "item").cast(RATINGS_SCHEMA)


def judge_attributes(
    judgments: pl.DataFrame, model_kinds: Mapping[str, str] | None = None
) -> pl.DataFrame:
    """One row per judge: ``rater, tm, cm, k, tm_kind, cm_kind`` (all strings, sorted by rater).
    ``model_kinds`` maps model names to a kind (``builtin``/``llm``); a model it lacks gets a
    null kind, which forms no group."""
    check_judgments(judgments)
    kinds = dict(model_kinds or {})
    judges = (
        judgments.select(
            _judge_expr().alias("rater"),
            pl.col("tm").cast(pl.String),
            pl.col("cm").cast(pl.String),
            pl.col("k").cast(pl.String),
        )
        .unique()
        .sort("rater")
    )
    return judges.with_columns(
        pl.col("tm").replace_strict(kinds, default=None, return_dtype=pl.String).alias("tm_kind"),
        pl.col("cm").replace_strict(kinds, default=None, return_dtype=pl.String).alias("cm_kind"),
    ).cast(ATTRIBUTES_SCHEMA)


def read_judgments(paths: Sequence[str | Path]) -> pl.DataFrame:
    """The classification Parquet files of ``splits classify`` (or an experiment's combined
    ``predictions.parquet``), concatenated; ConfigError naming the file when one is unreadable
    or is not a classification table."""
    frames = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{path}: judgments file does not exist")
        try:
            frame = pl.read_parquet(p)
        except (pl.exceptions.PolarsError, OSError) as err:
            raise ConfigError(
                f"{path}: cannot read judgments ({str(err).splitlines()[0]})"
            ) from err
        check_judgments(frame, str(path))
        frames.append(
            frame.select(
                pl.col("quadruplet_id").cast(pl.String),
                pl.col("tm").cast(pl.String),
                pl.col("k").cast(pl.Int64),
                pl.col("cm").cast(pl.String),
                pl.col("predicted_switched").cast(pl.Boolean),
            )
        )
    if not frames:
        raise ConfigError("--judgments: no files given")
    judgments = pl.concat(frames)
    check_judgments(judgments, "judgments (" + ", ".join(str(p) for p in paths) + ")")
    return judgments
