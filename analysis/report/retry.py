"""report.md's `## Retried runs` and analysis.json's `retried_runs`: the runs a sweep's `retry:` policy trained
again at a lower learning rate (harness/sweep/retry.py), from runs.parquet's `retry_*` columns.

Each row of runs.parquet holds its trial's final attempt, and the analysis uses it like any other run: its
setting is the one planned (`train.lr`, when the sweep sets it, keeps the planned rate), its health is the
final attempt's, and a run still unhealthy after its retries is listed under Run health and left out as any
other (analysis/run_health.py). This section lists, per retried run, its setting, seed, every attempt's
learning rate and status, and the final status. A sweep without `retry:` has no `retry_*` columns and no
section.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from harness import run_health as H
from harness import runs_columns as C

from .text import markdown_table


@dataclass(frozen=True)
class RetriedRun:
    trial: str
    setting: str  # the architecture and the settings that vary in the sweep
    seed: int
    path: str  # `0.16 diverged → 0.08 ok`: every attempt's learning rate and status
    status: str  # the final attempt's health status
    lr_initial: float
    lr_used: float


def _show(v: Any) -> str:
    return str(v.item() if isinstance(v, np.generic) else v)


def retried_runs(runs: pd.DataFrame, cols: list[str]) -> list[RetriedRun] | None:
    """The runs trained more than once (None when the sweep had no retry policy: no `retry_*` columns)."""
    if C.RETRY_ATTEMPTS not in runs.columns:
        return None
    varied = [c for c in cols if c != C.ARCH and runs[c].astype(str).nunique() > 1]
    out = []
    for _, row in runs[runs[C.RETRY_ATTEMPTS].fillna(0) > 0].iterrows():
        setting = _show(row[C.ARCH]) + "".join(f", {c}={_show(row[c])}" for c in varied)
        out.append(RetriedRun(str(row.get(C.TRIAL_ID, "")), setting, int(row[C.SEED]), str(row[C.RETRY_HISTORY]),
                              str(row.get(H.STATUS_KEY, "")), float(row[C.RETRY_LR_INITIAL]),
                              float(row[C.RETRY_LR_USED])))
    return sorted(out, key=lambda r: r.trial)


def retry_section(retried: list[RetriedRun] | None) -> list[str]:
    """report.md's `## Retried runs` (nothing for a sweep without a retry policy)."""
    if retried is None:
        return []
    head = ["## Retried runs", "",
            "The sweep's `retry:` policy trained an unhealthy run again from scratch (same seed and data) at a lower "
            "learning rate. Each run below is its final attempt everywhere in this report; its setting is the one "
            "planned. A run still unhealthy after its retries is listed under Run health like any other.", ""]
    if not retried:
        return head + ["No run needed a retry.", ""]
    rows = [[r.trial, r.setting, str(r.seed), r.path, r.status] for r in retried]
    return head + markdown_table(["run", "setting", "seed", "learning rate → status, per attempt", "final status"],
                                 rows) + [""]
