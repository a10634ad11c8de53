"""How much a power-law slope depends on the reference it is measured against.

A gain over a reference run (dAUC = AUC - AUC_ref) is not a property of the family alone: a reference with the
same mean AUC but a different seed-to-seed pattern moves every per-seed gain and so the slope. For every
setting of the reference architecture that the sweep contains (e.g. Wukong at each width it was run at), the
family's per-seed gains are recomputed against that setting's runs in the family's data setting, paired by
seed, and the power law refitted (analysis/powerlaw.py, seed as the unit). The report gives each slope and
the range; the cross-family comparison is also made in a quantity that needs no reference (the log-linear
slope b, analysis/family_comparison.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .families import show
from .gain_reference import Reference, reference_rows
from .powerlaw import fit_power_law


@dataclass(frozen=True)
class ReferenceSlope:
    reference: str  # e.g. "wukong (dim=8)"
    is_chosen: bool  # the configured reference
    slope: float
    ci: tuple[float, float]
    n_seeds: int  # seeds with a line
    n_dropped: int  # per-seed points the logarithm could not take


def _settings(runs: pd.DataFrame, ref: Reference) -> list[dict]:
    keys = [k for k in ref.size_keys if k in runs.columns] or [c for c in ref.setting if c in runs.columns]
    rows = runs[runs["arch"] == ref.arch]
    if not keys:
        return [{}]
    distinct = rows[keys].astype(object).drop_duplicates()
    return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in rec.items()}
            for rec in distinct.to_dict("records")]


def _matches(runs: pd.DataFrame, arch: str, setting: dict) -> np.ndarray:
    mask = (runs["arch"] == arch).to_numpy().copy()
    for k, v in setting.items():
        mask &= runs[k].astype(str).to_numpy() == str(v)
    return mask


def slopes_by_reference(runs: pd.DataFrame, ref: Reference, family_rows: pd.DataFrame, context: list[str],
                        column: str, seeds: np.ndarray, x: np.ndarray, values: np.ndarray, labels: list[str],
                        gain_of) -> list[ReferenceSlope]:
    """The power-law slope of one family and metric against every setting of the reference architecture.

    `values` [P, S] the family's metric per size and seed (`seeds` [S]), `x` [P] its compute axis, `gain_of`
    (values, ref) -> gains. Settings whose runs share no seed with the family are skipped."""
    out = []
    for setting in sorted(_settings(runs, ref), key=lambda s: [str(v) for v in s.values()]):
        alt = replace(ref, mask=_matches(runs, ref.arch, setting), setting=setting)
        rows, _ = reference_rows(runs, alt, family_rows, context)
        by_seed = rows.groupby("seed")[column].mean().reindex(seeds).to_numpy(dtype=np.float64)  # [S]
        if not np.isfinite(by_seed).any():
            continue
        fit, _, _ = fit_power_law(x, gain_of(values, by_seed[None, :]), labels=labels, seeds=seeds)
        name = ref.arch + (" (" + ", ".join(f"{k.removeprefix('model.')}={show(v)}" for k, v in setting.items())
                           + ")" if setting else "")
        chosen = all(str(ref.setting.get(k)) == str(v) for k, v in setting.items())
        nan = float("nan")
        out.append(ReferenceSlope(name, chosen, nan if fit is None else fit.slope,
                                  (nan, nan) if fit is None else fit.slope_ci, 0 if fit is None else fit.n_seeds,
                                  0 if fit is None else len(fit.dropped)))
    return out


def slope_range(slopes: list[ReferenceSlope]) -> tuple[float, float]:
    finite = [s.slope for s in slopes if np.isfinite(s.slope)]
    return (min(finite), max(finite)) if finite else (float("nan"), float("nan"))
