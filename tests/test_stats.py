"""The shared statistics of ``splits.stats`` against independent oracles: statsmodels
(multipletests, proportion_confint, mcnemar), scipy (binomtest), brute-force enumeration of every
sign assignment for small n, and hand values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import exact_sign_flip_p
from scipy import stats as scipy_stats
from splits.stats import (
    benjamini_hochberg,
    bonferroni,
    clopper_pearson,
    mcnemar_exact,
    one_sided_permutation_p,
    sign_flip_test,
    sign_test_below,
    wilson_interval,
)
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

# --------------------------------------------------------------------------- multiple comparisons


def test_benjamini_hochberg_matches_statsmodels():
    rng = np.random.default_rng(3)
    for size in (1, 2, 5, 22, 500):
        p = rng.random(size) ** 3
        p[: size // 4] = np.round(p[: size // 4], 2)  # ties
        np.testing.assert_allclose(
            benjamini_hochberg(p), multipletests(p, method="fdr_bh")[1], rtol=1e-12, atol=0
        )


def test_benjamini_hochberg_is_scipys_false_discovery_control_float_for_float():
    """The q-values are written out in numpy (no scipy.stats import in the jobs that need only
    them); they must be scipy's own floats, ties, zeros, ones and one-element families included."""
    rng = np.random.default_rng(3)
    families = [rng.uniform(size=n) for n in (2, 3, 17, 400)]
    families += [rng.uniform(size=50) ** 6, np.round(rng.uniform(size=60), 2)]
    families += [np.array([0.0, 1.0, 0.5, 0.5, 1e-300]), np.array([0.3])]
    for p in families:
        expected = scipy_stats.false_discovery_control(p, method="bh")
        assert np.array_equal(benjamini_hochberg(p), expected)
    with pytest.raises(ValueError, match="must lie between 0 and 1"):
        benjamini_hochberg([0.2, 1.5])


def test_benjamini_hochberg_hand_values_and_nan_rule():
    # sorted p 0.01, 0.03, 0.04, 0.20 -> p m / i = 0.04, 0.06, 0.0533, 0.20 -> running minimum
    # from the largest: 0.04, 0.0533, 0.0533, 0.20
    q = benjamini_hochberg([0.01, 0.04, 0.03, 0.20])
    assert q == pytest.approx([0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.20])
    # NaN stays NaN and does not count: the family is the two real tests
    with_nan = benjamini_hochberg([0.01, float("nan"), 0.04])
    assert math.isnan(with_nan[1])
    assert with_nan[0] == pytest.approx(0.02) and with_nan[2] == pytest.approx(0.04)
    assert benjamini_hochberg([]).shape == (0,)
    assert np.isnan(benjamini_hochberg([float("nan")])).all()


def test_bonferroni_matches_statsmodels_and_family_size():
    p = np.array([0.001, 0.02, 0.3, 0.04])
    np.testing.assert_allclose(bonferroni(p), multipletests(p, method="bonferroni")[1])
    assert bonferroni([0.01], m=15)[0] == pytest.approx(0.15)
    out = bonferroni([0.01, float("nan")])
    assert out[0] == pytest.approx(0.01) and math.isnan(out[1])


# --------------------------------------------------------------------------- sign flips


@pytest.mark.parametrize(
    "differences",
    [[1, 0.5, 0.5], [-0.5, 0, -0.5], [2.0, -1.0, 3.0, 0.5], [1, 1, 1, 1, 1, 1], [0.3, -0.2] * 4],
)
def test_sign_flip_matches_enumeration(differences):
    mean, p = sign_flip_test(differences, n_flips=20_000, seed=5)
    assert mean == pytest.approx(np.mean(differences))
    # Monte Carlo over 20 000 random assignments: binomial standard error <= 0.0036
    assert p == pytest.approx(exact_sign_flip_p(differences), abs=0.015)


def test_sign_flip_nan_rule_and_edges():
    # NaN differences are dropped: the same test as without them, same seed
    assert sign_flip_test([1, float("nan"), 0.5, 0.5], seed=2) == sign_flip_test(
        [1, 0.5, 0.5], seed=2
    )
    mean, p = sign_flip_test([], seed=0)
    assert math.isnan(mean) and math.isnan(p)
    assert all(math.isnan(v) for v in sign_flip_test([float("nan")] * 3))
    assert sign_flip_test(np.zeros(5)) == (0.0, 1.0)
    # never 0: the observed assignment counts among the flips
    assert sign_flip_test(np.ones(30), n_flips=99)[1] == pytest.approx(1 / 100)


# --------------------------------------------------------------------------- other tests


@pytest.mark.parametrize("b, c", [(0, 0), (3, 0), (5, 12), (40, 41), (1, 9), (100, 60)])
def test_mcnemar_matches_statsmodels(b, c):
    table = [[10, b], [c, 7]]
    assert mcnemar_exact(b, c) == pytest.approx(mcnemar(table, exact=True).pvalue, abs=1e-12)
    # b=1, c=9: 2 * P(X <= 1), X ~ Bin(10, 1/2) = 2 * 11/1024
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)


def test_sign_test_below_matches_binomtest():
    values = [0.1, 0.2, 0.5, 0.5, 0.9, 0.3, float("nan"), 0.05]
    below, n, p = sign_test_below(values, 0.5)
    assert (below, n) == (4, 5)  # the two ties and the NaN are dropped
    assert p == pytest.approx(scipy_stats.binomtest(4, 5, 0.5, alternative="greater").pvalue)
    assert math.isnan(sign_test_below([0.5, 0.5], 0.5)[2])


def test_one_sided_permutation_rule():
    null = np.arange(1, 101, dtype=float)  # median 50.5
    assert one_sided_permutation_p(96.0, null) == pytest.approx(0.05)
    assert one_sided_permutation_p(3.0, null) == pytest.approx(0.03)
    assert math.isnan(one_sided_permutation_p(float("nan"), null))


# --------------------------------------------------------------------------- intervals


@pytest.mark.parametrize("k, n", [(0, 10), (10, 10), (7, 20), (104, 200), (1, 3), (493, 500)])
def test_wilson_matches_statsmodels(k, n):
    lo, hi = wilson_interval(k, n)
    ref_lo, ref_hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    assert lo == pytest.approx(ref_lo, abs=1e-12)
    assert hi == pytest.approx(ref_hi, abs=1e-12)


def test_wilson_hand_value_and_empty():
    # 8 of 10, z = 1.959964: centre (0.8 + 0.19207)/1.38415 = 0.71675, half 0.22011
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4)
    assert hi == pytest.approx(0.9433, abs=1e-4)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_clopper_pearson_matches_scipy_binomtest():
    rng = np.random.default_rng(3)
    trials = rng.integers(1, 200, size=200)
    successes = np.array([rng.integers(0, t + 1) for t in trials])
    low, high = clopper_pearson(successes, trials, 0.05)
    for x, m, lo, hi in zip(successes, trials, low, high, strict=True):
        ci = scipy_stats.binomtest(int(x), int(m)).proportion_ci(0.95, method="exact")
        assert lo == pytest.approx(ci.low, abs=1e-10)
        assert hi == pytest.approx(ci.high, abs=1e-10)
    low, high = clopper_pearson([0], [0], 0.05)
    assert (low[0], high[0]) == (0.0, 1.0)


def _same_floats(got, expected) -> bool:
    """Equal float for float: NaN where NaN, the same sign of zero, the same bits elsewhere."""
    got, expected = np.asarray(got), np.asarray(expected)
    return (
        got.shape == expected.shape
        and got.dtype == expected.dtype
        and bool(np.all(got.view(np.int64) == expected.view(np.int64)))
    )


def test_beta_ppf_is_scipys_float_for_float():
    """splits.stats.beta_ppf (scipy.special's ufunc with scipy.stats' checks, without importing
    scipy.stats) gives scipy.stats.beta.ppf's floats, boundaries and bad arguments included."""
    from splits.stats import beta_ppf

    rng = np.random.default_rng(3)
    a = np.concatenate([rng.integers(-2, 400, 3000).astype(float), [0.0, -0.0, np.nan, np.inf]])
    b = np.concatenate([rng.integers(-2, 400, 3000).astype(float), [1.0, 2.0, 1.0, 1.0]])
    for q in (0.025, 0.975, 0.5, 0.0, 1.0, -0.1, 1.5, np.nan, 1e-300):
        with np.errstate(invalid="ignore", divide="ignore"):
            assert _same_floats(beta_ppf(q, a, b), scipy_stats.beta.ppf(q, a, b)), q
    qs = rng.random(a.size)
    assert _same_floats(beta_ppf(qs, a, b), scipy_stats.beta.ppf(qs, a, b))
    assert _same_floats(beta_ppf(0.3, 2.0, 5.0), scipy_stats.beta.ppf(0.3, 2.0, 5.0))


def test_hypergeom_sf_is_scipys_float_for_float():
    """splits.stats.hypergeom_sf gives scipy.stats.hypergeom.sf's floats: inside the support,
    below it (1), from its top on (0) and for impossible parameters (nan)."""
    from splits.stats import hypergeom_sf

    rng = np.random.default_rng(5)
    big_n = rng.integers(-1, 3000, 20000)
    big_k = rng.integers(-1, 3001, big_n.size)
    n = rng.integers(-1, 3001, big_n.size)
    k = rng.integers(-3, 3000, big_n.size)
    # the lift's calls: hits - 1 with hits between 0 and min(n, K), all parameters valid
    big_n[:5000] = np.abs(big_n[:5000]) + 1
    big_k[:5000] = rng.integers(0, big_n[:5000] + 1)
    n[:5000] = rng.integers(1, big_n[:5000] + 1)
    k[:5000] = rng.integers(0, np.minimum(n[:5000], big_k[:5000]) + 1) - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        expected = scipy_stats.hypergeom.sf(k, big_n, big_k, n)
        assert _same_floats(hypergeom_sf(k, big_n, big_k, n), expected)
        assert _same_floats(
            hypergeom_sf(k.astype(float) + 0.5, big_n, big_k, n),
            scipy_stats.hypergeom.sf(k.astype(float) + 0.5, big_n, big_k, n),
        )
    assert _same_floats(hypergeom_sf(3, 50, 10, 20), scipy_stats.hypergeom.sf(3, 50, 10, 20))


def test_binom_sf_is_scipys_float_for_float():
    """splits.stats.binom_sf (the sign test's p-value) gives scipy.stats.binom.sf's floats."""
    from splits.stats import binom_sf

    rng = np.random.default_rng(9)
    n = rng.integers(-1, 400, 20000)
    k = rng.integers(-3, 402, n.size).astype(float)
    k[::7] += 0.5
    p = np.concatenate([rng.random(n.size - 6), [0.0, 1.0, 0.5, -0.1, 1.1, np.nan]])
    with np.errstate(invalid="ignore"):
        assert _same_floats(binom_sf(k, n, p), scipy_stats.binom.sf(k, n, p))
    for below, trials in ((0, 1), (1, 1), (3, 10), (10, 10), (57, 100)):
        assert _same_floats(
            binom_sf(below - 1, trials, 0.5),
            scipy_stats.binomtest(below, trials, 0.5, alternative="greater").pvalue,
        )


def test_distributions_fall_back_to_scipy_stats_without_the_private_ufuncs(monkeypatch):
    """A scipy whose special module lacks the private ufuncs: each function is scipy.stats'."""
    from splits import stats as splits_stats

    monkeypatch.setattr(splits_stats, "_ufuncs", lambda: None)
    q, a, b = np.array([0.025, 0.5, 1.0]), np.array([1.0, 3.0, 0.0]), np.array([2.0, 4.0, 1.0])
    with np.errstate(invalid="ignore"):
        assert _same_floats(splits_stats.beta_ppf(q, a, b), scipy_stats.beta.ppf(q, a, b))
    k, big_n, big_k, n = np.array([2, -1, 9]), 50, 10, np.array([20, 5, 10])
    got, want = (
        splits_stats.hypergeom_sf(k, big_n, big_k, n),
        scipy_stats.hypergeom.sf(k, big_n, big_k, n),
    )
    assert _same_floats(got, want)
    assert _same_floats(splits_stats.binom_sf(3, 10, 0.5), scipy_stats.binom.sf(3, 10, 0.5))
