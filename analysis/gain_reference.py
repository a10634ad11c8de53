"""The reference a scaling gain is measured against: one architecture at one fixed size, outside every
fitted family.

The gain of a family (dAUC, relative LogLoss gain) is measured against the runs matching
`analysis.scaling.reference` (default `{arch: <baseline>}`) in the family's data setting, paired by seed. A
reference inside a fitted family would make one member the zero point and turn the fitted quantity
AUC(C) - AUC(C_member) into something that is not a power law, so it is refused, as is a selector that matches
several architectures or several model settings. Fitted families default to every architecture except the
reference's. The same check runs on finished runs (`recscale analyze`) and on a sweep's planned trials
(`recscale sweep FILE --dry-run`), whose config columns are the same.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core.errors import RecscaleError

from .collect import config_columns, default_baseline, hashable_lists
from .comparisons import select
from .config import AnalysisConfig, analysis_config
from .data_settings import is_data_column
from .families import show, size_columns

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
        shown = {k: v for k, v in self.selector.items() if k != "arch"}
        shown.update({k: self.setting[k] for k in self.size_keys if k in self.setting and k not in shown})
        size = ", ".join(f"{k.removeprefix('model.')}={show(v)}" for k, v in shown.items())
        return f"{self.arch} ({size})" if size else self.arch


def describe(selector: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in selector.items()) + "}"


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _settings(rows: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    """Distinct combinations of `columns` among `rows` (NaN shown as None)."""
    if not columns:
        return [{}]
    distinct = rows[columns].astype(object).where(rows[columns].notna(), None).drop_duplicates()
    return [{c: _plain(v) for c, v in rec.items()} for rec in distinct.to_dict("records")]


def resolve_reference(runs: pd.DataFrame, cfg: AnalysisConfig, baseline: str,
                      config_cols: list[str]) -> Reference:
    """Validate the reference against the runs; raises RecscaleError naming the reference and the problem."""
    scaling = cfg.scaling
    selector = dict(scaling.reference) or {"arch": baseline}
    try:
        mask = select(runs, selector)
    except RecscaleError as e:
        raise RecscaleError(f"{KEY} {describe(selector)}: {e}") from None
    archs = sorted(runs["arch"].unique())
    matched = runs[mask]
    if matched.empty:
        raise RecscaleError(f"{KEY} {describe(selector)} matches no run; architectures: {', '.join(archs)}")
    ref_archs = sorted(matched["arch"].unique())
    if len(ref_archs) > 1:
        raise RecscaleError(f"{KEY} {describe(selector)} matches runs of several architectures "
                            f"({', '.join(ref_archs)}); a reference is one architecture at one fixed size")
    ref_arch = ref_archs[0]
    notes = [f"analysis.scaling.families names {a!r}, which has no runs" for a in scaling.families
             if a not in archs]
    families = [a for a in (scaling.families or archs) if a in archs and (scaling.families or a != ref_arch)]
    if ref_arch in families:
        raise RecscaleError(
            f"{KEY} {describe(selector)} matches {int(mask.sum())} run(s) of the fitted family {ref_arch!r}: "
            "a family's gain is measured against a fixed reference outside it (one member as the zero point "
            "is not a power law). Choose another architecture as the reference, or leave "
            f"{ref_arch!r} out of analysis.scaling.families.")
    model_cols = [c for c in config_cols if c.startswith("model.") and matched[c].notna().any()]
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
    """The reference runs in a family's setting: they must share its data columns (`data_settings`: they
    change the test data), and any other context
    column (train.*) in which the reference itself varies. Returns (rows, "" or why there are none)."""
    rows = runs[ref.mask]
    for c in context:
        values = family_rows[c].dropna().unique()
        if len(values) != 1 or not rows[c].notna().any():
            continue
        if is_data_column(c) or rows[c].astype(str).nunique() > 1:
            rows = rows[select(rows, {c: _plain(values[0])})]
            if rows.empty:
                return rows, f"no reference run has {c}={_plain(values[0])}"
    return rows, ""


def check_planned(records: list[dict[str, Any]], section: dict[str, Any] | None) -> str:
    """The reference check of `recscale sweep --dry-run` on planned trials' config columns (plus
    `flops_per_target` where counted). Returns a one-line description; raises RecscaleError when refused."""
    cfg = analysis_config(section)
    runs = hashable_lists(pd.DataFrame(records))
    cols = config_columns(runs)
    baseline = cfg.baseline or default_baseline(runs)
    ref = resolve_reference(runs, cfg, baseline, cols)
    if not ref.families:
        return f"scaling reference {ref.description}: no other architecture to fit"
    sizes = size_columns(runs, cols, cfg.scaling.size_by)
    fitted = runs[runs["arch"].isin(ref.families)]
    n_sizes = {a: len(_settings(g, [c for c in sizes if g[c].notna().any()])) for a, g in fitted.groupby("arch")}
    per = ", ".join(f"{a} ({n} size{'s' if n != 1 else ''})" for a, n in n_sizes.items())
    return f"scaling reference {ref.description}; fitted against it: {per}"
