"""Learning curves of a run: TensorBoard event files in `<run folder>/curves/` (`CurveLogger` writes them during
training, `read_curves` reads them back). The tags, when points are written, and why logging changes no
number: docs/training.md ("Curves").
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from core import results_layout as layout


class CurveLogger:
    """Accumulates per-step values and writes a point every `every` global steps (`every=0`: off)."""

    def __init__(self, run_dir: Path, every: int, device: torch.device) -> None:
        self.every, self.dir = every, Path(run_dir) / layout.CURVES_DIR
        self._writer: Any = None
        self._loss = torch.zeros((), dtype=torch.float64, device=device)
        self._norm = torch.zeros((), dtype=torch.float64, device=device)
        self._targets, self._steps, self._norms = 0, 0, 0
        self._loss_f = self._norm_f = 0.0
        self._t0 = time.perf_counter()

    def writer(self) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.dir))
        return self._writer

    def step(self, global_step: int, loss_sum: torch.Tensor, n_targets: int, grad_norm: torch.Tensor | None,
             lr: float) -> None:
        """After optimiser step `global_step` (1-based: steps done so far) with summed loss `loss_sum`."""
        if not self.every:
            return
        if loss_sum.device.type == "cpu":  # reading a CPU scalar is cheaper than adding tensors
            self._loss_f += float(loss_sum)
            self._norm_f += float(grad_norm) if grad_norm is not None else 0.0
        else:  # on an accelerator: add on the device, read once per point
            self._loss += loss_sum.double()
            if grad_norm is not None:
                self._norm += grad_norm.double()
        self._norms += grad_norm is not None
        self._targets += n_targets
        self._steps += 1
        if global_step % self.every:
            return
        now = time.perf_counter()
        w = self.writer()
        w.add_scalar("train/loss", (float(self._loss) + self._loss_f) / max(self._targets, 1), global_step)
        w.add_scalar("train/lr", lr, global_step)
        if self._norms:
            w.add_scalar("train/grad_norm", (float(self._norm) + self._norm_f) / self._norms, global_step)
        w.add_scalar("train/targets_per_s", self._targets / max(now - self._t0, 1e-9), global_step)
        self._loss.zero_(), self._norm.zero_()
        self._targets = self._steps = self._norms = 0
        self._loss_f = self._norm_f = 0.0
        self._t0 = time.perf_counter()

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` spent on something else (a mid-epoch evaluation) out of the throughput."""
        self._t0 += seconds

    def evaluation(self, global_step: int, metrics: Mapping[str, Any]) -> None:
        """Validation metrics (`valid_<name>` keys) of an evaluation after `global_step` steps."""
        if not self.every:
            return
        w = self.writer()
        for key, value in metrics.items():
            if key.startswith("valid_") and isinstance(value, (int, float)) and key not in ("valid_n",
                                                                                             "valid_positives"):
                w.add_scalar(f"valid/{key.removeprefix('valid_')}", float(value), global_step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


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
