"""HSTU-only ranker: history items, feedback and the candidate as one causal token sequence.

After Zhai et al., "Actions Speak Louder than Words: Trillion-Parameter Sequential Transducers for Generative
Recommendations" (ICML 2024), in the form of the WHALE seed write-up: item_0, action_0, ..., candidate (at 2 L),
padded to 2 * history_len + 1 tokens. The rest: docs/architectures.md, "What the seed models compute, and every
adaptation" (HSTU-only) and "Configuration".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from architectures import register
from protocols.schema import HIST_FB_FIELDS, Batch, FeatureSpec

from .blocks.config_checks import CheckedConfig
from .blocks.embeddings import FieldEmbeddings, NonSequenceTokens
from .blocks.history import recent_history
from .blocks.hstu import DEFAULT_LAYER_NORM_EPS, DEFAULT_NUM_BUCKETS, HSTUEncoder, sequence_layout
from .blocks.mlp import MLP, PredictionHead


@dataclass
class HSTUConfig(CheckedConfig):
    """HSTU-only size and switches. `None` widths default to 2 * dim."""

    dim: int = 64  # embedding and token width D
    num_layers: int = 2  # HSTU layers
    history_len: int = 128  # most recent history events read; sequence max length 2 * history_len + 1
    num_heads: int = 4
    head_dim: int = 16  # per-head width of U, V, Q, K
    num_time_buckets: int = DEFAULT_NUM_BUCKETS
    isolate_equal_times: bool = False  # also mask earlier tokens at the same request time (other events)
    layer_norm_eps: float = DEFAULT_LAYER_NORM_EPS  # eps of both HSTU layer norms (docs/architectures.md)
    tokenizer_hidden: int | None = None  # hidden width of the item / action / candidate MLPs
    head_hidden: int | None = None


@register("hstu", config=HSTUConfig)
class HSTU(nn.Module):
    def __init__(self, spec: FeatureSpec, cfg: HSTUConfig) -> None:
        super().__init__()
        self.cfg = cfg
        D, hidden = cfg.dim, cfg.tokenizer_hidden or 2 * cfg.dim
        self.embeddings = FieldEmbeddings(spec, D)
        self.tokens = NonSequenceTokens(spec, D, self.embeddings)
        self.item = MLP(len(spec.hist_cat_fields) * D + 1, hidden, D)
        self.action = MLP(len(HIST_FB_FIELDS) * D, hidden, D)
        self.candidate = MLP(self.tokens.num_tokens * D, hidden, D)
        self.max_len = 2 * cfg.history_len + 1
        self.encoder = HSTUEncoder(D, cfg.num_layers, num_heads=cfg.num_heads, head_dim=cfg.head_dim,
                                   max_len=self.max_len, num_buckets=cfg.num_time_buckets, eps=cfg.layer_norm_eps)
        self.head = PredictionHead(D, cfg.head_hidden or 2 * D, spec.num_tasks)

    def sequence(self, batch: Batch) -> tuple[torch.Tensor, ...]:
        """The interleaved input: tokens [B, N, D], times [B, N], valid [B, N], candidate position [B]; N = 2L + 1."""
        hist_mask = batch["hist_mask"]  # [B, L]
        B, L = hist_mask.shape
        item_in = torch.cat([self.embeddings.item_tokens(batch["hist_cat"]).flatten(-2),
                             batch["hist_age"].unsqueeze(-1)], dim=-1)  # [B, L, 5D + 1]
        item = self.item(item_in)  # [B, L, D]
        action = self.action(self.embeddings.feedback_tokens(batch["hist_fb"]).flatten(-2))  # [B, L, D]
        cand = self.candidate(self.tokens(batch).flatten(1))  # [B, D]

        # interleave: [B, L, 2, D] -> [B, 2L, D], zero at PAD events, one free slot at the end
        pairs = torch.stack([item, action], dim=2) * hist_mask[:, :, None, None].to(item.dtype)
        seq = torch.cat([pairs.reshape(B, 2 * L, -1), item.new_zeros(B, 1, item.shape[-1])], dim=1)  # [B, N, D]
        pos = torch.arange(2 * L + 1, device=seq.device)
        cand_pos = 2 * hist_mask.sum(dim=1)  # [B]
        is_cand = pos.unsqueeze(0) == cand_pos.unsqueeze(1)  # [B, N]
        valid = pos.unsqueeze(0) <= cand_pos.unsqueeze(1)  # [B, N]
        seq = seq + is_cand.unsqueeze(-1).to(seq.dtype) * cand.unsqueeze(1)  # candidate at 2L

        hist_ts = batch["hist_ts"] * hist_mask  # [B, L], 0 at PAD
        ts = torch.cat([hist_ts.repeat_interleave(2, dim=1), hist_ts.new_zeros(B, 1)], dim=1)  # [B, N]
        ts = torch.where(is_cand, batch["request_ts"].unsqueeze(1), ts)
        return seq, ts, valid, cand_pos

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        seq, ts, valid, cand_pos = self.sequence(batch)  # [B, N, D], [B, N], [B, N], [B]
        B, N, D = seq.shape
        event = (torch.arange(N, device=seq.device) // 2).expand(B, N) if self.cfg.isolate_equal_times else None
        mask, buckets = sequence_layout(ts, valid, event=event, num_buckets=self.cfg.num_time_buckets)
        out = self.encoder(seq, valid, mask, buckets)[-1]  # [B, N, D]
        cand_out = out.gather(1, cand_pos.view(B, 1, 1).expand(B, 1, D)).squeeze(1)  # [B, D]
        return self.head(cand_out)  # [B] or [B, T]
