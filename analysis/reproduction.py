"""Did a fresh run of a sweep reproduce its committed reference? Bit-exact, within seed noise, or not.

Training is bit-exact only where the same floating-point kernels run it: the same CPU kind (its
instruction sets decide torch's vectorised kernels and MKL's and OpenBLAS's code paths), the same
library versions and thread count (`harness.fingerprint`). Elsewhere a run is a different rounding of
the same computation, and one epoch of SGD carries such differences into the last digits of every
weight and a few 1e-4 to 1e-3 of AUC. That is not a failure to reproduce as long as it is small against
what the reference's conclusions are measured against: the spread over seeds.

The check matches the two runs tables by `trial_id` and compares `REPRODUCED_COLUMNS` trial by trial:

- **bit-exact**: every reference trial present, no extra trial, every value identical;
- **within tolerance**: every |fresh - reference| at most the trial's tolerance;
- **NOT reproduced**: a trial missing or extra, or a difference beyond its tolerance (each one named).

Tolerance rule (`seed_noise_tolerance`): for a metric and a trial, `fraction` x the seed standard
deviation (ddof 1) of that metric among the reference trials of the trial's setting (every setting
column but the seed). A setting with fewer than two seeds, or with a zero spread, takes the smallest
positive seed SD of the metric over the sweep's settings; a sweep with none has tolerance 0 (only
bit-exact passes). The default fraction, `DEFAULT_SD_FRACTION` = 0.5, keeps a tolerated difference
below half a seed SD: a setting's seed mean then moves by at most that, against a standard error of
the difference of two settings' means of SD x sqrt(2 / seeds) (0.82 SD at 3 seeds), so no comparison
of the reference can change sign because of it. docs/sweeps.md gives the cross-CPU figures measured
against this rule. An absolute tolerance can be given instead (`absolute=`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.fingerprint import PREFIX as FINGERPRINT_PREFIX
from protocols.errors import RecscaleError

from .collect import RUNS_FILE, config_columns, hashable_lists

#: Per-run columns that must agree between a fresh sweep and its reference for it to count as reproduced.
REPRODUCED_COLUMNS = ("test_auc", "test_logloss")
#: Default tolerance as a fraction of the trial's setting's seed standard deviation.
DEFAULT_SD_FRACTION = 0.5
BIT_EXACT, WITHIN_TOLERANCE, NOT_REPRODUCED = "bit-exact", "within tolerance", "NOT reproduced"


@dataclass
class MetricAgreement:
    """How one metric of the matched trials agrees."""

    metric: str
    largest: float  # largest |fresh - reference| over the matched trials (nan when none matched)
    worst_trial: str  # the trial with that difference
    worst_setting_sd: float  # seed SD of the worst trial's setting in the reference (nan when not defined)
    worst_tolerance: float  # the worst trial's tolerance
    beyond: list[tuple[str, float, float]] = field(default_factory=list)  # (trial, |difference|, tolerance)


@dataclass
class ReproductionCheck:
    """Per-trial agreement of a fresh sweep with its reference, with the machines each ran on."""

    matched: int  # trials present in both
    missing: list[str]  # reference trials the fresh sweep lacks
    extra: list[str]  # fresh trials the reference lacks
    metrics: dict[str, MetricAgreement]
    tolerance_rule: str  # the rule in words, for the printout
    fingerprint_differences: list[tuple[str, str, str]]  # (key, fresh, reference) where the machines differ

    @property
    def exact(self) -> bool:
        return not self.missing and not self.extra and all(m.largest == 0.0 for m in self.metrics.values())

    @property
    def verdict(self) -> str:
        if self.exact:
            return BIT_EXACT
        if self.missing or self.extra or any(m.beyond for m in self.metrics.values()):
            return NOT_REPRODUCED
        return WITHIN_TOLERANCE


def _read_runs(folder: Path) -> pd.DataFrame:
    path = folder / RUNS_FILE
    if not path.is_file():
        raise RecscaleError(f"{path}: not found")
    table = pd.read_parquet(path)
    missing = [c for c in ("trial_id", *REPRODUCED_COLUMNS) if c not in table.columns]
    if missing:
        raise RecscaleError(f"{path}: column {missing[0]!r} missing")
    if table["trial_id"].duplicated().any():
        raise RecscaleError(f"{path}: trial_id {table['trial_id'][table['trial_id'].duplicated()].iloc[0]!r} "
                            "appears twice")
    return hashable_lists(table).set_index("trial_id")


def seed_noise_tolerance(reference: pd.DataFrame, metric: str, fraction: float) -> tuple[pd.Series, pd.Series]:
    """(tolerance, setting seed SD) per reference trial (indexed like `reference`) for `metric`, by the
    rule in the module docstring."""
    settings = [c for c in config_columns(reference.reset_index()) if c in reference.columns]
    values = reference[metric].astype(np.float64)
    if settings:
        sd = values.groupby([reference[c].astype(str) for c in settings], dropna=False).transform(
            lambda v: v.std(ddof=1) if v.notna().sum() >= 2 else np.nan)
    else:
        sd = pd.Series(values.std(ddof=1) if values.notna().sum() >= 2 else np.nan, index=values.index)
    positive = sd[sd > 0]
    floor = float(positive.min()) if len(positive) else 0.0
    sd_used = sd.where(sd > 0, floor)
    return fraction * sd_used, sd


def _fingerprints(table: pd.DataFrame) -> dict[str, str]:
    """Each `env_*` column's distinct values, joined ("" for a table that predates fingerprints)."""
    return {c[len(FINGERPRINT_PREFIX):]: " | ".join(sorted({str(v) for v in table[c].dropna()}))
            for c in table.columns if c.startswith(FINGERPRINT_PREFIX)}


def compare_with_reference(fresh_dir: Path | str, reference_dir: Path | str, *,
                           sd_fraction: float = DEFAULT_SD_FRACTION,
                           absolute: float | None = None) -> ReproductionCheck:
    """Match the two runs tables by `trial_id` and judge how far their `REPRODUCED_COLUMNS` differ."""
    fresh, ref = _read_runs(Path(fresh_dir)), _read_runs(Path(reference_dir))
    both = ref.index.intersection(fresh.index)
    agreements = {}
    for col in REPRODUCED_COLUMNS:
        tol, sd = seed_noise_tolerance(ref, col, sd_fraction)
        if absolute is not None:
            tol = pd.Series(absolute, index=ref.index)
        d = (fresh.loc[both, col].astype(np.float64) - ref.loc[both, col].astype(np.float64)).abs()
        d = d.fillna(np.inf).where(~(fresh.loc[both, col].isna() & ref.loc[both, col].isna()), 0.0)
        if len(d):
            worst = str(d.idxmax())
            agreements[col] = MetricAgreement(
                col, float(d.max()), worst, float(sd[worst]), float(tol[worst]),
                [(str(t), float(d[t]), float(tol[t])) for t in d.index if d[t] > tol[t]])
        else:
            agreements[col] = MetricAgreement(col, float("nan"), "", float("nan"), float("nan"))
    rule = (f"|difference| <= {absolute:g}" if absolute is not None else
            f"|difference| <= {sd_fraction:g} x the seed SD of the trial's setting in the reference")
    ff, fr = _fingerprints(fresh), _fingerprints(ref)
    fp_diff = [(k, ff.get(k, "(not recorded)"), fr.get(k, "(not recorded)")) for k in sorted({*ff, *fr})
               if ff.get(k) != fr.get(k)]
    return ReproductionCheck(
        matched=len(both), missing=sorted(set(ref.index) - set(fresh.index)),
        extra=sorted(set(fresh.index) - set(ref.index)), metrics=agreements, tolerance_rule=rule,
        fingerprint_differences=fp_diff,
    )


def check_lines(check: ReproductionCheck, *, exact: bool = False) -> list[str]:
    """The printout of `recscale reference check`, its last line the verdict."""
    lines = [f"{check.matched} trial(s) in both; {len(check.missing)} missing from the fresh sweep; "
             f"{len(check.extra)} not in the reference"]
    lines += [f"  missing: {t}" for t in check.missing] + [f"  not in the reference: {t}" for t in check.extra]
    if not check.exact:
        lines.append(f"tolerance: {check.tolerance_rule}")
    for m in check.metrics.values():
        line = f"  {m.metric}: largest |fresh - reference| = {m.largest:.3g}"
        if m.largest > 0:
            line += (f" ({m.worst_trial}; its setting's seed SD {m.worst_setting_sd:.3g}, "
                     f"tolerance {m.worst_tolerance:.3g})")
        lines.append(line)
        lines += [f"    beyond tolerance: {t} {m.metric} differs by {d:.3g} (tolerance {tol:.3g})"
                  for t, d, tol in m.beyond]
    if not check.exact:
        if check.fingerprint_differences:
            lines.append("where the two ran differs (fresh vs reference):")
            lines += [f"  {k}: {a or '(none)'} vs {b or '(none)'}" for k, a, b in check.fingerprint_differences]
        else:
            lines.append("the two runs record the same machine and software fingerprint")
    verdict = check.verdict
    if exact and verdict == WITHIN_TOLERANCE:
        verdict = f"NOT reproduced bit-exactly (--exact); {WITHIN_TOLERANCE} otherwise"
    lines.append(verdict)
    return lines
