"""Run health in the analysis: each run's recorded or derived status, the still-falling check measured from its curves
where it was not recorded, and which runs are left out (criteria: harness/run_health.py; docs/analysis.md, *Run
health*)."""
from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.results_layout import RUNS_FILE
from harness import run_health as H
from harness import runs_columns as C
from harness.curves import read_curves
from harness.run_health import Trend, trend_of

from .collect import SweepResults
from .columns import plain
from .headline import Headline


@dataclass(frozen=True)
class Exclusion:
    trial: str  # trial_id, or the row number when runs.parquet has none
    status: str
    reasons: str
    derived: bool  # derived from existing columns (not recorded by the run)
    kept: bool = False  # used anyway: undertrained, or every run of its setting failed


@dataclass
class RunHealth:
    status: pd.Series  # per row of the full runs table
    used: pd.Series  # per row: analysed (not failed, or every run of its setting failed)
    runs: pd.DataFrame  # every run of runs.parquet (`status` and `used` are indexed like it)
    excluded: list[Exclusion] = field(default_factory=list)
    derived_rows: int = 0  # rows whose status was derived here, not recorded
    unchecked: list[str] = field(default_factory=list)  # criteria not checked for some run
    total_runs: int = 0
    falling_unchecked: Counter[str] = field(default_factory=Counter)  # why still_falling was not checked: runs
    falling_here: int = 0  # runs whose still_falling check ran here, from their run folder's curves

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(self.status)
        return {s: int(c.get(s, 0)) for s in H.STATUSES}

    def notes(self) -> list[str]:
        """Report lines: what was checked, how, and what was left out (empty list when every run is ok and
        every criterion was checked)."""
        out = []
        others = ", ".join(f"{c} ({H.CRITERIA[c]})" for c in self.unchecked if c != "still_falling")
        if self.derived_rows:
            out.append(f"run health of {self.derived_rows} of {self.total_runs} run(s) derived from {RUNS_FILE}'s "
                       "columns (the runs predate the recorded status)"
                       + (f"; not checked for them: {others}" if others else ""))
        elif others:
            out.append(f"run health: not checked for some runs: {others}")
        if self.falling_unchecked:
            out.append(f"still_falling ({H.CRITERIA['still_falling']}) not checked for "
                       f"{sum(self.falling_unchecked.values())} of {self.total_runs} run(s): "
                       + "; ".join(f"{why}: {n}" for why, n in sorted(self.falling_unchecked.items())))
        if self.falling_here:
            out.append(f"still_falling checked by the analysis from the learning curves of {self.falling_here} "
                       "run(s) that did not record it")
        return out

    def warnings(self) -> list[str]:
        return [f"{e.trial}: {e.status} ({e.reasons}); " + (why_kept(e) if e.kept else "left out of the analysis")
                for e in self.excluded]


#: Statuses of runs that broke: left out where their setting has another run.
FAILED = (H.COLLAPSED, H.DIVERGED)


def why_kept(e: Exclusion) -> str:
    return ("used: undertrained runs are kept (leaving out the seeds that learned least would bias the mean)"
            if e.status not in FAILED else "USED in the analysis: every run of its setting failed")


def _str(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)


def curve_trend(row: Mapping[str, Any], run_path: Callable[[str], Path] | None) -> Trend | str:
    """The still-falling trend of one runs.parquet row from its run folder's curves, or why there is none."""
    run_dir = row.get(C.RUN_DIR)
    if run_path is None or not isinstance(run_dir, str) or not run_path(run_dir).is_dir():
        return "no curve (no run folder)"
    return trend_of(read_curves(run_path(run_dir)), total_steps=_int(row.get("train_steps")),
                    epochs=_int(row.get("epochs_run")))


def _int(v: Any) -> int | None:
    """A runs.parquet cell as an int; None when missing (a column added after the run)."""
    return None if v is None or pd.isna(v) else int(v)


def _recheck(status: str, reasons: str, h: H.Health) -> tuple[str, str]:
    """A recorded status with the still-falling verdict `h` (of the same run) added."""
    falling = [r for r in h.reasons if r.startswith("still_falling:")]
    if not falling or status in FAILED:  # a failed run stays failed (checked first)
        return status, reasons
    return H.UNDERTRAINED, "; ".join([r for r in (reasons, *falling) if r])


def _recorded_with_curve(row: Mapping[str, Any], run_path: Callable[[str], Path] | None,
                         ) -> tuple[str, str, list[str], Trend | str]:
    """A row's recorded status, reasons and unchecked criteria, with the still-falling check measured from its
    run folder's curves where the run did not record it and the curves exist (then the trend, else why not)."""
    status, reasons = _str(row.get(H.STATUS_KEY)), _str(row.get(H.REASONS_KEY))
    missing = [c for c in _str(row.get(H.UNCHECKED_KEY)).split(", ") if c]
    trend: Trend | str = _str(row.get(H.FALL_CURVE_KEY)).removeprefix(H.NOT_CHECKED) or "not recorded"
    if "still_falling" in missing:
        trend = curve_trend(row, run_path)
        if isinstance(trend, Trend):
            status, reasons = _recheck(status, reasons, H.classify(row, trend))
            missing.remove("still_falling")
    return status, reasons, missing, trend


def record_trends(runs: pd.DataFrame, run_path: Callable[[str], Path]) -> tuple[pd.DataFrame, int]:
    """`runs` with the still-falling check written in for every run that recorded a health status but not that
    check (a run trained before it existed) and whose run folder still holds its curves: the trend columns
    (`harness.run_health.trend_fields`), and the status, reasons and unchecked criteria as `assess` derives them.
    `reference publish` calls it, since a reference keeps no run folders to measure from later. Returns the
    table and how many rows were filled."""
    out = runs.copy()
    filled = 0
    for idx, row in zip(runs.index, runs.to_dict("records"), strict=True):
        if not _str(row.get(H.STATUS_KEY)):
            continue
        status, reasons, missing, trend = _recorded_with_curve(row, run_path)
        if not isinstance(trend, Trend):
            continue
        for key, value in {**H.trend_fields(trend), H.STATUS_KEY: status, H.REASONS_KEY: reasons,
                           H.UNCHECKED_KEY: ", ".join(missing)}.items():
            if key not in out.columns:
                out[key] = pd.Series([None] * len(out), index=out.index, dtype=object)
            out.at[idx, key] = value
        filled += 1
    return out, filled


def assess(runs: pd.DataFrame, cols: list[str], run_path: Callable[[str], Path] | None = None) -> RunHealth:
    """Status of every row of `runs` (recorded where the run recorded one, else derived from its columns), and
    which unhealthy ones are left out: those whose setting (`cols`) has an ok run. `run_path` maps a `run_dir`
    to its folder, whose curves serve the still-falling check of runs that did not record it."""
    statuses, reasons, recorded, here = [], [], [], 0
    unchecked: Counter[str] = Counter()
    why_not: Counter[str] = Counter()
    rows = runs.to_dict("records")
    for row in rows:
        recorded.append(bool(_str(row.get(H.STATUS_KEY))))
        if recorded[-1]:
            status, why, missing, trend = _recorded_with_curve(row, run_path)
            here += isinstance(trend, Trend)
        else:
            trend = curve_trend(row, run_path)
            h = H.classify(row, trend)
            status, why, missing = h.status, "; ".join(h.reasons), list(h.unchecked)
        if "still_falling" in missing:
            why_not[trend if isinstance(trend, str) else "not recorded"] += 1
        unchecked.update(missing)
        statuses.append(status)
        reasons.append(why)
    status = pd.Series(statuses, index=runs.index, dtype=object)
    usable = ~status.isin(FAILED)
    setting_usable = usable.groupby([runs[c].astype(str) for c in cols], dropna=False).transform("any") if cols \
        else pd.Series(bool(usable.any()), index=runs.index)
    used = usable | ~setting_usable
    excluded = [Exclusion(str(row.get(C.TRIAL_ID, f"row {i}")), s, why, not rec, kept=bool(u))
                for i, (row, s, why, rec, u) in enumerate(zip(rows, statuses, reasons, recorded, used)) if s != H.OK]
    return RunHealth(status, used, runs, excluded, recorded.count(False), [c for c in H.CRITERIA if unchecked[c]],
                     len(runs), falling_unchecked=why_not, falling_here=here)


def healthy(results: SweepResults, health: RunHealth) -> SweepResults:
    """`results` with only the runs `health` uses (renumbered); the same object when it uses every run."""
    keep = health.used.to_numpy(dtype=bool)
    if keep.all():
        return results
    return dataclasses.replace(results, runs=results.runs[keep].reset_index(drop=True))


def counts_label(statuses: pd.Series) -> str:
    """`3 ok` or `2 ok, 1 collapsed`: a setting's runs per status."""
    c = Counter(statuses)
    return ", ".join(f"{c[s]} {s}" for s in H.STATUSES if c.get(s))


def annotate_headline(h: Headline, runs: pd.DataFrame, cols: list[str], health: RunHealth) -> None:
    """Give each headline row its setting's health counts over every run of runs.parquet (`runs`)."""
    labels = {}
    for k, rows in runs.groupby(cols, dropna=False, sort=True):
        k = k if isinstance(k, tuple) else (k,)
        labels[tuple(str(plain(v)) for v in k)] = counts_label(health.status.loc[rows.index])
    for r in h.rows:
        r.health = labels.get(tuple(str(r.setting[c]) for c in cols), "")
    h.has_health = True


# ----------------------------------------------------------------------------------------------
# retried runs


@dataclass(frozen=True)
class RetriedRun:
    trial: str
    setting: str  # the architecture and the settings that vary in the sweep
    seed: int
    path: str  # `0.16 diverged → 0.08 ok`: every attempt's learning rate and status
    status: str  # the final attempt's health status
    lr_initial: float
    lr_used: float


def retried_runs(runs: pd.DataFrame, cols: list[str]) -> list[RetriedRun] | None:
    """The runs trained more than once (None when the sweep had no retry policy: no `retry_*` columns)."""
    if C.RETRY_ATTEMPTS not in runs.columns:
        return None
    varied = [c for c in cols if c != C.ARCH and runs[c].astype(str).nunique() > 1]
    out = []
    for _, row in runs[runs[C.RETRY_ATTEMPTS].fillna(0) > 0].iterrows():
        setting = str(plain(row[C.ARCH])) + "".join(f", {c}={plain(row[c])}" for c in varied)
        out.append(RetriedRun(str(row.get(C.TRIAL_ID, "")), setting, int(row[C.SEED]), str(row[C.RETRY_HISTORY]),
                              str(row.get(H.STATUS_KEY, "")), float(row[C.RETRY_LR_INITIAL]),
                              float(row[C.RETRY_LR_USED])))
    return sorted(out, key=lambda r: r.trial)
