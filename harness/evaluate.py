"""Full-set evaluation: predict every target of a split (float64 probabilities, the prediction files' and the
metrics' alike), compute metrics on the whole set, and recompute a finished run's metrics from its prediction files
(`recscale metrics RUN --recompute`; docs/training.md, "Metrics").
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core import results_layout as layout
from core.errors import RecscaleError
from harness.runs_columns import DATA_FINGERPRINT
from protocols.schema import TRUE_P_COLUMN, widen

from . import metric_registry
from . import metrics as M
from . import run_folder as RF
from . import tasks as T
from .config import TaskConfig

#: Target columns needed for grouped metrics and GAUC (plus `true_p` when present).
EVAL_COLUMNS: tuple[str, ...] = ("event_id", "label", "user_id", "video_unseen", "author_unseen", "duration_ms")


class PredictionMismatch(RecscaleError):
    """Saved predictions do not line up with the dataset's targets."""


def sigmoid64(logits: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function in float64."""
    x = np.asarray(logits, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def loader_options(device: torch.device, prefetch: int = 2, workers: int = 1) -> dict[str, Any]:
    """`PreparedDataset.batches` options for feeding `device`: background prefetch; on CUDA also narrow
    integer types and page-locked buffers, so that `move_batch` copies fewer bytes without blocking."""
    cuda = device.type == "cuda"
    return {"prefetch": prefetch, "workers": workers, "narrow": cuda, "pin_memory": cuda}


def move_batch(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The batch on `device` in the schema's dtypes (narrow fields are widened after the copy)."""
    if device.type == "cpu":
        return widen(batch)
    return widen({k: v.to(device, non_blocking=True) for k, v in batch.items()})


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    dataset: Any,
    split: str,
    *,
    batch_size: int,
    device: torch.device,
    bf16: bool = False,
    prefetch: int = 2,
    label_columns: tuple[str, ...] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(event_id int64, label float32, score float64 probability) of every target of `split`, in order; label and
    score are [n], or [n, T] for the T tasks of `label_columns` (harness/tasks.py)."""
    was_training = model.training
    model.eval()
    event_ids, labels, logits = [], [], []
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    try:
        for batch in dataset.batches(split, batch_size, seed=0, labels=label_columns,
                                     **loader_options(device, prefetch)):
            with autocast:
                out = model(move_batch(batch, device))  # [B] or [B, T]
            logits.append(out.float().cpu().numpy())
            event_ids.append(batch["event_id"].numpy())
            labels.append(batch["label"].numpy())
    finally:
        model.train(was_training)
    return (
        np.concatenate(event_ids).astype(np.int64),
        np.concatenate(labels).astype(np.float32),
        sigmoid64(np.concatenate(logits)),
    )


def target_columns(dataset: Any, split: str) -> dict[str, np.ndarray]:
    """The evaluation columns of a split's targets table as numpy arrays."""
    table = dataset.targets(split)
    names = list(EVAL_COLUMNS) + (["true_p"] if "true_p" in table.column_names else [])
    missing = [c for c in names if c not in table.column_names]
    if missing:
        raise RecscaleError(f"targets({split!r}) of the dataset lacks column(s) {missing}")
    return {c: table.column(c).to_numpy() for c in names}


def split_metrics(
    split: str, event_id: np.ndarray, label: np.ndarray, score: np.ndarray, columns: dict[str, np.ndarray],
    tasks: Sequence[TaskConfig] = (),
) -> tuple[dict[str, float], dict[str, dict[str, dict[str, float]]]]:
    """(flat metrics, {split name: grouped metrics}) of each task, keyed as docs/training.md ("Metrics") and
    docs/tasks.md ("Names") list them. `label`, `score` and `columns["label"]` (the dataset's labels) are [n], or
    [n, T] for the T `tasks`; `columns` (`target_columns`) is aligned row by row with them."""
    if len(event_id) != len(columns["event_id"]) or not np.array_equal(event_id, columns["event_id"]):
        raise PredictionMismatch(
            f"{split}: the {len(event_id)} predicted event ids differ from the dataset's "
            f"{len(columns['event_id'])} targets (order or membership)"
        )
    flat: dict[str, float] = {}
    groups: dict[str, dict[str, dict[str, float]]] = {}
    for task, suffix, (lab, sc, truth) in T.per_task(tasks, label, score, columns["label"]):
        if not np.array_equal(np.asarray(lab, dtype=np.float64), np.asarray(truth, dtype=np.float64)):
            row = int(np.flatnonzero(np.asarray(lab, np.float64) != np.asarray(truth, np.float64))[0])
            raise PredictionMismatch(f"{split}: label of event {int(event_id[row])} (row {row}) "
                                     "differs from the dataset")
        y, p, users = M.as_labels(lab), np.asarray(sc, dtype=np.float64).ravel(), np.asarray(columns["user_id"])
        true_p = columns.get(TRUE_P_COLUMN) if task is None or task.label == T.ORACLE_LABEL else None
        values = {f"{split}_{k}": v for k, v in metric_registry.binary_metrics(y, p, users).items()}
        if true_p is not None:
            true_p = np.asarray(true_p, dtype=np.float64)
            oracle = metric_registry.binary_metrics(y, true_p, users)
            values.update({f"oracle_{split}_{k}": v for k, v in oracle.items() if k not in ("n", "positives")})
        flat.update({k + suffix: v for k, v in values.items()})
        groups[split + suffix] = {}
        for name, mask in M.group_masks(columns).items():
            g = metric_registry.binary_metrics(y[mask], p[mask])
            if true_p is not None:
                g.update({f"oracle_{m.name}": m.value(y[mask], true_p[mask]) for m in metric_registry.headline_metrics()
                          if not m.needs_users})
            groups[split + suffix][name] = g
    return flat, groups


def open_dataset(path: str, *, verify: bool = False, progress: bool = False) -> Any:
    """The prepared dataset at `path`; `verify` checks every file of it against its manifest's checksums first."""
    from protocols.artifact import PreparedDataset

    if not Path(path).exists():
        raise RecscaleError(f"data: prepared dataset {path!r} does not exist (run `recscale prepare`)")
    return PreparedDataset.open(Path(path), verify=verify, progress=progress)


def recompute_metrics(run_dir: Path, *, data: str | None = None) -> dict[str, Any]:
    """{`<split>_auc`, ..., `oracle_<split>_...`, `groups`: {split: {...}}} from the prediction files, joined
    with the targets of the prepared dataset the run's config.yaml names (or `data`)."""
    config_path = run_dir / layout.CONFIG_FILE
    config = RF.read_config(run_dir)
    if config is None:
        raise RF.RunFolderError(f"{config_path}: not found")
    if "data" not in config and data is None:
        raise RF.RunFolderError(f"{config_path}: no `data` key; pass --data ARTIFACT")
    dataset = open_dataset(data or config["data"])
    saved = RF.read_metrics(run_dir)
    saved_fp = saved.get(DATA_FINGERPRINT)
    if saved_fp is not None and saved_fp != dataset.fingerprint:
        raise RecscaleError(f"{run_dir}: trained on data {saved_fp}, but {dataset.fingerprint} was given")
    out: dict[str, Any] = {"groups": {}}
    for split in layout.PREDICTION_SPLITS:
        table = RF.read_predictions(run_dir, split, metrics=saved)  # size and checksum checked
        flat, groups = split_metrics(split, table.column("event_id").to_numpy(), table.column("label").to_numpy(),
                                     table.column("score").to_numpy(), target_columns(dataset, split))
        out.update(flat)
        out["groups"].update(groups)
    # the same JSON normalisation as metrics.json (NaN -> null, numpy scalars -> Python)
    return json.loads(json.dumps(RF.json_safe(out), allow_nan=False))
