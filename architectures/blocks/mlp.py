"""The ReLU MLP used by tokenizers, heads and the DIN / DeepFM deep networks (biases on; an empty `hidden` sequence
is one Linear; layers are `nn.Sequential` children 0, 1, 2, ...), and `PredictionHead`, the head of every model
(docs/architectures.md, "The model contract"; docs/tasks.md): task 0 comes from `mlp`, so one task's parameters
are named as before multi-task runs existed.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn


class MLP(nn.Sequential):
    """in_dim -> hidden... -> out_dim with ReLU between the linear layers: [..., in] -> [..., out]."""

    def __init__(self, in_dim: int, hidden: int | Sequence[int], out_dim: int) -> None:
        widths = [hidden] if isinstance(hidden, int) else list(hidden)
        layers: list[nn.Module] = []
        for w in widths:
            layers += [nn.Linear(in_dim, w), nn.ReLU()]
            in_dim = w
        super().__init__(*layers, nn.Linear(in_dim, out_dim))


class PredictionHead(nn.Module):
    """[B, ...] -> logits [B] (one task) or [B, T]: flatten everything after the batch axis, then one
    in_dim -> hidden -> 1 MLP per task."""

    def __init__(self, in_dim: int, hidden: int | Sequence[int], num_tasks: int = 1) -> None:
        super().__init__()
        self.mlp = MLP(in_dim, hidden, 1)
        self.task_mlps = nn.ModuleList(MLP(in_dim, hidden, 1) for _ in range(num_tasks - 1))  # tasks 1 .. T-1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        logit = self.mlp(x).squeeze(-1)  # [B]
        if not self.task_mlps:
            return logit
        return torch.stack([logit, *(m(x).squeeze(-1) for m in self.task_mlps)], dim=-1)  # [B, T]
