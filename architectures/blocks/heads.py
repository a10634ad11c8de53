"""Prediction head of Wukong, HSTU-only, Shallow-hybrid and WHALE: flatten the final tokens, map them to one logit.

WHALE, Wukong and Shallow-hybrid flatten 8 x 64 tokens (512 -> 128 -> 1); HSTU-only reads the single
candidate token (64 -> 128 -> 1). Linear -> ReLU -> Linear with biases.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .mlp import MLP


class PredictionHead(nn.Module):
    """[B, ...] -> logits [B]: flatten everything after the batch axis, then in_dim -> hidden -> 1."""

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.mlp = MLP(in_dim, hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x.flatten(1)).squeeze(-1)
