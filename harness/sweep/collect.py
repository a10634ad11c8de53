"""`results/<sweep>/runs.parquet`: one row per finished trial, its config beside its metrics, built from the run
folders alone (`sweep_trial.json` + `metrics.json`), so it can be rebuilt from copied results without Ray.
Its columns: docs/sweeps.md, "What a sweep writes" (names in `harness.runs_columns`).
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from core.atomic_write import write_parquet, write_text
from core.results_layout import METRICS_FILE, RUNS_DIR, RUNS_FILE, TRIAL_RECORD_FILE
from core.typed_config import flat_keys
from harness import runs_columns as C


def scalar_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The flat, scalar part of a metrics.json dict (what Tune records and runs.parquet keeps; a non-finite float
    as None)."""
    return {k: v if not isinstance(v, float) or math.isfinite(v) else None
            for k, v in metrics.items() if isinstance(v, (int, float, str))}  # bool is an int


def write_trial_record(run_dir: Path, record: dict[str, Any]) -> None:
    """Atomically write the trial's config record into its run folder."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(run_dir / TRIAL_RECORD_FILE, json.dumps(record, indent=1, default=str))


def folder_row(run_dir: Path) -> dict[str, Any] | None:
    """The runs.parquet row of one run folder (None unless it holds both the trial record and metrics)."""
    record_path, metrics_path = run_dir / TRIAL_RECORD_FILE, run_dir / METRICS_FILE
    if not (record_path.exists() and metrics_path.exists()):
        return None
    # nested settings (a `train.schedule` mapping) one column per leaf: every cell a scalar analysis can group by
    record = flat_keys(json.loads(record_path.read_text()))
    metrics = scalar_metrics(json.loads(metrics_path.read_text()))
    metrics = {k: v for k, v in metrics.items() if k not in record}  # config columns win (same values)
    return {C.TRIAL_ID: record[C.TRIAL_ID], C.RUN_DIR: f"{RUNS_DIR}/{run_dir.name}", **record, **metrics}


def finished_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    """One dict per run folder holding both the trial record and finished metrics."""
    runs = Path(sweep_dir) / RUNS_DIR
    rows = (folder_row(run_dir) for run_dir in sorted(p for p in runs.glob("*") if p.is_dir()))
    return [row for row in rows if row is not None]


def row_digests(table: pa.Table) -> list[str]:
    """Each row's ROW_DIGEST: sha256 of its other columns as JSON (names sorted, floats by their exact repr),
    computed from the Arrow table so that writing and reading runs.parquet digest the same values."""
    cols = [c for c in table.column_names if c != C.ROW_DIGEST]
    return [hashlib.sha256(json.dumps(row, sort_keys=True, default=repr).encode()).hexdigest()[:16]
            for row in table.select(cols).to_pylist()]


def collect_runs(sweep_dir: Path) -> pd.DataFrame:
    """Build and atomically write `runs.parquet`; returns the table (empty when nothing finished)."""
    sweep_dir = Path(sweep_dir)
    table = pd.DataFrame(finished_rows(sweep_dir))
    if not table.empty:
        first = C.leading_columns()
        config = sorted(c for c in table.columns if c.startswith(C.CONFIG_PREFIXES))
        rest = [c for c in table.columns if c not in first and c not in config]
        table = table[[c for c in first if c in table.columns] + config + rest]
        table = table.sort_values([C.STAGE, C.TRIAL_ID], kind="stable").reset_index(drop=True)
        for col in config:  # mixed python types (e.g. int and None) -> let pandas pick one dtype
            table[col] = pd.Series(table[col].tolist(), dtype=object).infer_objects()
    written = pa.Table.from_pandas(table.drop(columns=[C.ROW_DIGEST], errors="ignore"), preserve_index=False)
    written = written.append_column(C.ROW_DIGEST, pa.array(row_digests(written), pa.string()))
    table[C.ROW_DIGEST] = written.column(C.ROW_DIGEST).to_pylist()  # the table as written
    write_parquet(sweep_dir / RUNS_FILE, written)
    return table
