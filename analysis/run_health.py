"""Run health in the analysis: each run's recorded status and which runs are left out (criteria and their
measurement at the end of each run: harness/run_health.py; docs/analysis.md, *Run health*)."""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core.results_layout import RUNS_FILE
from harness import run_health as H
from harness import runs_columns as C
from protocols.errors import plain

from .collect import SweepResults
from .headline import Headline


@dataclass(frozen=True)
class Exclusion:
    trial: str  # trial_id, or the row number when runs.parquet has none
    status: str
    reasons: str
    kept: bool = False  # used anyway: undertrained, or every run of its setting failed


@dataclass
class RunHealth:
    status: pd.Series  # per row of the full runs table
    used: pd.Series  # per row: analysed (not failed, or every run of its setting failed)
    runs: pd.DataFrame  # every run of runs.parquet (`status` and `used` are indexed like it)
    excluded: list[Exclusion] = field(default_factory=list)
    unrecorded: int = 0  # rows without a recorded status (written by hand or before runs recorded one): used
    unchecked: list[str] = field(default_factory=list)  # criteria not checked for some run
    total_runs: int = 0
    falling_unchecked: Counter[str] = field(default_factory=Counter)  # why still_falling was not checked: runs

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(self.status)
        return {s: int(c.get(s, 0)) for s in H.STATUSES}

    def notes(self) -> list[str]:
        """Report lines: what was checked, how, and what was left out (empty when every run is ok and checked)."""
        out = []
        others = ", ".join(f"{c} ({H.CRITERIA[c]})" for c in self.unchecked if c != "still_falling")
        if others:
            out.append(f"run health: not checked for some runs: {others}")
        if self.falling_unchecked:
            out.append(f"still_falling ({H.CRITERIA['still_falling']}) not checked for "
                       f"{sum(self.falling_unchecked.values())} of {self.total_runs} run(s): "
                       + "; ".join(f"{why}: {n}" for why, n in sorted(self.falling_unchecked.items())))
        return out

    def warnings(self) -> list[str]:
        unrecorded = [f"run health not recorded for {self.unrecorded} of {self.total_runs} run(s) of {RUNS_FILE} "
                      "(written by hand, or before runs recorded it): used as ok, no criterion checked; rerun "
                      "the sweep to check them"] if self.unrecorded else []
        return unrecorded + [f"{e.trial}: {e.status} ({e.reasons}); "
                             + (why_kept(e) if e.kept else "left out of the analysis") for e in self.excluded]


#: Statuses of runs that broke: left out where their setting has another run.
FAILED = (H.COLLAPSED, H.DIVERGED)


def why_kept(e: Exclusion) -> str:
    return ("used: undertrained runs are kept (leaving out the seeds that learned least would bias the mean)"
            if e.status not in FAILED else "USED in the analysis: every run of its setting failed")


def _str(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)


def assess(runs: pd.DataFrame, cols: list[str]) -> RunHealth:
    """Recorded status per row and the unhealthy runs left out per setting `cols` (docs/analysis.md, *Run health*)."""
    rows = runs.to_dict("records")
    recorded = [bool(_str(row.get(H.STATUS_KEY))) for row in rows]
    statuses = [_str(row.get(H.STATUS_KEY)) or H.OK for row in rows]
    reasons = [_str(row.get(H.REASONS_KEY)) for row in rows]
    unchecked: Counter[str] = Counter()
    why_not: Counter[str] = Counter()
    for row, rec in zip(rows, recorded, strict=True):
        missing = [c for c in _str(row.get(H.UNCHECKED_KEY)).split(", ") if c] if rec else []
        if "still_falling" in missing:
            why_not[_str(row.get(H.FALL_CURVE_KEY)).removeprefix(H.NOT_CHECKED) or "not recorded"] += 1
        unchecked.update(missing)
    status = pd.Series(statuses, index=runs.index, dtype=object)
    usable = ~status.isin(FAILED)
    setting_usable = usable.groupby([runs[c].astype(str) for c in cols], dropna=False).transform("any") if cols \
        else pd.Series(bool(usable.any()), index=runs.index)
    used = usable | ~setting_usable
    excluded = [Exclusion(str(row.get(C.TRIAL_ID, f"row {i}")), s, why, kept=bool(u))
                for i, (row, s, why, u) in enumerate(zip(rows, statuses, reasons, used)) if s != H.OK]
    return RunHealth(status, used, runs, excluded, recorded.count(False), [c for c in H.CRITERIA if unchecked[c]],
                     len(runs), falling_unchecked=why_not)


def healthy(results: SweepResults, health: RunHealth) -> SweepResults:
    """`results` with only the runs `health` uses (renumbered); the same object when it uses every run."""
    keep = health.used.to_numpy(dtype=bool)
    if keep.all():
        return results
    return dataclasses.replace(results, runs=results.runs[keep].reset_index(drop=True))


def annotate_headline(h: Headline, runs: pd.DataFrame, cols: list[str], health: RunHealth) -> None:
    """Give each headline row its setting's health counts over every run of runs.parquet (`runs`)."""
    labels = {}
    for k, rows in runs.groupby(cols, dropna=False, sort=True):
        c = Counter(health.status.loc[rows.index])  # `3 ok` or `2 ok, 1 collapsed`
        labels[tuple(str(plain(v)) for v in k)] = ", ".join(f"{c[s]} {s}" for s in H.STATUSES if c.get(s))
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
