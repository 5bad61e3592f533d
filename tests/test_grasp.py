"""GRASP agreement analysis: alpha against the krippendorff package, XRR on hand-computed
cases, GAI permutation p-values under no effect and a planted one, the CLI on ratings tables."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import krippendorff
import numpy as np
import polars as pl
import pytest
from scipy import stats
from splits.agreement import RatingMatrix, krippendorff_alpha_nominal, matrix_from_long
from splits.config.settings import schema_defaults
from splits.errors import ConfigError
from splits.probes.grasp import (
    METRICS,
    dsi_table,
    grasp,
    group_scores,
    rater_groups,
    xrr_from_counts,
)
from splits.probes.grasp_ratings import dices_ratings
from splits.probes.settings import GraspSettings
from splits.stats import one_sided_permutation_p


def _settings(**values) -> list[str]:
    """--settings JSON of probe_grasp: the schema's defaults, some values replaced."""
    settings = dataclasses.asdict(schema_defaults(GraspSettings, seed=0, **values))
    return ["--settings", json.dumps(settings)]


def cross_replication_reliability(codes_x, codes_y, n_categories: int) -> float:
    """XRR between two code matrices over the same items (items x raters_x, items x raters_y),
    through the stage's count-based ``xrr_from_counts``."""

    def count(codes):
        return np.stack(
            [(np.asarray(codes) == c).sum(axis=1) for c in range(n_categories)], axis=-1
        )

    return float(xrr_from_counts(count(codes_x), count(codes_y)))


def _oracle(codes: np.ndarray) -> float:
    data = np.where(codes < 0, np.nan, codes).T.astype(float)
    return float(krippendorff.alpha(reliability_data=data, level_of_measurement="nominal"))


def test_alpha_equals_krippendorff_on_dices350(reference_dir):
    path = reference_dir / "realdata" / "dices350" / "dices_350_crowdsourced.json"
    ratings = dices_ratings(str(path))
    matrix = matrix_from_long(ratings)
    assert matrix.codes.shape == (350, 123)
    assert matrix.categories == ("No", "Unsure", "Yes")
    counts = {c: int((matrix.codes == i).sum()) for i, c in enumerate(matrix.categories)}
    assert counts == {"No": 26292, "Unsure": 2694, "Yes": 14064}
    ours = krippendorff_alpha_nominal(matrix.codes, 3)
    assert ours == pytest.approx(_oracle(matrix.codes), abs=1e-10)


@pytest.mark.parametrize("seed", range(8))
def test_alpha_equals_krippendorff_on_random_matrices_with_missing(seed):
    rng = np.random.default_rng(seed)
    n_items, n_raters, n_cat = rng.integers(5, 60), rng.integers(2, 12), rng.integers(2, 6)
    truth = rng.integers(0, n_cat, size=n_items)
    agree = rng.random((n_items, n_raters)) < rng.uniform(0, 0.9)
    codes = np.where(agree, truth[:, None], rng.integers(0, n_cat, size=(n_items, n_raters)))
    codes[rng.random(codes.shape) < rng.uniform(0, 0.5)] = -1
    # keep at least one pairable item so alpha is defined
    codes[0, :2] = [0, 1 % n_cat]
    assert krippendorff_alpha_nominal(codes, int(n_cat)) == pytest.approx(_oracle(codes), abs=1e-10)


def test_alpha_perfect_agreement_and_undefined_cases():
    codes = np.array([[0, 0, -1], [1, 1, 1], [2, -1, 2]])
    assert krippendorff_alpha_nominal(codes, 3) == pytest.approx(1.0)
    # a single category in use: alpha is undefined
    assert np.isnan(krippendorff_alpha_nominal(np.zeros((4, 3), dtype=int), 2))


def test_xrr_hand_computed():
    # items 1-3; X has two raters, Y one. Categories a=0, b=1.
    x = np.array([[0, 0], [0, 1], [1, 1]])
    y = np.array([[0], [1], [0]])
    # d_o per item: item1 0/2, item2 1/2, item3 2/2 -> mean 0.5
    # pooled: X = {a:3, b:3}, Y = {a:2, b:1}; d_e = 1 - (3/6*2/3 + 3/6*1/3) = 0.5
    assert cross_replication_reliability(x, y, 2) == pytest.approx(1 - 0.5 / 0.5)
    # perfect cross agreement on varied items: kappa_x = 1
    x2 = np.array([[0], [1], [0], [1]])
    assert cross_replication_reliability(x2, x2.copy(), 2) == pytest.approx(1.0)
    # d_o = 1/4 (one of four items disagrees); p_x = p_y = (1/2, 1/2) -> d_e = 1/2
    y2 = np.array([[0], [1], [0], [0]])
    # p_y = (3/4, 1/4): d_e = 1 - (1/2*3/4 + 1/2*1/4) = 1/2
    assert cross_replication_reliability(x2, y2, 2) == pytest.approx(1 - 0.25 / 0.5)
    # missing ratings: item 2 is unrated by Y and does not count
    x3 = np.array([[0, 1], [1, 1], [1, 0]])
    y3 = np.array([[0], [-1], [1]])
    # d_o: item1 1/2, item3 1/2 -> 1/2; pooled over items 1,3: X {a:2,b:2}, Y {a:1,b:1}: d_e=1/2
    assert cross_replication_reliability(x3, y3, 2) == pytest.approx(0.0)


def _xrr_paper(ratings_x: list[tuple[str, int]], ratings_y: list[tuple[str, int]]) -> float:
    """Wong, Paritosh & Aroyo (2021), kappa_x = 1 - d_o / d_e with the nominal distance, written
    from the paper's formula over raw (item, rating) pairs: over the items rated by both sides,
    d_o = 1/(R_x + R_y) * sum_u (R_xu + R_yu) / (R_xu R_yu) * sum_{r in X_u, s in Y_u} D(r, s)
    and d_e = 1/(R_x R_y) * sum over all cross pairs of ratings D(r, s)."""
    items = {u for u, _ in ratings_x} & {u for u, _ in ratings_y}
    xs = [(u, r) for u, r in ratings_x if u in items]
    ys = [(u, r) for u, r in ratings_y if u in items]
    observed = 0.0
    for u in items:
        xu = [r for v, r in xs if v == u]
        yu = [r for v, r in ys if v == u]
        pairs = sum(r != s for r in xu for s in yu)
        observed += (len(xu) + len(yu)) / (len(xu) * len(yu)) * pairs
    d_o = observed / (len(xs) + len(ys))
    d_e = sum(r != s for _, r in xs for _, s in ys) / (len(xs) * len(ys))
    return 1.0 - d_o / d_e


def _as_pairs(codes: np.ndarray) -> list[tuple[str, int]]:
    return [(f"i{u}", int(c)) for u, row in enumerate(codes) for c in row if c >= 0]


def _missing_by_item(seed: int, n_items: int = 80, n_x: int = 6, n_y: int = 14):
    """Binary ratings whose missing rate varies by item from 0% to 85%; the heavily rated items
    are the contentious ones (the two sides disagree there), the sparse ones are easy, so an
    item weight that ignores the number of ratings moves d_o."""
    rng = np.random.default_rng(seed)
    missing = np.linspace(0.0, 0.85, n_items)
    contentious = missing < 0.3
    truth = rng.integers(0, 2, size=n_items)
    x = np.where(rng.random((n_items, n_x)) < 0.9, truth[:, None], 1 - truth[:, None])
    flip_y = np.where(contentious, 0.55, 0.1)[:, None]
    y = np.where(rng.random((n_items, n_y)) < flip_y, 1 - truth[:, None], truth[:, None])
    x[rng.random(x.shape) < missing[:, None]] = -1
    y[rng.random(y.shape) < missing[:, None]] = -1
    # every item keeps at least one rating on each side
    x[:, 0] = np.where(x[:, 0] < 0, truth, x[:, 0])
    y[:, 0] = np.where(y[:, 0] < 0, truth, y[:, 0])
    return x, y


@pytest.mark.parametrize("seed", range(4))
def test_xrr_equals_paper_formula_with_unbalanced_missingness(seed):
    x, y = _missing_by_item(seed)
    assert cross_replication_reliability(x, y, 2) == pytest.approx(
        _xrr_paper(_as_pairs(x), _as_pairs(y)), abs=1e-12
    )


@pytest.mark.parametrize("seed", range(4))
def test_xrr_equals_paper_formula_on_balanced_and_random_tables(seed):
    rng = np.random.default_rng(100 + seed)
    n_items, n_cat = int(rng.integers(10, 40)), int(rng.integers(2, 5))
    x = rng.integers(0, n_cat, size=(n_items, int(rng.integers(1, 6))))
    y = rng.integers(0, n_cat, size=(n_items, int(rng.integers(1, 6))))
    # balanced: every item fully rated
    assert cross_replication_reliability(x, y, n_cat) == pytest.approx(
        _xrr_paper(_as_pairs(x), _as_pairs(y)), abs=1e-12
    )
    # random missingness, including items that one side never rated (they do not count)
    x[rng.random(x.shape) < 0.4] = -1
    y[rng.random(y.shape) < 0.4] = -1
    x[0, 0], y[0, 0], x[1, 0], y[1, 0] = 0, 1 % n_cat, 1 % n_cat, 1 % n_cat
    assert cross_replication_reliability(x, y, n_cat) == pytest.approx(
        _xrr_paper(_as_pairs(x), _as_pairs(y)), abs=1e-12
    )


def _panel(rng, n_items, n_raters, planted: bool):
    """Binary ratings; with ``planted``, raters of group g1 share an item-level opinion of
    their own (in-group cohesion above cross-group)."""
    truth = rng.integers(0, 2, size=n_items)
    own = np.where(rng.random(n_items) < 0.35, 1 - truth, truth)  # g1 differs on about a third
    group = np.array(["g1" if r < n_raters // 3 else "g2" for r in range(n_raters)])
    rows = []
    for r in range(n_raters):
        base = own if (planted and group[r] == "g1") else truth
        noisy = np.where(rng.random(n_items) < 0.25, rng.integers(0, 2, size=n_items), base)
        rows += [(f"i{i}", f"r{r}", str(v)) for i, v in enumerate(noisy)]
    ratings = pl.DataFrame(rows, schema=["item", "rater", "rating"], orient="row")
    raters = pl.DataFrame({"rater": [f"r{r}" for r in range(n_raters)], "group": group.tolist()})
    return ratings, raters


def test_gai_p_value_near_uniform_without_group_effect():
    p_values = []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        ratings, raters = _panel(rng, 30, 12, planted=False)
        matrix = matrix_from_long(ratings)
        groups, _ = rater_groups(matrix.raters, raters, 3, 1)
        table = grasp(matrix, [g for g in groups if g.name == "group=g1"], 200, seed, 1.0).groups
        p_values.append(table["p_gai"][0])
    p_values = np.array(p_values)
    # one-sided rule: p lies in (0, ~0.5]; under H0 the share below 0.05 is about 10% (two tails
    # folded) and the p-values spread over the range
    assert 0.0 <= np.mean(p_values < 0.05) <= 0.25
    assert 0.15 < np.median(p_values) < 0.45


def test_gai_p_value_small_with_planted_group_effect():
    rng = np.random.default_rng(7)
    ratings, raters = _panel(rng, 60, 15, planted=True)
    matrix = matrix_from_long(ratings)
    groups, _ = rater_groups(matrix.raters, raters, 3, 1)
    table = grasp(matrix, groups, 500, 0, 1.0).groups.sort("group")
    g1 = table.row(0, named=True)
    assert g1["group"] == "group=g1"
    assert g1["gai"] > 1.2
    assert g1["p_gai"] < 0.01
    assert g1["q_gai"] < 0.05


def test_rater_groups_intersections_minimum_and_duplicates():
    raters = ("a", "b", "c", "d", "e", "f")
    attributes = pl.DataFrame(
        {
            "rater": list(raters),
            "gender": ["f", "f", "f", "m", "m", "m"],
            "age": ["young", "young", "old", "old", "old", "young"],
        }
    )
    groups, skipped = rater_groups(raters, attributes, 2, 2)
    names = {g.name for g in groups}
    assert {"gender=f", "gender=m", "age=old", "age=young"} <= names
    assert "gender=f & age=young" in names  # two raters (a, b)
    assert any(
        s["group"] == "gender=f & age=old" and s["reason"] == "too few raters" for s in skipped
    )


def test_grasp_cli_on_csv_ratings(tmp_path):
    from splits.cli import main

    rng = np.random.default_rng(3)
    ratings, raters = _panel(rng, 25, 9, planted=True)
    ratings.rename({"item": "conversation", "rating": "label"}).write_csv(tmp_path / "ratings.csv")
    raters.write_csv(tmp_path / "raters.csv")
    out = tmp_path / "out"
    code = main(
        [
            "probe", "grasp", "--ratings", str(tmp_path / "ratings.csv"), "--raters",
            str(tmp_path / "raters.csv"), "--columns",
            json.dumps({"item_col": "conversation", "rating_col": "label"}), "--outdir", str(out),
            *_settings(min_raters=3, permutations=100),
        ]
    )  # fmt: skip
    assert code == 0
    table = pl.read_parquet(out / "groups.parquet")
    assert set(table["group"]) == {"group=g1", "group=g2"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_raters"] == 9 and summary["n_items"] == 25
    # a missing column is a clear one-line error, not a traceback
    assert (
        main(
            [
                "probe",
                "grasp",
                "--ratings",
                str(tmp_path / "ratings.csv"),
                "--outdir",
                str(out),
                *_settings(),
            ]
        )  # fmt: skip
        == 2
    )


# --------------------------------------------------------------------------- GRASP's other metrics


def _side(codes: np.ndarray, members: np.ndarray, item: int) -> list[int]:
    return [int(c) for c in codes[item, members] if c >= 0]


def _plurality(values: list[int]) -> float:
    """The most frequent value, NaN when there is none or it is tied."""
    top = Counter(values).most_common()
    if not top or (len(top) > 1 and top[0][1] == top[1][1]):
        return float("nan")
    return float(top[0][0])


def _oracle_metrics(codes: np.ndarray, members: np.ndarray, n_cat: int, smoothing: float):
    """The in-group and cross-group metrics item by item from their definitions (docs/method.md §3.2),
    with scipy's entropies and the krippendorff package."""
    plurality, negentropy, cross = [], [], []
    votes = [[], []]
    for item in range(codes.shape[0]):
        inside, outside = _side(codes, members, item), _side(codes, ~members, item)
        if len(inside) >= 2:
            counts = np.bincount(inside, minlength=n_cat)
            plurality.append(counts.max() / len(inside))
            negentropy.append(np.log(n_cat) - stats.entropy(counts))
        if inside and outside:
            p = np.bincount(inside, minlength=n_cat) / len(inside)
            q = (np.bincount(outside, minlength=n_cat) + smoothing) / (
                len(outside) + smoothing * n_cat
            )
            # H(p, q) = H(p) + KL(p || q)
            cross.append(np.log(n_cat) - (stats.entropy(p) + stats.entropy(p, q)))
        votes[0].append(_plurality(inside))
        votes[1].append(_plurality(outside))
    agreement = krippendorff.alpha(reliability_data=np.array(votes), level_of_measurement="nominal")
    return {
        "plurality_size": float(np.mean(plurality)),
        "negentropy": float(np.mean(negentropy)),
        "plurality_agreement": float(agreement),
        "cross_negentropy": float(np.mean(cross)),
    }


@pytest.mark.parametrize("seed", range(6))
def test_grasp_metrics_equal_item_by_item_definitions(seed):
    rng = np.random.default_rng(200 + seed)
    n_items, n_raters, n_cat = int(rng.integers(20, 50)), int(rng.integers(6, 14)), 3
    truth = rng.integers(0, n_cat, size=n_items)
    codes = np.where(
        rng.random((n_items, n_raters)) < 0.6,
        truth[:, None],
        rng.integers(0, n_cat, size=(n_items, n_raters)),
    )
    codes[rng.random(codes.shape) < 0.3] = -1
    codes[:, 0] = truth  # every item rated at least once and all categories in use
    codes[:n_cat, 1] = np.arange(n_cat)
    members = np.zeros(n_raters, dtype=bool)
    members[rng.choice(n_raters, size=n_raters // 2, replace=False)] = True
    smoothing = float(rng.choice([0.5, 1.0]))
    matrix = RatingMatrix(
        tuple(f"i{u}" for u in range(n_items)),
        tuple(f"r{r}" for r in range(n_raters)),
        tuple("abc"),
        codes,
    )
    ours = {k: float(v) for k, v in group_scores(matrix.one_hot(), members, smoothing).items()}
    oracle = _oracle_metrics(codes, members, n_cat, smoothing)
    for key, value in oracle.items():
        assert ours[key] == pytest.approx(value, abs=1e-10), key
    inside = np.where(members[None, :], codes, -1)
    assert ours["irr"] == pytest.approx(_oracle(inside), abs=1e-10)


def test_plurality_ties_have_no_plurality():
    # item 0: group tied (a, b) -> no plurality; item 1: a vs a; item 2: b vs a; item 3: a vs b
    codes = np.array([[0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1]])
    members = np.array([True, True, False, False])
    matrix = RatingMatrix(("0", "1", "2", "3"), tuple("wxyz"), ("a", "b"), codes)
    ours = float(group_scores(matrix.one_hot(), members, 1.0)["plurality_agreement"])
    votes = np.array([[np.nan, 0, 1, 0], [0, 0, 0, 1]])
    expected = krippendorff.alpha(reliability_data=votes, level_of_measurement="nominal")
    assert ours == pytest.approx(expected)


def test_planted_group_every_metric_on_its_side_with_nulls_and_q():
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(7)
    ratings, raters = _panel(rng, 60, 15, planted=True)
    matrix = matrix_from_long(ratings)
    groups, _ = rater_groups(matrix.raters, raters, 3, 1)
    result = grasp(matrix, groups, 400, 0, 1.0)
    g1 = result.groups.filter(pl.col("group") == "group=g1").row(0, named=True)
    # the planted group agrees with itself more and with the others less than a random
    # rater set of its size
    for key in ("irr", "plurality_size", "negentropy", "gai"):
        assert g1[f"dir_{key}"] == "above" and g1[f"p_{key}"] < 0.05, key
    for key in ("xrr", "plurality_agreement", "cross_negentropy"):
        assert g1[f"dir_{key}"] == "below" and g1[f"p_{key}"] < 0.05, key
    # p, direction and null median follow from the published nulls; q is BH across groups
    for row in result.groups.iter_rows(named=True):
        for key in METRICS:
            null = (
                result.nulls.filter((pl.col("group") == row["group"]) & (pl.col("metric") == key))
                .sort("permutation")["value"]
                .to_numpy()
            )
            assert null.size == 400
            assert row[f"p_{key}"] == pytest.approx(one_sided_permutation_p(row[key], null))
            assert row[f"null_median_{key}"] == pytest.approx(np.nanmedian(null))
    for key in METRICS:
        p = result.groups[f"p_{key}"].to_numpy()
        assert np.allclose(
            result.groups[f"q_{key}"].to_numpy(), multipletests(p, method="fdr_bh")[1]
        )


def test_dsi_is_the_largest_gai_of_a_dimension_and_significant_only_with_it():
    groups = pl.DataFrame(
        {
            "group": ["g=a", "g=b", "r=x", "r=y", "g=a & r=x"],
            "attributes": ["g", "g", "r", "r", "g,r"],
            "gai": [1.4, 0.9, 1.1, 1.3, float("nan")],
            "p_gai": [0.001, 0.4, 0.01, 0.2, float("nan")],
            "q_gai": [0.004, 0.4, 0.02, 0.25, float("nan")],
        }
    )
    dsi = {r["dimension"]: r for r in dsi_table(groups, 0.05).iter_rows(named=True)}
    assert dsi["g"]["dsi"] == 1.4 and dsi["g"]["group"] == "g=a" and dsi["g"]["significant"]
    # r's largest GAI (y) is not significant although x is: the DSI is not significant
    assert dsi["r"]["dsi"] == 1.3 and dsi["r"]["group"] == "r=y" and not dsi["r"]["significant"]
    assert dsi["g,r"]["dsi"] is None and not dsi["g,r"]["significant"]


# --------------------------------------------------------------------------- loaders


DICES_ATTRIBUTES = ["rater_gender", "rater_race", "rater_age", "rater_education"]


def _dices_wide(rng, n_items: int = 30, n_raters: int = 24) -> pl.DataFrame:
    """A DICES-style table: one row per rating with the rater's demographics on the row
    (DICES-350's CSV shape: rater_id, rater_gender, rater_race, rater_age, rater_education,
    item_id, Q_overall), women more often saying "Yes" on the first half of the items."""
    people = [
        {
            "rater_id": f"R{r:03d}",
            "rater_gender": ["Man", "Woman"][r % 2],
            "rater_race": ["White", "Black", "Asian"][r % 3],
            "rater_age": ["gen z", "millenial", "gen x+"][(r // 2) % 3],
            "rater_education": ["College degree", "High school"][(r // 3) % 2],
        }
        for r in range(n_raters)
    ]
    rows = []
    for item in range(n_items):
        base = "Yes" if rng.random() < 0.4 else "No"
        for person in people:
            vote = base
            if person["rater_gender"] == "Woman" and item < n_items // 2:
                vote = "Yes" if rng.random() < 0.8 else "No"
            elif rng.random() < 0.15:
                vote = "Unsure"
            rows.append({**person, "item_id": str(1000 + item), "Q_overall": vote})
    return pl.DataFrame(rows)


def test_dices_style_wide_table_loader_and_cli(tmp_path):
    from splits.cli import main
    from splits.probes.grasp_ratings import RatingColumns, rating_rows

    wide = _dices_wide(np.random.default_rng(0))
    # dirt: a row without a rating, a row without a rater
    wide = pl.concat(
        [
            wide,
            wide.head(1).with_columns(pl.lit(None, dtype=pl.String).alias("Q_overall")),
            wide.head(1).with_columns(
                pl.lit("").alias("rater_id"), pl.lit("9999").alias("item_id")
            ),
        ]
    )
    columns = RatingColumns("item_id", "rater_id", "Q_overall", tuple(DICES_ATTRIBUTES), (), None)
    ratings, attributes, counts = rating_rows(wide, columns, "dices.csv")
    assert counts == {
        "rows": 30 * 24 + 2,
        "missing_item_or_rater": 1,
        "missing_rating": 1,
        "kept": 30 * 24,
    }
    assert ratings.columns == ["item", "rater", "rating"] and ratings.height == 720
    assert attributes.height == 24
    row = attributes.filter(pl.col("rater") == "R005").row(0, named=True)
    assert (row["rater_gender"], row["rater_race"], row["rater_age"]) == (
        "Woman",
        "Asian",
        "gen x+",
    )
    # a rater whose demographics differ between rows is a one-line error naming the rater
    broken = wide.with_columns(
        pl.when((pl.col("rater_id") == "R003") & (pl.col("item_id") == "1004"))
        .then(pl.lit("Man"))
        .otherwise(pl.col("rater_gender"))
        .alias("rater_gender")
    )
    with pytest.raises(ConfigError, match="R003.*rater_gender"):
        rating_rows(broken, columns, "dices.csv")

    wide.write_csv(tmp_path / "dices.csv")
    out = tmp_path / "out"
    code = main(
        ["probe", "grasp", "--ratings", str(tmp_path / "dices.csv"), "--columns",
         json.dumps({"item_col": "item_id", "rater_col": "rater_id", "rating_col": "Q_overall",
                     "attribute_cols": DICES_ATTRIBUTES}),
         "--outdir", str(out), *_settings(min_raters=4, max_order=2, permutations=200)]
    )  # fmt: skip
    assert code == 0
    table = pl.read_parquet(out / "groups.parquet")
    women = table.filter(pl.col("group") == "rater_gender=Woman").row(0, named=True)
    assert women["n_raters"] == 12 and women["gai"] > 1 and women["p_gai"] < 0.05
    dsi = pl.read_parquet(out / "dsi.parquet")
    assert set(dsi["dimension"]) >= {"rater_gender", "rater_race", "rater_gender,rater_race"}
    gender = dsi.filter(pl.col("dimension") == "rater_gender").row(0, named=True)
    assert gender["dsi"] == pytest.approx(
        table.filter(pl.col("attributes") == "rater_gender")["gai"].max()
    )
    nulls = pl.read_parquet(out / "nulls.parquet")
    assert nulls.height == table.height * len(METRICS) * 200
    assert (out / "null_histograms.png").stat().st_size > 10_000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["read"][str(tmp_path / "dices.csv")]["missing_rating"] == 1


def test_d3_style_likert_binarised_with_missing_codes(tmp_path):
    from splits.cli import main
    from splits.probes.grasp_ratings import RatingColumns, rating_rows

    table = pl.DataFrame(
        {
            "rater_id": ["a", "a", "b", "b", "c", "c", "d"],
            "item_id": ["1", "2", "1", "2", "1", "2", "1"],
            "raw": ["0", "4", "2", "-1", "na", "1.0", "lots"],
        }
    )
    columns = RatingColumns("item_id", "rater_id", "raw", (), ("-1", "na"), 2.0)
    ratings, attributes, counts = rating_rows(table, columns, "d3.csv")
    assert attributes is None
    assert counts == {
        "rows": 7,
        "missing_item_or_rater": 0,
        "missing_rating": 2,
        "non_numeric_rating": 1,
        "kept": 4,
    }
    assert ratings.sort("rater", "item").rows() == [
        ("1", "a", "<2"),
        ("2", "a", ">=2"),
        ("1", "b", ">=2"),
        ("2", "c", "<2"),
    ]
    # D3 ships the rater attributes in their own table: the CLI joins them by rater id
    rng = np.random.default_rng(1)
    rows, people = [], []
    for r in range(16):
        region = ["North America", "Sinosphere"][r % 2]
        people.append({"rater_id": f"p{r}", "region": region, "gender": ["Man", "Woman"][r // 8]})
        for item in range(40):
            lean = 3 if (region == "Sinosphere" and item % 2) else 1
            raw = int(np.clip(lean + rng.integers(-1, 2), 0, 4))
            rows.append({"rater_id": f"p{r}", "item_id": f"t{item}", "raw": str(raw)})
    rows.append({"rater_id": "p0", "item_id": "t99", "raw": "-1"})
    pl.DataFrame(rows).write_csv(tmp_path / "ratings.csv")
    pl.DataFrame(people).write_csv(tmp_path / "raters.csv")
    out = tmp_path / "out"
    code = main(
        ["probe", "grasp", "--ratings", str(tmp_path / "ratings.csv"), "--raters",
         str(tmp_path / "raters.csv"), "--columns",
         json.dumps({"item_col": "item_id", "rater_col": "rater_id", "rating_col": "raw",
                     "missing_ratings": ["-1", "na"], "binarize_at": 2}),
         "--outdir", str(out), *_settings(min_raters=4, permutations=200)]
    )  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["categories"] == ["<2", ">=2"] and summary["n_items"] == 40
    groups = pl.read_parquet(out / "groups.parquet")
    sino = groups.filter(pl.col("group") == "region=Sinosphere").row(0, named=True)
    assert sino["dir_irr"] == "above" and sino["p_irr"] < 0.05
    assert sino["dir_xrr"] == "below" and sino["p_xrr"] < 0.05
