"""MPTF (Mixup-PerToken-FFN), HELIX's feature-interaction operator.

MPTF = the parameter-free `mixup` of `token_mixing.py` (cross-token communication without an attention
matrix) followed by a SwiGLU feed-forward network with separate parameters per token (`swiglu.py`,
`tokens=T`, with the gate/up normalisation `gate_up_norm`). Interaction between fields happens in the
element-wise product of the gate and up branches.

Block (pre-norm with residuals): S = X + Mixup(X); out = S + SwiGLU_per_token(RMSNorm(S)).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .swiglu import GateUpNorm, SwiGLU
from .token_mixing import mixup


class MPTF(nn.Module):
    """Mixup then per-token SwiGLU, both residual: [B, T, W] -> [B, T, W]."""

    def __init__(self, tokens: int, width: int, hidden: int, gate_up_norm: GateUpNorm = "rms") -> None:
        super().__init__()
        self.norm = nn.RMSNorm(width)
        self.ffn = SwiGLU(width, hidden, gate_up_norm, tokens=tokens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x + mixup(x)  # [B, T, W]
        return s + self.ffn(self.norm(s))
