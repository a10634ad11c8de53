"""Softmax attention with key masks: its kernel, the explicit matmuls (the reference op, which fvcore counts) or
torch's fused `sdpa_attention` (the same masking rule exactly), held by each module that runs one and passed to
the op; and multi-head attention (HELIX, OneTrans, RankMixer+Transformer). Keys not allowed get zero weight
exactly, and a query with no allowed key reads zero (as WHALE's fusion). docs/architectures.md, "Shared blocks";
docs/training.md, "Speed".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, cast, get_args

import torch
import torch.nn as nn
import torch.nn.functional as F

AttentionKernel = Literal["auto", "sdpa", "explicit"]
KERNELS: tuple[str, ...] = get_args(AttentionKernel)


def use_sdpa(q: torch.Tensor, kernel: AttentionKernel) -> bool:
    """Whether the attention on `q` runs through SDPA under `kernel` ("auto": on CUDA tensors only)."""
    return kernel == "sdpa" or (kernel == "auto" and q.is_cuda)


class UsesAttentionKernel:
    """Mixin of the modules that run a softmax attention: `attention_kernel` is the kernel they pass to the
    attention op ("auto" until `set_attention_kernel` sets another)."""

    attention_kernel: AttentionKernel = "auto"


def set_attention_kernel(model: nn.Module, kernel: str) -> nn.Module:
    """Set `kernel` ("auto" | "sdpa" | "explicit") on every softmax-attention module of `model` (itself
    included); returns `model`; an unknown `kernel` is a ValueError naming the allowed values."""
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel {kernel!r} is not one of {', '.join(KERNELS)}")
    for module in model.modules():
        if isinstance(module, UsesAttentionKernel):
            module.attention_kernel = cast(AttentionKernel, kernel)
    return model


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                   scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v over allowed keys; q [.., Nq, E], k [.., Nk, E], v [.., Nk, Ev], `allowed`
    bool broadcasting to [.., Nq, Nk]. A query with no allowed key reads exactly zero. -> [.., Nq, Ev]"""
    any_key = allowed.any(dim=-1, keepdim=True)  # [.., Nq, 1]
    mask = allowed | ~any_key  # an empty row reads every key (finite), then is zeroed
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out * any_key.to(out.dtype)


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, N, H*dh] -> [B, H, N, dh]"""
    B, N, W = x.shape
    return x.view(B, N, heads, W // heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, H, N, dh] -> [B, N, H*dh]"""
    B, H, N, dh = x.shape
    return x.transpose(1, 2).reshape(B, N, H * dh)


def explicit_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The reference op: softmax attention as explicit matmuls; q [B, H, Nq, dh], k, v [B, H, Nk, dh],
    `allowed` broadcasting to [B, H, Nq, Nk] -> [B, H, Nq, dh]; a query with no allowed key reads zero."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])  # [B, H, Nq, Nk]
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1) * allowed.to(scores.dtype)  # all-masked rows -> 0
    return torch.matmul(weights, v)  # [B, H, Nq, dh]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, *,
           kernel: AttentionKernel) -> torch.Tensor:
    """Softmax attention; `allowed` broadcasts to [B, H, Nq, Nk] (True = may read). Returns [B, H, Nq, dh].
    k, v may have fewer heads G (H a multiple of G): query head h reads key/value head h // (H / G) (GQA).
    Runs through SDPA when `use_sdpa(q, kernel)` says so (same masking rule), else `explicit_attend`."""
    if k.shape[1] != q.shape[1]:  # GQA: each key/value head serves H / G consecutive query heads
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))  # [B, H, Nk, dh]
    if use_sdpa(q, kernel):
        return sdpa_attention(q, k, v, allowed)
    return explicit_attend(q, k, v, allowed)


@dataclass
class KV:
    """Projected keys and values with their validity mask."""

    k: torch.Tensor  # [B, H, N, dh]
    v: torch.Tensor  # [B, H, N, dh]
    mask: torch.Tensor  # [B, N] bool

    def concat(self, other: KV) -> KV:
        return KV(torch.cat([self.k, other.k], 2), torch.cat([self.v, other.v], 2),
                  torch.cat([self.mask, other.mask], 1))

    def index_rows(self, index: torch.Tensor) -> KV:
        """Rows `index` of the batch (used to gather a per-request cache back to its candidates)."""
        return KV(self.k[index], self.v[index], self.mask[index])


class KVProjection(nn.Module):
    """LayerNorm(x) W_K, LayerNorm(x) W_V split into heads; x [B, N, W] -> KV.

    `heads` is the query head count (head width W / heads); `kv_heads` (default `heads`) key/value heads
    of that width are projected, so W_K, W_V are W x (kv_heads * W / heads).
    """

    def __init__(self, width: int, heads: int, kv_heads: int | None = None) -> None:
        super().__init__()
        kv_heads = heads if kv_heads is None else kv_heads
        if width % heads or heads % kv_heads:
            raise ValueError(f"width {width} is not divisible by heads {heads}, or heads by kv_heads {kv_heads}")
        self.heads = kv_heads
        self.norm = nn.LayerNorm(width)
        self.k = nn.Linear(width, kv_heads * (width // heads), bias=False)
        self.v = nn.Linear(width, kv_heads * (width // heads), bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> KV:
        h = self.norm(x)  # [B, N, W]
        return KV(split_heads(self.k(h), self.heads), split_heads(self.v(h), self.heads), mask)


class QueryRead(UsesAttentionKernel, nn.Module):
    """Queries LayerNorm(x) W_Q read a `KV`; the read is projected by W_O. x [B, Nq, W] -> [B, Nq, W].
    The read runs with the module's `attention_kernel`."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.q = nn.Linear(width, width, bias=False)
        self.out = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor, kv: KV) -> torch.Tensor:
        q = split_heads(self.q(self.norm(x)), self.heads)  # [B, H, Nq, dh]
        allowed = kv.mask[:, None, None, :]  # [B, 1, 1, Nk]
        read = attend(q, kv.k, kv.v, allowed, kernel=self.attention_kernel)  # [B, H, Nq, dh]
        return self.out(merge_heads(read))  # [B, Nq, W]


class MultiHeadAttention(nn.Module):
    """Pre-norm multi-head attention of queries x_q [B, Nq, W] over x_kv [B, Nk, W] (key mask [B, Nk])."""

    def __init__(self, width: int, heads: int, kv_heads: int | None = None) -> None:
        super().__init__()
        self.kv = KVProjection(width, heads, kv_heads)
        self.read = QueryRead(width, heads)

    def forward(self, x_q: torch.Tensor, x_kv: torch.Tensor, kv_mask: torch.Tensor) -> torch.Tensor:
        return self.read(x_q, self.kv(x_kv, kv_mask))
