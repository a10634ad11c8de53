"""Multi-task runs (`train.tasks`; docs/tasks.md): the harness's work per task (`weighted_loss`, `per_task`). Task
0 keeps every one-task name (metric keys, prediction columns, curve tags, health keys); task t > 0 adds `@<name>`
(`suffixes`). A split's metrics, its predictions and a run's health are those of each task's labels and scores.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from . import run_health
from .config import TaskConfig
from .metric_registry import all_metrics
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
    """Flat metrics of each task of a split whose scores are not finite (a diverged run): the counts, and NaN for
    every registered metric, so the run still gets a metrics.json that records it as `diverged`."""
    out: dict[str, float] = {}
    for _, suffix, (lab,) in per_task(tasks, label):
        y = np.asarray(lab, dtype=np.float64)
        out.update({f"{split}_n{suffix}": int(y.size), f"{split}_positives{suffix}": int(y.sum()),
                    **{f"{split}_{m.name}{suffix}": math.nan for m in all_metrics()}})
    return out


def prediction_columns(label: np.ndarray, score: np.ndarray, tasks: Sequence[TaskConfig]) -> dict[str, np.ndarray]:
    """A predictions file's label and score columns: `label`, `score` and `label@<name>`, `score@<name>`."""
    return {f"{c}{suffix}": v for _, suffix, (lab, sc) in per_task(tasks, label, score)
            for c, v in (("label", lab), ("score", sc))}


def health(metrics: Mapping[str, Any], model: Any, valid_scores: np.ndarray,
           curves: Mapping[str, Sequence[tuple[int, float]]], *, tasks: Sequence[TaskConfig], total_steps: int,
           epochs: int) -> dict[str, Any]:
    """The health keys `train_run` adds to metrics.json (harness/run_health.py), of each task on its own metrics,
    validation scores and curves (task t > 0 reads the keys and tags ending in its suffix): `weights_finite` (the
    run's), `valid_pred_std` (of the validation probabilities), the still-falling measurement and the status
    fields. Reads the trained model, scores and curves only; uses no random state."""
    with torch.no_grad():
        finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    out: dict[str, Any] = {}
    for _, suffix, (scores,) in per_task(tasks, valid_scores):
        mine = {k.removesuffix(suffix): v for k, v in metrics.items() if k.endswith(suffix)}
        task_curves = {k.removesuffix(suffix): v for k, v in curves.items() if k.endswith(suffix)}
        trend = run_health.trend_of(task_curves, total_steps=total_steps, epochs=epochs)
        keys = {"weights_finite": finite, "valid_pred_std": float(np.std(np.asarray(scores, dtype=np.float64))),
                **run_health.trend_fields(trend)}
        keys.update(run_health.classify({**mine, **keys}, trend).fields())
        out.update({k + suffix: v for k, v in keys.items()})
    return out
