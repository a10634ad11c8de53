"""One Wukong interaction layer: Factorization Machine Block + Linear Compression Block, after Zhang et al.,
"Wukong" (ICML 2024), as the WHALE seed write-up specifies it (its formula: docs/architectures.md, "Wukong
layer"). X [B, n, D] -> [B, k_f + k_c, D]. The products over the token axis are written as linear maps on X^T
so that fvcore's shape rules count them.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .mlp import MLP


class WukongLayer(nn.Module):
    """[B, n_in, D] -> [B, fmb_tokens + lcb_tokens, D]."""

    def __init__(self, n_in: int, dim: int, *, fmb_tokens: int = 4, lcb_tokens: int = 4, hidden: int | None = None):
        super().__init__()
        self.dim, self.fmb_tokens = dim, fmb_tokens
        n_out = fmb_tokens + lcb_tokens
        self.gram_norm = nn.LayerNorm(n_in * n_in)
        self.fmb = MLP(n_in * n_in, hidden or 2 * dim, fmb_tokens * dim)
        self.lcb = nn.Parameter(torch.empty(lcb_tokens, n_in))  # W_L
        nn.init.kaiming_uniform_(self.lcb, a=5**0.5)
        if n_out != n_in:
            self.residual = nn.Parameter(torch.empty(n_out, n_in))  # W_R over the token axis
            nn.init.kaiming_uniform_(self.residual, a=5**0.5)
        else:
            self.register_parameter("residual", None)
        self.out_norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        gram = torch.matmul(x, x.transpose(1, 2))  # [B, n, n]
        fmb = self.fmb(self.gram_norm(gram.reshape(B, -1))).view(B, self.fmb_tokens, self.dim)  # [B, k_f, D]
        xt = x.transpose(1, 2)  # [B, D, n]
        lcb = F.linear(xt, self.lcb).transpose(1, 2)  # [B, k_c, D]
        res = x if self.residual is None else F.linear(xt, self.residual).transpose(1, 2)  # [B, n_out, D]
        return self.out_norm(torch.cat([fmb, lcb], dim=1) + res)  # [B, n_out, D]


def wukong_stack(n_in: int, dim: int, num_layers: int, *, fmb_tokens: int = 4, lcb_tokens: int = 4,
                 hidden: int | None = None) -> nn.Sequential:
    """`num_layers` Wukong layers; the first maps n_in tokens to fmb_tokens + lcb_tokens, the rest keep that count."""
    n_out = fmb_tokens + lcb_tokens
    return nn.Sequential(*(WukongLayer(n_out if i else n_in, dim, fmb_tokens=fmb_tokens, lcb_tokens=lcb_tokens,
                                       hidden=hidden) for i in range(num_layers)))
