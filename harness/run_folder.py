"""Atomic writers and readers of one run folder (`RunFolderError`: a missing or damaged file): the tree, metrics.json
(NaN as null, the prediction files' `integrity` record) and the learning curves (`read_curves`) are in
docs/training.md, the file names in `core.results_layout`, what a damaged file gives in docs/reliability.md.
"""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from core import atomic_write
from core import results_layout as layout
from core.atomic_write import write_text
from core.errors import RecscaleError, one_line
from protocols import integrity

#: Every file a run folder may hold; any of them present means the folder holds a run.
RUN_FILES: tuple[str, ...] = (
    layout.CONFIG_FILE,
    layout.METRICS_FILE,
    layout.CHECKPOINT_FILE,
    layout.TRIAL_RECORD_FILE,
    layout.DATA_FINGERPRINT_FILE,
    *(layout.predictions_file(s) for s in layout.PREDICTION_SPLITS),
)


class RunFolderError(RecscaleError):
    """A run folder is missing a file or holds an unreadable one."""


def json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def write_run_start(run_dir: Path, config: dict[str, Any], data_fingerprint: str) -> None:
    """A fresh run's config.yaml and the fingerprint of the data it starts on, written before any checkpoint."""
    write_text(run_dir / layout.CONFIG_FILE, yaml.safe_dump(config, sort_keys=False))
    write_text(run_dir / layout.DATA_FINGERPRINT_FILE, data_fingerprint + "\n")


def _rebuild_hint(run_dir: Path) -> str:
    return (f"to rebuild it, delete {run_dir / layout.METRICS_FILE} and resume the run (recscale train --config "
            f"{run_dir / layout.CONFIG_FILE} --out {run_dir} --resume): its final checkpoint is evaluated again, "
            "or, for a sweep's run that kept none, the run is trained again to the same bits")


def write_metrics(run_dir: Path, metrics: dict[str, Any]) -> None:
    """Write metrics.json (last, after the predictions), with the integrity record of the prediction files."""
    names = [layout.predictions_file(s) for s in layout.PREDICTION_SPLITS
             if (run_dir / layout.predictions_file(s)).exists()]
    record = {**metrics, integrity.INTEGRITY_KEY: integrity.record_of(run_dir, names)}
    write_text(run_dir / layout.METRICS_FILE, json.dumps(json_safe(record), indent=2, allow_nan=False) + "\n")


def read_metrics(run_dir: Path) -> dict[str, Any]:
    """metrics.json; RunFolderError naming the file when it is absent, truncated or not a JSON object."""
    path = run_dir / layout.METRICS_FILE
    try:
        metrics = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunFolderError(f"{path}: not found (the run has not finished?)") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise RunFolderError(f"{path}: not valid JSON ({e}); the file is truncated or damaged; "
                             f"{_rebuild_hint(run_dir)}") from None
    if not isinstance(metrics, dict):
        raise RunFolderError(f"{path}: not a JSON object; the file is damaged; {_rebuild_hint(run_dir)}")
    return metrics


def check_predictions(run_dir: Path, split: str, *, metrics: dict[str, Any] | None = None) -> None:
    """Refuse a prediction file whose size or checksum differs from metrics.json's record (RunFolderError);
    nothing to check when the run has no metrics.json yet or was written before the record existed."""
    name = layout.predictions_file(split)
    if metrics is None:
        if not is_finished(run_dir):
            return
        metrics = read_metrics(run_dir)
    if integrity.INTEGRITY_KEY not in metrics:
        return
    problems = integrity.file_problems(run_dir, metrics, checksums=True, only=[name], recorded_in=layout.METRICS_FILE)
    if problems:
        raise RunFolderError(f"{problems[0]}; {_rebuild_hint(run_dir)}")


def write_predictions(run_dir: Path, split: str, event_id: np.ndarray, columns: dict[str, np.ndarray]) -> None:
    """`predictions_<split>.parquet`: event ids, then the label (float32) and score (float64) columns of every
    task (`label`, `score`; a multi-task run adds `label@<task>`, `score@<task>`, harness/tasks.py)."""
    dtype = {"label": np.float32, "score": np.float64}
    table = pa.table({"event_id": pa.array(np.asarray(event_id, dtype=np.int64)),
                      **{name: pa.array(np.asarray(values, dtype=dtype[name.split("@")[0]]))
                         for name, values in columns.items()}})
    atomic_write.write_parquet(run_dir / layout.predictions_file(split), table)


def read_predictions(run_dir: Path, split: str, *, metrics: dict[str, Any] | None = None) -> pa.Table:
    """The prediction table of `split`, checked against metrics.json's record (`check_predictions`)."""
    path = run_dir / layout.predictions_file(split)
    if not path.exists():
        raise RunFolderError(f"{path}: not found")
    check_predictions(run_dir, split, metrics=metrics)
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a damaged file
        raise RunFolderError(f"{path}: cannot be read as parquet ({e}); the file is truncated or damaged; "
                             f"{_rebuild_hint(run_dir)}") from None
    missing = {"event_id", "label", "score"} - set(table.column_names)
    if missing:
        raise RunFolderError(f"{path}: missing column(s) {sorted(missing)}")
    return table


def is_finished(run_dir: Path) -> bool:
    return (run_dir / layout.METRICS_FILE).exists()


def copy_run(src: Path, dst: Path) -> None:
    """Copy the finished run in `src` into `dst`, all but its trial record (`dst` keeps its own; a folder of a
    start that stopped there is replaced), metrics.json last and atomically: `dst` counts as finished only once
    every other file is there."""
    for item in src.iterdir():
        if item.name not in (layout.TRIAL_RECORD_FILE, layout.METRICS_FILE):
            if item.is_dir():
                shutil.rmtree(dst / item.name, ignore_errors=True)  # e.g. the curves of a run killed early
                shutil.copytree(item, dst / item.name)
            else:
                shutil.copy2(item, dst / item.name)
    atomic_write.atomic_write(dst / layout.METRICS_FILE, lambda tmp: shutil.copy2(src / layout.METRICS_FILE, tmp))


def clean_stale_temporaries(run_dir: Path) -> None:
    """Remove the temporary files (`.<run file>.tmp.<pid>`) that a killed writer left in `run_dir` (one process
    trains a run folder at a time, so every such file found when a run starts or resumes is stale)."""
    for name in RUN_FILES:
        for tmp in run_dir.glob(atomic_write.temporary_glob(name)):
            tmp.unlink(missing_ok=True)


def read_data_fingerprint(run_dir: Path) -> str | None:
    """The data fingerprint the run started on, or None for a folder written before it was recorded."""
    path = run_dir / layout.DATA_FINGERPRINT_FILE
    return path.read_text().strip() if path.exists() else None


def read_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's config.yaml as a dict, or None when absent."""
    path = run_dir / layout.CONFIG_FILE
    if not path.exists():
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise RunFolderError(f"{path}: invalid YAML: {one_line(e)}") from None
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    return data


def normalised_config(config: dict[str, Any]) -> dict[str, Any]:
    """`config` as read back from config.yaml (tuples become lists), for comparing with `read_config`."""
    return yaml.safe_load(yaml.safe_dump(config, sort_keys=False))


def read_curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """`{tag: [(step, value), ...]}` from a run's event files, sorted by step, the last written value per step
    (a resumed run repeats some steps); empty when the run has none."""
    folder = Path(run_dir) / layout.CURVES_DIR
    if not folder.is_dir():
        return {}
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: dict[str, dict[int, float]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*"), key=lambda p: (p.stat().st_mtime, p.name)):
        for event in EventFileLoader(str(path)).Load():
            for v in event.summary.value:
                value = v.tensor.float_val[0] if v.HasField("tensor") and v.tensor.float_val else v.simple_value
                out.setdefault(v.tag, {})[int(event.step)] = float(value)
    return {tag: sorted(points.items()) for tag, points in out.items()}
