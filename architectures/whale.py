"""WHALE, the model of the WHALE seed write-up: layer-wise fusion of feature interaction (Wukong) and history
encoding (HSTU), with the fusion's two reads (`whale` attends, `whale_meanpool` takes the masked mean), and the
seed's shallow-fusion control (`shallow_hybrid`). Per layer l: N~ = Wukong_l(N) [B, 8, D]; H = HSTU_l(H) [B, L, D]
(never receives fusion output); N = Fusion_l(N~, H). The rest: docs/architectures.md, "What the seed models
compute, and every adaptation", "FLOPs and parameters" and "Configuration".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
import torch.nn as nn

from architectures import register
from protocols.schema import Batch, FeatureSpec

from .blocks.config_checks import CheckedConfig
from .blocks.embeddings import FieldEmbeddings, NonSequenceTokens
from .blocks.history import History, history_per_request, recent_history
from .blocks.hstu import DEFAULT_LAYER_NORM_EPS, DEFAULT_NUM_BUCKETS, HistoryBranch
from .blocks.masked_attention import UsesAttentionKernel, sdpa_attention, use_sdpa
from .blocks.mlp import PredictionHead
from .blocks.swiglu import SwiGLU
from .blocks.wukong import wukong_stack


@dataclass
class WhaleConfig(CheckedConfig):
    """WHALE size and switches. `None` widths default to 2 * dim."""

    dim: int = 64  # embedding and token width D
    num_layers: int = 2  # WHALE layers (Wukong + HSTU + fusion each)
    history_len: int = 128  # most recent history events read (L_max of the HSTU layers)
    num_heads: int = 4  # HSTU heads
    head_dim: int = 16  # HSTU per-head width of U, V, Q, K
    num_time_buckets: int = DEFAULT_NUM_BUCKETS
    layer_norm_eps: float = DEFAULT_LAYER_NORM_EPS  # eps of both HSTU layer norms (docs/architectures.md)
    fusion_read: Literal["attention", "mean"] = "attention"  # "mean" = the WHALE MeanPool control
    fmb_tokens: int = 4
    lcb_tokens: int = 4
    fmb_hidden: int | None = None
    ffn_hidden: int | None = None  # SwiGLU hidden width
    event_hidden: int | None = None
    head_hidden: int | None = None
    reuse_requests: bool = False  # compute the history side once per request in the batch


@dataclass
class WhaleMeanPoolConfig(WhaleConfig):
    """WHALE with the mean-pool read (the MeanPool control); only the default of `fusion_read` differs."""

    fusion_read: Literal["attention", "mean"] = "mean"


@dataclass
class ShallowHybridConfig(CheckedConfig):
    """Shallow-hybrid size. `None` widths default to 2 * dim."""

    dim: int = 64  # embedding and token width D
    num_layers: int = 2  # HSTU layers, and Wukong layers after them
    history_len: int = 128  # most recent history events read (L_max of the HSTU layers)
    num_heads: int = 4  # HSTU heads
    head_dim: int = 16  # HSTU per-head width of U, V, Q, K
    num_time_buckets: int = DEFAULT_NUM_BUCKETS  # HSTU time buckets (table has one more entry)
    fmb_tokens: int = 4
    lcb_tokens: int = 4
    fmb_hidden: int | None = None
    event_hidden: int | None = None  # hidden width of the event-token MLP
    head_hidden: int | None = None


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


class Fusion(nn.Module):
    """One fusion layer: the T non-sequence tokens read the history, then a projection residual and SwiGLU."""

    def __init__(self, dim: int, *, ffn_hidden: int, read: Literal["attention", "mean"] = "attention") -> None:
        super().__init__()
        self.read = CrossAttentionRead(dim) if read == "attention" else MeanPoolRead(dim)
        self.proj = nn.Linear(2 * dim, dim, bias=False)  # W_F
        self.ffn = SwiGLU(dim, ffn_hidden, "none", input_norm="layer")  # LN inside, residual here

    def forward(self, n: torch.Tensor, memory: Memory, valid: torch.Tensor) -> torch.Tensor:
        """n [B, T, D], memory from `read.memory(h, valid)`, valid [B, L] -> [B, T, D]."""
        a = self.read(n, memory, valid)  # [B, T, D]
        z = n + self.proj(torch.cat([n, a], dim=-1))  # [B, T, D]
        return z + self.ffn(z)  # [B, T, D]


class Whale(nn.Module):
    def __init__(self, spec: FeatureSpec, cfg: WhaleConfig) -> None:
        super().__init__()
        self.cfg = cfg
        D = cfg.dim
        self.embeddings = FieldEmbeddings(spec, D)
        self.tokens = NonSequenceTokens(spec, D, self.embeddings)
        self.history = HistoryBranch(spec, self.embeddings, dim=D, num_layers=cfg.num_layers,
                                     num_heads=cfg.num_heads, head_dim=cfg.head_dim, max_len=cfg.history_len,
                                     num_buckets=cfg.num_time_buckets, event_hidden=cfg.event_hidden,
                                     eps=cfg.layer_norm_eps)
        self.wukong = wukong_stack(self.tokens.num_tokens, D, cfg.num_layers, fmb_tokens=cfg.fmb_tokens,
                                   lcb_tokens=cfg.lcb_tokens, hidden=cfg.fmb_hidden)
        self.fusions = nn.ModuleList(
            [Fusion(D, ffn_hidden=cfg.ffn_hidden or 2 * D, read=cfg.fusion_read) for _ in range(cfg.num_layers)]
        )
        self.head = PredictionHead((cfg.fmb_tokens + cfg.lcb_tokens) * D, cfg.head_hidden or 2 * D, spec.num_tasks)

    def _memories(self, hist: History) -> list[Memory]:
        """Everything candidate-independent: each layer's fusion memory (K, V or the mean)."""
        outs = self.history(hist)  # num_layers x [B, L, D]
        fusions = cast(list[Fusion], self.fusions)
        return [fusion.read.memory(h, hist["hist_mask"]) for fusion, h in zip(fusions, outs)]

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        memories = history_per_request(self._memories, batch, enabled=self.cfg.reuse_requests)
        valid = batch["hist_mask"]  # [B, L]
        n = self.tokens(batch)  # [B, 13, D]
        for wukong, fusion, memory in zip(self.wukong, self.fusions, memories):
            n = fusion(wukong(n), memory, valid)  # [B, 8, D]
        return self.head(n)  # [B] or [B, T]


register("whale", config=WhaleConfig)(Whale)
register("whale_meanpool", config=WhaleMeanPoolConfig)(Whale)


@register("shallow_hybrid", config=ShallowHybridConfig)
class ShallowHybrid(nn.Module):
    """The shallow-fusion control: the masked mean of the history branch's last layer (0 for an empty history)
    appended as a 14th token before the first Wukong layer (14 -> 8 -> 8 tokens)."""

    def __init__(self, spec: FeatureSpec, cfg: ShallowHybridConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings = FieldEmbeddings(spec, cfg.dim)
        self.tokens = NonSequenceTokens(spec, cfg.dim, self.embeddings)
        self.history = HistoryBranch(spec, self.embeddings, dim=cfg.dim, num_layers=cfg.num_layers,
                                     num_heads=cfg.num_heads, head_dim=cfg.head_dim, max_len=cfg.history_len,
                                     num_buckets=cfg.num_time_buckets, event_hidden=cfg.event_hidden)
        self.layers = wukong_stack(self.tokens.num_tokens + 1, cfg.dim, cfg.num_layers, fmb_tokens=cfg.fmb_tokens,
                                   lcb_tokens=cfg.lcb_tokens, hidden=cfg.fmb_hidden)
        self.head = PredictionHead((cfg.fmb_tokens + cfg.lcb_tokens) * cfg.dim, cfg.head_hidden or 2 * cfg.dim,
                                   spec.num_tasks)

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        h = self.history(batch)[-1]  # [B, L, D], 0 at PAD
        m = batch["hist_mask"].unsqueeze(-1).to(h.dtype)  # [B, L, 1]
        summary = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)  # [B, D]
        x = torch.cat([self.tokens(batch), summary.unsqueeze(1)], dim=1)  # [B, 14, D]
        return self.head(self.layers(x))  # [B, 8, D] -> [B] or [B, T]
