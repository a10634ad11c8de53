"""Scaling-law fits: log(gain) against log(FLOPs per target), per architecture family.

A family is one architecture at one setting of everything that is not a model size (protocol, delay,
ablation switches, ...); its points are its distinct model sizes, averaged over seeds. The gain of a point
over a named reference is dAUC = AUC - AUC_ref, or the relative loss gain (L_ref - L) / L_ref for LogLoss
(NE gives the same relative gain on a shared test set). Gains are paired by seed where the reference has
that seed. The fit is ln(gain) = intercept + slope * ln(FLOPs) with scipy.stats.linregress; the slope
interval comes from resampling seeds (the same drawn seeds for every point), and a held-out check refits
without the largest-compute point and predicts it. Points whose gain is <= 0 have no logarithm: they are
listed and left out of the fit, never dropped silently.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
from scipy import stats

from .collect import SweepResults
from .comparisons import select

#: gain(value, reference) per metric; positive means better than the reference.
GAINS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "auc": lambda x, ref: x - ref,
    "gauc": lambda x, ref: x - ref,
    "logloss": lambda x, ref: (ref - x) / ref,
    "ne": lambda x, ref: (ref - x) / ref,
}
GAIN_LABELS = {"auc": "dAUC", "gauc": "dGAUC", "logloss": "relative LogLoss gain", "ne": "relative NE gain"}
#: Metrics fitted by default (NE's relative gain equals LogLoss's on one test set).
SCALING_METRICS = ("auc", "logloss")
#: HELIX CTR fit (seed 003): ln(dAUC) = 0.085 ln(C) - 4.733, read with C in GFLOPs per sample.
HELIX_CTR = {"slope": 0.085, "intercept": -4.733, "r2": 0.925, "flops_unit": 1e9}
HELIX_CVR_SLOPE = 0.132


@dataclass
class ScalingPoint:
    family: str
    setting: dict[str, Any]  # size columns of this point
    flops: float
    seeds: np.ndarray  # [S] seed universe of the family
    gain_per_seed: np.ndarray  # [S], NaN where the point has no run for that seed

    @property
    def gain(self) -> float:
        return float(np.nanmean(self.gain_per_seed))

    @property
    def n_seeds(self) -> int:
        return int(np.isfinite(self.gain_per_seed).sum())

    @property
    def label(self) -> str:
        size = ", ".join(f"{k.removeprefix('model.')}={v}" for k, v in self.setting.items())
        return f"{self.family} ({size})" if size else self.family


@dataclass
class HeldOut:
    label: str
    flops: float
    observed: float
    predicted: float

    @property
    def log_error(self) -> float:
        """ln(predicted / observed): 0 is perfect, 0.1 is about 10% too high; NaN when observed <= 0."""
        return float(np.log(self.predicted / self.observed)) if self.observed > 0 else float("nan")


@dataclass
class PowerLawFit:
    n_points: int
    slope: float
    intercept: float
    r2: float
    slope_se: float
    intercept_se: float
    slope_ci: tuple[float, float]
    band_x: np.ndarray  # [G] FLOPs grid
    band_lo: np.ndarray  # [G] 2.5% of bootstrap predictions
    band_hi: np.ndarray  # [G] 97.5%
    n_boot: int
    held_out: HeldOut | None

    def predict(self, flops: np.ndarray | float) -> np.ndarray:
        return np.exp(self.intercept + self.slope * np.log(flops))


@dataclass
class FamilyScaling:
    family: str
    metric: str
    reference: str
    points: list[ScalingPoint]
    fit: PowerLawFit | None
    excluded: list[ScalingPoint] = field(default_factory=list)  # gain <= 0 or undefined
    notes: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)  # the family's non-size settings (arch, protocol, ...)


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    xm, ym = x.mean(), y.mean()
    slope = ((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum()
    return float(slope), float(ym - slope * xm)


def fit_power_law(
    flops: np.ndarray, gains: np.ndarray, *, labels: list[str], n_resamples: int = 2000, seed: int = 0
) -> tuple[PowerLawFit | None, list[int], str]:
    """Fit ln(mean gain) = a + b ln(flops) over points with a positive mean gain.

    `flops` [P]; `gains` [P, S] per seed (NaN where missing). Returns (fit or None, indices of excluded
    points, note). Bootstrap: draw S seeds with replacement, recompute every point's mean gain on them, refit.
    """
    flops = np.asarray(flops, dtype=np.float64)
    gains = np.asarray(gains, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean_gain = np.nanmean(gains, axis=1)  # [P]
    usable = np.isfinite(mean_gain) & (mean_gain > 0) & np.isfinite(flops) & (flops > 0)
    excluded = np.flatnonzero(~usable).tolist()
    x, y = np.log(flops[usable]), np.log(mean_gain[usable])
    if len(np.unique(x)) < 2:
        return None, excluded, f"{int(usable.sum())} point(s) with a positive gain at distinct FLOPs: nothing to fit"
    reg = stats.linregress(x, y)
    rng = np.random.default_rng(seed)
    n_seeds = gains.shape[1]
    grid = np.linspace(x.min(), x.max(), 60)  # [G] ln FLOPs over the fitted points
    draws = rng.integers(0, n_seeds, (n_resamples, n_seeds))  # [R, S] seeds drawn for every point alike
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a point without any of the drawn seeds
        g = np.nanmean(gains[:, draws], axis=2)  # [P, R]
    ok = np.isfinite(g) & (g > 0) & (np.isfinite(flops) & (flops > 0))[:, None]  # [P, R]
    w = ok.astype(np.float64)
    lx = np.log(np.where(flops > 0, flops, 1.0))[:, None]  # [P, 1]
    ly = np.log(np.where(ok, g, 1.0))  # [P, R]
    n_ok = w.sum(axis=0)  # [R]
    with np.errstate(invalid="ignore", divide="ignore"):
        xm = (w * lx).sum(axis=0) / n_ok
        ym = (w * ly).sum(axis=0) / n_ok
        sxx = (w * (lx - xm) ** 2).sum(axis=0)
        slopes = (w * (lx - xm) * (ly - ym)).sum(axis=0) / sxx  # [R]
    valid = (n_ok >= 2) & (sxx > 1e-12)
    intercepts = ym[valid] - slopes[valid] * xm[valid]
    slopes = slopes[valid]
    if len(slopes):
        slope_ci = (float(np.percentile(slopes, 2.5)), float(np.percentile(slopes, 97.5)))
        curves = intercepts[:, None] + slopes[:, None] * grid[None, :]  # [R, G]
        band = np.exp(np.percentile(curves, [2.5, 97.5], axis=0))  # [2, G]
    else:
        slope_ci, band = (float("nan"), float("nan")), np.full((2, len(grid)), np.nan)
    note = "" if usable.sum() > 2 else "2 points: the line passes through both, R^2 = 1 says nothing"
    fit = PowerLawFit(
        n_points=int(usable.sum()), slope=float(reg.slope), intercept=float(reg.intercept),
        r2=float(reg.rvalue**2), slope_se=float(reg.stderr), intercept_se=float(reg.intercept_stderr),
        slope_ci=slope_ci, band_x=np.exp(grid), band_lo=band[0], band_hi=band[1], n_boot=len(slopes),
        held_out=_held_out(flops, mean_gain, labels),
    )
    return fit, excluded, note


def _held_out(flops: np.ndarray, mean_gain: np.ndarray, labels: list[str]) -> HeldOut | None:
    """Refit without the largest-compute point (needs 2 other positive points) and predict it."""
    finite = np.flatnonzero(np.isfinite(mean_gain) & np.isfinite(flops) & (flops > 0))
    if len(finite) < 3:
        return None
    top = finite[np.argmax(flops[finite])]
    rest = np.array([i for i in finite if i != top and mean_gain[i] > 0])
    if len(rest) < 2 or len(np.unique(flops[rest])) < 2:
        return None
    slope, intercept = _ols(np.log(flops[rest]), np.log(mean_gain[rest]))
    predicted = float(np.exp(intercept + slope * np.log(flops[top])))
    return HeldOut(labels[top], float(flops[top]), float(mean_gain[top]), predicted)


def _reference_by_seed(results: SweepResults, family_rows: pd.DataFrame, metric: str) -> tuple[pd.Series, str, list[str]]:
    """Reference metric per seed for a family, and a description. Matches the family's non-model context."""
    runs, col = results.runs, results.metric_column(metric)
    selector = results.config.scaling.reference or {"arch": results.baseline}
    ref = runs[select(runs, selector)]
    notes: list[str] = []
    context = [c for c in results.config_columns
               if c not in selector and c != "arch" and not c.startswith("model.") and ref[c].notna().any()]
    same = np.ones(len(ref), dtype=bool)
    for c in context:
        values = family_rows[c].dropna().unique()
        if len(values) == 1:
            same &= select(ref, {c: _py(values[0])})
    if same.any():
        ref = ref[same]
    elif len(ref):
        notes.append("no reference run shares this family's settings; using every reference run")
    if ref.empty:
        return pd.Series(dtype=float), "", [f"no run matches the reference {selector}"]
    settings = ref.groupby(results.config_columns, dropna=False)
    if settings.ngroups > 1 and "flops_per_target" in ref.columns:
        smallest = ref["flops_per_target"].idxmin()
        keep = (ref[results.config_columns].astype(str) == ref.loc[smallest, results.config_columns].astype(str)).all(axis=1)
        ref = ref[keep]
        notes.append("the reference matches several settings; using its smallest-compute one")
    desc = ", ".join(f"{k}={v}" for k, v in selector.items())
    return ref.groupby("seed")[col].mean(), desc, notes


def _py(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _is_reference_only(results: SweepResults, rows: pd.DataFrame, sizes: list[str]) -> bool:
    selector = results.config.scaling.reference or {"arch": results.baseline}
    single_size = not sizes or len(rows.drop_duplicates(sizes)) == 1
    return single_size and bool(select(rows, selector).all())


def size_columns(results: SweepResults) -> list[str]:
    """Columns that make a model size: configured, or every numeric (non-boolean) model.* column."""
    if results.config.scaling.size_by:
        return list(results.config.scaling.size_by)
    runs = results.runs
    return [c for c in results.config_columns if c.startswith("model.")
            and pd.api.types.is_numeric_dtype(runs[c]) and not pd.api.types.is_bool_dtype(runs[c])]


def scaling_analysis(results: SweepResults, metrics: tuple[str, ...] = SCALING_METRICS) -> list[FamilyScaling]:
    """One FamilyScaling per (family, metric) for families with FLOPs; unfitted families carry a note."""
    runs, cfg = results.runs, results.config
    if "flops_per_target" not in runs.columns or runs["flops_per_target"].isna().all():
        return []
    sizes = size_columns(results)
    family_cols = [c for c in results.config_columns if c not in sizes]
    labelled = [c for c in family_cols if c != "arch" and runs[c].nunique(dropna=False) > 1]
    out: list[FamilyScaling] = []
    for key, rows in runs.groupby(family_cols, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        setting = dict(zip(family_cols, key))
        if cfg.scaling.families and setting["arch"] not in cfg.scaling.families:
            continue
        family = setting["arch"] + "".join(f", {c}={_py(setting[c])}" for c in labelled)
        if _is_reference_only(results, rows, sizes):
            continue  # the reference itself at one size: its gain is 0 by construction
        seeds = np.sort(rows["seed"].unique())
        for metric in metrics:
            if not results.has_metric(metric):
                continue
            fam = _family_metric(results, family, rows, sizes, seeds, metric)
            fam.context = {c: _py(v) for c, v in setting.items()}
            out.append(fam)
    return out


def _family_metric(results: SweepResults, family: str, rows: pd.DataFrame, sizes: list[str],
                   seeds: np.ndarray, metric: str) -> FamilyScaling:
    col, cfg = results.metric_column(metric), results.config
    ref_by_seed, ref_desc, notes = _reference_by_seed(results, rows, metric)
    if ref_by_seed.empty:
        return FamilyScaling(family, metric, ref_desc, [], None, [], notes)
    ref_paired = ref_by_seed.reindex(seeds).to_numpy()  # [S]
    ref_paired = np.where(np.isfinite(ref_paired), ref_paired, ref_by_seed.mean())
    if not np.isin(seeds, ref_by_seed.index).all():
        notes.append("some seeds have no reference run; their gains use the reference's mean")
    points: list[ScalingPoint] = []
    groups = rows.groupby(sizes, dropna=False, sort=True) if sizes else [((), rows)]
    for key, point_rows in groups:
        key = key if isinstance(key, tuple) else (key,)
        values = point_rows.set_index("seed")[col].reindex(seeds).to_numpy(dtype=np.float64)  # [S]
        gain = GAINS[metric](values, ref_paired)
        points.append(ScalingPoint(family, {c: _py(v) for c, v in zip(sizes, key)},
                                   float(point_rows["flops_per_target"].mean()), seeds, gain))
    points.sort(key=lambda p: p.flops)
    if len(points) < 2:
        return FamilyScaling(family, metric, ref_desc, points, None, [],
                             notes + ["one model size: nothing to fit"])
    fit, excluded, note = fit_power_law(
        np.array([p.flops for p in points]), np.stack([p.gain_per_seed for p in points]),
        labels=[p.label for p in points], n_resamples=min(cfg.n_resamples, 2000), seed=cfg.seed,
    )
    if note:
        notes.append(note)
    return FamilyScaling(family, metric, ref_desc, points, fit, [points[i] for i in excluded], notes)
