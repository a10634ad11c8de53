"""Read a sweep folder, addressed relative to it: runs.parquet (checked), sweep.yaml's `analysis:` section and
per-run files; columns sorted into config columns, the seed, and metrics."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from core.errors import RecscaleError, one_line
from core.results_layout import METRICS_FILE, RUNS_FILE, SWEEP_FILE, predictions_file
from core.typed_config import from_dict
from harness import run_folder
from harness import runs_columns as C
from harness.sweep.collect import folder_row, row_digests
from harness.sweep.schema import RoundsSection
from protocols.errors import DataValidationError

from .config import AnalysisConfig, analysis_config


@dataclass
class SweepResults:
    """One sweep folder, loaded. `runs` has one row per finished run."""

    root: Path
    name: str
    runs: pd.DataFrame
    config: AnalysisConfig
    config_columns: list[str]  # setting columns, seed excluded
    baseline: str
    rounds: RoundsSection | None = None  # the sweep's seeds in rounds (None: a fixed-seed sweep)

    def metric_column(self, metric: str) -> str:
        return C.metric_column(self.config.split, metric)

    def has_metric(self, metric: str) -> bool:
        col = self.metric_column(metric)
        return col in self.runs.columns and bool(self.runs[col].notna().any())

    @property
    def oracle_column(self) -> str:
        """Per-run AUC of the true probabilities on the analysed split (synthetic logs only)."""
        return C.oracle_auc_column(self.config.split)

    def run_path(self, run_dir: str) -> Path:
        return self.root / str(run_dir).partition(C.TASK_SEPARATOR)[0]  # a task row's `<run_dir>@<task>`: the run's

    def predictions_path(self, row: int) -> Path | None:
        """The run's prediction file for the analysed split (None without a `run_dir`); may not exist."""
        run_dir = self.runs.at[row, C.RUN_DIR] if C.RUN_DIR in self.runs.columns else None
        if run_dir is None or pd.isna(run_dir):
            return None
        return self.run_path(run_dir) / predictions_file(self.config.split)

    def predictions(self, run_dir: str) -> pd.DataFrame | None:
        """`event_id, label, score` of the run's predictions for the analysed split, or None if absent."""
        path = self.run_path(run_dir) / predictions_file(self.config.split)
        if not path.exists():
            return None
        # checked against the size and checksum metrics.json records; a damaged file is an error naming it
        table = run_folder.read_predictions(self.run_path(run_dir), self.config.split)
        _, sep, task = str(run_dir).partition(C.TASK_SEPARATOR)
        suffix = sep + task  # `@<task>` of task t > 0 of a multi-task run, else ""
        frame = table.select(["event_id", "label" + suffix, "score" + suffix]).to_pandas()
        frame.columns = ["event_id", "label", "score"]
        if frame["event_id"].duplicated().any():
            row = int(np.flatnonzero(frame["event_id"].duplicated().to_numpy())[0])
            raise DataValidationError(str(path), "event_id", "duplicate event", record=row,
                                      value=int(frame["event_id"].iloc[row]))
        return frame

    def metrics_json(self, run_dir: str) -> dict[str, Any] | None:
        path = self.run_path(run_dir) / METRICS_FILE
        if not path.exists():
            return None
        return run_folder.read_metrics(self.run_path(run_dir))  # a damaged file is an error naming it


def read_runs(path: Path, *, trust_edits: bool = False) -> pd.DataFrame:
    """runs.parquet read and checked, each fault named (docs/analysis.md, opening; docs/reliability.md)."""
    if not path.exists():
        raise RecscaleError(f"{path}: not found; is {path.parent} a sweep results folder (recscale sweep output)?")
    try:
        table = pq.read_table(path)
        runs = table.to_pandas()
    except Exception as e:  # pyarrow raises several types for damaged files
        raise DataValidationError(str(path), "(file)", f"cannot be read as parquet: {e}") from None
    if not trust_edits:
        verify_digests(table, path)
    for col in (C.ARCH, C.SEED):
        if col not in runs.columns:
            raise DataValidationError(str(path), col, "required column missing")
        bad = runs[col].isna().to_numpy()
        if bad.any():
            raise DataValidationError(str(path), col, "missing value", record=int(np.flatnonzero(bad)[0]))
    if len(runs) == 0:
        raise DataValidationError(str(path), "(rows)", "no finished runs to analyse")
    runs[C.ARCH] = runs[C.ARCH].astype(str)
    return hashable_lists(rows_per_task(runs)).reset_index(drop=True)


def rows_per_task(runs: pd.DataFrame) -> pd.DataFrame:
    """A multi-task run as one row per task, each task the data setting `task` (docs/tasks.md, "Analysis per task");
    one-task runs are unchanged."""
    suffixed = [c for c in runs.columns if C.TASK_SEPARATOR in c and c not in (C.TRIAL_ID, C.RUN_DIR)]
    if not suffixed:
        return runs
    frames = [runs.drop(columns=suffixed)]
    metrics = [c for c in frames[0].columns if c.startswith(("valid_", "test_", "oracle_"))]  # task 0's
    for name in sorted({c.split(C.TASK_SEPARATOR, 1)[1] for c in suffixed}):
        mine = [c for c in suffixed if c.endswith(C.TASK_SEPARATOR + name)]
        rows = runs[runs[mine].notna().any(axis=1)].drop(columns=suffixed).copy()
        rows[[c for c in metrics if c + C.TASK_SEPARATOR + name not in mine]] = np.nan  # task 0's only (the oracle)
        rows[[c.split(C.TASK_SEPARATOR)[0] for c in mine]] = runs.loc[rows.index, mine].to_numpy()
        rows[C.TASK] = name
        for col in (C.TRIAL_ID, C.RUN_DIR):
            if col in rows.columns:
                rows[col] = rows[col].astype(str) + C.TASK_SEPARATOR + name
        frames.append(rows)
    return pd.concat(frames, ignore_index=True)


def verify_digests(table: pa.Table, path: Path) -> None:
    """Raise naming the first row whose `row_digest` does not match its values (docs/analysis.md, opening); a table
    without digests passes."""
    if C.ROW_DIGEST not in table.column_names:
        return
    bad = [i for i, (a, b) in enumerate(zip(table.column(C.ROW_DIGEST).to_pylist(), row_digests(table))) if a != b]
    if not bad:
        return
    row = table.slice(bad[0], 1).to_pylist()[0]
    folder = (folder_row(path.parent / str(row[C.RUN_DIR])) if row.get(C.RUN_DIR) else None) or {}
    differ = [c for c in folder if c in row and row[c] != folder[c]]  # Arrow and metrics.json: None, no NaN
    what = "; ".join(f"column {c} is {row[c]!r}, its run folder records {folder[c]!r}" for c in differ[:3]) \
        or f"its values do not match its {C.ROW_DIGEST}"
    raise RecscaleError(f"{path}: row {bad[0]} (trial {row.get(C.TRIAL_ID)}, {row.get(C.RUN_DIR)}): {what}; edited "
                        f"after the sweep wrote it ({len(bad)} row(s) in all); pass --trust-edits to use it anyway")


def hashable_lists(runs: pd.DataFrame) -> pd.DataFrame:
    """List-valued settings (e.g. model.gather_quotas, numpy arrays from parquet) as hashable tuples."""
    for col in runs.columns[runs.dtypes == object]:  # noqa: E721  # a pandas dtype mask, not a type check
        runs[col] = runs[col].map(lambda v: tuple(v.tolist()) if isinstance(v, np.ndarray) else
                                  tuple(v) if isinstance(v, list) else v)
    return runs


def read_sweep_doc(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise DataValidationError(str(path), "(file)", f"not valid YAML: {one_line(e)}") from None
    if not isinstance(doc, dict):
        raise DataValidationError(str(path), "(file)", "top level must be a mapping")
    return doc


def config_columns(runs: pd.DataFrame) -> list[str]:
    """Setting columns present in `runs` (seed excluded): the architecture, the data settings, then every `model.`,
    `train.` and `data.` column but the tuned key (docs/sweeps.md, "Tuning")."""
    tuned = set(runs[C.TUNED].dropna().astype(str)) if C.TUNED in runs.columns else set()
    cols = [c for c in (C.ARCH, *C.data_setting_columns()) if c in runs.columns]
    cols += sorted(c for c in runs.columns
                   if c.startswith(C.CONFIG_PREFIXES) and c != f"{C.TRAIN_PREFIX}seed" and c not in tuned)
    return cols


def default_baseline(runs: pd.DataFrame) -> str:
    """The architecture with the least mean FLOPs per target (alphabetical first without FLOPs)."""
    if C.FLOPS_PER_TARGET in runs.columns and runs[C.FLOPS_PER_TARGET].notna().any():
        return str(runs.groupby(C.ARCH)[C.FLOPS_PER_TARGET].mean().idxmin())
    return sorted(runs[C.ARCH].unique())[0]


def load_results(root: Path | str, *, baseline: str | None = None, trust_edits: bool = False) -> SweepResults:
    """Load a sweep folder; `baseline` overrides the `analysis.baseline` of sweep.yaml (`trust_edits`: read_runs)."""
    root = Path(root)
    if not root.is_dir():
        raise RecscaleError(f"{root}: results folder not found")
    runs = read_runs(root / RUNS_FILE, trust_edits=trust_edits)
    doc = read_sweep_doc(root / SWEEP_FILE)
    try:
        cfg = analysis_config(doc.get("analysis"))
        rounds = from_dict(RoundsSection, doc["rounds"], prefix="rounds.") if doc.get("rounds") else None
    except RecscaleError as e:
        raise RecscaleError(f"{root / SWEEP_FILE}: {e}") from None
    chosen = baseline or cfg.baseline or default_baseline(runs)
    archs = sorted(runs[C.ARCH].unique())
    if chosen not in archs:
        raise RecscaleError(f"baseline {chosen!r} has no runs in {root / RUNS_FILE}; architectures: {', '.join(archs)}")
    cfg.baseline = chosen
    if f"{cfg.split}_auc" not in runs.columns:
        raise DataValidationError(str(root / RUNS_FILE), f"{cfg.split}_auc", "required metric column missing")
    cols = config_columns(runs)
    dup = runs.duplicated(subset=cols + [C.SEED], keep=False).to_numpy()
    if dup.any():
        rows = np.flatnonzero(dup)[:4].tolist()
        raise DataValidationError(str(root / RUNS_FILE), C.SEED,
                                  f"rows {rows} repeat the same setting and seed; keep one run per seed")
    name = str(doc.get("name") or root.resolve().name)  # the sweep's name, so a copied folder reads the same
    return SweepResults(root=root, name=name, runs=runs, config=cfg, config_columns=cols, baseline=chosen,
                        rounds=rounds)


def unreadable_runs(results: SweepResults, prediction_rows: set[int], *, metrics_needed: bool = True) -> list[str]:
    """One message per row whose run folder, metrics.json (`metrics_needed`) or, for a row in `prediction_rows`,
    predictions file is absent (docs/analysis.md, opening); empty without a `run_dir` column."""
    runs = results.runs
    if C.RUN_DIR not in runs.columns:
        return []
    split_file = predictions_file(results.config.split)
    out: list[str] = []
    for row in range(len(runs)):
        run_dir = runs.at[row, C.RUN_DIR]
        who = f"{runs.at[row, C.ARCH]} seed {runs.at[row, C.SEED]}"
        if run_dir is None or pd.isna(run_dir):
            out.append(f"{RUNS_FILE} row {row} ({who}): no run_dir; its per-run files were not read")
            continue
        path = results.run_path(run_dir)
        lost: list[str] = []
        if not path.is_dir():
            lost.append("run folder missing")
        else:
            if metrics_needed and not (path / METRICS_FILE).exists():
                lost.append(f"{METRICS_FILE} missing (left out of the grouped-metric plot)")
            if row in prediction_rows and not (path / split_file).exists():
                lost.append(f"{split_file} missing (DeLong skipped for its seed)")
        if lost:
            out.append(f"run {run_dir} ({who}) could not be read: {'; '.join(lost)}")
    return out


def run_folders_absent(results: SweepResults) -> bool:
    """True when runs.parquet names run folders but none exists (a published reference; docs/analysis.md, opening)."""
    if C.RUN_DIR not in results.runs.columns:
        return True
    dirs = [d for d in results.runs[C.RUN_DIR] if d is not None and not pd.isna(d)]
    return not any(results.run_path(d).is_dir() for d in dirs)
