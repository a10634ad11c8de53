"""Power law of a gain against compute: each seed fitted alone, the seeds' lines averaged, a t interval over seeds
(and the pseudo-replicated per-point one, for comparison only); method: docs/analysis.md, *Scaling fits*."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, stats

from ..stats.paired import LEVEL, mean_t_interval

CI_METHOD = ("mean of per-seed slopes (each seed's sizes fitted alone), t interval with df = seeds - 1: the seed "
             "is the unit of replication")
BAND_METHOD = "t interval (df = seeds - 1) of the mean per-seed line at each x"
GRID = 60  # points of the plotted band
#: intercept and slope: fitted only on more sizes than that (on as many it passes through every size mean)
PARAMETERS = 2
#: Slopes searched; a best slope at the edge is not determined by the points (two sizes whose gains have
#: opposite signs: no power law passes through both), and the seed gets no line.
SLOPE_GRID = np.linspace(-10.0, 10.0, 801)


@dataclass(frozen=True)
class DroppedPoint:
    label: str  # the size's label
    seed: int
    gain: float
    reason: str


@dataclass
class PowerLawFit:
    n_points: int  # sizes with at least one per-seed point
    n_obs: int  # per-seed points in the fit
    slope: float  # mean of the per-seed slopes
    intercept: float  # mean of the per-seed intercepts
    slope_se: float  # sd of per-seed slopes / sqrt(S)
    intercept_se: float
    slope_ci: tuple[float, float]  # t interval, df = S - 1
    df: int  # S - 1
    seed_slopes: dict[int, float]  # seed -> its own slope
    seed_intercepts: dict[int, float]
    r2: float  # of the per-seed gains against the mean line
    r2_means: float  # of the seed-mean gains against the mean line
    slope_ci_per_point: tuple[float, float]  # pseudo-replicated interval, for comparison only
    band_x: np.ndarray  # [G] x grid over the fitted sizes
    band_lo: np.ndarray  # [G] lower edge of the band (gain)
    band_hi: np.ndarray  # [G]
    obs_x: np.ndarray  # [N] ln x of each per-seed point
    dropped: list[DroppedPoint] = field(default_factory=list)  # runs that are not data points (did not learn)
    ci_method: str = CI_METHOD
    band_method: str = BAND_METHOD

    @property
    def n_seeds(self) -> int:
        return len(self.seed_slopes)

    def predict(self, x: np.ndarray | float) -> np.ndarray:
        return np.exp(self.intercept + self.slope * np.log(x))

    @property
    def x_range(self) -> tuple[float, float]:
        return float(np.exp(self.obs_x.min())), float(np.exp(self.obs_x.max()))


def level_fit(lx: np.ndarray, gain: np.ndarray) -> tuple[float, float] | None:
    """(slope, intercept) of gain = e^intercept x^slope by least squares on the gains (None: no positive curve, or a
    slope at the edge of SLOPE_GRID); method: docs/analysis.md, "Fit and interval, the seed as the unit"."""
    if len(np.unique(lx)) < 2:
        return None
    centre = float(lx.mean())
    q = lx - centre
    w = np.exp(SLOPE_GRID[:, None] * q[None, :])  # [B, N]
    u = w @ gain  # [B]
    explained = np.where(u > 0, u * u / (w * w).sum(axis=1), -np.inf)
    k = int(np.argmax(explained))
    if not np.isfinite(explained[k]) or k in (0, len(SLOPE_GRID) - 1):
        return None

    def rising(b: float) -> float:  # the derivative of (g.w)^2 / (w.w) divided by 2 (g.w) / (w.w)^2 > 0
        e = np.exp(b * q)
        return float((gain @ (q * e)) * (e @ e) - (gain @ e) * ((q * e) @ e))

    lo, hi = float(SLOPE_GRID[k - 1]), float(SLOPE_GRID[k + 1])
    b = optimize.brentq(rising, lo, hi, xtol=1e-14) if rising(lo) > 0 > rising(hi) else float(SLOPE_GRID[k])
    e = np.exp(b * q)
    return float(b), float(np.log((gain @ e) / (e @ e)) - b * centre)


def seed_lines(lx: np.ndarray, gain: np.ndarray, who: np.ndarray) -> dict[int, tuple[float, float]]:
    """seed -> (slope, intercept) of the level fit through that seed's points (seeds with a positive curve)."""
    lines = {int(s): level_fit(lx[who == s], gain[who == s]) for s in np.unique(who)}
    return {s: line for s, line in lines.items() if line is not None}


def _observations(x, gains, seeds, labels, skip):
    """(ln x, gain, seed) of every per-seed point (sizes, then seeds), the [P, S] mask of the points taken, and
    every run left out with its reason."""
    taken = np.isfinite(gains) & (np.isfinite(x) & (x > 0))[:, None]  # [P, S]
    dropped = [DroppedPoint(labels[p], int(seeds[j]), float(gains[p, j]), why)
               for (p, j), why in sorted(skip.items()) if taken[p, j]]
    for p, j in skip:
        taken[p, j] = False
    size, seed = np.nonzero(taken)  # [N] each
    return np.log(x[size]), gains[size, seed], seeds[seed], taken, dropped


def _r2(lx: np.ndarray, y: np.ndarray, slope: float, intercept: float) -> float:
    ss_tot = ((y - y.mean()) ** 2).sum()
    return float(1.0 - ((y - np.exp(intercept + slope * lx)) ** 2).sum() / ss_tot) if ss_tot > 0 else float("nan")


def _per_point_ci(lx: np.ndarray, y: np.ndarray, level: float) -> tuple[float, float]:
    """The level fit of every point pooled, its slope's Gauss-Newton standard error with df = points - 2."""
    line = level_fit(lx, y) if len(lx) >= 3 else None
    if line is None:
        return float("nan"), float("nan")
    slope, intercept = line
    f = np.exp(intercept + slope * lx)
    jac = np.column_stack([f, f * lx])  # d f / d (intercept, slope)
    cov = ((y - f) ** 2).sum() / (len(lx) - 2) * np.linalg.inv(jac.T @ jac)
    half = stats.t.ppf(0.5 + level / 2, len(lx) - 2) * float(np.sqrt(cov[1, 1]))
    return slope - half, slope + half


def fit_power_law(
    x: np.ndarray, gains: np.ndarray, *, labels: list[str], seeds: np.ndarray | None = None, level: float = LEVEL,
    skip: dict[tuple[int, int], str] | None = None,
) -> tuple[PowerLawFit | None, list[int], str]:
    """Fit gain = e^a x^b per seed and average the seeds' (a, b). `x` [P] compute per size; `gains` [P, S], NaN where
    a seed is missing; `seeds` [S] (default 0..S-1); `skip`: (size, seed) index -> why the run is no data point.
    Returns (fit or None, indices of sizes with no point, note)."""
    x = np.asarray(x, dtype=np.float64)
    gains = np.asarray(gains, dtype=np.float64)
    seeds = np.arange(gains.shape[1]) if seeds is None else np.asarray(seeds)
    skip = skip or {}
    lx, ly, who, taken, dropped = _observations(x, gains, seeds, labels, skip)
    excluded = np.flatnonzero(~taken.any(axis=1)).tolist()
    used = np.unique(lx)
    if len(used) <= PARAMETERS:
        return None, excluded, f"not fitted: {PARAMETERS} parameters on {len(used)} size{'s' * (len(used) != 1)}"
    lines = seed_lines(lx, ly, who)
    if not lines:
        return None, excluded, f"{len(used)} size(s): no seed's gains fit a positive power law"
    slopes, intercepts = (np.array(v) for v in zip(*lines.values()))  # [S] each
    slope, slope_se, half = mean_t_interval(slopes, level)
    intercept, intercept_se, _ = mean_t_interval(intercepts, level)
    S = len(lines)
    notes = []
    seeds_without = sorted(set(map(int, seeds)) - set(lines))
    if seeds_without:
        notes.append(f"seed(s) {', '.join(map(str, seeds_without))}: no positive power law fits their gains (fewer "
                     "than 2 sizes, a best curve <= 0, or a slope the points do not determine): left out of the slope")
    if S < 2:
        notes.append(f"{S} seed with a line: no interval (needs 2)")
    grid = np.linspace(lx.min(), lx.max(), GRID)  # [G] ln x
    per_seed = intercepts[:, None] + slopes[:, None] * grid[None, :]  # [S, G]
    centre = per_seed.mean(axis=0)
    band_half = (stats.t.ppf(0.5 + level / 2, S - 1) * per_seed.std(axis=0, ddof=1) / np.sqrt(S)
                 if S >= 2 else np.full(GRID, np.nan))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean_gain = np.nanmean(np.where(taken, gains, np.nan), axis=1)  # [P] over the points taken
    ok = np.isfinite(mean_gain)
    fit = PowerLawFit(
        n_points=len(used), n_obs=len(lx), slope=slope, intercept=intercept, slope_se=slope_se,
        intercept_se=intercept_se, slope_ci=(slope - half, slope + half), df=S - 1,
        seed_slopes={k: v[0] for k, v in lines.items()}, seed_intercepts={k: v[1] for k, v in lines.items()},
        r2=_r2(lx, ly, slope, intercept), r2_means=_r2(np.log(x[ok]), mean_gain[ok], slope, intercept),
        slope_ci_per_point=_per_point_ci(lx, ly, level), band_x=np.exp(grid), band_lo=np.exp(centre - band_half),
        band_hi=np.exp(centre + band_half), obs_x=lx, dropped=dropped,
    )
    return fit, excluded, "; ".join(notes)
