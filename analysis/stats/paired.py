"""Seed-level statistics: one paired comparison's (mean, sd, BCa interval, paired t, Wilcoxon, sign flip), Holm and its
decision levels, t intervals, power, the MDE, and the seed bootstrap of a whole study (docs/analysis.md)."""
from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

DECIDED = "decided"
NOT_DECIDED = "not decided"
UNTESTABLE = "not testable"
#: The level of the t intervals of fits, steps and contrasts and of the seed bootstrap, and the alpha of their tests.
LEVEL = 0.95
ALPHA = 0.05


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
    notes: tuple[str, ...] = field(default_factory=tuple)


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


def t_power(lam: float, n: int, alpha: float) -> float:
    """Power of a two-sided one-sample t-test at level `alpha` with n values and noncentrality lam = delta *
    sqrt(n) / sd: P(|T| > t_crit), T ~ nct(n - 1, lam), exactly."""
    t_crit = stats.t.ppf(1.0 - alpha / 2.0, n - 1)
    far_tail = np.nan_to_num(stats.nct.cdf(-t_crit, n - 1, lam))  # ~0 for lam > 0; NaN-prone for large lam
    return float(stats.nct.sf(t_crit, n - 1, lam) + far_tail)


def minimum_detectable_effect(std: float, n: int, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean delta a two-sided paired t-test detects with `power` at level `alpha` (`t_power`)."""
    if n < 2 or not np.isfinite(std) or std <= 0.0:
        return float("nan")

    def shortfall(lam: float) -> float:
        return t_power(lam, n, alpha) - power

    high = 1.0
    while shortfall(high) < 0.0:  # power grows with lam: double until the root is bracketed
        high *= 2.0
    lam = optimize.brentq(shortfall, 0.0, high)
    return float(lam * std / np.sqrt(n))


def _holm_uncapped(pvalues: np.ndarray | list[float]) -> tuple[np.ndarray, np.ndarray]:
    """The p-values and their Holm-adjusted values before the cap at 1; NaN entries stay NaN and do not count."""
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full_like(p, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    out[order] = np.maximum.accumulate((len(order) - np.arange(len(order))) * p[order])
    return p, out


def first_step_level(alpha: float, m: int) -> float:
    """alpha / m, Holm's first step: the level of the MDE and seeds needed (docs/analysis.md, *Questions*)."""
    return alpha / max(int(m), 1)


def holm(pvalues: np.ndarray | list[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (family-wise error control); NaN entries stay NaN, others count."""
    return np.minimum(_holm_uncapped(pvalues)[1], 1.0)


def holm_levels(pvalues: np.ndarray | list[float], alpha: float) -> np.ndarray:
    """The level alpha / c at which Holm's step-down decides each p-value, c its Holm factor (docs/analysis.md,
    *Questions*); NaN entries stay NaN."""
    p, adjusted = _holm_uncapped(pvalues)
    level = np.full_like(p, alpha)  # a p-value of exactly 0 is decided at any level
    np.divide(alpha * p, adjusted, out=level, where=adjusted > 0)
    level[np.isnan(p)] = np.nan
    return level


def t_interval(mean: float, std: float, n: int, level: float) -> tuple[float, float]:
    """Two-sided (1 - level) t interval of a mean delta: it excludes 0 exactly when the paired t p < level."""
    if n < 2 or not (np.isfinite(std) and np.isfinite(level)):
        return float("nan"), float("nan")
    half = float(stats.t.ppf(1.0 - level / 2.0, n - 1) * std / np.sqrt(n))
    return mean - half, mean + half


def mean_t_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, standard error, t half-width with df = n - 1) of replicate values; NaN where n < 2."""
    values = np.asarray(values, dtype=np.float64)
    n, nan = len(values), float("nan")
    if n < 2:
        return (float(values.mean()) if n else nan), nan, nan
    se = float(values.std(ddof=1) / np.sqrt(n))
    return float(values.mean()), se, float(stats.t.ppf(0.5 + level / 2, n - 1) * se)


def seed_mean(deltas: np.ndarray) -> tuple[float, float, float]:
    """Mean, sample sd (NaN below 2 seeds) and two-sided t-test p against 0 (NaN without a spread) of per-seed
    deltas, as `ttest_rel` of the paired values: the test of every paired comparison (its interval: the caller's)."""
    x = np.asarray(deltas, dtype=np.float64)
    nan = float("nan")
    if len(x) < 2:
        return (float(x.mean()) if len(x) else nan), nan, nan
    sd = float(x.std(ddof=1))
    return float(x.mean()), sd, float(stats.ttest_1samp(x, 0.0).pvalue) if sd > 0 else nan


def verdict(p_adjusted: float, alpha: float) -> str:
    """Words for a Holm-adjusted seed-level p-value."""
    if not np.isfinite(p_adjusted):
        return UNTESTABLE
    return DECIDED if p_adjusted < alpha else NOT_DECIDED


def paired_stats(a: np.ndarray, b: np.ndarray, *, alpha: float = 0.05, n_resamples: int = 9999,
                 seed: int = 0) -> PairedStats:
    """All seed-level statistics of `a - b` for values of A and B aligned by seed."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d = a - b
    n = len(d)
    nan = float("nan")
    if n == 0:
        return PairedStats(0, (), nan, nan, nan, nan, nan, nan, nan, ("no paired seeds",))
    mean, std, p_t = seed_mean(d)
    if n < 2:
        note = f"only {n} paired seed: deltas reported without p-values (a seed spread needs at least 2)"
        return PairedStats(n, tuple(d.tolist()), mean, nan, nan, nan, nan, nan, nan, (note,))
    notes = ["every seed gives the same delta: t-test undefined"] if std == 0.0 else []
    lo, hi = bca_interval(d, n_resamples=n_resamples, seed=seed)
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
    return PairedStats(n, tuple(d.tolist()), mean, std, lo, hi, p_t, p_w, p_perm, tuple(notes))


#: The largest seed count `seeds_for_power` searches; beyond it the answer is "more than this".
MAX_SEEDS = 1000


def seeds_for_power(std: float, effect: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest seed count n >= 2 at which a two-sided paired t-test of per-seed differences with sd `std` detects
    `effect` with `power` (noncentral t); NaN without a spread, inf when even MAX_SEEDS do not suffice."""
    if not np.isfinite(std) or std <= 0.0 or not np.isfinite(effect) or effect == 0.0:
        return float("nan")

    def reached(n: int) -> bool:
        return t_power(abs(effect) * np.sqrt(n) / std, n, alpha) >= power

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


#: The seed bootstrap (`seed_interval`): docs/analysis.md, *Scaling fits*.
BOOTSTRAP_RESAMPLES = 999
BOOTSTRAP_METHOD = ("seed bootstrap (seeds resampled with replacement, whole fit redone; scipy.stats.bootstrap "
                    "percentile)")


@dataclass(frozen=True)
class Estimate:
    """A value with a 95% interval."""

    value: float
    lo: float
    hi: float


@dataclass(frozen=True)
class SeedInterval:
    lo: float
    hi: float
    undefined_share: float  # share of draws where the statistic was NaN or infinite
    n_seeds: int


def seed_interval(n_seeds: int, statistic: Callable[[np.ndarray], float], *, level: float = LEVEL,
                  n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                  clip: tuple[float, float] = (-1e6, 1e6)) -> SeedInterval:
    """Percentile interval of `statistic(seed indices)` over seed resamples, each distinct multiset computed once (an
    undefined draw counts in `undefined_share`, at the upper end); NaN bounds with < 2 seeds."""
    nan = float("nan")
    if n_seeds < 2:
        return SeedInterval(nan, nan, nan, n_seeds)
    cache: dict[bytes, tuple[float, bool]] = {}
    undefined = []

    def cached(idx: np.ndarray) -> float:
        chosen = np.sort(idx.astype(np.int64))
        key = chosen.tobytes()
        if key not in cache:
            value = float(statistic(chosen))
            bad = not np.isfinite(value)
            if np.isnan(value):  # undefined counts as beyond the upper end; the share says how often
                value = clip[1]
            cache[key] = (min(max(value, clip[0]), clip[1]), bad)
        value, bad = cache[key]
        undefined.append(bad)
        return value

    res = stats.bootstrap((np.arange(n_seeds),), cached, vectorized=False, method="percentile",
                          n_resamples=n_resamples, confidence_level=level, random_state=np.random.default_rng(seed))
    return SeedInterval(float(res.confidence_interval.low), float(res.confidence_interval.high),
                        float(np.mean(undefined)) if undefined else nan, n_seeds)
