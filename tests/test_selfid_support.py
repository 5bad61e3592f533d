"""The self-ID stage's sums over users (curves.summarise_users) and its support tests drawn as
counts (curves.shuffle_draw, curves.resample_draw): the same distributions as shuffling and
resampling the users one by one (exact enumeration, and the per-user tests written out here),
and the same curve, rates and formula comparison as per-user computations (scipy's
Mann-Whitney U for the AUC)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import polars as pl
import pytest
from scipy import stats
from splits.demographics.curves import (
    _hinge_fit,
    auto_threshold,
    bin_expr,
    breakpoint_support,
    curve_from_sums,
    group_sums,
    resample_draw,
    selfid_curve,
    shuffle_draw,
    summarise_users,
)
from splits.demographics.selfid import compare_formulas, roc_auc
from splits.io import iter_parquet_slices

SCORES = ["g_sum_log", "g_breadth_x_volume", "g_entropy"]


def _chi_square_p(observed: Counter, expected: Counter, draws: int) -> float:
    keys = sorted(expected)
    assert set(observed) <= set(expected), set(observed) - set(expected)  # nothing impossible
    total = sum(expected.values())
    f_obs = np.array([observed.get(k, 0) for k in keys], dtype=float)
    f_exp = np.array([expected[k] * draws / total for k in keys])
    return float(stats.chisquare(f_obs, f_exp).pvalue)


def test_shuffle_draw_is_dealing_the_users_at_random():
    """Six users of three kinds dealt to three bins of 1, 2 and 3 places: the counts per bin
    and kind follow the distribution of all 720 orders of the users (chi-square)."""
    kinds = [0, 0, 0, 1, 1, 2]  # each user's kind
    bin_users = np.array([1, 2, 3, 0])  # an empty bin gets nobody
    slot_bin = np.repeat(np.arange(len(bin_users)), bin_users)
    expected = Counter()
    for order in itertools.permutations(range(len(kinds))):
        placed = np.zeros((len(bin_users), 3), dtype=int)
        for slot, user in enumerate(order):
            placed[slot_bin[slot], kinds[user]] += 1
        expected[tuple(placed.ravel())] += 1
    rng = np.random.default_rng(7)
    kind_users = np.bincount(kinds)
    draws = 20_000
    observed = Counter(
        tuple(shuffle_draw(kind_users, bin_users, rng).ravel()) for _ in range(draws)
    )
    assert len(expected) > 5 and set(observed) == set(expected)
    assert _chi_square_p(observed, expected, draws) > 1e-4


def test_resample_draw_is_drawing_the_users_with_replacement():
    """Four users in three cells (1, 1, 2 users): users drawn four times with replacement, all
    256 sequences enumerated, give the distribution of the counts per cell (chi-square)."""
    cell_of_user = [0, 1, 2, 2]
    expected = Counter()
    for picks in itertools.product(range(4), repeat=4):
        expected[tuple(np.bincount([cell_of_user[u] for u in picks], minlength=3))] += 1
    rng = np.random.default_rng(3)
    cell_users = np.array([1, 1, 2])
    draws = 20_000
    observed = Counter(tuple(resample_draw(cell_users, rng)) for _ in range(draws))
    assert _chi_square_p(observed, expected, draws) > 1e-4


def _users(n: int, rate, seed: int) -> pl.DataFrame:
    """Users with tied group-ness (scores from small counts), posts, and verified self-IDs at
    ``rate(percentile)`` per post; anti-self-IDs at a flat rate."""
    rng = np.random.default_rng(seed)
    counts = rng.geometric(0.3, (n, 3))
    score = np.round(np.log1p(counts).sum(1), 9)
    percentile = (stats.rankdata(score, method="min") - 1) * 100.0 / n
    posts = rng.integers(5, 40, n)
    return pl.DataFrame(
        {
            "author": [f"u{i}" for i in range(n)],
            "percentile": percentile,
            "n_posts": posts,
            "n_self": rng.binomial(posts, rate(percentile)),
            "n_anti": rng.binomial(posts, 0.002),
            "g_sum_log": score,
            "g_breadth_x_volume": counts.sum(1).astype(float),
            "g_entropy": np.round(counts[:, 0] / counts.sum(1), 9),
        }
    )


def _per_user_support(per_user: pl.DataFrame, bins: int, seed: int) -> tuple[float, float]:
    """The support tests as first written: every user shuffled over the percentiles and
    resampled one by one; (permutation p, bootstrap agreement) of the curve's breakpoint."""
    width = 100.0 / bins
    frame = per_user.select(bin_expr(bins), "n_posts", "n_self")
    user_bin = frame["bin"].to_numpy()
    posts = frame["n_posts"].to_numpy().astype(float)
    selfs = frame["n_self"].to_numpy().astype(float)

    def fit(p, s):
        n_posts = np.bincount(user_bin, p, minlength=bins)
        n_self = np.bincount(user_bin, s, minlength=bins)
        kept = np.nonzero(n_posts > 0)[0]
        found = _hinge_fit(
            kept * width, (kept + 1) * width, n_self[kept] / n_posts[kept], n_posts[kept], 2
        )
        if found is None:
            return math.nan, 0.0
        above = kept * width >= found[0]
        below_rate = n_self[kept][~above].sum() / max(n_posts[kept][~above].sum(), 1.0)
        return found[0], n_self[kept][above].sum() / n_posts[kept][above].sum() - below_rate

    breakpoint, rise = fit(posts, selfs)
    rng = np.random.default_rng(seed)
    n = len(posts)
    as_large = sum(
        fit(posts[o], selfs[o])[1] >= rise - 1e-15 for o in (rng.permutation(n) for _ in range(999))
    )
    found = []
    for _ in range(200):
        w = np.bincount(rng.integers(0, n, n), minlength=n)
        found.append(fit(w * posts, w * selfs)[0])
    agreement = float(np.mean(np.abs(np.asarray(found) - breakpoint) <= width + 1e-9))
    return (1 + as_large) / 1000, agreement


@pytest.mark.parametrize("lift", [0.0004, 0.0015])
def test_support_by_counts_agrees_with_the_per_user_tests(lift):
    """A weak rise above the 60th percentile (p and agreement neither 0 nor 1): the tests drawn
    as counts and the per-user tests agree within their Monte Carlo error (999 shuffles: p's
    standard error <= 0.016; 200 resamples: agreement's <= 0.036)."""
    users = _users(3000, lambda p: np.where(p >= 60, 0.004 + lift, 0.004), seed=11)
    breakpoint = auto_threshold(selfid_curve(users, 20))
    assert breakpoint is not None
    by_counts = breakpoint_support(summarise_users([users], 20), breakpoint, seed=5)
    p_value, agreement = _per_user_support(users, 20, seed=5)
    assert 0.005 < p_value < 0.5 and 0.2 < agreement < 0.8  # neither test at its bound
    assert abs(by_counts["permutation_p"] - p_value) <= 0.07, (by_counts, p_value)
    assert abs(by_counts["bootstrap_agreement"] - agreement) <= 0.15, (by_counts, agreement)


def test_sums_in_batches_equal_the_sums_of_the_whole_table():
    users = _users(2000, lambda p: np.where(p >= 50, 0.02, 0.002), seed=2)
    whole = summarise_users([users], 20, SCORES)
    # the support tests' draws do not depend on the users' order or batches
    shuffled = users.sample(fraction=1.0, shuffle=True, seed=9)
    in_batches = summarise_users([shuffled.slice(i, 300) for i in range(0, 2000, 300)], 20)
    breakpoint = auto_threshold(curve_from_sums(whole.by_percentile, 20))
    for _ in range(3):  # polars' group_by order varies between calls
        assert breakpoint_support(in_batches, breakpoint, seed=3) == breakpoint_support(
            whole, breakpoint, seed=3
        )
    batches = summarise_users((users.slice(i, 97) for i in range(0, 2000, 97)), 20, SCORES)
    assert whole.users == batches.users == 2000
    assert whole.by_percentile.equals(batches.by_percentile)
    assert whole.cells.equals(batches.cells)
    for score in SCORES:
        assert whole.by_score[score].equals(batches.by_score[score])
    # the sums hold fewer rows than there are users: tied scores are summed once
    assert whole.by_score["g_sum_log"].height < 2000 / 4
    # the curve from the sums is the curve of the users one by one (written out here)
    curve = curve_from_sums(whole.by_percentile, 20)
    binned = users.with_columns(bin_expr(20))
    for row in curve.iter_rows(named=True):
        in_bin = binned.filter(pl.col("bin") == row["bin"])
        assert row["n_users"] == in_bin.height and row["n_posts"] == in_bin["n_posts"].sum()
        assert row["self_occurrences"] == in_bin["n_self"].sum()
        assert row["self_users"] == (in_bin["n_self"] > 0).sum()
        assert row["anti_users"] == (in_bin["n_anti"] > 0).sum()


def test_no_users_sum_to_empty_tables():
    empty = _users(10, lambda p: np.zeros_like(p), seed=0).clear()
    summary = summarise_users([], 20, SCORES)
    assert summary.users == 0 and summary.cells.height == 0
    assert summarise_users([empty], 20, SCORES).by_percentile.equals(summary.by_percentile)
    assert curve_from_sums(summary.by_percentile, 20)["n_users"].sum() == 0


def test_formula_comparison_from_sums_equals_the_users_one_by_one():
    """Every column of the comparison against a per-user computation: percentiles by ranking
    each formula's scores, the AUC as scipy's Mann-Whitney U over the labelled users."""
    users = _users(1500, lambda p: np.where(p >= 70, 0.03, 0.003), seed=4)
    table = compare_formulas(summarise_users([users], 20, SCORES), 70.0, "demo")
    for row in table.iter_rows(named=True):
        score = users[f"g_{row['formula']}"].to_numpy()
        percentile = (stats.rankdata(score, method="min") - 1) * 100.0 / len(score)
        above = users.filter(pl.Series(percentile >= 70.0))
        n_self, n_anti = users["n_self"].to_numpy(), users["n_anti"].to_numpy()
        pos, neg = (n_self > 0) & (n_anti == 0), (n_anti > 0) & (n_self == 0)
        u = stats.mannwhitneyu(score[pos], score[neg], method="asymptotic").statistic
        assert row["auc_self_vs_anti"] == pytest.approx(u / (pos.sum() * neg.sum()), abs=1e-12)
        assert row["auc_self_vs_anti"] == roc_auc(score[pos | neg], pos[pos | neg])
        assert row["users"] == 1500 and row["users_above"] == above.height
        assert row["self_id_users"] == (n_self > 0).sum()
        assert row["anti_id_users"] == (n_anti > 0).sum()
        assert row["self_rate_above_per_1k"] == pytest.approx(
            1000 * above["n_self"].sum() / above["n_posts"].sum()
        )
        assert row["self_anti_ratio_above"] == pytest.approx(
            above["n_self"].sum() / above["n_anti"].sum()
        )
        assert row["self_id_users_above_share"] == pytest.approx(
            (above["n_self"] > 0).sum() / (n_self > 0).sum()
        )
        per_user = users.with_columns(pl.Series("percentile", percentile))
        assert row["auto_threshold"] == auto_threshold(selfid_curve(per_user, 20))


def test_group_sums_counts_the_comparison_classes():
    frame = pl.DataFrame(
        {
            "g": [1.0, 1.0, 1.0, 2.0],
            "n_posts": [3, 4, 5, 6],
            "n_self": [1, 0, 2, 0],
            "n_anti": [0, 1, 1, 0],
        }
    )
    rows = {r["g"]: r for r in group_sums(frame, "g").iter_rows(named=True)}
    assert rows[1.0] == {
        "g": 1.0,
        "users": 3,
        "n_posts": 12,
        "n_self": 3,
        "n_anti": 2,
        "self_users": 2,
        "anti_users": 2,
        "self_only": 1,
        "anti_only": 1,
    }
    assert rows[2.0]["users"] == 1 and rows[2.0]["self_users"] == 0


def test_parquet_slices_give_every_row_once(tmp_path):
    frame = pl.DataFrame({"a": range(10_000), "b": [str(i) for i in range(10_000)]})
    frame.write_parquet(tmp_path / "t.parquet", row_group_size=3000)
    pieces = list(iter_parquet_slices(tmp_path / "t.parquet", ["a"], rows=700))
    assert max(p.height for p in pieces) == 700 and pieces[0].columns == ["a"]
    assert pl.concat(pieces).equals(frame.select("a"))
    pl.DataFrame(schema={"a": pl.Int64}).write_parquet(tmp_path / "empty.parquet")
    assert list(iter_parquet_slices(tmp_path / "empty.parquet")) == []
