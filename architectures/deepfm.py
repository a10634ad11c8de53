"""DeepFM: first order + factorisation machine + deep network over F = 20 shared field vectors [B, F, E].

Paper: Guo et al., "DeepFM: A Factorization-Machine based Neural Network for CTR Prediction", IJCAI 2017. The
fields: docs/helix.md, "Baselines".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
import torch.nn as nn

from protocols.schema import HIST_FB_FIELDS, Batch, FeatureSpec

from . import register
from .blocks.config_checks import CheckedConfig
from .blocks.embeddings import FieldEmbeddings, NonSequenceTokens
from .blocks.history import recent_history
from .blocks.mlp import PredictionHead


@dataclass
class DeepFMConfig(CheckedConfig):
    dim: int = 64  # embedding width E
    num_layers: int = 2  # hidden layers of the deep part
    mlp_width: int = 256
    history_len: int = 128


@register("deepfm", config=DeepFMConfig)
class DeepFM(nn.Module):
    def __init__(self, spec: FeatureSpec, cfg: DeepFMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        E = cfg.dim
        self.embeddings = FieldEmbeddings(spec, E)
        self.non_sequence = NonSequenceTokens(spec, E, self.embeddings)
        self.first_order = nn.ModuleDict({f: nn.Embedding(spec.vocab_sizes[f], 1) for f in spec.cat_fields})
        for t in self.first_order.values():
            nn.init.zeros_(cast(nn.Embedding, t).weight)
        self.first_order_num = nn.Linear(len(spec.num_features), 1)
        n_fields = self.non_sequence.num_tokens + len(spec.hist_cat_fields) + len(HIST_FB_FIELDS)
        self.deep = PredictionHead(n_fields * E, [cfg.mlp_width] * cfg.num_layers, spec.num_tasks)

    def fields(self, batch: Batch) -> torch.Tensor:
        """[B, 13 + 5 + 2, E]: non-sequence tokens then the mean-pooled history item and feedback fields."""
        mask = batch["hist_mask"].to(torch.float32)  # [B, L]
        items = self.embeddings.item_tokens(batch["hist_cat"])  # [B, L, 5, E]
        feedback = self.embeddings.feedback_tokens(batch["hist_fb"])  # [B, L, 2, E]
        events = torch.cat([items, feedback], 2)  # [B, L, 7, E]
        pooled = torch.einsum("bl,blfe->bfe", mask, events) / mask.sum(1).clamp(min=1)[:, None, None]
        return torch.cat([self.non_sequence(batch), pooled], 1)

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        v = self.fields(batch)  # [B, F, E]
        cat = batch["cat"]
        first = sum(self.first_order[f](cat[:, i]).squeeze(-1) for i, f in enumerate(self.first_order))
        first = first + self.first_order_num(batch["num"]).squeeze(-1)  # [B]
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(-1)  # [B]
        deep = self.deep(v)  # [B] or [B, T]
        return (first + fm).view(-1, *[1] * (deep.dim() - 1)) + deep  # [B] or [B, T]
