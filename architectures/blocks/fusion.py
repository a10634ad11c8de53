"""Fusion of WHALE's non-sequence tokens with the history, and the reads of WHALE and WHALE MeanPool.

    A = read(LN(N), LN(H))                 # cross-attention, or the MeanPool control's masked mean
    Z = N + [N; A] W_F                      # W_F: 2D -> D, no bias
    N' = Z + SwiGLU(LN(Z)) = Z + W_d(SiLU(W_g LN(Z)) * W_u LN(Z))   # gate/up D -> hidden, down hidden -> D, no biases

Reads (both return A [B, T, D] for T query tokens and give exactly zero for an empty history):
- `CrossAttentionRead`: one head of width D; Q = LN(N) W_Q, K = LN(H) W_K, V = LN(H) W_V (no biases),
  softmax(Q K^T / sqrt(D)) over valid positions only: `explicit_cross_attention` (the reference op,
  explicit matmuls), or `sdpa_attention` where the module's `attention_kernel` selects SDPA
  (`attention_kernel.py`).
- `MeanPoolRead`: V = LN(H) W_V averaged over valid positions, the same vector for every query token.

The part of a read that depends on the history only (K and V, or the mean) is split out as `memory(h, valid)`
so a caller can compute it once per request (see `request_reuse.py`). Reductions are element-wise sums, not
matrix products, so the FLOP counters see only the projections and the attention products.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn

from .attention_kernel import UsesAttentionKernel, sdpa_attention, use_sdpa
from .swiglu import SwiGLU

Memory = tuple[torch.Tensor, ...]


def explicit_cross_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor,
                             scale: float, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The reference op: softmax(q k^T * scale) v over valid keys as explicit matmuls; q [B, T, D],
    k, v [B, L, D], valid [B, L] -> [B, T, D], exactly zero for a row with no valid key. That zero-or-one
    factor has `dtype` (default q's): the module passes its input's, so under bf16 autocast the read is
    promoted to the input's float32."""
    scores = torch.matmul(q, k.transpose(1, 2)) * scale  # [B, T, L]
    scores = scores.masked_fill(~valid.unsqueeze(1), torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)  # exactly 0 on PAD when any position is valid
    has_history = valid.any(dim=1).to(dtype or q.dtype)[:, None, None]  # [B, 1, 1]
    return torch.matmul(weights, v) * has_history  # [B, T, D]; zero read for an empty history


class CrossAttentionRead(UsesAttentionKernel, nn.Module):
    """Single-head softmax cross-attention from T query tokens to the valid history positions, with the
    module's `attention_kernel`."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.query_norm = nn.LayerNorm(dim)
        self.kv_norm = nn.LayerNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)
        self.scale = dim**-0.5

    def memory(self, h: torch.Tensor, valid: torch.Tensor) -> Memory:
        """h [B, L, D] -> (K [B, L, D], V [B, L, D])."""
        hn = self.kv_norm(h)
        return self.k(hn), self.v(hn)

    def forward(self, n: torch.Tensor, memory: Memory, valid: torch.Tensor) -> torch.Tensor:
        """n [B, T, D], valid [B, L] -> A [B, T, D]."""
        k, v = memory
        q = self.q(self.query_norm(n))  # [B, T, D]
        if use_sdpa(q, self.attention_kernel):  # fused kernel, same masking and empty-history rule
            return sdpa_attention(q, k, v, valid.unsqueeze(1), scale=self.scale)  # [B, T, D]
        return explicit_cross_attention(q, k, v, valid, self.scale, n.dtype)  # [B, T, D]


class MeanPoolRead(nn.Module):
    """Masked mean of the projected history values, copied to every query token (WHALE MeanPool)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.kv_norm = nn.LayerNorm(dim)
        self.v = nn.Linear(dim, dim, bias=False)

    def memory(self, h: torch.Tensor, valid: torch.Tensor) -> Memory:
        """h [B, L, D] -> (mean V [B, D],); zero for an empty history."""
        v = self.v(self.kv_norm(h))  # [B, L, D]
        m = valid.unsqueeze(-1).to(v.dtype)  # [B, L, 1]
        return ((v * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0),)

    def forward(self, n: torch.Tensor, memory: Memory, valid: torch.Tensor) -> torch.Tensor:
        (mean,) = memory
        return mean.unsqueeze(1).expand_as(n)  # [B, T, D]


READS: dict[str,
            type[CrossAttentionRead] | type[MeanPoolRead]] = {"attention": CrossAttentionRead, "mean": MeanPoolRead}


class Fusion(nn.Module):
    """One fusion layer: the T non-sequence tokens read the history, then a projection residual and SwiGLU."""

    def __init__(self, dim: int, *, ffn_hidden: int, read: Literal["attention", "mean"] = "attention") -> None:
        super().__init__()
        self.read: CrossAttentionRead | MeanPoolRead = READS[read](dim)
        self.proj = nn.Linear(2 * dim, dim, bias=False)  # W_F
        self.ffn = SwiGLU(dim, ffn_hidden, "none", input_norm="layer")  # LN inside, residual here

    def memory(self, h: torch.Tensor, valid: torch.Tensor) -> Memory:
        return self.read.memory(h, valid)

    def forward(self, n: torch.Tensor, memory: Memory, valid: torch.Tensor) -> torch.Tensor:
        """n [B, T, D], memory from `memory(h, valid)`, valid [B, L] -> [B, T, D]."""
        a = self.read(n, memory, valid)  # [B, T, D]
        z = n + self.proj(torch.cat([n, a], dim=-1))  # [B, T, D]
        return z + self.ffn(z)  # [B, T, D]
