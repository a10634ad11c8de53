"""One family's compute ladder for one metric, as the curve fits and their checks see it.

A ladder holds the metric per size and seed, the reference per seed (for the power law of the gain) and the
compute axis; `fit(form, sizes, seeds)` fits one of analysis/curve_fits.py's forms on a subset of sizes and a
multiset of seeds (a seed drawn twice counts twice) and caches the result, so leave-one-size-out checks, seed
bootstraps and extrapolations share their fits.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .axes import Convention
from .curve_fits import LOG_LINEAR, POWER_LAW, SATURATING, Curve, fit_log_linear, fit_power_law_gain, fit_saturating


@dataclass
class Ladder:
    metric: str
    labels: list[str]  # [P] ordered by compute
    x: np.ndarray  # [P] compute on the fit's axis
    values: np.ndarray  # [P, S] the metric per size and seed, NaN where missing
    ref: np.ndarray  # [S] the reference metric per seed
    seeds: np.ndarray  # [S]
    higher_is_better: bool
    convention: Convention
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def lx(self) -> np.ndarray:
        return np.log(self.x)

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)

    def gains(self) -> np.ndarray:
        return self.convention.gain_of(self.metric, self.values, self.ref[None, :])  # [P, S]

    def size_means(self) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nanmean(self.values, axis=1)  # [P]

    def seed_sd(self) -> float:
        """Pooled within-size sample sd of the metric over seeds (the seed noise of one run)."""
        dev, df = 0.0, 0
        for row in self.values:
            ok = row[np.isfinite(row)]
            if len(ok) >= 2:
                dev += float(((ok - ok.mean()) ** 2).sum())
                df += len(ok) - 1
        return float(np.sqrt(dev / df)) if df else float("nan")

    def points(self, sizes: tuple[int, ...], seeds: tuple[int, ...]):
        """(ln x, metric, gain, seed position) of the finite points of `sizes` x `seeds` (seeds may repeat;
        a repeated seed gets its own position so that per-seed lines stay separate)."""
        lx, y, g, who = [], [], [], []
        gains = self.gains()
        for k, j in enumerate(seeds):
            for p in sizes:
                if np.isfinite(self.values[p, j]):
                    lx.append(np.log(self.x[p]))
                    y.append(self.values[p, j])
                    g.append(gains[p, j])
                    who.append(k)
        return np.array(lx), np.array(y), np.array(g), np.array(who)

    def fit(self, form: str, sizes: tuple[int, ...] | None = None,
            seeds: tuple[int, ...] | None = None) -> Curve | None:
        sizes = tuple(range(len(self.x))) if sizes is None else tuple(sizes)
        seeds = tuple(range(self.n_seeds)) if seeds is None else tuple(sorted(int(s) for s in seeds))
        key = (form, sizes, seeds)
        if key not in self._cache:
            self._cache[key] = self._fit(form, sizes, seeds)
        return self._cache[key]

    def _fit(self, form: str, sizes: tuple[int, ...], seeds: tuple[int, ...]) -> Curve | None:
        lx, y, g, who = self.points(sizes, seeds)
        if len(lx) == 0:
            return None
        if form == LOG_LINEAR:
            return fit_log_linear(lx, y)
        if form == SATURATING:
            return fit_saturating(lx, y, higher_is_better=self.higher_is_better, scale=self.seed_sd())
        ref_mean = float(np.mean(self.ref[list(seeds)]))
        return fit_power_law_gain(lx, g, who, lambda gain: self.convention.value_of(self.metric, gain, ref_mean))

    def predict(self, form: str, at_lx: float, sizes: tuple[int, ...] | None = None,
                seeds: tuple[int, ...] | None = None) -> float:
        curve = self.fit(form, sizes, seeds)
        return float("nan") if curve is None else float(curve.predict(np.array(at_lx)))


__all__ = ["LOG_LINEAR", "POWER_LAW", "SATURATING", "Ladder"]
