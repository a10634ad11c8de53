"""Z-scale group-sequential boundaries by recursive numerical integration of the looks' joint normal law
(Jennison & Turnbull 2000, ch. 19), kept beside the tests as the independent reference that the spending
functions of analysis/stats/sequential.py are checked against: the boundaries they give must spend the published
alpha, and the t-tests' nominal levels must tend to them with many seeds (docs/analysis.md, "Boundaries")."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import optimize, stats

from analysis.stats.sequential import SequentialDesign, Spending, spent

#: Grid points over the continuation region of each look (Simpson's rule; boundaries to about 1e-5).
GRID = 801


def _simpson(lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(lo, hi, GRID)
    w = np.ones(GRID)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return x, w * (x[1] - x[0]) / 3.0


class _Looks:
    """The B-values of a Brownian motion with `drift` stopped on crossing |Z_k| >= c_k: `cross(c)` the probability
    of first crossing at the next look, `advance(c)` fixes that boundary (docs/analysis.md, *Seeds in rounds*)."""

    def __init__(self, fractions: np.ndarray, drift: float):
        self.t, self.drift, self.k = np.asarray(fractions, dtype=np.float64), drift, 0
        # continuation grid, its weights and the sub-density of B there before look k (None before look 0)
        self.x: np.ndarray | None = None
        self.w = self.f = np.ones(1)

    def _parts(self) -> tuple[np.ndarray, np.ndarray, float]:
        prev = self.t[self.k - 1] if self.k else 0.0
        step = self.t[self.k] - prev
        if self.x is None:
            return np.zeros(1), np.ones(1), step  # B(0) = 0
        return self.x, self.w * self.f, step

    def cross(self, c: float) -> float:
        u = c * np.sqrt(self.t[self.k])
        x, mass, step = self._parts()
        mu, s = x + self.drift * step, np.sqrt(step)
        return float(mass @ (stats.norm.cdf((-u - mu) / s) + stats.norm.sf((u - mu) / s)))

    def advance(self, c: float) -> None:
        u = min(c, 40.0) * np.sqrt(self.t[self.k])
        x, mass, step = self._parts()
        y, w = _simpson(-u, u)
        s = np.sqrt(step)
        self.f = stats.norm.pdf((y[:, None] - x[None, :] - self.drift * step) / s) @ mass / s
        self.x, self.w, self.k = y, w, self.k + 1


def crossing_probabilities(bounds: np.ndarray, fractions: np.ndarray, drift: float = 0.0) -> np.ndarray:
    """Probability of first crossing |Z_k| >= bounds[k] at each look, Z_k = B(t_k) / sqrt(t_k) with drift
    `drift` per unit information (0: the null)."""
    looks, out = _Looks(fractions, drift), []
    for c in bounds:
        out.append(looks.cross(float(c)))
        looks.advance(float(c))
    return np.array(out)


@lru_cache(maxsize=256)
def _bounds(fractions: tuple[float, ...], alpha: float, spending: Spending) -> tuple[float, ...]:
    increments = np.diff(spent(np.array(fractions), alpha, spending), prepend=0.0)
    looks, out = _Looks(np.array(fractions), 0.0), []
    for target in increments:
        if target <= 0.0:
            c = np.inf
        else:
            c = optimize.brentq(lambda c, spend: looks.cross(c) - spend, 0.0, 40.0, args=(target,), xtol=1e-10)
        out.append(float(c))
        looks.advance(float(c))
    return tuple(out)


def z_bounds(design: SequentialDesign, alpha: float | None = None) -> np.ndarray:
    """Two-sided boundaries on the Z scale at each look of `design` for level `alpha` (default: the design's)."""
    return np.array(_bounds(tuple(design.fractions.tolist()), alpha or design.alpha, design.spending))
