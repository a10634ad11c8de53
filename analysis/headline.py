"""The headline table, one row per architecture and model setting, and `oracle_gap_share` (docs/analysis.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness import runs_columns as C
from protocols.errors import plain

from .collect import SweepResults
from .columns import context_columns, family_columns, show, size_columns
from .fits.reference import Reference, reference_rows


@dataclass
class HeadlineRow:
    label: str
    setting: dict[str, Any]  # the row's config values
    n_seeds: int
    auc: tuple[float, float]  # mean, sd over seeds
    logloss: tuple[float, float]
    flops_per_target: float
    params_non_embedding: float
    oracle_auc: float
    share_oracle_gap: float
    is_reference: bool = False
    health: str = ""  # runs per health status (analysis/run_health.py)


@dataclass
class Headline:
    rows: list[HeadlineRow]
    reference: str  # what share_oracle_gap is measured from ("" when it is not)
    notes: list[str] = field(default_factory=list)
    has_params: bool = False
    has_oracle: bool = False
    has_health: bool = False


def _mean_sd(values: pd.Series) -> tuple[float, float]:
    v = values.dropna().to_numpy(dtype=np.float64)
    if len(v) == 0:
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else float("nan")


def _column_mean(rows: pd.DataFrame, column: str) -> float:
    if column not in rows.columns or not rows[column].notna().any():
        return float("nan")
    return float(rows[column].astype(float).mean())


def oracle_gap_share(rows: pd.DataFrame, ref_rows: pd.DataFrame, auc_col: str, oracle_col: str) -> float:
    """Share of the oracle gap closed by `rows` over `ref_rows`, paired by seed (docs/analysis.md, "Share of the
    oracle gap closed"); NaN when no seed pairs or when the reference is not below the oracle."""
    if oracle_col not in rows.columns or auc_col not in ref_rows.columns:
        return float("nan")
    paired = pd.concat({"auc": rows.groupby(C.SEED)[auc_col].mean(),
                        "oracle": rows.groupby(C.SEED)[oracle_col].mean(),
                        "ref": ref_rows.groupby(C.SEED)[auc_col].mean()}, axis=1, join="inner").dropna()
    gap = float((paired["oracle"] - paired["ref"]).mean()) if len(paired) else float("nan")
    if not gap > 0:
        return float("nan")
    return float((paired["auc"] - paired["ref"]).mean()) / gap


def headline(results: SweepResults, reference: Reference | None) -> Headline:
    runs, cols = results.runs, results.config_columns
    auc_col, ll_col, oracle_col = results.metric_column("auc"), results.metric_column("logloss"), results.oracle_column
    sizes = size_columns(runs, cols, results.config.scaling.size_by)
    fam_cols = family_columns(runs, cols, sizes)
    # label: varying non-size settings, then the size (its attributes, e.g. a head width, are implied)
    shown = [c for c in [*fam_cols, *sizes] if c != C.ARCH and runs[c].astype(str).nunique() > 1]
    has_oracle = oracle_col in runs.columns and bool(runs[oracle_col].notna().any())
    notes = []
    usable_ref = reference is not None and reference.fixed
    if has_oracle and not usable_ref:
        notes.append("share of the oracle gap: the reference is not one fixed model, so it is not computed")
    elif not has_oracle:
        notes.append(f"share of the oracle gap: no `{oracle_col}` column (only synthetic logs know the oracle)")
    context = context_columns(fam_cols)
    out = []
    for key, rows in runs.groupby(cols, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        setting: dict[str, Any] = {c: plain(v) for c, v in zip(cols, key)}
        label = setting[C.ARCH] + "".join(f", {c.removeprefix(C.MODEL_PREFIX)}={show(setting[c])}" for c in shown
                                          if isinstance(setting[c], tuple) or bool(pd.notna(setting[c])))
        oracle, share = _column_mean(rows, oracle_col), float("nan")
        is_ref = bool(usable_ref and reference is not None and reference.mask[rows.index.to_numpy()].all())
        if has_oracle and usable_ref and reference is not None:
            ref, _ = reference_rows(runs, reference, rows, context)
            share = oracle_gap_share(rows, ref, auc_col, oracle_col)
        out.append(HeadlineRow(label, setting, int(rows[C.SEED].nunique()), _mean_sd(rows[auc_col]),
                               _mean_sd(rows[ll_col]) if ll_col in rows.columns else (float("nan"),) * 2,
                               _column_mean(rows, C.FLOPS_PER_TARGET), _column_mean(rows, C.PARAMS_NON_EMBEDDING),
                               oracle, share, is_ref))
    out.sort(key=lambda r: (r.setting[C.ARCH], np.nan_to_num(r.flops_per_target, nan=np.inf), r.label))
    desc = reference.description if usable_ref and reference is not None else ""
    return Headline(out, desc, notes, C.PARAMS_NON_EMBEDDING in runs.columns, has_oracle)
