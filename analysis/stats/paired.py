"""Seed-level significance of one paired comparison: is the gain of A over B larger than seed noise?

Input is one metric measured for A and B on the same seeds (and the same data, sizes and settings), so the
unit of replication is the seed. For the per-seed deltas d = A - B this module reports their mean and
standard deviation, a 95% BCa bootstrap interval (scipy.stats.bootstrap), a paired t-test
(scipy.stats.ttest_rel), a Wilcoxon signed-rank test, a sign-flip permutation test
(scipy.stats.permutation_test, exact when 2**n <= n_resamples), the minimum detectable effect of a paired
t-test at the observed spread and seed count, and Holm's step-down correction across the comparisons of
one report. With fewer than two paired seeds only the deltas are reported.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

SIGNIFICANT = "significant across seeds"
NOISE = "within seed noise"
UNTESTABLE = "not testable"


@dataclass(frozen=True)
class PairedStats:
    """Statistics of per-seed deltas `a - b`; p-values are two-sided and NaN where undefined."""

    n: int
    deltas: tuple[float, ...]
    mean: float
    std: float
    ci_low: float
    ci_high: float
    p_t: float
    p_wilcoxon: float
    p_permutation: float
    mde: float
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def testable(self) -> bool:
        return self.n >= 2 and np.isfinite(self.p_t)


def bca_interval(deltas: np.ndarray, *, n_resamples: int, seed: int, level: float = 0.95) -> tuple[float, float]:
    """BCa bootstrap interval of the mean delta; a point interval when every delta is the same."""
    deltas = np.asarray(deltas, dtype=np.float64)
    if np.ptp(deltas) == 0.0:
        return float(deltas[0]), float(deltas[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about BCa on tiny samples; we report the seed count
        res = stats.bootstrap(
            (deltas,), np.mean, method="BCa", n_resamples=n_resamples, confidence_level=level,
            vectorized=True, random_state=np.random.default_rng(seed),
        )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def sign_flip_pvalue(deltas: np.ndarray, *, n_resamples: int, seed: int) -> float:
    """Two-sided sign-flip permutation p-value of mean(deltas) == 0 (exact when 2**n <= n_resamples)."""
    res = stats.permutation_test(
        (np.asarray(deltas, dtype=np.float64),), lambda x, axis: np.mean(x, axis=axis),
        permutation_type="samples", vectorized=True, n_resamples=n_resamples, alternative="two-sided",
        random_state=np.random.default_rng(seed),
    )
    return float(res.pvalue)


def minimum_detectable_effect(std: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean delta a two-sided paired t-test detects with `power` at level `alpha`.

    Solved exactly with the noncentral t distribution: power(lam) = P(|T| > t_crit), T ~ nct(n - 1, lam),
    lam = delta * sqrt(n) / std.
    """
    if n < 2 or not np.isfinite(std) or std <= 0.0:
        return float("nan")
    df = n - 1
    t_crit = stats.t.ppf(1.0 - alpha / 2.0, df)

    def shortfall(lam: float) -> float:
        far_tail = np.nan_to_num(stats.nct.cdf(-t_crit, df, lam))  # ~0 for lam > 0; NaN-prone for large lam
        return float(stats.nct.sf(t_crit, df, lam) + far_tail - power)

    high = 1.0
    while shortfall(high) < 0.0:  # power grows with lam: double until the root is bracketed
        high *= 2.0
    lam = optimize.brentq(shortfall, 0.0, high)
    return float(lam * std / np.sqrt(n))


def holm(pvalues: np.ndarray | list[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (family-wise error control); NaN entries stay NaN, others count."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full_like(p, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    m = len(finite)
    if m == 0:
        return out
    order = finite[np.argsort(p[finite], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return out


def verdict(p_adjusted: float, alpha: float) -> str:
    """Words for a Holm-adjusted seed-level p-value."""
    if not np.isfinite(p_adjusted):
        return UNTESTABLE
    return SIGNIFICANT if p_adjusted < alpha else NOISE


def paired_stats(
    a: np.ndarray, b: np.ndarray, *, alpha: float = 0.05, power: float = 0.8, n_resamples: int = 9999, seed: int = 0
) -> PairedStats:
    """All seed-level statistics of `a - b` for values of A and B aligned by seed."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d = a - b
    n = len(d)
    nan = float("nan")
    if n == 0:
        return PairedStats(0, (), nan, nan, nan, nan, nan, nan, nan, nan, ("no paired seeds",))
    mean = float(d.mean())
    if n < 2:
        note = f"only {n} paired seed: deltas reported without p-values (a seed spread needs at least 2)"
        return PairedStats(n, tuple(d.tolist()), mean, nan, nan, nan, nan, nan, nan, nan, (note,))
    std = float(d.std(ddof=1))
    notes: list[str] = []
    lo, hi = bca_interval(d, n_resamples=n_resamples, seed=seed)
    if std == 0.0:
        notes.append("every seed gives the same delta: t-test undefined")
        p_t = nan
    else:
        p_t = float(stats.ttest_rel(a, b).pvalue)
    if np.all(d == 0.0):
        p_w = nan
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p_w = float(stats.wilcoxon(d).pvalue)
    p_perm = sign_flip_pvalue(d, n_resamples=n_resamples, seed=seed)
    floor = 2.0 / 2**n
    if floor >= alpha:
        notes.append(f"with {n} seeds the sign-flip and Wilcoxon p-values cannot go below {floor:.3g}")
    if n < 10:
        notes.append(f"BCa interval from {n} seeds is rough")
    mde = minimum_detectable_effect(std, n, alpha=alpha, power=power)
    return PairedStats(n, tuple(d.tolist()), mean, std, lo, hi, p_t, p_w, p_perm, mde, tuple(notes))


#: The largest seed count `seeds_for_power` searches; beyond it the answer is "more than this".
MAX_SEEDS = 1000


def seeds_for_power(std: float, effect: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest seed count n >= 2 at which a two-sided paired (one-sample) t-test of per-seed differences
    with sd `std` detects a true mean `effect` with `power` (noncentral t, as `minimum_detectable_effect`).
    NaN without a spread; inf when even MAX_SEEDS do not suffice."""
    if not np.isfinite(std) or std <= 0.0 or not np.isfinite(effect) or effect == 0.0:
        return float("nan")

    def reached(n: int) -> bool:
        df = n - 1
        t_crit = stats.t.ppf(1.0 - alpha / 2.0, df)
        lam = abs(effect) * np.sqrt(n) / std
        return float(stats.nct.sf(t_crit, df, lam) + np.nan_to_num(stats.nct.cdf(-t_crit, df, lam))) >= power

    if not reached(MAX_SEEDS):
        return float("inf")
    lo, hi = 1, MAX_SEEDS  # reached(hi) holds; find the smallest n with reached(n) by bisection (monotone in n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid >= 2 and reached(mid):
            hi = mid
        else:
            lo = mid
    return float(hi)
