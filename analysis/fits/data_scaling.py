"""Data as a compute axis: L(N, D) fitted on a sweep that varies `data.n_train`, its checks and the compute-optimal
frontier (docs/analysis.md, "Data as a compute axis")."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np
import pandas as pd
from scipy import optimize
from scipy.special import huber, logsumexp

from harness import runs_columns as C

from ..collect import SweepResults
from ..stats.paired import Estimate, SeedInterval, minimum_detectable_effect, seed_interval
from .axes import TRAINING_MULTIPLIER

#: The fit's name in analysis.json (`form`); an iterative fit (forms.py ITERATIVE_FORMS).
FORM = "loss surface L(N, D)"
#: Huber threshold on log-space residuals (Hoffmann et al. 2022, approach 3).
HUBER_DELTA = 1e-3
EXPONENT_BOUNDS = (1e-3, 4.0)
#: A fitted exponent within this relative distance of a bound counts as at the bound.
BOUND_SLACK = 1e-4
N_STARTS = 8
#: Training FLOPs per parameter per target in C = 6 N D.
FLOPS_PER_PARAM_TARGET = 6.0
_EXPONENT_GRID = (0.05, 0.15, 0.3, 0.5, 0.8, 1.2, 2.0)
_E_SHARES = (0.5, 0.8, 0.9, 0.97, 0.995)      # E as a share of the smallest observed loss
_AB_SHARES = (1e-3, 1e-2, 0.05, 0.2, 0.6)     # A (B) at the geometric-mean size, as a share of the mean loss
#: L-BFGS-B's projected-gradient tolerance; its relative-decrease rule is off (ftol=0): docs/reproducibility.md.
GTOL = 1e-12
#: E's floor as a share of the smallest loss: docs/analysis.md, "Data as a compute axis".
E_FLOOR = 1e-6
PARAMS = ("E", "A", "B", "alpha", "beta")


@dataclass(frozen=True)
class Surface:
    """A fitted L(N, D); N and D in their own units (parameters, targets)."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    identified: bool = True

    def predict(self, n: np.ndarray | float, d: np.ndarray | float) -> np.ndarray:
        n, d = np.asarray(n, dtype=np.float64), np.asarray(d, dtype=np.float64)
        return self.E + self.A * n ** -self.alpha + self.B * d ** -self.beta

    @property
    def n_exponent(self) -> float:
        """a in N*(C) ~ C^a: beta / (alpha + beta)."""
        return self.beta / (self.alpha + self.beta)

    def n_opt(self, c: np.ndarray | float) -> np.ndarray:
        """Compute-optimal N for training compute C = 6 N D."""
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))
        return g * (np.asarray(c, dtype=np.float64) / FLOPS_PER_PARAM_TARGET) ** self.n_exponent

    def d_opt(self, c: np.ndarray | float) -> np.ndarray:
        """Compute-optimal D for C = 6 N D (= C / (6 N*(C)))."""
        c = np.asarray(c, dtype=np.float64)
        return c / (FLOPS_PER_PARAM_TARGET * self.n_opt(c))

    def params(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in PARAMS}


def _objective(theta: np.ndarray, ln_n: np.ndarray, ln_d: np.ndarray, ln_l: np.ndarray) -> tuple[float, np.ndarray]:
    """Huber loss of log residuals and its gradient in theta = (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * ln_n, b - beta * ln_d, np.full_like(ln_n, e)])
    lse = logsumexp(terms, axis=0)
    r = lse - ln_l
    dr = np.clip(r, -HUBER_DELTA, HUBER_DELTA)  # d huber / d r
    w = np.exp(terms - lse)  # softmax weights: d lse / d term
    grad = np.array([np.sum(dr * w[0]), np.sum(dr * w[1]), np.sum(dr * w[2]),
                     np.sum(dr * w[0] * -ln_n), np.sum(dr * w[1] * -ln_d)])
    return float(huber(HUBER_DELTA, r).sum()), grad


def _grid_starts(ln_n: np.ndarray, ln_d: np.ndarray, ln_l: np.ndarray) -> np.ndarray:
    """The N_STARTS grid points with the lowest objective, as rows (a, b, e, alpha, beta)."""
    low, mean = float(np.exp(ln_l.min())), float(np.exp(ln_l).mean())
    grid = np.array(list(itertools.product(
        np.log(np.array(_AB_SHARES) * mean), np.log(np.array(_AB_SHARES) * mean), np.log(np.array(_E_SHARES) * low),
        _EXPONENT_GRID, _EXPONENT_GRID)))
    a, b, e, alpha, beta = (grid[:, i:i + 1] for i in range(5))
    lse = np.logaddexp(np.logaddexp(a - alpha * ln_n, b - beta * ln_d), e)
    cost = huber(HUBER_DELTA, lse - ln_l).sum(axis=1)
    return grid[np.argsort(cost, kind="stable")[:N_STARTS]]


def fit_surface(n: np.ndarray, d: np.ndarray, loss: np.ndarray) -> Surface | None:
    """Fit L(N, D) to every point (N_i, D_i, L_i); None with fewer than 2 distinct N or D or < 6 points."""
    n, d, loss = (np.asarray(v, dtype=np.float64) for v in (n, d, loss))
    if len(loss) < 6 or len(np.unique(n)) < 2 or len(np.unique(d)) < 2:
        return None
    n0, d0 = float(np.exp(np.log(n).mean())), float(np.exp(np.log(d).mean()))
    ln_n, ln_d, ln_l = np.log(n / n0), np.log(d / d0), np.log(loss)
    bounds = [(None, None)] * 2 + [(float(ln_l.min()) + np.log(E_FLOOR), None)] + [EXPONENT_BOUNDS] * 2
    best = min((optimize.minimize(_objective, start, args=(ln_n, ln_d, ln_l), jac=True, method="L-BFGS-B",
                                  bounds=bounds, options={"ftol": 0.0, "gtol": GTOL, "maxiter": 20000})
                for start in _grid_starts(ln_n, ln_d, ln_l)), key=lambda res: res.fun)  # the first of the lowest
    a, b, e, alpha, beta = (float(v) for v in best.x)
    lo, hi = EXPONENT_BOUNDS
    inside = all(lo * (1 + BOUND_SLACK) < x < hi * (1 - BOUND_SLACK) for x in (alpha, beta))
    return Surface(E=float(np.exp(e)), A=float(np.exp(a) * n0 ** alpha), B=float(np.exp(b) * d0 ** beta),
                   alpha=alpha, beta=beta, identified=inside)


#: The frontier is drawn from FRONTIER_REACH times below the smallest to FRONTIER_REACH times above the
#: largest measured compute 6 N D; beyond the measured range it is an extrapolation (the report says so).
FRONTIER_REACH = 10.0
FRONTIER_POINTS = 25
#: Where a seed resample whose fit is not determined counts (docs/analysis.md, "Data as a compute axis", Intervals).
UNDETERMINED = 1e30


@dataclass(frozen=True)
class HeldOut:
    left_out: str  # "largest D" or "largest N"
    n: float
    d: float
    observed: float  # seed-mean loss of the cell
    predicted: float
    se: float  # seed SE of the observed mean

    @property
    def error(self) -> float:
        return self.predicted - self.observed


@dataclass
class DataScaling:
    metric: str
    split: str
    points: pd.DataFrame  # n, d, loss, seed, run (one row per run used)
    dropped: list[str]
    surface: Surface | None
    intervals: dict[str, Estimate] = field(default_factory=dict)
    frontier: pd.DataFrame = field(default_factory=pd.DataFrame)  # c, n_opt (+lo/hi), d_opt (+lo/hi), loss_opt
    measured_c: tuple[float, float] = (float("nan"), float("nan"))
    held_out: list[HeldOut] = field(default_factory=list)
    counted_ratio: dict[float, float] = field(default_factory=dict)  # N -> counted training FLOPs / 6 N D
    seed_sd: float = float("nan")  # median seed SD of the paired neighbouring-D differences
    detectable: float = float("nan")  # smallest detectable such difference
    n_seeds: int = 0
    level: float = 0.05  # of the detectable-effect test
    power: float = 0.8
    notes: list[str] = field(default_factory=list)


def surface_points(runs: pd.DataFrame, loss_column: str) -> tuple[pd.DataFrame, list[str]]:
    """(one row per usable run: n, d, loss, seed, run; and a reason for each run left out)."""
    d_col = C.TRAIN_TARGETS if C.TRAIN_TARGETS in runs.columns else C.N_TRAIN
    frame = pd.DataFrame({
        "n": pd.to_numeric(runs.get(C.PARAMS_NON_EMBEDDING), errors="coerce"),
        "d": pd.to_numeric(runs[d_col], errors="coerce"),
        "loss": pd.to_numeric(runs.get(loss_column), errors="coerce"),
        C.SEED: runs[C.SEED],
        "run": runs[C.TRIAL_ID] if C.TRIAL_ID in runs.columns else runs.index.astype(str),
    })
    good = frame[["n", "d", "loss"]].gt(0) & np.isfinite(frame[["n", "d", "loss"]])
    dropped = [f"{run}: no positive finite {', '.join(good.columns[~ok])} (left out of the L(N, D) fit)"
               for run, ok in zip(frame["run"], good.to_numpy()) if not ok.all()]
    return frame[good.all(axis=1)].reset_index(drop=True), dropped


class _SeedFits:
    """The fit on every seed resample, computed once per distinct multiset of seeds."""

    def __init__(self, points: pd.DataFrame):
        self.points = points
        self.seeds = np.array(sorted(points[C.SEED].unique()))
        self._cache: dict[tuple[int, ...], Surface | None] = {}

    def __call__(self, idx: np.ndarray) -> Surface | None:
        key = tuple(int(i) for i in np.sort(idx))
        if key not in self._cache:
            p = pd.concat([self.points[self.points[C.SEED] == self.seeds[i]] for i in key])
            self._cache[key] = fit_surface(p["n"].to_numpy(), p["d"].to_numpy(), p["loss"].to_numpy())
        return self._cache[key]

    def interval(self, value_of) -> SeedInterval:
        def statistic(idx: np.ndarray) -> float:
            s = self(idx)
            return float("nan") if s is None or not s.identified else float(value_of(s))
        return seed_interval(len(self.seeds), statistic, clip=(-UNDETERMINED, UNDETERMINED))


def _held_out(points: pd.DataFrame) -> list[HeldOut]:
    """Refit without the largest D, then without the largest N; predict the left-out cells' seed means."""
    out = []
    cells = points.groupby(["n", "d"])["loss"].agg(["mean", "std", "count"]).reset_index()
    for label, col in (("largest D", "d"), ("largest N", "n")):
        top = points[col].max()
        fit = fit_surface(*(points.loc[points[col] < top, k].to_numpy() for k in ("n", "d", "loss")))
        if fit is None:
            continue
        for _, c in cells[cells[col] == top].iterrows():
            out.append(HeldOut(label, float(c["n"]), float(c["d"]), float(c["mean"]),
                               float(fit.predict(c["n"], c["d"])), float(c["std"] / np.sqrt(c["count"]))))
    return out


def _detectable(points: pd.DataFrame, alpha: float, power: float) -> tuple[float, float]:
    """(seed SD, detectable difference): the "Detectable effect" check (docs/analysis.md, *Data as a compute axis*)."""
    wide = points.pivot_table(index=["n", C.SEED], columns="d", values="loss")
    sds, n_seeds = [], points[C.SEED].nunique()
    for _, block in wide.groupby(level="n"):
        ds = sorted(block.columns)
        for lo, hi in zip(ds, ds[1:]):
            diff = (block[lo] - block[hi]).dropna()
            if len(diff) >= 2:
                sds.append(float(diff.std(ddof=1)))
    if not sds:
        return float("nan"), float("nan")
    sd = float(np.median(sds))
    return sd, minimum_detectable_effect(sd, n_seeds, alpha=alpha, power=power)


def _counted_ratio(runs: pd.DataFrame) -> dict[float, float]:
    """Per N: the project's counted training FLOPs per target (3 x forward, analysis/fits/axes.py) over 6 N."""
    if C.FLOPS_PER_TARGET not in runs.columns or C.PARAMS_NON_EMBEDDING not in runs.columns:
        return {}
    frame = runs[[C.PARAMS_NON_EMBEDDING, C.FLOPS_PER_TARGET]].dropna()
    ratio = TRAINING_MULTIPLIER * frame[C.FLOPS_PER_TARGET] / (FLOPS_PER_PARAM_TARGET * frame[C.PARAMS_NON_EMBEDDING])
    return {float(n): float(r) for n, r in ratio.groupby(frame[C.PARAMS_NON_EMBEDDING]).median().items()}


def _frontier(fits: _SeedFits, surface: Surface, points: pd.DataFrame, c_lo: float, c_hi: float) -> pd.DataFrame:
    """N*(C), D*(C) with seed-bootstrap bands; `measured`: both lie within the measured N and D ranges."""
    rows = []
    n_range, d_range = (points["n"].min(), points["n"].max()), (points["d"].min(), points["d"].max())
    for c in np.geomspace(c_lo / FRONTIER_REACH, c_hi * FRONTIER_REACH, FRONTIER_POINTS):
        n_iv = fits.interval(lambda s, c=c: s.n_opt(c))
        d_iv = fits.interval(lambda s, c=c: s.d_opt(c))
        n, d = float(surface.n_opt(c)), float(surface.d_opt(c))
        rows.append({"c": float(c), "n_opt": n, "n_lo": n_iv.lo, "n_hi": n_iv.hi, "d_opt": d,
                     "d_lo": d_iv.lo, "d_hi": d_iv.hi, "loss_opt": float(surface.predict(n, d)),
                     "measured": bool(n_range[0] <= n <= n_range[1] and d_range[0] <= d <= d_range[1])})
    return pd.DataFrame(rows)


def data_scaling_analysis(results: SweepResults) -> DataScaling | None:
    """The L(N, D) fit, its intervals, frontier and checks; None unless the sweep varies data.n_train."""
    runs = results.runs
    if C.N_TRAIN not in runs.columns or runs[C.N_TRAIN].nunique(dropna=True) <= 1:
        return None
    cfg = results.config.data_scaling
    loss_column = f"{cfg.split}_{cfg.metric}"
    points, dropped = surface_points(runs, loss_column)
    out = DataScaling(cfg.metric, cfg.split, points, dropped, None, n_seeds=int(points[C.SEED].nunique()),
                      level=results.config.alpha, power=results.config.power)
    out.counted_ratio = _counted_ratio(runs)
    out.surface = fit_surface(points["n"].to_numpy(), points["d"].to_numpy(), points["loss"].to_numpy())
    if out.surface is None:
        out.notes.append("fewer than 2 model sizes or 2 data sizes with usable runs: no L(N, D) fit")
        return out
    out.seed_sd, out.detectable = _detectable(points, results.config.alpha, results.config.power)
    out.held_out = _held_out(points)
    if not out.surface.identified:
        out.notes.append("an exponent of the fit ends at its bound: the surface predicts, but its parameters and "
                         "the frontier are not determined by these sizes")
        return out
    fits = _SeedFits(points)
    share = 0.0
    for name in (*PARAMS, "n_exponent"):
        get = attrgetter(name)
        iv = fits.interval(get)
        out.intervals[name] = Estimate(float(get(out.surface)), iv.lo, iv.hi)
        share = max(share, iv.undefined_share)
    if share > 0:
        out.notes.append(f"in {share:.0%} of the seed resamples an exponent ended at its bound: those draws count "
                         "at the upper end of every interval")
    c = FLOPS_PER_PARAM_TARGET * points["n"] * points["d"]
    out.measured_c = (float(c.min()), float(c.max()))
    out.frontier = _frontier(fits, out.surface, points, *out.measured_c)
    return out
