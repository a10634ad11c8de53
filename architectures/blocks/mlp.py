"""The ReLU MLP used by tokenizers, heads and the DIN / DeepFM deep networks (biases on).

`MLP(in_dim, hidden, out_dim)`: Linear -> ReLU -> Linear for one hidden width, or
Linear -> ReLU -> ... -> Linear through every width of a sequence `hidden` (an empty sequence is one
Linear). Layers are `nn.Sequential` children 0, 1, 2, ... in that order.
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        return super().forward(x)
