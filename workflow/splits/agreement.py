"""Inter-rater agreement shared by the stages (the grasp probe, the human validation of theories):
ratings as a category-code matrix, and Krippendorff's alpha (nominal) from per-item counts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from splits.errors import ConfigError


@dataclass(frozen=True)
class RatingMatrix:
    """Ratings as category codes: ``codes[item, rater]`` in 0..C-1, -1 where missing."""

    items: tuple[str, ...]
    raters: tuple[str, ...]
    categories: tuple[str, ...]
    codes: np.ndarray

    def one_hot(self) -> np.ndarray:
        """(items, raters, categories) float array, 1 where the rater gave that category."""
        n_cat = len(self.categories)
        eye = np.vstack([np.eye(n_cat), np.zeros((1, n_cat))])
        return eye[np.where(self.codes < 0, n_cat, self.codes)]


def matrix_from_long(
    ratings: pl.DataFrame, item: str = "item", rater: str = "rater", rating: str = "rating"
) -> RatingMatrix:
    """Build the items x raters code matrix from a long table. Null ratings are missing values;
    a rater rating the same item twice is a user error (ConfigError)."""
    for column in (item, rater, rating):
        if column not in ratings.columns:
            raise ConfigError(
                f"ratings table: column {column!r} is missing (has {ratings.columns})"
            )
    table = ratings.select(
        pl.col(item).cast(pl.String).alias("item"),
        pl.col(rater).cast(pl.String).alias("rater"),
        pl.col(rating).cast(pl.String).alias("rating"),
    ).drop_nulls()
    duplicated = table.select("item", "rater").is_duplicated()
    if duplicated.any():
        first = table.filter(duplicated).row(0)
        raise ConfigError(
            f"ratings table: rater {first[1]!r} rates item {first[0]!r} more than once"
        )
    items = tuple(sorted(table["item"].unique().to_list()))
    raters = tuple(sorted(table["rater"].unique().to_list()))
    categories = tuple(sorted(table["rating"].unique().to_list()))
    item_index = {v: i for i, v in enumerate(items)}
    rater_index = {v: i for i, v in enumerate(raters)}
    category_index = {v: i for i, v in enumerate(categories)}
    codes = np.full((len(items), len(raters)), -1, dtype=np.int64)
    rows = np.array([item_index[v] for v in table["item"].to_list()], dtype=np.int64)
    cols = np.array([rater_index[v] for v in table["rater"].to_list()], dtype=np.int64)
    vals = np.array([category_index[v] for v in table["rating"].to_list()], dtype=np.int64)
    codes[rows, cols] = vals
    return RatingMatrix(items, raters, categories, codes)


# --------------------------------------------------------------------------- coefficients


def alpha_from_counts(counts: np.ndarray) -> np.ndarray:
    """Krippendorff's alpha (nominal) from per-item category counts.

    ``counts`` has shape (..., items, categories); leading axes (e.g. permutations) broadcast.
    Uses the coincidence-matrix form: alpha = 1 - (n - 1) (n - sum_c o_cc) / (n^2 - sum_c n_c^2),
    over pairable items (at least two ratings). NaN where undefined (fewer than two pairable
    values or a single category in use).
    """
    counts = np.asarray(counts, dtype=float)
    m = counts.sum(axis=-1)
    pairable = m >= 2
    safe_m = np.where(pairable, m, 2.0)
    diagonal = np.where(pairable, ((counts**2).sum(axis=-1) - m) / (safe_m - 1.0), 0.0)
    o_cc = diagonal.sum(axis=-1)
    n_c = (counts * pairable[..., None]).sum(axis=-2)
    n = n_c.sum(axis=-1)
    denominator = n**2 - (n_c**2).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = 1.0 - (n - 1.0) * (n - o_cc) / denominator
    return np.where((denominator > 0) & (n > 1), alpha, np.nan)


def krippendorff_alpha_nominal(codes: np.ndarray, n_categories: int | None = None) -> float:
    """Krippendorff's alpha (nominal) of an items x raters code matrix (-1 = missing)."""
    codes = np.asarray(codes)
    n_cat = int(codes.max()) + 1 if n_categories is None else n_categories
    if n_cat <= 0:
        return float("nan")
    counts = np.stack([(codes == c).sum(axis=1) for c in range(n_cat)], axis=-1)
    return float(alpha_from_counts(counts))
