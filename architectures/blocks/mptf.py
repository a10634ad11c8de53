"""MPTF (Mixup-PerToken-FFN), HELIX's feature-interaction operator, and the SwiGLU variants it uses.

MPTF = the parameter-free `mixup` of `token_mixing.py` (cross-token communication without an attention
matrix) followed by a SwiGLU feed-forward network with separate parameters per token. Interaction
between fields happens in the element-wise product of the gate and up branches.

Gate/up normalisation (HELIX's stability fix, after QK-Norm): the gate and up branch outputs are each
normalised before the product, without a learnable gain (a gain was found to re-amplify the outliers).
The paper does not name the normalisation; we use RMS normalisation over the hidden channels.
Alternatives, selected by `gate_up_norm`:
- `"rms"`: gate <- g / rms(g), up <- u / rms(u) (non-parametric);
- `"softcap"`: the earlier fix, bounding extreme activations: v <- c * tanh(v / c) with c = `SOFTCAP`
  on both branches (a smooth cap that saturates at the threshold; the review describes a hard clip);
- `"none"`: plain SwiGLU.

Block (pre-norm with residuals): S = X + Mixup(X); out = S + PerTokenSwiGLU(RMSNorm(S)).
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from .token_mixing import PerTokenLinear, mixup

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
    """Shared-parameter SwiGLU: [..., W] -> [..., W] via SiLU(norm(x W_g)) * norm(x W_u), then W_d."""

    def __init__(self, width: int, hidden: int, gate_up_norm: GateUpNorm = "rms") -> None:
        super().__init__()
        self.gate = nn.Linear(width, hidden, bias=False)
        self.up = nn.Linear(width, hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)
        self.gate_up_norm = gate_up_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = normalise_branch(self.gate(x), self.gate_up_norm)
        u = normalise_branch(self.up(x), self.gate_up_norm)
        return self.down(F.silu(g) * u)


class PerTokenSwiGLU(nn.Module):
    """SwiGLU with separate weights per token: [B, T, W] -> [B, T, W]."""

    def __init__(self, tokens: int, width: int, hidden: int, gate_up_norm: GateUpNorm = "rms") -> None:
        super().__init__()
        self.gate = PerTokenLinear(tokens, width, hidden)
        self.up = PerTokenLinear(tokens, width, hidden)
        self.down = PerTokenLinear(tokens, hidden, width)
        self.gate_up_norm = gate_up_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = normalise_branch(self.gate(x), self.gate_up_norm)  # [B, T, H]
        u = normalise_branch(self.up(x), self.gate_up_norm)  # [B, T, H]
        return self.down(F.silu(g) * u)  # [B, T, W]


class MPTF(nn.Module):
    """Mixup then per-token SwiGLU, both residual: [B, T, W] -> [B, T, W]."""

    def __init__(self, tokens: int, width: int, hidden: int, gate_up_norm: GateUpNorm = "rms") -> None:
        super().__init__()
        self.norm = nn.RMSNorm(width)
        self.ffn = PerTokenSwiGLU(tokens, width, hidden, gate_up_norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x + mixup(x)  # [B, T, W]
        return s + self.ffn(self.norm(s))
