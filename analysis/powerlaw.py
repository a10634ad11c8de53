"""Power-law fit of a gain against compute, on per-seed points, with an interval that says what it is.

Model: ln(gain) = intercept + slope * ln(x), natural logarithms. Every seed's gain at every size is its own
observation (ln x, ln gain), and the line is the ordinary least-squares fit through all of them
(scipy.stats.linregress). The slope's interval is the t interval of that regression,
slope +- t(0.975, n - 2) * SE, with n the number of per-seed points: it carries the seed-to-seed scatter and
any lack of fit of the line, unlike a percentile bootstrap over 3 seeds, which has only 10 distinct
resamples. The plotted band is the t confidence band of the fitted mean line. Each seed's own slope (its
sizes alone) is kept as a diagnostic of how much the slope moves between seeds.

A size whose seed-mean gain is <= 0 has no logarithm: it is listed and left out with all its seeds. A single
seed whose gain is <= 0 at a size with a positive mean is left out and listed too (keeping its other seeds
makes that size look a little better than it is; the report says so). The held-out check refits without the
largest-compute size and predicts its seed-mean gain.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

CI_METHOD = ("t interval of the OLS slope on per-seed points (each seed's gain at each size is one point, "
             "df = n - 2)")
BAND_METHOD = "t confidence band of the fitted mean line"
LEVEL = 0.95
GRID = 60  # points of the plotted band


@dataclass
class HeldOut:
    label: str
    x: float
    observed: float  # seed-mean gain of the held-out size
    predicted: float  # from the fit without it

    @property
    def log_error(self) -> float:
        """ln(predicted / observed): 0 is perfect, 0.1 is about 10% too high; NaN when observed <= 0."""
        return float(np.log(self.predicted / self.observed)) if self.observed > 0 else float("nan")


@dataclass
class PowerLawFit:
    n_points: int  # sizes in the fit
    n_obs: int  # per-seed points in the fit
    slope: float
    intercept: float
    r2: float  # of the per-seed points
    r2_means: float  # of the seed-mean points against the same line
    slope_se: float
    intercept_se: float
    slope_ci: tuple[float, float]
    df: int
    resid_sd: float  # residual standard deviation of ln(gain)
    x_mean: float  # mean ln x of the observations
    sxx: float  # sum of squared deviations of ln x
    band_x: np.ndarray  # [G] x grid over the fitted sizes
    band_lo: np.ndarray  # [G] lower edge of the band (gain)
    band_hi: np.ndarray  # [G]
    held_out: HeldOut | None
    obs_x: np.ndarray  # [N] ln x of each per-seed point
    obs_y: np.ndarray  # [N] ln gain
    seed_slopes: dict[int, float] = field(default_factory=dict)  # seed -> slope of that seed's sizes alone
    dropped: list[tuple[str, int, float]] = field(default_factory=list)  # (size label, seed, gain <= 0)
    ci_method: str = CI_METHOD
    band_method: str = BAND_METHOD

    def predict(self, x: np.ndarray | float) -> np.ndarray:
        return np.exp(self.intercept + self.slope * np.log(x))

    @property
    def x_range(self) -> tuple[float, float]:
        return float(np.exp(self.obs_x.min())), float(np.exp(self.obs_x.max()))


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    xm, ym = x.mean(), y.mean()
    slope = ((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum()
    return float(slope), float(ym - slope * xm)


def _observations(x: np.ndarray, gains: np.ndarray, points: np.ndarray, seeds: np.ndarray, labels: list[str]):
    """(ln x, ln gain, seed) of every positive per-seed gain of `points`, and the dropped ones."""
    lx, ly, who, dropped = [], [], [], []
    for p in points:
        for j, g in enumerate(gains[p]):
            if not np.isfinite(g):
                continue
            if g > 0:
                lx.append(np.log(x[p]))
                ly.append(np.log(g))
                who.append(seeds[j])
            else:
                dropped.append((labels[p], int(seeds[j]), float(g)))
    return np.array(lx), np.array(ly), np.array(who), dropped


def fit_power_law(
    x: np.ndarray, gains: np.ndarray, *, labels: list[str], seeds: np.ndarray | None = None, level: float = LEVEL
) -> tuple[PowerLawFit | None, list[int], str]:
    """Fit ln(gain) = a + b ln(x) on per-seed points of the sizes with a positive seed-mean gain.

    `x` [P] compute per size (any positive unit); `gains` [P, S] per seed, NaN where a seed is missing;
    `seeds` [S] their names (default 0..S-1). Returns (fit or None, indices of excluded sizes, note).
    """
    x = np.asarray(x, dtype=np.float64)
    gains = np.asarray(gains, dtype=np.float64)
    seeds = np.arange(gains.shape[1]) if seeds is None else np.asarray(seeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a size without any seed
        mean_gain = np.nanmean(gains, axis=1)  # [P]
    usable = np.isfinite(mean_gain) & (mean_gain > 0) & np.isfinite(x) & (x > 0)  # [P]
    excluded = np.flatnonzero(~usable).tolist()
    lx, ly, who, dropped = _observations(x, gains, np.flatnonzero(usable), seeds, labels)
    if len(np.unique(lx)) < 2:
        return None, excluded, f"{int(usable.sum())} size(s) with a positive gain at distinct compute: nothing to fit"
    n = len(lx)
    reg = stats.linregress(lx, ly)
    df = n - 2
    x_mean, sxx = float(lx.mean()), float(((lx - lx.mean()) ** 2).sum())
    resid = ly - (reg.intercept + reg.slope * lx)
    nan = float("nan")
    resid_sd = float(np.sqrt((resid**2).sum() / df)) if df > 0 else nan
    t = float(stats.t.ppf(0.5 + level / 2, df)) if df > 0 else nan
    slope_ci = (float(reg.slope - t * reg.stderr), float(reg.slope + t * reg.stderr)) if df > 0 else (nan, nan)
    grid = np.linspace(lx.min(), lx.max(), GRID)  # [G] ln x
    centre = reg.intercept + reg.slope * grid  # [G]
    half = t * resid_sd * np.sqrt(1.0 / n + (grid - x_mean) ** 2 / sxx) if df > 0 else np.full(GRID, nan)
    means = np.log(mean_gain[usable])
    fitted_means = reg.intercept + reg.slope * np.log(x[usable])
    ss_tot = ((means - means.mean()) ** 2).sum()
    r2_means = float(1.0 - ((means - fitted_means) ** 2).sum() / ss_tot) if ss_tot > 0 else nan
    notes = []
    if usable.sum() == 2:
        notes.append("2 sizes: the line has no lack-of-fit check")
    if df <= 0:
        notes.append(f"{n} per-seed points: no interval (needs 3)")
    fit = PowerLawFit(
        n_points=int(usable.sum()), n_obs=n, slope=float(reg.slope), intercept=float(reg.intercept),
        r2=float(reg.rvalue**2), r2_means=r2_means, slope_se=float(reg.stderr),
        intercept_se=float(reg.intercept_stderr), slope_ci=slope_ci, df=df, resid_sd=resid_sd, x_mean=x_mean,
        sxx=sxx, band_x=np.exp(grid), band_lo=np.exp(centre - half), band_hi=np.exp(centre + half),
        held_out=_held_out(x, gains, mean_gain, seeds, labels), obs_x=lx, obs_y=ly,
        seed_slopes=_seed_slopes(lx, ly, who), dropped=dropped,
    )
    return fit, excluded, "; ".join(notes)


def _seed_slopes(lx: np.ndarray, ly: np.ndarray, who: np.ndarray) -> dict[int, float]:
    out = {}
    for s in np.unique(who):
        mine = who == s
        if len(np.unique(lx[mine])) >= 2:
            out[int(s)] = _ols(lx[mine], ly[mine])[0]
    return out


def _held_out(x: np.ndarray, gains: np.ndarray, mean_gain: np.ndarray, seeds: np.ndarray,
              labels: list[str]) -> HeldOut | None:
    """Refit without the largest-compute size (needs 2 other positive sizes) and predict its mean gain."""
    finite = np.flatnonzero(np.isfinite(mean_gain) & np.isfinite(x) & (x > 0))
    if len(finite) < 3:
        return None
    top = finite[np.argmax(x[finite])]
    rest = np.array([i for i in finite if i != top and mean_gain[i] > 0])
    if len(rest) < 2 or len(np.unique(x[rest])) < 2:
        return None
    lx, ly, _, _ = _observations(x, gains, rest, seeds, labels)
    slope, intercept = _ols(lx, ly)
    predicted = float(np.exp(intercept + slope * np.log(x[top])))
    return HeldOut(labels[top], float(x[top]), float(mean_gain[top]), predicted)
