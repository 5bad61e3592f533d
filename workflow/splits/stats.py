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

import functools
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
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    below = int(np.sum(v < tau))
    n = int(np.sum(v != tau))
    if n == 0:
        return below, n, math.nan
    # scipy.stats.binomtest(below, n, 0.5, alternative="greater").pvalue is binom.sf(below - 1)
    p = float(binom_sf(below - 1, n, 0.5))
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
    x = np.asarray(successes, dtype=np.float64)
    m = np.asarray(trials, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(x > 0, beta_ppf(alpha / 2, x, m - x + 1), 0.0)
        high = np.where(x < m, beta_ppf(1 - alpha / 2, x + 1, m - x), 1.0)
    low = np.where(m > 0, np.nan_to_num(low, nan=0.0), 0.0)
    high = np.where(m > 0, np.nan_to_num(high, nan=1.0), 1.0)
    return low, high


# ------------------------------------------- scipy.stats' distributions without scipy.stats
# ``scipy.stats.beta.ppf``, ``hypergeom.sf`` and ``binom.sf`` are argument checks and boundary
# values around scipy.special's (Boost) ufuncs; done here around the same ufuncs, they give the
# same floats (tests/test_stats.py checks them equal on grids with the boundary cases) without
# importing scipy.stats, ~0.8 CPU s of each job that needs nothing else of it (the lift, the
# personalization probe's sign test). A scipy
# without these ufuncs (private names) gets scipy.stats' own functions.


@functools.cache
def _ufuncs():
    try:
        from scipy.special._ufuncs import _beta_ppf, _binom_sf, _hypergeom_sf
    except ImportError:
        return None
    return _beta_ppf, _hypergeom_sf, _binom_sf


def beta_ppf(q, a, b):
    """``scipy.stats.beta.ppf(q, a, b)``: nan where a or b is not above 0 or q is outside
    [0, 1]; 0 at q = 0, 1 at q = 1."""
    ufuncs = _ufuncs()
    if ufuncs is None:
        from scipy import stats

        return stats.beta.ppf(q, a, b)
    q, a, b = np.asarray(q), np.asarray(a), np.asarray(b)
    valid = (a > 0) & (b > 0)
    inside = valid & (0 < q) & (q < 1)
    out = np.full(np.broadcast_shapes(q.shape, a.shape, b.shape), np.nan)
    out[np.broadcast_to(valid & (q == 0), out.shape)] = 0.0
    out[np.broadcast_to(valid & (q == 1), out.shape)] = 1.0
    if np.any(inside):
        # scipy.stats multiplies by the scale 1 and adds the location 0 (a -0.0 becomes 0.0)
        out[inside] = ufuncs[0](*_at(inside, q, a, b)) * 1 + 0
    return out[()] if out.ndim == 0 else out


def hypergeom_sf(k, big_n, big_k, n):
    """``scipy.stats.hypergeom.sf(k, big_n, big_k, n)``: P(X > k) for X the number of marked
    items among n drawn from big_n of which big_k are marked; 1 below the support, 0 from its
    top on, nan for impossible parameters."""
    ufuncs = _ufuncs()
    if ufuncs is None:
        from scipy import stats

        return stats.hypergeom.sf(k, big_n, big_k, n)
    k, big_n, big_k, n = (np.asarray(v) for v in (k, big_n, big_k, n))
    low, high = np.maximum(n - (big_n - big_k), 0), np.minimum(big_k, n)
    valid = (big_n > 0) & (big_k >= 0) & (n >= 0) & (big_k <= big_n) & (n <= big_n)
    valid &= _integral(big_n) & _integral(big_k) & _integral(n)
    inside = valid & (k >= low) & (k < high) & np.isfinite(k)
    shape = np.broadcast_shapes(*(v.shape for v in (k, big_n, big_k, n)))
    out = np.zeros(shape)
    out[np.broadcast_to(~valid | np.isnan(k), shape)] = np.nan
    out[np.broadcast_to(((k < low) | np.isneginf(k)) & valid, shape)] = 1.0
    if np.any(inside):
        out[inside] = np.clip(ufuncs[1](*_at(inside, k, big_k, n, big_n)), 0, 1)
    return out[()] if out.ndim == 0 else out


def binom_sf(k, n, p):
    """``scipy.stats.binom.sf(k, n, p)``: P(X > k) for X ~ Binomial(n, p); 1 below 0, 0 from n
    on, nan for impossible parameters."""
    ufuncs = _ufuncs()
    if ufuncs is None:
        from scipy import stats

        return stats.binom.sf(k, n, p)
    k, n, p = np.asarray(k), np.asarray(n), np.asarray(p)
    valid = (n >= 0) & _integral(n) & (p >= 0) & (p <= 1)
    inside = valid & (k >= 0) & (k < n) & np.isfinite(k)
    shape = np.broadcast_shapes(k.shape, n.shape, p.shape)
    out = np.zeros(shape)
    out[np.broadcast_to(~valid | np.isnan(k), shape)] = np.nan
    out[np.broadcast_to(((k < 0) | np.isneginf(k)) & valid, shape)] = 1.0
    if np.any(inside):
        k_at, n_at, p_at = _at(inside, k, n, p)
        out[inside] = np.clip(ufuncs[2](np.floor(k_at), n_at, p_at), 0, 1)
    return out[()] if out.ndim == 0 else out


def _integral(x: np.ndarray) -> np.ndarray:
    return x == np.round(x)


def _at(where: np.ndarray, *args: np.ndarray) -> list[np.ndarray]:
    """The arguments at the positions ``where`` (broadcast to its shape), flattened."""
    where = np.broadcast_to(where, np.broadcast_shapes(where.shape, *(a.shape for a in args)))
    return [np.broadcast_to(a, where.shape)[where] for a in args]
