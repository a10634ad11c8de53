"""Multi-task runs (`train.tasks`; docs/tasks.md): the harness's work per task. Task 0 keeps every one-task
name (metric keys, prediction columns, curve tags, health keys); task t > 0 adds `@<name>` (`suffixes`). The loss
is the weighted sum of the tasks' summed BCE losses (`weighted_loss`); a split's metrics (`evaluate.split_metrics`),
its predictions and a run's health are those of each task's labels and scores, through the one-task code.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from . import run_health
from .config import TaskConfig
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


def per_task(tasks: Sequence[TaskConfig], *arrays: np.ndarray) -> Iterator[tuple[TaskConfig | None, str, tuple]]:
    """(task, its key suffix, its column of each array [n, T]) of every task; a one-task run's (None, "", arrays)."""
    if not tasks:
        yield None, "", arrays
    for t, (task, suffix) in enumerate(zip(tasks, suffixes(tasks))):
        yield task, suffix, tuple(a[:, t] for a in arrays)


def undefined_metrics(split: str, label: np.ndarray, tasks: Sequence[TaskConfig]) -> dict[str, float]:
    """`run_health.undefined_metrics` of each task (a diverged run)."""
    return {k + suffix: v for _, suffix, (lab,) in per_task(tasks, label)
            for k, v in run_health.undefined_metrics(split, lab).items()}


def prediction_columns(label: np.ndarray, score: np.ndarray, tasks: Sequence[TaskConfig]) -> dict[str, np.ndarray]:
    """A predictions file's label and score columns: `label`, `score` and `label@<name>`, `score@<name>`."""
    return {f"{c}{suffix}": v for _, suffix, (lab, sc) in per_task(tasks, label, score)
            for c, v in (("label", lab), ("score", sc))}


def health(metrics: Mapping[str, Any], model: Any, valid_scores: np.ndarray,
           curves: Mapping[str, Sequence[tuple[int, float]]], *, tasks: Sequence[TaskConfig], total_steps: int,
           epochs: int) -> dict[str, Any]:
    """`run_health.record` of each task, on its own metrics, validation scores and curves (task t > 0 reads
    the keys and tags ending in its suffix); the training loss and the weights are the run's."""
    out: dict[str, Any] = {}
    for _, suffix, (scores,) in per_task(tasks, valid_scores):
        mine = {k.removesuffix(suffix): v for k, v in metrics.items() if k.endswith(suffix)}
        task_curves = {k.removesuffix(suffix): v for k, v in curves.items() if k.endswith(suffix)}
        trend = run_health.trend_of(task_curves, total_steps=total_steps, epochs=epochs)
        out.update({k + suffix: v for k, v in run_health.record(mine, model, scores, trend).items()})
    return out
