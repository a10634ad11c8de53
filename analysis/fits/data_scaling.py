"""Data as a compute axis: the L(N, D) fit of a sweep that varies `data.n_train`, and its compute-optimal frontier.

Only a sweep whose runs.parquet has a `data.n_train` column with more than one value gets this section
(`data_scaling_analysis` returns None otherwise, so other analyses are unchanged).

Points: every run is one point (N, D, L): N = non-embedding parameters (`params_non_embedding`), D = the
training targets the run saw (`train_targets`, else its `data.n_train`), L = the configured loss
(`analysis.data_scaling`: validation LogLoss by default). A run without a positive finite N, D or L is listed
with its reason, never dropped silently.

Method:
- the surface E + A/N^alpha + B/D^beta is fitted to every point (analysis/fits/surface.py: Huber loss of
  log residuals, grid of starts, L-BFGS-B);
- intervals: seed bootstrap (analysis/stats/bootstrap.py): seeds are drawn with replacement, every point of a
  drawn seed comes along, the whole fit is redone; intervals for E, A, B, alpha, beta, the exponent
  beta/(alpha+beta) of N*(C), and N*(C), D*(C) at each compute of the frontier grid;
- compute-optimal frontier for C = 6 N D (analysis/fits/surface.py states the convention); the report also
  gives, per model size, the project's counted training FLOPs (3 x forward FLOPs per target x D,
  analysis/fits/axes.py) over 6 N D, so a reader can move the frontier onto that axis;
- form check on held-out sizes: refit without the largest D (and, separately, without the largest N) and
  predict the seed-mean loss of every left-out cell; errors are set against the seed standard error of that
  cell's mean;
- detectable effect: the smallest loss difference between two neighbouring training-set sizes (same N) that a
  paired t-test over the seeds detects at the configured power (analysis/stats/paired.py), from the median
  seed SD of those paired differences.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

import numpy as np
import pandas as pd

from harness import runs_columns as C

from ..collect import PARAMS_COLUMN, SweepResults
from ..stats.bootstrap import METHOD as BOOTSTRAP_METHOD
from ..stats.bootstrap import SeedInterval, seed_interval
from ..stats.paired import minimum_detectable_effect
from .family_comparison import Estimate
from .surface import FLOPS_PER_PARAM_TARGET, HUBER_DELTA, Surface, fit_surface
from .surface import FORM as LOSS_SURFACE_FORM

N_TRAIN_COLUMN = "data.n_train"
TARGETS_COLUMN = "train_targets"
FORWARD_FLOPS_COLUMN = C.FLOPS_PER_TARGET
PARAMS = ("E", "A", "B", "alpha", "beta")
#: The frontier is drawn from FRONTIER_REACH times below the smallest to FRONTIER_REACH times above the
#: largest measured compute 6 N D; beyond the measured range it is an extrapolation (the report says so).
FRONTIER_REACH = 10.0
FRONTIER_POINTS = 25
#: A seed resample whose fit is not determined (an exponent at its bound) counts at this value, the upper end
#: of every interval (analysis/stats/bootstrap.py); the report prints an end this large as "undetermined".
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

    @property
    def loss_column(self) -> str:
        return f"{self.split}_{self.metric}"


def varies_n_train(runs: pd.DataFrame) -> bool:
    return N_TRAIN_COLUMN in runs.columns and runs[N_TRAIN_COLUMN].nunique(dropna=True) > 1


def surface_points(runs: pd.DataFrame, loss_column: str) -> tuple[pd.DataFrame, list[str]]:
    """(one row per usable run: n, d, loss, seed, run; and a reason for each run left out)."""
    d_col = TARGETS_COLUMN if TARGETS_COLUMN in runs.columns else N_TRAIN_COLUMN
    frame = pd.DataFrame({
        "n": pd.to_numeric(runs.get(PARAMS_COLUMN), errors="coerce"),
        "d": pd.to_numeric(runs[d_col], errors="coerce"),
        "loss": pd.to_numeric(runs.get(loss_column), errors="coerce"),
        "seed": runs["seed"],
        "run": runs["trial_id"] if "trial_id" in runs.columns else runs.index.astype(str),
    })
    dropped = []
    for _, row in frame.iterrows():
        bad = [k for k in ("n", "d", "loss") if not (np.isfinite(row[k]) and row[k] > 0)]
        if bad:
            dropped.append(f"{row['run']}: no positive finite {', '.join(bad)} (left out of the L(N, D) fit)")
    ok = frame[["n", "d", "loss"]].gt(0).all(axis=1) & np.isfinite(frame[["n", "d", "loss"]]).all(axis=1)
    return frame[ok].reset_index(drop=True), dropped


class _SeedFits:
    """The fit on every seed resample, computed once per distinct multiset of seeds."""

    def __init__(self, points: pd.DataFrame):
        self.points = points
        self.seeds = np.array(sorted(points["seed"].unique()))
        self._cache: dict[tuple[int, ...], Surface | None] = {}

    def __call__(self, idx: np.ndarray) -> Surface | None:
        key = tuple(int(i) for i in np.sort(idx))
        if key not in self._cache:
            parts = [self.points[self.points["seed"] == self.seeds[i]] for i in key]
            p = pd.concat(parts)
            self._cache[key] = fit_surface(p["n"].to_numpy(), p["d"].to_numpy(), p["loss"].to_numpy())
        return self._cache[key]

    def interval(self, value_of) -> SeedInterval:
        def statistic(idx: np.ndarray) -> float:
            s = self(idx)
            return float("nan") if s is None or not s.identified else float(value_of(s))
        return seed_interval(len(self.seeds), statistic, clip=(-UNDETERMINED, UNDETERMINED))


def _cell_means(points: pd.DataFrame) -> pd.DataFrame:
    return points.groupby(["n", "d"])["loss"].agg(["mean", "std", "count"]).reset_index()


def _held_out(points: pd.DataFrame) -> list[HeldOut]:
    """Refit without the largest D, then without the largest N; predict the left-out cells' seed means."""
    out = []
    cells = _cell_means(points)
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
    """(median seed SD of the paired loss differences between neighbouring D at the same N, the smallest such
    difference a paired t-test over the seeds detects)."""
    wide = points.pivot_table(index=["n", "seed"], columns="d", values="loss")
    sds, n_seeds = [], points["seed"].nunique()
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
    if FORWARD_FLOPS_COLUMN not in runs.columns or PARAMS_COLUMN not in runs.columns:
        return {}
    from .axes import TRAINING_MULTIPLIER

    frame = runs[[PARAMS_COLUMN, FORWARD_FLOPS_COLUMN]].dropna()
    ratio = TRAINING_MULTIPLIER * frame[FORWARD_FLOPS_COLUMN] / (FLOPS_PER_PARAM_TARGET * frame[PARAMS_COLUMN])
    return {float(n): float(r) for n, r in ratio.groupby(frame[PARAMS_COLUMN]).median().items()}


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
    if not varies_n_train(runs):
        return None
    cfg = results.config.data_scaling
    loss_column = f"{cfg.split}_{cfg.metric}"
    points, dropped = surface_points(runs, loss_column)
    out = DataScaling(cfg.metric, cfg.split, points, dropped, None, n_seeds=int(points["seed"].nunique()),
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
    getters = {**{k: attrgetter(k) for k in PARAMS}, "n_exponent": attrgetter("n_exponent")}
    share = 0.0
    for name, get in getters.items():
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


def data_scaling_json(ds: DataScaling | None) -> dict[str, Any] | None:
    if ds is None:
        return None
    s = ds.surface
    return {
        "form": LOSS_SURFACE_FORM, "metric": ds.metric, "split": ds.split, "n_points": len(ds.points),
            "n_seeds": ds.n_seeds,
        "dropped": ds.dropped, "notes": ds.notes,
        "method": {"fit": f"Huber (delta {HUBER_DELTA:g}) on log residuals, grid of starts, L-BFGS-B",
                   "intervals": BOOTSTRAP_METHOD, "compute": f"C = {FLOPS_PER_PARAM_TARGET:g} N D"},
        "surface": None if s is None else {**s.params(), "identified": s.identified},
        "intervals": {k: {"value": e.value, "lo": e.lo, "hi": e.hi} for k, e in ds.intervals.items()},
        "frontier": ds.frontier.to_dict(orient="records"),
        "measured_compute": list(ds.measured_c),
        "held_out": [{"left_out": h.left_out, "n": h.n, "d": h.d, "observed": h.observed, "predicted": h.predicted,
                      "error": h.error, "se": h.se} for h in ds.held_out],
        "counted_training_flops_over_6nd": {str(int(n)): r for n, r in ds.counted_ratio.items()},
        "seed_sd_neighbouring_d": ds.seed_sd, "detectable_difference": ds.detectable,
    }
