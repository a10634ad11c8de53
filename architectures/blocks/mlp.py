"""Two-layer MLP used by tokenizers and heads (Linear -> ReLU -> Linear, biases on)."""
from __future__ import annotations

import torch
import torch.nn as nn


class MLP(nn.Sequential):
    """in_dim -> hidden -> out_dim with ReLU between the two linear layers."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int) -> None:
        super().__init__(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        return super().forward(x)
