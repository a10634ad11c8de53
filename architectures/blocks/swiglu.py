"""SwiGLU, the one gated feed-forward network of every model, `W_d(SiLU(n(x W_g)) * n(x W_u))` with no biases
and no residual, with its gate/up normalisations `n` and per-token weights (`tokens=T`, input [B, T, W]):
docs/architectures.md, "Shared blocks"; docs/helix.md.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from .token_mixing import PerTokenLinear

GateUpNorm = Literal["rms", "softcap", "none"]
#: Threshold of the SoftCap alternative.
SOFTCAP = 10.0


def normalise_branch(x: torch.Tensor, kind: GateUpNorm) -> torch.Tensor:
    """Gate/up branch normalisation over the last (hidden) axis."""
    if kind == "rms":
        return F.rms_norm(x, (x.shape[-1],))
    if kind == "softcap":
        return SOFTCAP * torch.tanh(x / SOFTCAP)
    if kind == "none":
        return x
    raise ValueError(f"unknown gate_up_norm {kind!r}; valid: rms, softcap, none")


class SwiGLU(nn.Module):
    """[..., W] -> [..., W] (per-token weights: [B, T, W] -> [B, T, W]); see the module docstring."""

    def __init__(
        self,
        width: int,
        hidden: int,
        gate_up_norm: GateUpNorm = "none",
        *,
        input_norm: Literal["none", "layer"] = "none",
        tokens: int | None = None,
    ) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width) if input_norm == "layer" else None

        def linear(i: int, o: int) -> nn.Module:
            return nn.Linear(i, o, bias=False) if tokens is None else PerTokenLinear(tokens, i, o)

        self.gate = linear(width, hidden)
        self.up = linear(width, hidden)
        self.down = linear(hidden, width)
        self.gate_up_norm = gate_up_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x if self.norm is None else self.norm(x)
        g = normalise_branch(self.gate(h), self.gate_up_norm)  # [..., H]
        u = normalise_branch(self.up(h), self.gate_up_norm)  # [..., H]
        return self.down(F.silu(g) * u)  # [..., W]
