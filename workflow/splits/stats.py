"""Statistical tests shared by the stages: one implementation of each.

- multiple comparisons: Benjamini-Hochberg q-values (``scipy.stats.false_discovery_control``'s
  steps, written out so that a stage needing only them does not import scipy.stats) and
  Bonferroni; in both a NaN p-value (a test that could not be run) stays NaN and is not counted
  in the family unless the caller gives the family size;
- paired tests: the sign-flip permutation test of a mean difference, the exact McNemar test,
  the sign test against a threshold;
- the one-sided permutation p-value on the observed side of the null median (GRASP's DSI);
- binomial intervals: Wilson score and Clopper-Pearson.

scipy.stats is imported inside the functions that need it: it is slow to import and several
command-line stages import this module only for the cheap functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z_95 = 1.959963984540054  # scipy.stats.norm.ppf(0.975)
SIGN_FLIPS = 10_000

# --------------------------------------------------------------------------- multiple comparisons


def benjamini_hochberg(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values, step-up, capped at 1).

    NaN p-values stay NaN and do not count in the number of tests."""
    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    valid = ~np.isnan(p)
    if valid.any():
        out[valid] = _bh(p[valid])
    return out


def _bh(p: np.ndarray) -> np.ndarray:
    """``scipy.stats.false_discovery_control(p, method="bh")`` for a 1-d array, step for step
    (the same floats: tests/test_stats.py checks them equal), without importing scipy.stats,
    which costs a stage job ~1.3 CPU s where this is all it needs (the grasp probes, the
    hypotheses table)."""
    if not np.all(p == np.clip(p, 0, 1)):
        raise ValueError("Benjamini-Hochberg: p-values must lie between 0 and 1")
    if p.size <= 1:
        return p.copy()
    m = p.size
    order = np.argsort(p)
    q = p[order] * (m / np.arange(1, m + 1))  # p_(i) m / i
    np.minimum.accumulate(q[::-1], out=q[::-1])  # the running minimum from the largest p
    out = np.empty_like(q)
    out[order] = q
    return np.clip(out, 0, 1)


def bonferroni(p_values: Sequence[float] | np.ndarray, m: int | None = None) -> np.ndarray:
    """Bonferroni-adjusted p-values min(1, p * m); NaN stays NaN. ``m`` is the size of the
    family of hypotheses (e.g. every pair of groups, tested or not); by default the number of
    non-NaN p-values given."""
    p = np.asarray(p_values, dtype=np.float64)
    if m is None:
        m = int(np.sum(~np.isnan(p)))
    return np.minimum(1.0, p * max(m, 1))


# --------------------------------------------------------------------------- paired tests


def sign_flip_test(
    differences: Sequence[float] | np.ndarray, n_flips: int = SIGN_FLIPS, seed: int = 0
) -> tuple[float, float]:
    """Two-sided sign-flip permutation test of mean(differences) == 0.

    Returns (mean difference, p-value). The p-value counts the observed arrangement among the
    random sign assignments, (1 + #{|permuted mean| >= |observed mean|}) / (1 + n_flips), so it
    is never 0; all-zero differences give p = 1.

    NaN rule: a NaN difference is a pair with a side missing; it is dropped. With no difference
    left there is nothing to test and the result is (nan, nan): the callers keep the NaN out of
    their Benjamini-Hochberg family instead of counting an untested key as p = 1.
    """
    d = np.asarray(differences, dtype=np.float64)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return math.nan, math.nan
    observed = float(d.mean())
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_flips, d.size))
    permuted = np.abs((signs * d).mean(axis=1))
    # permuted means equal to the observed one up to rounding count as reaching it
    tolerance = 1e-12 * max(1.0, abs(observed))
    extreme = int(np.sum(permuted >= abs(observed) - tolerance))
    return observed, (1 + extreme) / (1 + n_flips)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b (only model 1 right) and c
    (only model 2 right): the binomial test of min(b, c) in b + c trials at 1/2."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))  # exact integers
    return min(1.0, 2 * tail / 2**n)


def sign_test_below(values: Sequence[float] | np.ndarray, tau: float) -> tuple[int, int, float]:
    """Sign test against a threshold: H0 P(value < tau) <= 1/2, H1 values are mostly below tau.

    Returns (number below tau, number of non-tied values, one-sided binomial p-value).
    Values equal to tau are ties and are dropped (the usual sign-test convention); NaN values are
    dropped.
    """
    from scipy import stats

    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    below = int(np.sum(v < tau))
    n = int(np.sum(v != tau))
    if n == 0:
        return below, n, math.nan
    p = float(stats.binomtest(below, n, 0.5, alternative="greater").pvalue)
    return below, n, p


def one_sided_permutation_p(observed: float, null: Sequence[float] | np.ndarray) -> float:
    """Share of permuted values beyond the observed one, on the observed side of the null median
    (above the median: share >= observed; below: share <= observed). NaN nulls are dropped."""
    null = np.asarray(null, dtype=np.float64)
    null = null[~np.isnan(null)]
    if null.size == 0 or np.isnan(observed):
        return math.nan
    if observed >= np.median(null):
        return float(np.mean(null >= observed))
    return float(np.mean(null <= observed))


# --------------------------------------------------------------------------- binomial intervals


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (nan, nan) when n == 0."""
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def clopper_pearson(successes, trials, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact two-sided 1 - alpha interval of a binomial proportion (beta quantiles), vectorised;
    trials = 0 gives [0, 1]."""
    from scipy import stats

    x = np.asarray(successes, dtype=np.float64)
    m = np.asarray(trials, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(x > 0, stats.beta.ppf(alpha / 2, x, m - x + 1), 0.0)
        high = np.where(x < m, stats.beta.ppf(1 - alpha / 2, x + 1, m - x), 1.0)
    low = np.where(m > 0, np.nan_to_num(low, nan=0.0), 0.0)
    high = np.where(m > 0, np.nan_to_num(high, nan=1.0), 1.0)
    return low, high
