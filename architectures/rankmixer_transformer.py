"""RankMixer + Transformer: the two-stage production baseline HELIX is compared against.

Papers: RankMixer (Zhu et al., "RankMixer: Scaling Up Ranking Models in Industrial Recommenders", 2025) for the
feature-interaction stage, a plain Transformer over the history (the HELIX paper's production baseline) for the
sequence stage. The stages and the adaptations to RecFlow: docs/helix.md, "Baselines".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from protocols.schema import ITEM_FIELD_INDEX, Batch, FeatureSpec

from . import register
from .blocks.config_checks import CheckedConfig, require_divisible
from .blocks.embeddings import FieldEmbeddings, HistoryEventTokenizer, NonSequenceTokens
from .blocks.helix_encoder import EncoderLayer
from .blocks.history import History, history_per_request, recent_history
from .blocks.masked_attention import MultiHeadAttention
from .blocks.mlp import PredictionHead
from .blocks.token_mixing import RankMixerBlock


@dataclass
class RankMixerTransformerConfig(CheckedConfig):
    dim: int = 64  # width W of the RankMixer tokens and of the history Transformer
    num_layers: int = 2  # RankMixer blocks
    seq_layers: int = 2  # Transformer layers over the history
    num_heads: int = 4
    mix_tokens: int = 8
    embed_dim: int = 64
    history_len: int = 128
    ffn_mult: int = 2
    reuse_requests: bool = False

    NON_NEGATIVE = ("seq_layers",)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_divisible(self, "dim", "mix_tokens", "num_heads")  # Mixup; attention heads


@register("rankmixer_transformer", config=RankMixerTransformerConfig)
class RankMixerTransformer(nn.Module):
    def __init__(self, spec: FeatureSpec, cfg: RankMixerTransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        W, E, T = cfg.dim, cfg.embed_dim, cfg.mix_tokens
        self.embeddings = FieldEmbeddings(spec, E)
        self.non_sequence = NonSequenceTokens(spec, E, self.embeddings)
        self.events = HistoryEventTokenizer(spec, E, self.embeddings)
        self.event_proj = nn.Linear(E, W)
        self.seq_layers = nn.ModuleList(
            [EncoderLayer(W, cfg.num_heads, cfg.ffn_mult * W, gate_up_norm="none") for _ in range(cfg.seq_layers)]
        )
        self.target_query = nn.Linear(len(ITEM_FIELD_INDEX) * E, W)
        self.target_read = MultiHeadAttention(W, cfg.num_heads)
        self.tokenize = nn.Linear(self.non_sequence.num_tokens * E + 2 * W, T * W)
        self.mixer = nn.ModuleList([RankMixerBlock(T, W, cfg.ffn_mult) for _ in range(cfg.num_layers)])
        self.head = PredictionHead(T * W, W, spec.num_tasks)

    def encode_history(self, hist: History) -> torch.Tensor:
        """Candidate-independent sequence stage: [B, L, W], zero at PAD."""
        mask = hist["hist_mask"]  # [B, L]
        h = self.event_proj(self.events(hist))
        for layer in self.seq_layers:
            h = layer(h, mask, h, mask)
        return h * mask[..., None].to(h.dtype)

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        mask = batch["hist_mask"]  # [B, L]
        hist = history_per_request(self.encode_history, batch, enabled=self.cfg.reuse_requests)  # [B, L, W]
        count = mask.sum(1, keepdim=True).clamp(min=1).to(hist.dtype)
        mean = hist.sum(1) / count  # [B, W]
        item = self.embeddings.item_tokens(batch["cat"][:, list(ITEM_FIELD_INDEX)]).flatten(1)  # [B, 5E]
        query = self.target_query(item)[:, None]  # [B, 1, W]
        target = self.target_read(query, hist, mask)[:, 0]  # [B, W]
        features = torch.cat([self.non_sequence(batch).flatten(1), mean, target], dim=1)  # [B, 13E + 2W]
        x = self.tokenize(features).view(-1, self.cfg.mix_tokens, self.cfg.dim)  # [B, T, W]
        for block in self.mixer:
            x = block(x)
        return self.head(x)  # [B] or [B, T]
