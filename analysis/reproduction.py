"""Did a fresh run of a sweep reproduce its committed reference? Bit-exact, within seed noise, or not.

Training is bit-exact only where the same floating-point kernels run it: the same CPU kind (its
instruction sets decide torch's vectorised kernels and MKL's and OpenBLAS's code paths), the same
library versions and thread count (`harness.fingerprint`). Elsewhere a run is a different rounding of
the same computation, and training carries such differences on: most runs end within 1e-7 of each
other, but a few amplify them to a redraw of part of their training noise. Forcing torch's plain C++
kernels (ATEN_CPU_CAPABILITY=default) on the demo moved the median trial by 5e-5 and the largest by
0.68 (AUC) and 0.92 (LogLoss) of its setting's seed SD as floored below (0.94 and 1.75 of the three-seed
SD of its own setting; docs/reproducibility.md). Such a rerun is not a
failure to reproduce as long as it stays within what the reference's conclusions are measured against,
the spread over seeds, and shows no systematic shift.

The check matches the two runs tables by `trial_id` and compares `REPRODUCED_COLUMNS` trial by trial:

- **bit-exact**: every reference trial present, no extra trial, every value identical;
- **within tolerance**: every |fresh - reference| at most the trial's tolerance, and no systematic shift;
- **NOT reproduced**: a trial missing or extra, a difference beyond its tolerance (each one named), or a
  systematic shift.

Tolerance rule (`seed_noise_tolerance`): for a metric and a trial, `fraction` x the seed standard
deviation (ddof 1) of that metric among the reference trials of the trial's setting (every setting
column but the seed), floored at the median of the sweep's per-setting seed SDs. The floor is there
because an SD from three seeds is a rough estimate (with 2 degrees of freedom its 90% interval runs from
0.52 to 4.4 times the true SD), so a setting whose seeds happened to land close together would
otherwise get a tolerance far below its real noise. A setting with fewer than two seeds, or with a zero
spread, takes the median too; a sweep with no spread at all has tolerance 0 (only bit-exact passes).
The default fraction, `DEFAULT_SD_FRACTION` = 2, accepts a trial whose fresh value
lies where another seed of its setting could have landed (two seeds differ by sqrt(2) SD on average).
Systematic shift (`SHIFT_ALPHA`): the signed differences in units of their setting's SD, over every
matched trial, tested against a mean of zero (one-sample t-test, scipy.stats.ttest_1samp) at p < 0.01
per metric; a kernel change moves trials both ways (the demo's p: 0.83 and 0.64), a changed method or
input moves them one way. An absolute tolerance can be given instead (`absolute=`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from core.errors import RecscaleError
from harness.fingerprint import PREFIX as FINGERPRINT_PREFIX

from .collect import RUNS_FILE, config_columns, read_runs

#: Per-run columns that must agree between a fresh sweep and its reference for it to count as reproduced.
REPRODUCED_COLUMNS = ("test_auc", "test_logloss")
#: Default tolerance as a multiple of the trial's setting's seed standard deviation.
DEFAULT_SD_FRACTION = 2.0
#: Level of the one-sample t-test for a systematic shift of the standardised differences, per metric.
SHIFT_ALPHA = 0.01
#: Fewest differing trials the shift test needs.
SHIFT_MIN_TRIALS = 5
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
    floor_sd: float = float("nan")  # the median per-setting seed SD, the floor of every setting's SD
    median_in_sd: float = float("nan")  # median |difference| / setting seed SD
    shift_p: float | None = None  # p of the systematic-shift test (None: too few differing trials)

    @property
    def shifted(self) -> bool:
        return self.shift_p is not None and self.shift_p < SHIFT_ALPHA


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
        if self.missing or self.extra or any(m.beyond or m.shifted for m in self.metrics.values()):
            return NOT_REPRODUCED
        return WITHIN_TOLERANCE


def _read_runs(folder: Path) -> pd.DataFrame:
    """The sweep's runs table as `recscale analyze` reads it (`collect.read_runs`: damaged files and missing
    arch/seed named), with the trial id and the compared metrics checked too, indexed by trial id."""
    path = folder / RUNS_FILE
    table = read_runs(path)
    missing = [c for c in ("trial_id", *REPRODUCED_COLUMNS) if c not in table.columns]
    if missing:
        raise RecscaleError(f"{path}: column {missing[0]!r} missing")
    if table["trial_id"].duplicated().any():
        raise RecscaleError(f"{path}: trial_id {table['trial_id'][table['trial_id'].duplicated()].iloc[0]!r} "
                            "appears twice")
    return table.set_index("trial_id")


def seed_noise_tolerance(reference: pd.DataFrame, metric: str) -> tuple[pd.Series, pd.Series, float]:
    """(seed SD used, the setting's own seed SD, the floor) per reference trial (indexed like `reference`)
    for `metric`, by the rule in the module docstring; the tolerance is a multiple of the first."""
    settings = [c for c in config_columns(reference.reset_index()) if c in reference.columns]
    values = reference[metric].astype(np.float64)
    keys = [reference[c].astype(str) for c in settings]
    if settings:
        sd = values.groupby(keys, dropna=False).transform(lambda v: v.std(ddof=1) if v.notna().sum() >= 2 else np.nan)
        per_setting = sd.groupby(keys, dropna=False).first()
    else:
        sd = pd.Series(values.std(ddof=1) if values.notna().sum() >= 2 else np.nan, index=values.index)
        per_setting = sd.iloc[:1]
    positive = per_setting[per_setting > 0]
    floor = float(positive.median()) if len(positive) else 0.0
    return sd.where(sd > floor, floor), sd, floor


def _shift_p(standardised: pd.Series) -> float | None:
    """p of a one-sample t-test of the standardised signed differences against zero (None when fewer than
    SHIFT_MIN_TRIALS differ, or they are not finite)."""
    from scipy import stats

    x = standardised.to_numpy(dtype=np.float64)
    if not np.isfinite(x).all() or np.count_nonzero(x) < SHIFT_MIN_TRIALS:
        return None
    return float(stats.ttest_1samp(x, 0.0).pvalue)


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
        sd_used, sd, floor = seed_noise_tolerance(ref, col)
        tol = sd_fraction * sd_used if absolute is None else pd.Series(absolute, index=ref.index)
        d = (fresh.loc[both, col].astype(np.float64) - ref.loc[both, col].astype(np.float64)).abs()
        d = d.fillna(np.inf).where(~(fresh.loc[both, col].isna() & ref.loc[both, col].isna()), 0.0)
        if len(d):
            worst = str(d.idxmax())
            scale = sd_used.loc[both].where(sd_used.loc[both] > 0)
            standardised = (fresh.loc[both, col].astype(np.float64) - ref.loc[both, col].astype(np.float64)) / scale
            agreements[col] = MetricAgreement(
                col, float(d.max()), worst, float(sd[worst]), float(tol[worst]),
                [(str(t), float(d[t]), float(tol[t])) for t in d.index if d[t] > tol[t]],
                floor_sd=floor, median_in_sd=float((d / scale).median()), shift_p=_shift_p(standardised))
        else:
            agreements[col] = MetricAgreement(col, float("nan"), "", float("nan"), float("nan"))
    rule = (f"|difference| <= {absolute:g}" if absolute is not None else
            f"|difference| <= {sd_fraction:g} x the seed SD of the trial's setting in the reference (at least "
            "the median setting's), "
            f"and no systematic shift (one-sample t-test of the differences in SD units, p < {SHIFT_ALPHA:g})")
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
            line += (f" ({m.worst_trial}; its setting's seed SD {m.worst_setting_sd:.3g}, median setting's "
                     f"{m.floor_sd:.3g}, tolerance {m.worst_tolerance:.3g})")
        lines.append(line)
        if m.largest > 0 and np.isfinite(m.median_in_sd):
            shift = "" if m.shift_p is None else f"; systematic shift p = {m.shift_p:.2g}"
            lines.append(f"    median |difference| = {m.median_in_sd:.2g} seed SD{shift}"
                         + ("  <- shifted" if m.shifted else ""))
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
