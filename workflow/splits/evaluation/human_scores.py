"""Scores of filled human-validation sheets (``splits human score``; docs/method.md §2.11, paper
Appendix C): the signed relevance and centrality scores, the plain means of unexpectedness and
specificity, and the agreement between annotators (see :mod:`splits.evaluation.human`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from splits.errors import ConfigError
from splits.evaluation.human import MEASURES, PLAIN_MEASURES, SIGNED_MEASURES

log = logging.getLogger(__name__)


def sheet_score(ratings: Sequence[int | None], meant: Sequence[bool]) -> tuple[float, int]:
    """(normalised score, number of counted statements) of one sheet for one signed measure."""
    contributions = [
        4 if is_meant else -4
        for rating, is_meant in zip(ratings, meant, strict=True)
        if rating is not None and rating == 4
    ]
    if not contributions:
        return 0.0, 0
    return sum(contributions) / (4 * len(contributions)), len(contributions)


def read_filled(path: str | Path) -> pl.DataFrame:
    """One filled file (part 1, part 2 or both): sheet_id, item and the measure columns it has
    (others null); ratings must be whole numbers 0-4 or blank."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"filled sheet {path} does not exist")
    frame = pl.read_csv(path, infer_schema=False)
    missing = [c for c in ("sheet_id", "item") if c not in frame.columns]
    present = [m for m in MEASURES if m in frame.columns]
    if missing or not present:
        raise ConfigError(
            f"{path}: needs the columns sheet_id, item and some of {', '.join(MEASURES)}"
        )
    records = []
    for line, row in enumerate(frame.iter_rows(named=True), start=2):
        record = {"sheet_id": row["sheet_id"], "item": _int(row["item"], path, line, "item")}
        for measure in MEASURES:
            value = _int(row[measure], path, line, measure) if measure in present else None
            if value is not None and not 0 <= value <= 4:
                raise ConfigError(f"{path}: line {line}: {measure} must be 0-4, not {value}")
            record[measure] = value
        records.append(record)
    schema = {"sheet_id": pl.String, "item": pl.Int64, **dict.fromkeys(MEASURES, pl.Int64)}
    return pl.DataFrame(records, schema=schema)


def _int(value: Any, path: Path, line: int, column: str) -> int | None:
    if value is None or str(value).strip() == "":
        return None
    try:
        number = float(str(value).strip())
    except ValueError as err:
        raise ConfigError(f"{path}: line {line}: {column} {value!r} is not a number") from err
    if not number.is_integer():
        raise ConfigError(f"{path}: line {line}: {column} {value!r} is not a whole number")
    return int(number)


def combine_files(frames: Sequence[tuple[str, pl.DataFrame]], annotator: str) -> pl.DataFrame:
    """One annotator's files (e.g. part 1 and part 2) as one table; a statement rated twice on
    one measure is an error."""
    combined: pl.DataFrame | None = None
    for path, frame in frames:
        if frame.select("sheet_id", "item").is_duplicated().any():
            raise ConfigError(f"{path}: a (sheet_id, item) appears twice")
        if combined is None:
            combined = frame
            continue
        joined = combined.join(frame, on=["sheet_id", "item"], how="full", coalesce=True)
        for measure in MEASURES:
            both = joined[measure].is_not_null() & joined[f"{measure}_right"].is_not_null()
            if both.any():
                raise ConfigError(
                    f"annotator {annotator}: {measure} of sheet "
                    f"{joined.filter(both)['sheet_id'][0]} rated in two files ({path})"
                )
        combined = joined.select(
            "sheet_id",
            "item",
            *[pl.coalesce(measure, f"{measure}_right").alias(measure) for measure in MEASURES],
        )
    return combined


def score_sheets(
    key: pl.DataFrame, filled: Mapping[str, pl.DataFrame]
) -> tuple[pl.DataFrame, dict]:
    """Per (annotator, sheet) scores and per-model summaries."""
    per_sheet = []
    unknown_items = 0
    status = {m: {"complete": 0, "incomplete": 0, "unrated": 0} for m in MEASURES}
    for annotator, ratings in filled.items():
        joined = key.join(ratings, on=["sheet_id", "item"], how="inner")
        unknown_items += ratings.height - joined.height
        rated = set(joined["sheet_id"])
        for (sheet_id,), part in (
            key.filter(pl.col("sheet_id").is_in(list(rated)))
            .join(ratings, on=["sheet_id", "item"], how="left")
            .sort("sheet_id", "item")
            .group_by("sheet_id", maintain_order=True)
        ):
            record: dict[str, Any] = {
                "annotator": annotator,
                "sheet_id": sheet_id,
                "model": part["model"][0],
            }
            meant = part["meant_for_post_set"].to_list()
            for measure in MEASURES:
                values = part[measure].to_list()
                n_rated = sum(v is not None for v in values)
                state = (
                    "complete"
                    if n_rated == len(values)
                    else ("unrated" if n_rated == 0 else "incomplete")
                )
                status[measure][state] += 1
                record[f"{measure}_rated"] = state == "complete"
                if measure in SIGNED_MEASURES:
                    score, counted = sheet_score(values, meant)
                    complete = state == "complete"
                    record[f"{measure}_score"] = score if complete else None
                    record[f"{measure}_counted"] = counted if complete else None
                    record[f"{measure}_won"] = (score > 0) if complete else None
                else:
                    kept = [v for v in values if v is not None] if state == "complete" else []
                    record[f"{measure}_sum"] = sum(kept)
                    record[f"{measure}_n"] = len(kept)
            per_sheet.append(record)
    table = pl.DataFrame(per_sheet)
    summary: dict[str, Any] = {
        "unknown_items_ignored": unknown_items,
        "sheets_by_status": status,
        "models": {},
    }
    if table.height:
        for (model,), part in table.group_by("model", maintain_order=True):
            entry: dict[str, Any] = {"annotated_sheets": part.height}
            for measure in SIGNED_MEASURES:
                scores = part[f"{measure}_score"].drop_nulls()
                entry[measure] = float(scores.mean()) if scores.len() else None
                entry[f"{measure}_sheets"] = scores.len()
                entry[f"{measure}_sheets_won"] = int(part[f"{measure}_won"].drop_nulls().sum())
            for measure in PLAIN_MEASURES:
                n = int(part[f"{measure}_n"].sum())
                entry[measure] = float(part[f"{measure}_sum"].sum()) / n if n else None
                entry[f"{measure}_ratings"] = n
            summary["models"][model] = entry
        summary["models"] = dict(sorted(summary["models"].items()))
        table = table.drop(*[f"{m}_sum" for m in PLAIN_MEASURES]).sort(
            "model", "annotator", "sheet_id"
        )
    summary["agreement"] = agreement(key, filled)
    return table, summary


def agreement(key: pl.DataFrame, filled: Mapping[str, pl.DataFrame]) -> dict[str, Any]:
    """Krippendorff's alpha (nominal, GRASP's) per measure, and on the "rated 4" indicator of
    the signed measures, over the statements of the key rated by at least two annotators."""
    from splits.agreement import krippendorff_alpha_nominal, matrix_from_long

    long = pl.concat(
        [
            key.select("sheet_id", "item")
            .join(ratings, on=["sheet_id", "item"], how="inner")
            .with_columns(pl.lit(annotator).alias("rater"))
            for annotator, ratings in filled.items()
        ]
    ).with_columns(pl.format("{}:{}", "sheet_id", "item").alias("statement"))
    columns = {m: pl.col(m) for m in MEASURES}
    columns.update({f"{m}_is_4": pl.col(m) == 4 for m in SIGNED_MEASURES})
    out: dict[str, Any] = {"annotators": len(filled)}
    for name, expression in columns.items():
        ratings = long.select("statement", "rater", expression.alias("rating")).drop_nulls()
        shared = ratings.group_by("statement").len().filter(pl.col("len") >= 2)["statement"]
        ratings = ratings.filter(pl.col("statement").is_in(shared.to_list()))
        entry: dict[str, Any] = {"statements": shared.len(), "ratings": ratings.height}
        if shared.len() == 0:
            entry["alpha"] = None
            entry["why_none"] = "no statement rated by two annotators"
        else:
            matrix = matrix_from_long(ratings, item="statement", rater="rater", rating="rating")
            alpha = krippendorff_alpha_nominal(matrix.codes, len(matrix.categories))
            entry["alpha"] = None if np.isnan(alpha) else alpha
            if entry["alpha"] is None:
                entry["why_none"] = "undefined (one rating value only)"
        out[name] = entry
    return out


def parse_sheet_args(values: Sequence[str]) -> dict[str, list[str]]:
    """``NAME=PATH`` or ``PATH`` (the annotator is the file's stem) -> annotator: paths."""
    out: dict[str, list[str]] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep:
            name, path = Path(value).stem, value
        if not name:
            raise ConfigError(f"--sheets: {value!r} names no annotator (NAME=PATH)")
        out.setdefault(name, []).append(path)
    return out


def read_key(path: str | Path) -> pl.DataFrame:
    """key.csv written by ``splits human export``."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"key {path} does not exist")
    return pl.read_csv(
        path,
        schema_overrides={
            "sheet_id": pl.String,
            "item": pl.Int64,
            "meant_for_post_set": pl.Boolean,
        },
    )
