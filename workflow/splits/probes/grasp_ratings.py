"""GRASP's readers: rating tables (CSV/TSV/Parquet, long or DICES-style with the rater
attributes on every row) and DICES JSON, as long ``item, rater, rating`` tables."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from splits.errors import ConfigError


def read_table(path: str) -> pl.DataFrame:
    """A CSV, TSV or Parquet table (by suffix); ConfigError naming the file if unreadable."""
    from pathlib import Path

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{path}: file does not exist")
    try:
        if p.suffix == ".parquet":
            return pl.read_parquet(p)
        separator = "\t" if p.suffix in (".tsv", ".tab") else ","
        return pl.read_csv(p, separator=separator, infer_schema_length=0)
    except (pl.exceptions.PolarsError, OSError) as err:
        raise ConfigError(f"{path}: cannot read table ({str(err).splitlines()[0]})") from err


@dataclass(frozen=True)
class RatingColumns:
    """How to read a ratings table: the column names, the rater attribute columns carried on
    every rating row (DICES-style; empty for a separate raters table), the values that mean "no
    rating" (D3's -1 "did not understand"), and a Likert threshold: with ``binarize_at`` set, a
    numeric rating r becomes ">=t" or "<t"."""

    item: str
    rater: str
    rating: str
    attributes: tuple[str, ...]
    missing_values: tuple[str, ...]
    binarize_at: float | None


def rating_rows(
    table: pl.DataFrame, columns: RatingColumns, where: str
) -> tuple[pl.DataFrame, pl.DataFrame | None, dict[str, int]]:
    """One rating per row -> (long ratings item/rater/rating, rater attributes or None, counts).

    Every row is kept or counted under a reason: ``missing_item_or_rater``, ``missing_rating``
    (null, empty or one of ``missing_values``), ``non_numeric_rating`` (with ``binarize_at``).
    A rater whose attribute differs between rows is a ConfigError naming the rater."""
    needed = (columns.item, columns.rater, columns.rating, *columns.attributes)
    for column in needed:
        if column not in table.columns:
            raise ConfigError(
                f"{where}: column {column!r} is missing (has {', '.join(table.columns)})"
            )
    frame = table.select(
        pl.col(columns.item).cast(pl.String).str.strip_chars().alias("item"),
        pl.col(columns.rater).cast(pl.String).str.strip_chars().alias("rater"),
        pl.col(columns.rating).cast(pl.String).str.strip_chars().alias("rating"),
        *[pl.col(c).cast(pl.String).alias(c) for c in columns.attributes],
    )
    counts = {"rows": frame.height}
    no_key = (
        pl.col("item").is_null()
        | (pl.col("item") == "")
        | pl.col("rater").is_null()
        | (pl.col("rater") == "")
    )
    counts["missing_item_or_rater"] = int(frame.select(no_key.sum()).item())
    frame = frame.filter(~no_key)
    no_rating = (
        pl.col("rating").is_null()
        | (pl.col("rating") == "")
        | pl.col("rating").is_in(list(columns.missing_values))
    )
    counts["missing_rating"] = int(frame.select(no_rating.sum()).item())
    frame = frame.filter(~no_rating)
    if columns.binarize_at is not None:
        threshold = float(columns.binarize_at)
        value = pl.col("rating").cast(pl.Float64, strict=False)
        counts["non_numeric_rating"] = int(frame.select(value.is_null().sum()).item())
        label = f"{threshold:g}"
        frame = frame.filter(value.is_not_null()).with_columns(
            pl.when(value >= threshold)
            .then(pl.lit(f">={label}"))
            .otherwise(pl.lit(f"<{label}"))
            .alias("rating")
        )
    counts["kept"] = frame.height
    attributes = None
    if columns.attributes:
        per_rater = frame.select("rater", *columns.attributes).unique()
        conflict = per_rater.filter(pl.col("rater").is_duplicated())
        if conflict.height:
            rater = conflict["rater"][0]
            values = conflict.filter(pl.col("rater") == rater)
            column = next(c for c in columns.attributes if values[c].n_unique() > 1)
            raise ConfigError(
                f"{where}: rater {rater!r} has more than one {column!r} "
                f"({', '.join(str(v) for v in values[column].unique().sort().to_list())})"
            )
        attributes = per_rater.sort("rater")
    return frame.select("item", "rater", "rating"), attributes, counts


def dices_ratings(path: str) -> pl.DataFrame:
    """DICES-350 crowd votes as a long table (item, rater, rating). Rater ids are the vote
    positions (the same rater order for every item, per the dataset card)."""
    import json

    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    rows: dict[str, list] = {"item": [], "rater": [], "rating": []}
    for instance in data["instances"]:
        votes = instance["annotations"]["safety"]["individual_human_scores"]
        for position, vote in enumerate(votes):
            if vote is None or vote == "":
                continue
            rows["item"].append(str(instance["id"]))
            rows["rater"].append(f"rater{position:03d}")
            rows["rating"].append(str(vote))
    return pl.DataFrame(rows)
