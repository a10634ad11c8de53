"""Multi-task runs (`train.tasks`; docs/tasks.md): the harness's work per task. Task 0 keeps every one-task
name (metric keys, prediction columns, curve tags, health keys); task t > 0 adds `@<name>` (`suffixes`). The loss
is the weighted sum of the tasks' summed BCE losses (`weighted_loss`); a split's metrics, its predictions and a
run's health are those of each task's labels and scores, through the one-task code.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from protocols.schema import TRUE_P_COLUMN

from . import run_health
from .config import TaskConfig
from .evaluate import split_metrics as one_task_metrics
from .runs_columns import TASK_SEPARATOR as SEPARATOR

#: The label the synthetic log's truth (`true_p`) is the probability of: only its task gets oracle metrics.
ORACLE_LABEL = "long_view"


def suffixes(tasks: Sequence[TaskConfig]) -> list[str]:
    """The key suffix of each task: "" for task 0 (and a one-task run), `@<name>` for the others."""
    return [""] + [SEPARATOR + t.name for t in tasks[1:]]


def labels(tasks: Sequence[TaskConfig]) -> tuple[str, ...]:
    """The label column of each task (the loader's `labels`); empty for a one-task run."""
    return tuple(t.label for t in tasks)


def weighted_loss(logits: torch.Tensor, label: torch.Tensor,
                  weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the weighted sum over tasks of each task's BCE summed over the batch, the per-task sums [T]) of logits and
    labels [B, T]."""
    per_task = F.binary_cross_entropy_with_logits(logits.float(), label, reduction="none").sum(0)  # [T]
    return (per_task * weights).sum(), per_task


def split_metrics(split: str, event_id: np.ndarray, label: np.ndarray, score: np.ndarray,
                  columns: dict[str, np.ndarray], tasks: Sequence[TaskConfig],
                  task_labels: np.ndarray | None) -> tuple[dict[str, float], dict[str, Any]]:
    """`evaluate.split_metrics` of each task (labels and scores [n, T], `task_labels` the dataset's [n, T]), keys
    and group names suffixed; a one-task run's (labels and scores [n]) as they are."""
    if not tasks or task_labels is None:
        values, one = one_task_metrics(split, event_id, label, score, columns)
        return values, {split: one}
    flat: dict[str, float] = {}
    groups: dict[str, Any] = {}
    for t, (task, suffix) in enumerate(zip(tasks, suffixes(tasks))):
        task_columns = {**columns, "label": task_labels[:, t]}
        if task.label != ORACLE_LABEL:
            task_columns.pop(TRUE_P_COLUMN, None)
        values, groups[split + suffix] = one_task_metrics(split, event_id, label[:, t], score[:, t], task_columns)
        flat.update({k + suffix: v for k, v in values.items()})
    return flat, groups


def undefined_metrics(split: str, label: np.ndarray, tasks: Sequence[TaskConfig]) -> dict[str, float]:
    """`run_health.undefined_metrics` of each task (a diverged run)."""
    if not tasks:
        return run_health.undefined_metrics(split, label)
    return {k + suffix: v for t, suffix in enumerate(suffixes(tasks))
            for k, v in run_health.undefined_metrics(split, label[:, t]).items()}


def prediction_columns(label: np.ndarray, score: np.ndarray, tasks: Sequence[TaskConfig]) -> dict[str, np.ndarray]:
    """A predictions file's label and score columns: `label`, `score` and `label@<name>`, `score@<name>`."""
    if not tasks:
        return {"label": label, "score": score}
    return {f"{c}{suffix}": values[:, t] for t, suffix in enumerate(suffixes(tasks))
            for c, values in (("label", label), ("score", score))}


def health(metrics: Mapping[str, Any], model: Any, valid_scores: np.ndarray,
           curves: Mapping[str, Sequence[tuple[int, float]]], *, tasks: Sequence[TaskConfig], total_steps: int,
           epochs: int) -> dict[str, Any]:
    """`run_health.record` of each task, on its own metrics, validation scores and curves (task t > 0 reads
    the keys and tags ending in its suffix); the training loss and the weights are the run's."""
    if not tasks:
        return run_health.record(metrics, model, valid_scores, run_health.trend_of(
            curves, total_steps=total_steps, epochs=epochs))
    out: dict[str, Any] = {}
    for t, suffix in enumerate(suffixes(tasks)):
        mine = {k.removesuffix(suffix): v for k, v in metrics.items() if not suffix or k.endswith(suffix)}
        task_curves = {k.removesuffix(suffix): v for k, v in curves.items() if not suffix or k.endswith(suffix)}
        trend = run_health.trend_of(task_curves, total_steps=total_steps, epochs=epochs)
        out.update({k + suffix: v for k, v in run_health.record(mine, model, valid_scores[:, t], trend).items()})
    return out
