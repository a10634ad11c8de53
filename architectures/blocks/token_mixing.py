"""RankMixer-style token mixing (Zhu et al., 2025): the parameter-free Mixup (a transpose of [T, T, W/T];
applying it twice is the identity), per-token linear maps, the mix-token maps and the RankMixer block
(post-norm, as in the RankMixer paper); HELIX's MPTF (`helix.py`) reuses `mixup` and `PerTokenLinear`.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def mixup(x: torch.Tensor) -> torch.Tensor:
    """[B, T, W] -> [B, T, W]; output token t = [slice t of token 0 | slice t of token 1 | ...]."""
    B, T, W = x.shape
    if W % T:
        raise ValueError(f"Mixup needs width {W} divisible by the token count {T}")
    return x.view(B, T, T, W // T).transpose(1, 2).reshape(B, T, W)


class PerTokenLinear(nn.Module):
    """T independent weight matrices; x [B, T, in] -> [B, T, out] (no bias)."""

    def __init__(self, tokens: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(tokens, in_dim, out_dim))
        bound = 1.0 / math.sqrt(in_dim)  # nn.Linear's default range
        nn.init.uniform_(self.weight, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x.transpose(0, 1), self.weight).transpose(0, 1)  # [T, B, in] @ [T, in, out]


class PerTokenFFN(nn.Module):
    """Per-token two-layer GELU network: [B, T, W] -> [B, T, W]."""

    def __init__(self, tokens: int, width: int, hidden: int) -> None:
        super().__init__()
        self.up = PerTokenLinear(tokens, width, hidden)
        self.down = PerTokenLinear(tokens, hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class MixTokenizer(nn.Module):
    """[B, N, D] feature tokens -> [B, T, W] mix tokens (flatten, one linear map, reshape)."""

    def __init__(self, in_tokens: int, in_dim: int, tokens: int, width: int) -> None:
        super().__init__()
        self.tokens, self.width = tokens, width
        self.proj = nn.Linear(in_tokens * in_dim, tokens * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x.flatten(1)).view(x.shape[0], self.tokens, self.width)


class SegmentMixTokenizer(nn.Module):
    """[B, N, D] feature tokens -> [B, T, W]: segment t (n_t whole tokens, flattened) -> Linear(n_t D, W); the T
    contiguous segments have sizes ceil / floor of N / T, the larger first."""

    def __init__(self, in_tokens: int, in_dim: int, tokens: int, width: int) -> None:
        super().__init__()
        if not 1 <= tokens <= in_tokens:
            raise ValueError(f"cannot cut {in_tokens} feature tokens into {tokens} non-empty segments")
        size, extra = divmod(in_tokens, tokens)
        ends = [(t + 1) * size + min(t + 1, extra) for t in range(tokens)]
        self.bounds = list(zip([0, *ends[:-1]], ends))  # [start, end) of each segment
        self.proj = nn.ModuleList([nn.Linear((b - a) * in_dim, width) for a, b in self.bounds])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        segments = [proj(x[:, a:b].flatten(1)) for (a, b), proj in zip(self.bounds, self.proj)]  # T x [B, W]
        return torch.stack(segments, 1)  # [B, T, W]


class RankMixerBlock(nn.Module):
    """One RankMixer layer: token mixing then per-token FFN, each with a residual and LayerNorm."""

    def __init__(self, tokens: int, width: int, ffn_mult: int = 2) -> None:
        super().__init__()
        self.norm_mix = nn.LayerNorm(width)
        self.ffn = PerTokenFFN(tokens, width, ffn_mult * width)
        self.norm_ffn = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, W]
        s = self.norm_mix(mixup(x) + x)
        return self.norm_ffn(self.ffn(s) + s)
