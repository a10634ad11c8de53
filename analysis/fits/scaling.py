"""Scaling fits per architecture family against an external reference: the seed-paired gain points, and the fits of
the sibling modules on them (docs/analysis.md, *Scaling fits*)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pandas as pd

from harness import metric_registry
from harness import runs_columns as C
from protocols.errors import plain

from ..collect import SweepResults
from ..columns import context_columns, family_columns, labelled_columns, same_setting, show, size_columns
from ..headline import oracle_gap_share
from .axes import Convention, PaperComparison, compare_with_helix
from .forms import ComputeForGain, FormCheck, Ladder, check_forms, extrapolations
from .marginal_returns import MarginalReturns, marginal_returns
from .powerlaw import PowerLawFit, fit_power_law
from .reference import Reference, ReferenceSlope, arm_rows, reference_rows, slopes_by_reference

#: The AUC of no skill: a run at or below it did not learn and is left out of every fit (and named).
CHANCE = {"auc": 0.5}
#: Below this many seeds a family's intervals rest on few replicates: the report warns.
MIN_SEEDS = 5


@dataclass
class ScalingPoint:
    family: str
    setting: dict[str, Any]  # size columns of this point
    flops: float  # forward FLOPs per target (as measured)
    x: float  # the fit's axis value (analysis/fits/axes.py)
    seeds: np.ndarray  # [S] seeds paired with the reference
    gain_per_seed: np.ndarray  # [S], NaN where the size has no run for that seed
    value_per_seed: np.ndarray | None = None  # [S] the metric itself (e.g. test AUC), NaN where missing
    oracle_gap_closed: float = float("nan")  # share of the oracle gap closed (AUC; NaN without an oracle)

    @property
    def gain(self) -> float:
        g = self.gain_per_seed[np.isfinite(self.gain_per_seed)]
        return float(g.mean()) if len(g) else float("nan")

    @property
    def n_seeds(self) -> int:
        return int(np.isfinite(self.gain_per_seed).sum())

    @property
    def size_text(self) -> str:
        """The point's size settings, e.g. `retained_tokens=(8, 4)` ("" without size columns)."""
        return ", ".join(f"{k.removeprefix(C.MODEL_PREFIX)}={show(v)}" for k, v in self.setting.items())

    @property
    def size_label(self) -> str:
        """The size settings, or the family's name when it has none."""
        return self.size_text or self.family

    @property
    def label(self) -> str:
        return f"{self.family} ({self.size_text})" if self.size_text else self.family


@dataclass
class FamilyScaling:
    family: str
    metric: str
    reference: str
    points: list[ScalingPoint]
    fit: PowerLawFit | None
    excluded: list[ScalingPoint] = field(default_factory=list)  # no seed with a positive gain
    notes: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)  # the family's non-size settings (arch, protocol, ...)
    convention: Convention = field(default_factory=Convention)
    ref_value: float = float("nan")  # mean reference metric over the paired seeds
    n_seeds: int = 0
    helix: PaperComparison | None = None
    marginal: MarginalReturns | None = None  # steps between consecutive points by FLOPs (>= 2 points)
    ladder: Ladder | None = None  # the metric per size and seed, for the curve forms
    forms: FormCheck | None = None  # power law / log-linear / saturating, held out and lack of fit
    extrapolations: list[ComputeForGain] = field(default_factory=list)  # compute for a further gain, per form
    reference_slopes: list[ReferenceSlope] = field(default_factory=list)  # slope against each reference setting
    not_learned: list[str] = field(default_factory=list)  # runs left out everywhere, with why

    @property
    def arch(self) -> str:
        return str(self.context.get(C.ARCH, self.family))

    @property
    def gain_label(self) -> str:
        return self.convention.gain_label(self.metric)


def scaling_analysis(results: SweepResults, reference: Reference,
                     metrics: tuple[str, ...] | None = None) -> list[FamilyScaling]:
    """One FamilyScaling per (family, metric) for the fitted architectures; unfitted ones carry a note. `metrics`
    default: the registry's headline metrics that declare a gain (docs/analysis.md, "Gain")."""
    if metrics is None:
        metrics = metric_registry.scaling_metrics()
    runs, cfg = results.runs, results.config
    if not reference.families or C.FLOPS_PER_TARGET not in runs.columns or runs[C.FLOPS_PER_TARGET].isna().all():
        return []
    conv = Convention(cfg.scaling.x_axis, cfg.scaling.x_unit, cfg.scaling.gain)
    sizes = size_columns(runs, results.config_columns, cfg.scaling.size_by)
    fam_cols = family_columns(runs, results.config_columns, sizes)
    labelled = labelled_columns(runs, fam_cols)
    out: list[FamilyScaling] = []
    for key, arch_rows in runs.groupby(fam_cols, dropna=False, sort=True):
        setting: dict[str, Any] = {c: plain(v) for c, v in zip(fam_cols, key)}
        if setting[C.ARCH] not in reference.families:
            continue
        whole = setting[C.ARCH] + "".join(f", {c}={show(setting[c])}" for c in labelled)
        for family, rows in arm_rows(cfg.scaling.arms, setting[C.ARCH], arch_rows) or [(whole, arch_rows)]:
            context = context_columns(fam_cols)
            ref_rows, why = reference_rows(runs, reference, rows, context)
            for metric in metrics:
                if not results.has_metric(metric):
                    continue
                fam = FamilyScaling(family, metric, reference.description, [], None, context=setting,
                                    convention=conv, n_seeds=int(rows[C.SEED].nunique()))
                if ref_rows.empty:
                    fam.notes.append(why or "no reference run in this family's setting")
                else:
                    _fill(results, fam, rows, ref_rows, sizes, reference, context)
                fam.helix = compare_with_helix(metric, conv, fam.fit.slope_ci if fam.fit else None)
                out.append(fam)
    return out


def _fill(results: SweepResults, fam: FamilyScaling, rows: pd.DataFrame, ref_rows: pd.DataFrame,
          sizes: list[str], reference: Reference, context: list[str]) -> None:
    """Points (gains paired by seed with the reference), the fit of one family and metric, and its slope against
    every setting of the reference architecture."""
    col = results.metric_column(fam.metric)
    ref_by_seed = ref_rows.groupby(C.SEED)[col].mean().dropna()
    family_seeds = np.sort(rows[C.SEED].unique())
    seeds = family_seeds[np.isin(family_seeds, ref_by_seed.index)]  # [S]
    unpaired = family_seeds[~np.isin(family_seeds, ref_by_seed.index)]
    if len(unpaired):
        fam.notes.append(f"seed(s) {', '.join(map(str, unpaired))} have no reference run: left out")
    if len(seeds) == 0:
        fam.notes.append("no seed shared with the reference")
        return
    ref = ref_by_seed.reindex(seeds).to_numpy(dtype=np.float64)  # [S]
    fam.ref_value = float(ref.mean())
    fam.n_seeds = len(seeds)
    sizes = [c for c in sizes if rows[c].notna().any()]  # e.g. model.size only exists for named-size models
    groups = rows.groupby(sizes, dropna=False, sort=True) if sizes else [((), rows)]
    for key, point_rows in groups:
        values = point_rows.groupby(C.SEED)[col].mean().reindex(seeds).to_numpy(dtype=np.float64)  # [S]
        flops = float(point_rows[C.FLOPS_PER_TARGET].mean())
        share = oracle_gap_share(point_rows, ref_rows, results.metric_column("auc"), results.oracle_column)
        fam.points.append(ScalingPoint(fam.family, {c: plain(v) for c, v in zip(sizes, key)}, flops,
                                       float(fam.convention.x(flops)), seeds,
                                       fam.convention.gain_of(fam.metric, values, ref), values, share))
    fam.points.sort(key=lambda p: (not np.isfinite(p.x), p.x))
    skip = _not_learned(results, rows, fam, seeds)
    learned = np.stack([cast(np.ndarray, p.value_per_seed) for p in fam.points])  # [P, S]
    for (p, j) in skip:
        learned[p, j] = np.nan  # a run that did not learn is not a data point
    fam.not_learned = [f"{fam.points[p].label}, seed {seeds[j]}: {why}" for (p, j), why in skip.items()]
    fam.marginal = marginal_returns([p.size_label for p in fam.points], np.array([p.flops for p in fam.points]),
                                    learned, seeds, fam.metric)
    if len(fam.points) < 2:
        fam.notes.append("one model size: nothing to fit")
        return
    x = np.array([p.x for p in fam.points])  # [P]
    fit, excluded, note = fit_power_law(
        x, np.stack([p.gain_per_seed for p in fam.points]), labels=[p.label for p in fam.points], seeds=seeds,
        skip=skip,
    )
    if note:
        fam.notes.append(note)
    fam.fit = fit
    fam.excluded = [fam.points[i] for i in excluded]
    if np.isfinite(x).all() and (x > 0).all() and len(np.unique(x)) >= 2:
        fam.ladder = Ladder(fam.metric, [p.size_label for p in fam.points], x, learned, ref, seeds,
                            metric_registry.get(fam.metric).higher_is_better, fam.convention)
        fam.forms = check_forms(fam.ladder)
        fam.extrapolations = extrapolations(fam.ladder)
    if fit is not None:
        fam.reference_slopes = slopes_by_reference(
            results.runs, reference, rows, context, col, seeds, x,
            np.stack([cast(np.ndarray, p.value_per_seed) for p in fam.points]), [p.label for p in fam.points],
            lambda v, r: fam.convention.gain_of(fam.metric, v, r))


def _not_learned(results: SweepResults, rows: pd.DataFrame, fam: FamilyScaling,
                 seeds: np.ndarray) -> dict[tuple[int, int], str]:
    """(point index, seed index) -> why, for runs whose test AUC is at or below chance, for every metric of the family
    (docs/analysis.md, "Runs that are not data points")."""
    if not results.has_metric("auc"):
        return {}
    col = results.metric_column("auc")
    out = {}
    for p, point in enumerate(fam.points):
        mine = rows[same_setting(rows, point.setting)]
        auc = mine.groupby(C.SEED)[col].mean().reindex(seeds).to_numpy(dtype=np.float64)
        for j, a in enumerate(auc):
            if np.isfinite(a) and a <= CHANCE["auc"]:
                out[(p, j)] = f"did not learn (test AUC {a:.4f} <= chance {CHANCE['auc']:g}): not a data point"
    return out
