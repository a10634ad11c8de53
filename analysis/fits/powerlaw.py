"""Power-law fit of a gain against compute with the seed as the unit of replication.

ln(gain) = intercept + slope * ln(x), natural logarithms; each seed fitted alone, the family's line the mean of
the per-seed lines, t interval with df = seeds - 1. The pooled per-point interval is kept only as
`slope_ci_per_point` (pseudo-replicated, never decided on). docs/analysis.md, *Scaling fits*.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

CI_METHOD = ("mean of per-seed slopes (each seed's sizes fitted alone), t interval with df = seeds - 1: the seed "
             "is the unit of replication")
PER_POINT_METHOD = ("pseudo-replicated: OLS on every per-seed point as if independent (df = points - 2); shown "
                    "for comparison only")
BAND_METHOD = "t interval (df = seeds - 1) of the mean per-seed line at each x"
LEVEL = 0.95
GRID = 60  # points of the plotted band
MIN_SIZES_FOR_R2 = 3
NO_LOG = "gain <= 0: no logarithm"


@dataclass(frozen=True)
class DroppedPoint:
    label: str  # the size's label
    seed: int
    gain: float
    reason: str


@dataclass
class PowerLawFit:
    n_points: int  # sizes with at least one positive per-seed gain
    n_obs: int  # per-seed points in the fit
    slope: float  # mean of the per-seed slopes
    intercept: float  # mean of the per-seed intercepts
    slope_se: float  # sd of per-seed slopes / sqrt(S)
    intercept_se: float
    slope_ci: tuple[float, float]  # t interval, df = S - 1
    df: int  # S - 1
    seed_slopes: dict[int, float]  # seed -> its own slope
    seed_intercepts: dict[int, float]
    r2: float  # of the per-seed points against the mean line; NaN with < 3 sizes
    r2_means: float  # of the seed-mean ln gains against the mean line; NaN with < 3 sizes
    slope_ci_per_point: tuple[float, float]  # pseudo-replicated interval, for comparison only
    band_x: np.ndarray  # [G] x grid over the fitted sizes
    band_lo: np.ndarray  # [G] lower edge of the band (gain)
    band_hi: np.ndarray  # [G]
    obs_x: np.ndarray  # [N] ln x of each per-seed point
    obs_y: np.ndarray  # [N] ln gain
    obs_seed: np.ndarray  # [N] its seed
    dropped: list[DroppedPoint] = field(default_factory=list)
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


def seed_lines(lx: np.ndarray, ly: np.ndarray, who: np.ndarray) -> dict[int, tuple[float, float]]:
    """seed -> (slope, intercept) of the OLS line through that seed's points (seeds with >= 2 distinct x)."""
    out = {}
    for s in np.unique(who):
        mine = who == s
        if len(np.unique(lx[mine])) >= 2:
            fit = stats.linregress(lx[mine], ly[mine])
            out[int(s)] = (float(fit.slope), float(fit.intercept))
    return out


def mean_t_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """(mean, standard error, t half-width with df = n - 1) of replicate values; NaN where n < 2."""
    values = np.asarray(values, dtype=np.float64)
    n, nan = len(values), float("nan")
    if n < 2:
        return (float(values.mean()) if n else nan), nan, nan
    se = float(values.std(ddof=1) / np.sqrt(n))
    return float(values.mean()), se, float(stats.t.ppf(0.5 + level / 2, n - 1) * se)


def _observations(x, gains, seeds, labels, skip):
    """(ln x, ln gain, seed) of every positive per-seed gain, and every point left out with its reason."""
    lx, ly, who, dropped = [], [], [], []
    for p in range(len(x)):
        for j, g in enumerate(gains[p]):
            if not np.isfinite(g) or not (np.isfinite(x[p]) and x[p] > 0):
                continue
            if (p, j) in skip or g <= 0:
                dropped.append(DroppedPoint(labels[p], int(seeds[j]), float(g), skip.get((p, j), NO_LOG)))
                continue
            lx.append(np.log(x[p]))
            ly.append(np.log(g))
            who.append(seeds[j])
    return np.array(lx), np.array(ly), np.array(who), dropped


def _r2(lx: np.ndarray, ly: np.ndarray, slope: float, intercept: float) -> float:
    ss_tot = ((ly - ly.mean()) ** 2).sum()
    return float(1.0 - ((ly - intercept - slope * lx) ** 2).sum() / ss_tot) if ss_tot > 0 else float("nan")


def _per_point_ci(lx: np.ndarray, ly: np.ndarray, level: float) -> tuple[float, float]:
    if len(lx) < 3 or len(np.unique(lx)) < 2:
        return float("nan"), float("nan")
    reg = stats.linregress(lx, ly)
    t = stats.t.ppf(0.5 + level / 2, len(lx) - 2)
    return float(reg.slope - t * reg.stderr), float(reg.slope + t * reg.stderr)


def fit_power_law(
    x: np.ndarray, gains: np.ndarray, *, labels: list[str], seeds: np.ndarray | None = None, level: float = LEVEL,
    skip: dict[tuple[int, int], str] | None = None,
) -> tuple[PowerLawFit | None, list[int], str]:
    """Fit ln(gain) = a + b ln(x) per seed and average the seeds' lines.

    `x` [P] compute per size (any positive unit); `gains` [P, S] per seed, NaN where a seed is missing;
    `seeds` [S] their names (default 0..S-1); `skip` maps (size index, seed index) of runs that are not data
    points (e.g. did not learn) to the reason. Returns (fit or None, indices of sizes
    with no usable seed, note).
    """
    x = np.asarray(x, dtype=np.float64)
    gains = np.asarray(gains, dtype=np.float64)
    seeds = np.arange(gains.shape[1]) if seeds is None else np.asarray(seeds)
    skip = skip or {}
    lx, ly, who, dropped = _observations(x, gains, seeds, labels, skip)
    taken = np.array([[g > 0 and (p, j) not in skip for j, g in enumerate(row)] for p, row in enumerate(gains)])
    usable = np.isfinite(x) & (x > 0) & taken.any(axis=1)  # [P]
    excluded = np.flatnonzero(~usable).tolist()
    used = np.unique(lx)
    lines = seed_lines(lx, ly, who) if len(lx) else {}
    if not lines:
        return None, excluded, f"{len(used)} size(s) with a positive gain: no seed has a line to fit"
    slopes = np.array([v[0] for v in lines.values()])  # [S]
    intercepts = np.array([v[1] for v in lines.values()])  # [S]
    slope, slope_se, half = mean_t_interval(slopes, level)
    intercept, intercept_se, _ = mean_t_interval(intercepts, level)
    S = len(lines)
    notes = []
    seeds_without = sorted(set(map(int, seeds)) - set(lines))
    if seeds_without:
        notes.append(f"seed(s) {', '.join(map(str, seeds_without))} have fewer than 2 sizes with a positive gain: "
                     "no line of their own, left out of the slope")
    if len(used) == 2:
        notes.append("2 sizes: the line has no lack-of-fit check and no R²")
    if S < 2:
        notes.append(f"{S} seed with a line: no interval (needs 2)")
    grid = np.linspace(lx.min(), lx.max(), GRID)  # [G] ln x
    per_seed = intercepts[:, None] + slopes[:, None] * grid[None, :]  # [S, G]
    centre = per_seed.mean(axis=0)
    band_half = (stats.t.ppf(0.5 + level / 2, S - 1) * per_seed.std(axis=0, ddof=1) / np.sqrt(S)
                 if S >= 2 else np.full(GRID, np.nan))
    enough = len(used) >= MIN_SIZES_FOR_R2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean_gain = np.nanmean(np.where(taken, gains, np.nan), axis=1)  # [P] over the points taken
    ok = np.isfinite(mean_gain) & (mean_gain > 0) & np.isfinite(x) & (x > 0)
    lm, ym = np.log(x[ok]), np.log(mean_gain[ok])
    fit = PowerLawFit(
        n_points=len(used), n_obs=len(lx), slope=slope, intercept=intercept, slope_se=slope_se,
        intercept_se=intercept_se, slope_ci=(slope - half, slope + half), df=S - 1,
        seed_slopes={k: v[0] for k, v in lines.items()}, seed_intercepts={k: v[1] for k, v in lines.items()},
        r2=_r2(lx, ly, slope, intercept) if enough else float("nan"),
        r2_means=_r2(lm, ym, slope, intercept) if enough else float("nan"),
        slope_ci_per_point=_per_point_ci(lx, ly, level), band_x=np.exp(grid), band_lo=np.exp(centre - band_half),
        band_hi=np.exp(centre + band_half), obs_x=lx, obs_y=ly, obs_seed=who, dropped=dropped,
    )
    return fit, excluded, "; ".join(notes)
