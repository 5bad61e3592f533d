"""Statistics of lift@k: a hand-computed example, scipy on random lists, and the coverage of
the confidence interval measured by simulation (the shared tests, Benjamini-Hochberg and
Clopper-Pearson, are in test_stats.py).

Oracles: arithmetic done by hand below; scipy.stats.hypergeom per row; a simulated population
whose true lift at depth f is computed in closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats
from splits.hypotheses.lift import (
    depth_counts,
    hypergeom_quantiles,
    lift_interval,
    lift_statistics,
    null_band,
)
from splits.stats import clopper_pearson

ALPHA = 0.05


def test_hand_computed_example():
    # ranked list of 10 posts, the 5 target posts first; k = 0.5 -> n = 5 posts read
    labels = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0], dtype=bool)
    [(fraction, n, hits, big_k, big_n)] = depth_counts(labels, np.arange(10), [0.5])
    assert (fraction, n, hits, big_k, big_n) == (0.5, 5, 5, 5, 10)
    out = lift_statistics([hits], [n], [big_k], [big_n], ALPHA)
    # precision 5/5 over base rate 5/10
    assert out["lift"][0] == pytest.approx(2.0)
    # P(X >= 5), X ~ Hypergeom(10, 5, 5): only one of C(10, 5) = 252 draws has all five
    assert out["p_value"][0] == pytest.approx(1 / 252)
    # interval: top share 5/5 -> Clopper-Pearson (level 1 - alpha/2) lower bound c = (alpha/4)^(1/5),
    # upper 1; rest share 0/5 -> [0, 1 - c]. Lift at the corners: c / (0.5 c + 0.5 (1 - c)) = 2c,
    # and 1 / (0.5 * 1 + 0.5 * 0) = 2.
    c = (ALPHA / 4) ** (1 / 5)
    assert out["lift_low"][0] == pytest.approx(2 * c)
    assert out["lift_high"][0] == pytest.approx(2.0)
    # null band: X takes 0..5 with weights 1, 25, 100, 100, 25, 1 (/252); the 2.5% quantile is 1,
    # the upper 2.5% point 4 -> lifts (1/5)/0.5 and (4/5)/0.5
    assert out["null_band_low"][0] == pytest.approx(0.4)
    assert out["null_band_high"][0] == pytest.approx(1.6)
    # the same band as counts of target posts among the 5 read, and the precision 5/5
    assert (out["null_band_low_hits"][0], out["null_band_high_hits"][0]) == (1, 4)
    assert out["precision"][0] == 1.0


def test_depth_counts_leave_out_empty_depths():
    labels = np.array([True, False, True])
    counts = depth_counts(labels, np.array([2, 1, 0]), [0.005, 0.5, 1.0])
    # 0.005 x 3 posts reads none: left out; 0.5 -> n = 1 (post 2, a target); 1.0 -> all 3
    assert counts == [(0.5, 1, 1, 2, 3), (1.0, 3, 2, 2, 3)]


def test_against_scipy_on_random_lists():
    rng = np.random.default_rng(7)
    rows = []
    for _ in range(300):
        big_n = int(rng.integers(5, 400))
        labels = rng.random(big_n) < rng.uniform(0.05, 0.95)
        if not labels.any():
            labels[0] = True
        ranked = rng.permutation(big_n)
        fraction = float(rng.choice([0.005, 0.01, 0.02, 0.05, 0.1, 0.5]))
        counts = depth_counts(labels, ranked, [fraction])
        for _, n, hits, big_k, length in counts:
            assert hits == int(labels[ranked[:n]].sum())
            assert big_k == int(labels.sum()) and length == big_n
            assert n == int(fraction * big_n)
            rows.append((hits, n, big_k, length))
    hits, n, big_k, big_n = (np.array(c) for c in zip(*rows, strict=True))
    out = lift_statistics(hits, n, big_k, big_n, ALPHA)
    for i in range(len(rows)):
        assert out["lift"][i] == pytest.approx((hits[i] / n[i]) / (big_k[i] / big_n[i]))
        p = sum(stats.hypergeom.pmf(x, big_n[i], big_k[i], n[i]) for x in range(hits[i], n[i] + 1))
        assert out["p_value"][i] == pytest.approx(p, rel=1e-9, abs=1e-14)
        low = stats.hypergeom.ppf(ALPHA / 2, big_n[i], big_k[i], n[i])
        assert out["null_band_low"][i] == pytest.approx(low / n[i] / (big_k[i] / big_n[i]))
        high = stats.hypergeom.isf(ALPHA / 2, big_n[i], big_k[i], n[i])
        assert (out["null_band_low_hits"][i], out["null_band_high_hits"][i]) == (low, high)
        assert out["precision"][i] == hits[i] / n[i]
        assert out["lift_low"][i] <= out["lift"][i] + 1e-12 <= out["lift_high"][i] + 2e-12


def test_null_band_is_the_release_formula():
    # the release: L = hypergeom.ppf(a/2, N, K, n), U = hypergeom.isf(a/2, N, K, n), lift L/n / (K/N)
    low, high = null_band([40], [300], [1000], 0.05)
    base = 300 / 1000
    assert low[0] == pytest.approx(stats.hypergeom.ppf(0.025, 1000, 300, 40) / 40 / base)
    assert high[0] == pytest.approx(stats.hypergeom.isf(0.025, 1000, 300, 40) / 40 / base)


def test_band_quantiles_equal_scipy_on_random_rows():
    rng = np.random.default_rng(21)
    size = 3000
    big_n = rng.integers(2, 14_000, size)
    big_k = np.maximum(1, (big_n * rng.uniform(0, 1, size)).astype(np.int64))
    big_k = np.minimum(big_k, big_n)
    n = np.maximum(
        1, (big_n * rng.choice([0.005, 0.01, 0.05, 0.1, 0.5, 1.0], size)).astype(np.int64)
    )
    for tail in (0.025, 0.005, 0.25):
        low, high = hypergeom_quantiles(n, big_k, big_n, tail)
        assert np.array_equal(low, stats.hypergeom.ppf(tail, big_n, big_k, n))
        assert np.array_equal(high, stats.hypergeom.isf(tail, big_n, big_k, n))


def test_whole_list_has_lift_one():
    low, high = lift_interval([30], [100], [30], [100], 0.05)
    assert low[0] == 1.0 and high[0] == 1.0


# --------------------------------------------------------------------------- coverage


class Population:
    """Posts of a target group (share ``base``) and of the other group; a post matches the query
    with probability ``match[g]`` and then scores Exponential(rate ``rate[g]``); non-matching
    posts come after the matching ones in random order. The true lift at depth f is the target
    share of the top fraction f of this population over ``base``."""

    def __init__(self, base, match, rate):
        self.base = base
        self.match = match  # (target, other)
        self.rate = rate

    def true_lift(self, fraction: float) -> float:
        p, (m1, m0), (r1, r0) = self.base, self.match, self.rate
        matching = p * m1 + (1 - p) * m0
        if fraction >= matching:  # all matching posts, then non-matching ones at random
            target_rest = (p * (1 - m1)) / (1 - matching)
            share = (p * m1 + (fraction - matching) * target_rest) / fraction
            return share / p

        def above(s):
            return p * m1 * math.exp(-r1 * s) + (1 - p) * m0 * math.exp(-r0 * s) - fraction

        threshold = optimize.brentq(above, 0.0, 200.0)
        share = p * m1 * math.exp(-r1 * threshold) / fraction
        return share / p

    def ranked_labels(self, size: int, rng: np.random.Generator) -> np.ndarray:
        target = rng.random(size) < self.base
        matches = rng.random(size) < np.where(target, self.match[0], self.match[1])
        score = rng.exponential(1.0, size) / np.where(target, self.rate[0], self.rate[1])
        key = np.where(matches, score, -1.0 - rng.random(size))  # non-matching: random order
        return target[np.argsort(-key)]


@pytest.mark.parametrize(
    "population,size,fraction",
    [
        (Population(0.5, (0.30, 0.10), (1.0, 1.0)), 2000, 0.05),
        (Population(0.3, (0.20, 0.05), (0.7, 1.0)), 3000, 0.01),
        (Population(0.5, (0.05, 0.02), (1.0, 1.0)), 1500, 0.10),  # depth past the matches
        (Population(0.4, (0.20, 0.20), (1.0, 1.0)), 1000, 0.02),  # no association: lift 1
        (Population(0.5, (0.90, 0.10), (1.0, 1.0)), 100, 0.3),  # small pool, deep k
        (Population(0.5, (0.90, 0.20), (1.0, 1.0)), 200, 0.5),
    ],
)
def test_interval_coverage_by_simulation(population, size, fraction):
    rng = np.random.default_rng(12345)
    truth = population.true_lift(fraction)
    replicates = 1500
    rows = []
    for _ in range(replicates):
        labels = population.ranked_labels(size, rng)
        [(_, n, hits, big_k, length)] = depth_counts(labels, np.arange(size), [fraction])
        rows.append((hits, n, big_k, length))
    hits, n, big_k, big_n = (np.array(c) for c in zip(*rows, strict=True))
    out = lift_statistics(hits, n, big_k, big_n, ALPHA)
    covered = (out["lift_low"] <= truth) & (truth <= out["lift_high"])
    coverage = covered.mean()
    # the interval claims >= 95%; allow 3 Monte Carlo standard errors below
    assert coverage >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / replicates), (coverage, truth)
    band = (out["null_band_low"] <= truth) & (truth <= out["null_band_high"])
    if truth > 1.5:
        # the release's "CI" is the null's acceptance band: it misses a real lift most of the time
        assert band.mean() < 0.5, band.mean()


def test_precision_interval_over_the_observed_base_rate_undercovers():
    """Why the interval accounts for the rest of the list: the simpler Clopper-Pearson interval
    of precision divided by the list's observed target share K/N treats K/N as fixed, but K
    includes the x posts it is compared with; deep k on small pools shows it."""
    population = Population(0.5, (0.90, 0.10), (1.0, 1.0))
    size, fraction = 100, 0.3
    truth = population.true_lift(fraction)
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(1500):
        labels = population.ranked_labels(size, rng)
        [(_, n, hits, big_k, length)] = depth_counts(labels, np.arange(size), [fraction])
        rows.append((hits, n, big_k, length))
    hits, n, big_k, big_n = (np.array(c) for c in zip(*rows, strict=True))
    low, high = clopper_pearson(hits, n, ALPHA)
    base = big_k / big_n
    naive = ((low / base <= truth) & (truth <= high / base)).mean()
    ours = lift_statistics(hits, n, big_k, big_n, ALPHA)
    covered = ((ours["lift_low"] <= truth) & (truth <= ours["lift_high"])).mean()
    assert naive < 0.9 and covered >= 0.94, (naive, covered)
