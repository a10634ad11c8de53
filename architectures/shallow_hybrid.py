"""Shallow-hybrid: HSTU-encoded history summarised once, then Wukong over 14 tokens.

The shallow-fusion control of the WHALE seed write-up: the masked mean of the last layer of the shared history
branch (0 for an empty history) is appended as a 14th token before the first Wukong layer (14 -> 8 -> 8 tokens).
Counts: docs/architectures.md, "FLOPs and parameters".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn as nn

from architectures import register
from protocols.schema import Batch, FeatureSpec

from .blocks.config_checks import CheckedConfig
from .blocks.embeddings import FieldEmbeddings, NonSequenceTokens
from .blocks.history_window import recent_history
from .blocks.hstu import DEFAULT_NUM_BUCKETS, HistoryBranch
from .blocks.mlp import PredictionHead
from .blocks.wukong import WukongLayer, wukong_stack


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


@register("shallow_hybrid", config=ShallowHybridConfig)
class ShallowHybrid(nn.Module):
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
        self.head = PredictionHead(cast(WukongLayer, self.layers[-1]).n_out * cfg.dim, cfg.head_hidden or 2 * cfg.dim,
                                   spec.num_tasks)

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        h = self.history(batch)[-1]  # [B, L, D], 0 at PAD
        m = batch["hist_mask"].unsqueeze(-1).to(h.dtype)  # [B, L, 1]
        summary = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)  # [B, D]
        x = torch.cat([self.tokens(batch), summary.unsqueeze(1)], dim=1)  # [B, 14, D]
        for layer in self.layers:
            x = layer(x)  # [B, 8, D]
        return self.head(x)  # [B] or [B, T]
