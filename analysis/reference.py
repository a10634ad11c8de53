"""Committed reference studies (docs/reproducibility.md): `publish_reference` copies a sweep's shareable files
(never run folders) into a reference, and `compare_with_reference` judges whether a fresh run reproduced it."""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from core.errors import RecscaleError
from core.results_layout import DATASETS_FILE, SEEDS_ADDED_FILE, TUNING_FILE, score_ranks_file
from harness import runs_columns as C
from harness.fingerprint import fingerprint_differences

from .collect import RUNS_FILE, SWEEP_FILE, config_columns, load_results, read_runs
from .compare.delong_seeds import write_score_ranks
from .compare.pairing import pair_runs
from .compare.questions import questions_of
from .pipeline import replace_path

#: Files copied from the sweep folder into its reference (everything else is regenerated there).
REFERENCE_INPUTS = (SWEEP_FILE, RUNS_FILE)
#: Files also copied when the sweep has them (docs/sweeps.md, "What a sweep writes").
COPIED_OPTIONAL_INPUTS = (DATASETS_FILE, TUNING_FILE, SEEDS_ADDED_FILE)
#: Inputs a reference holds when its sweep has them: the copied ones, and the score ranks written here.
OPTIONAL_INPUTS = (*COPIED_OPTIONAL_INPUTS, score_ranks_file("test"), score_ranks_file("valid"))


def publish_reference(sweep_dir: Path | str, out: Path | str, *, trust_edits: bool = False) -> Path:
    """Copy the reference inputs of `sweep_dir` into `out` (replaced atomically) with the score ranks of the runs
    that data comparisons compare, and return it; the caller analyses it (`analysis.pipeline.analyze(out)`)."""
    sweep_dir, out = Path(sweep_dir), Path(out)
    for name in REFERENCE_INPUTS:
        if not (sweep_dir / name).is_file():
            raise RecscaleError(f"{sweep_dir / name}: not found; is {sweep_dir} a finished sweep folder?")
    if out.resolve() == sweep_dir.resolve():
        raise RecscaleError(f"{out}: the reference folder must differ from the sweep folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for name in (*REFERENCE_INPUTS, *COPIED_OPTIONAL_INPUTS):  # the first two checked above
            if (sweep_dir / name).is_file():
                shutil.copy2(sweep_dir / name, tmp / name)
        _write_ranks(sweep_dir, tmp, trust_edits)
        replace_path(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _write_ranks(sweep_dir: Path, out: Path, trust_edits: bool) -> None:
    """Score ranks of every run that a comparison varying a data setting pairs (nothing when none does)."""
    results = load_results(sweep_dir, trust_edits=trust_edits)
    comparisons = [q for q, _ in questions_of(results) if q.kind == "comparison"]
    rows = [int(r) for c in comparisons for p in pair_runs(results, c) if p.varies_data
            for r in (*p.rows_a, *p.rows_b)]
    if rows and results.config.delong:
        write_score_ranks(results, rows, out / score_ranks_file(results.config.split))


#: Per-run columns that must agree between a fresh sweep and its reference for it to count as reproduced.
REPRODUCED_COLUMNS = ("test_auc", "test_logloss")
#: Default tolerance as a multiple of the trial's setting's seed standard deviation.
DEFAULT_SD_FRACTION = 2.0
#: Level of the one-sample t-test for a systematic shift of the standardised differences, per metric.
SHIFT_ALPHA = 0.01
#: Fewest differing trials the shift test needs.
SHIFT_MIN_TRIALS = 5
BIT_EXACT, WITHIN_TOLERANCE, NOT_REPRODUCED = "bit-exact", "within tolerance", "NOT reproduced"
DIFFERENT_STUDY = "NOT reproduced: a different study (the trials' configurations differ)"


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
    config_differences: list[tuple[str, str, str, str]] = field(default_factory=list)  # (trial, column, fresh, ref)

    @property
    def exact(self) -> bool:
        return (not self.missing and not self.extra and not self.config_differences
                and all(m.largest == 0.0 for m in self.metrics.values()))

    @property
    def verdict(self) -> str:
        if self.config_differences:
            return DIFFERENT_STUDY
        if self.exact:
            return BIT_EXACT
        if self.missing or self.extra or any(m.beyond or m.shifted for m in self.metrics.values()):
            return NOT_REPRODUCED
        return WITHIN_TOLERANCE


def _read_runs(folder: Path, trust_edits: bool) -> pd.DataFrame:
    """The runs table as `collect.read_runs` reads it, its trial ids and compared metrics checked, by trial id."""
    path = folder / RUNS_FILE
    table = read_runs(path, trust_edits=trust_edits)
    missing = [c for c in (C.TRIAL_ID, *REPRODUCED_COLUMNS) if c not in table.columns]
    if missing:
        raise RecscaleError(f"{path}: column {missing[0]!r} missing")
    if table[C.TRIAL_ID].duplicated().any():
        raise RecscaleError(f"{path}: trial_id {table[C.TRIAL_ID][table[C.TRIAL_ID].duplicated()].iloc[0]!r} "
                            "appears twice")
    return table.set_index(C.TRIAL_ID)


def seed_noise_tolerance(reference: pd.DataFrame, metric: str) -> tuple[pd.Series, pd.Series, float]:
    """(seed SD used, the setting's own seed SD, the floor) per reference trial (indexed like `reference`)
    for `metric` (docs/reproducibility.md: the tolerance is a multiple of the first)."""
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
    """The shift test's p (docs/reproducibility.md); None with a non-finite value or under SHIFT_MIN_TRIALS nonzero."""
    x = standardised.to_numpy(dtype=np.float64)
    if not np.isfinite(x).all() or np.count_nonzero(x) < SHIFT_MIN_TRIALS:
        return None
    return float(stats.ttest_1samp(x, 0.0).pvalue)


def _fingerprints(table: pd.DataFrame) -> dict[str, str]:
    """Each `env_*` column's distinct values, joined ("" for a table that predates fingerprints)."""
    return {c: " | ".join(sorted({str(v) for v in table[c].dropna()}))
            for c in table.columns if c.startswith(C.ENV_PREFIX)}


def _config_differences(fresh: pd.DataFrame, ref: pd.DataFrame, both: pd.Index) -> list[tuple[str, str, str, str]]:
    """(trial, column, fresh value, reference value) for every setting column (config columns and the seed)
    in which a matched trial differs; a column only one table has counts as (not recorded) in the other."""
    cols = sorted({*config_columns(fresh.reset_index()), *config_columns(ref.reset_index()), C.SEED})
    def text(t: pd.DataFrame) -> pd.DataFrame:
        values = pd.DataFrame({c: t.loc[both, c] if c in t.columns else "(not recorded)" for c in cols}, index=both)
        return values.astype(str).where(values.notna(), "(none)")
    a, b = text(fresh), text(ref)
    return [(str(t), c, a.at[t, c], b.at[t, c]) for t in both for c in cols if a.at[t, c] != b.at[t, c]]


def compare_with_reference(fresh_dir: Path | str, reference_dir: Path | str, *,
                           sd_fraction: float = DEFAULT_SD_FRACTION,
                           absolute: float | None = None, trust_edits: bool = False) -> ReproductionCheck:
    """Match the two runs tables by `trial_id`, name any trial whose configuration differs, and judge how far
    their `REPRODUCED_COLUMNS` differ."""
    fresh, ref = _read_runs(Path(fresh_dir), trust_edits), _read_runs(Path(reference_dir), trust_edits)
    both = ref.index.intersection(fresh.index)
    agreements = {}
    for col in REPRODUCED_COLUMNS:
        sd_used, sd, floor = seed_noise_tolerance(ref, col)
        tol = sd_fraction * sd_used if absolute is None else pd.Series(absolute, index=ref.index)
        diff = fresh.loc[both, col].astype(np.float64) - ref.loc[both, col].astype(np.float64)
        d = diff.abs().fillna(np.inf).where(~(fresh.loc[both, col].isna() & ref.loc[both, col].isna()), 0.0)
        if len(d):
            worst = str(d.idxmax())
            scale = sd_used.loc[both].where(sd_used.loc[both] > 0)
            agreements[col] = MetricAgreement(
                col, float(d.max()), worst, float(sd[worst]), float(tol[worst]),
                [(str(t), float(d[t]), float(tol[t])) for t in d.index if d[t] > tol[t]],
                floor_sd=floor, median_in_sd=float((d / scale).median()), shift_p=_shift_p(diff / scale))
        else:
            agreements[col] = MetricAgreement(col, float("nan"), "", float("nan"), float("nan"))
    rule = (f"|difference| <= {absolute:g}" if absolute is not None else
            f"|difference| <= {sd_fraction:g} x the seed SD of the trial's setting in the reference (at least "
            "the median setting's), "
            f"and no systematic shift (one-sample t-test of the differences in SD units, p < {SHIFT_ALPHA:g})")
    fp_diff = fingerprint_differences(_fingerprints(fresh), _fingerprints(ref), missing="(not recorded)")
    return ReproductionCheck(
        matched=len(both), missing=sorted(set(ref.index) - set(fresh.index)),
        extra=sorted(set(fresh.index) - set(ref.index)), metrics=agreements, tolerance_rule=rule,
        fingerprint_differences=fp_diff, config_differences=_config_differences(fresh, ref, both),
    )


def check_lines(check: ReproductionCheck, *, exact: bool = False) -> list[str]:
    """The printout of `recscale reference check`, its last line the verdict."""
    lines = [f"{check.matched} trial(s) in both; {len(check.missing)} missing from the fresh sweep; "
             f"{len(check.extra)} not in the reference"]
    lines += [f"  missing: {t}" for t in check.missing] + [f"  not in the reference: {t}" for t in check.extra]
    if check.config_differences:  # a different study: the CPU is beside the point
        n = len(check.config_differences)
        lines.append(f"{n} configuration difference(s) (trial, column: fresh vs reference):")
        lines += [f"  {t}, {c}: {a} vs {b}" for t, c, a, b in check.config_differences[:10]]
        return lines + ([f"  ... {n - 10} more"] if n > 10 else []) + [check.verdict]
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
