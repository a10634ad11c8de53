"""Seed bootstrap: a percentile interval of any statistic of a study over resampled seeds, each distinct multiset
computed once; an undefined draw counts in `undefined_share`, at the upper end (docs/analysis.md, *Scaling fits*)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
N_RESAMPLES = 999
SEED = 0
METHOD = "seed bootstrap (seeds resampled with replacement, whole fit redone; scipy.stats.bootstrap percentile)"


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
                  n_resamples: int = N_RESAMPLES, seed: int = SEED,
                  clip: tuple[float, float] = (-1e6, 1e6)) -> SeedInterval:
    """Percentile interval of `statistic(seed indices)` over seed resamples; NaN bounds with < 2 seeds."""
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
