"""DIN: the candidate weights the user's history through a local activation unit, then a ReLU MLP.

Paper: Zhou et al., "Deep Interest Network for Click-Through Rate Prediction", KDD 2018. What it computes here
and the adaptations to RecFlow: docs/helix.md, "Baselines".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from protocols.schema import ITEM_FIELD_INDEX, Batch, FeatureSpec

from . import register
from .blocks.config_checks import CheckedConfig
from .blocks.embeddings import FieldEmbeddings, NonSequenceTokens
from .blocks.history import recent_history
from .blocks.mlp import MLP, PredictionHead


@dataclass
class DinConfig(CheckedConfig):
    dim: int = 64  # embedding width E
    num_layers: int = 2  # hidden layers of the deep network
    mlp_width: int = 200  # first hidden width (then halved per layer)
    attention_hidden: tuple[int, ...] = (80, 40)
    history_len: int = 128


@register("din", config=DinConfig)
class Din(nn.Module):
    def __init__(self, spec: FeatureSpec, cfg: DinConfig) -> None:
        super().__init__()
        self.cfg = cfg
        E, n_item = cfg.dim, len(ITEM_FIELD_INDEX)
        self.embeddings = FieldEmbeddings(spec, E)
        self.non_sequence = NonSequenceTokens(spec, E, self.embeddings)
        self.activation = MLP(4 * n_item * E, cfg.attention_hidden, 1)
        in_dim = self.non_sequence.num_tokens * E + (n_item + 2) * E
        widths = [max(1, cfg.mlp_width // 2**i) for i in range(cfg.num_layers)]
        self.deep = PredictionHead(in_dim, widths, spec.num_tasks)

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        mask = batch["hist_mask"].to(torch.float32)  # [B, L]
        q = self.embeddings.item_tokens(batch["cat"][:, list(ITEM_FIELD_INDEX)]).flatten(1)  # [B, 5E]
        k = self.embeddings.item_tokens(batch["hist_cat"]).flatten(2)  # [B, L, 5E]
        fb = self.embeddings.feedback_tokens(batch["hist_fb"]).flatten(2)  # [B, L, 2E]
        qe = q[:, None].expand_as(k)
        weight = self.activation(torch.cat([k, qe, k - qe, k * qe], -1)).squeeze(-1) * mask  # [B, L]
        interest = torch.einsum("bl,bld->bd", weight, torch.cat([k, fb], -1))  # [B, 7E]
        x = torch.cat([self.non_sequence(batch).flatten(1), interest], 1)
        return self.deep(x)  # [B] or [B, T]
