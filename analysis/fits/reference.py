"""The scaling reference, validated on the runs (`resolve_reference`) or planned trials (`check_planned`), and the
slope against each of its settings (`slopes_by_reference`): docs/analysis.md, "Reference", "Reference sensitivity"."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from core.errors import RecscaleError
from harness import runs_columns as C
from protocols.errors import plain

from ..collect import config_columns, default_baseline, hashable_lists
from ..columns import is_data_column, same_setting, show, size_columns
from ..compare.pairing import select
from ..config import AnalysisConfig, analysis_config
from .powerlaw import fit_power_law

KEY = "analysis.scaling.reference"


@dataclass
class Reference:
    """The resolved reference and the architectures fitted against it."""

    selector: dict[str, Any]
    arch: str
    setting: dict[str, Any]  # its model.* values (the fixed size); {} when it matches several
    families: list[str]  # fitted architectures
    mask: np.ndarray  # [R] rows of the runs table matching the selector
    fixed: bool = True  # one model setting (always, when some family is fitted)
    notes: list[str] = field(default_factory=list)
    size_keys: list[str] = field(default_factory=list)  # size columns the reference fills

    @property
    def description(self) -> str:
        """E.g. `wukong (dim=64, num_layers=2)`: the architecture, its size and any other selector key."""
        shown = {k: v for k, v in self.selector.items() if k != C.ARCH}
        shown.update({k: self.setting[k] for k in self.size_keys if k in self.setting and k not in shown})
        size = ", ".join(f"{k.removeprefix(C.MODEL_PREFIX)}={show(v)}" for k, v in shown.items())
        return f"{self.arch} ({size})" if size else self.arch


def describe(selector: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in selector.items()) + "}"


def _settings(rows: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    """Distinct combinations of `columns` among `rows` (NaN shown as None)."""
    if not columns:
        return [{}]
    distinct = rows[columns].astype(object).where(rows[columns].notna(), None).drop_duplicates()
    return [{c: plain(v) for c, v in rec.items()} for rec in distinct.to_dict("records")]


def resolve_reference(runs: pd.DataFrame, cfg: AnalysisConfig, baseline: str, config_cols: list[str]) -> Reference:
    """Validate the reference against the runs; raises RecscaleError naming the reference and the problem."""
    scaling = cfg.scaling
    selector = dict(scaling.reference) or {C.ARCH: baseline}
    try:
        mask = select(runs, selector)
    except RecscaleError as e:
        raise RecscaleError(f"{KEY} {describe(selector)}: {e}") from None
    archs = sorted(runs[C.ARCH].unique())
    matched = runs[mask]
    if matched.empty:
        raise RecscaleError(f"{KEY} {describe(selector)} matches no run; architectures: {', '.join(archs)}")
    ref_archs = sorted(matched[C.ARCH].unique())
    if len(ref_archs) > 1:
        raise RecscaleError(f"{KEY} {describe(selector)} matches runs of several architectures "
                            f"({', '.join(ref_archs)}); a reference is one architecture at one fixed size")
    ref_arch = ref_archs[0]
    notes = [f"analysis.scaling.families names {a!r}, which has no runs" for a in scaling.families if a not in archs]
    families = [a for a in (scaling.families or archs) if a in archs and (scaling.families or a != ref_arch)]
    if ref_arch in families:
        raise RecscaleError(
            f"{KEY} {describe(selector)} matches {int(mask.sum())} run(s) of the fitted family {ref_arch!r}: "
            "a family's gain is measured against a fixed reference outside it (one member as the zero point "
            "is not a power law). Choose another architecture as the reference, or leave "
            f"{ref_arch!r} out of analysis.scaling.families.")
    model_cols = [c for c in config_cols if c.startswith(C.MODEL_PREFIX) and matched[c].notna().any()]
    settings = _settings(matched, model_cols)
    sizes = size_columns(runs, config_cols, scaling.size_by)
    if families and len(settings) > 1:
        shown = [c for c in model_cols if matched[c].astype(str).nunique() > 1]
        listed = "; ".join(", ".join(f"{c}={show(s[c])}" for c in shown) for s in _settings(matched, shown)[:8])
        raise RecscaleError(
            f"{KEY} {describe(selector)} matches {len(settings)} model settings of {ref_arch} ({listed}); a "
            f"reference is one fixed size: add the size to the selector (size columns: {', '.join(sizes)})")
    fixed = len(settings) == 1
    return Reference(selector, ref_arch, settings[0] if fixed else {}, families, mask, fixed, notes,
                     [c for c in sizes if c in model_cols])


def reference_rows(runs: pd.DataFrame, ref: Reference, family_rows: pd.DataFrame,
                   context: list[str]) -> tuple[pd.DataFrame, str]:
    """(the reference runs in a family's setting, "" or why none): docs/analysis.md, "Reference"."""
    rows = runs[ref.mask]
    for c in context:
        values = family_rows[c].dropna().unique()
        if len(values) != 1 or not rows[c].notna().any():
            continue
        if is_data_column(c) or rows[c].astype(str).nunique() > 1:
            rows = rows[select(rows, {c: plain(values[0])})]
            if rows.empty:
                return rows, f"no reference run has {c}={plain(values[0])}"
    return rows, ""


def arm_rows(arms: dict[str, dict[str, Any]], arch: str, rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The named arms (`analysis.scaling.arms`) of architecture `arch` that hold some of `rows`, each with its
    rows (empty: the architecture has no arms)."""
    cut = [(name, rows[select(rows, sel)]) for name, sel in arms.items() if sel[C.ARCH] == arch]
    return [(name, r) for name, r in cut if len(r)]


def check_planned(records: list[dict[str, Any]], section: dict[str, Any] | None) -> str:
    """The reference check of `recscale sweep --dry-run` on planned trials: a one-line description, or RecscaleError."""
    cfg = analysis_config(section)
    runs = hashable_lists(pd.DataFrame(records))
    cols = config_columns(runs)
    ref = resolve_reference(runs, cfg, cfg.baseline or default_baseline(runs), cols)
    if not ref.families:
        return f"scaling reference {ref.description}: no other architecture to fit"
    sizes = size_columns(runs, cols, cfg.scaling.size_by)
    fitted = runs[runs[C.ARCH].isin(ref.families)]
    families = [fam for a, g in fitted.groupby(C.ARCH) for fam in arm_rows(cfg.scaling.arms, str(a), g) or [(a, g)]]
    n_sizes = {a: len(_settings(g, [c for c in sizes if g[c].notna().any()])) for a, g in families}
    per = ", ".join(f"{a} ({n} size{'s' if n != 1 else ''})" for a, n in n_sizes.items())
    return f"scaling reference {ref.description}; fitted against it: {per}"


@dataclass(frozen=True)
class ReferenceSlope:
    reference: str  # e.g. "wukong (dim=8)"
    is_chosen: bool  # the configured reference
    slope: float
    ci: tuple[float, float]
    n_seeds: int  # seeds with a line


def _reference_settings(runs: pd.DataFrame, ref: Reference) -> list[dict]:
    keys = [k for k in ref.size_keys if k in runs.columns] or [c for c in ref.setting if c in runs.columns]
    rows = runs[runs[C.ARCH] == ref.arch]
    if not keys:
        return [{}]
    distinct = rows[keys].astype(object).drop_duplicates()
    return [{k: plain(v) for k, v in rec.items()} for rec in distinct.to_dict("records")]


def slopes_by_reference(runs: pd.DataFrame, ref: Reference, family_rows: pd.DataFrame, context: list[str],
                        column: str, seeds: np.ndarray, x: np.ndarray, values: np.ndarray, labels: list[str],
                        gain_of) -> list[ReferenceSlope]:
    """The power-law slope of one family and metric against every setting of the reference architecture.

    `values` [P, S] the family's metric per size and seed (`seeds` [S]), `x` [P] its compute axis, `gain_of`
    (values, ref) -> gains. Settings whose runs share no seed with the family are skipped."""
    out = []
    for setting in sorted(_reference_settings(runs, ref), key=lambda s: [str(v) for v in s.values()]):
        alt = replace(ref, mask=same_setting(runs, {C.ARCH: ref.arch, **setting}), setting=setting)
        rows, _ = reference_rows(runs, alt, family_rows, context)
        by_seed = rows.groupby(C.SEED)[column].mean().reindex(seeds).to_numpy(dtype=np.float64)  # [S]
        if not np.isfinite(by_seed).any():
            continue
        fit, _, _ = fit_power_law(x, gain_of(values, by_seed[None, :]), labels=labels, seeds=seeds)
        name = ref.arch + (" (" + ", ".join(f"{k.removeprefix(C.MODEL_PREFIX)}={show(v)}" for k, v in setting.items())
                           + ")" if setting else "")
        chosen = all(str(ref.setting.get(k)) == str(v) for k, v in setting.items())
        nan = float("nan")
        out.append(ReferenceSlope(name, chosen, nan if fit is None else fit.slope,
                                  (nan, nan) if fit is None else fit.slope_ci, 0 if fit is None else fit.n_seeds))
    return out


def slope_range(slopes: list[ReferenceSlope]) -> tuple[float, float]:
    finite = [s.slope for s in slopes if np.isfinite(s.slope)]
    return (min(finite), max(finite)) if finite else (float("nan"), float("nan"))
