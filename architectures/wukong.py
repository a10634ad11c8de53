"""Wukong: stacked factorization-machine interaction layers over the 13 non-sequence tokens.

Paper: Zhang et al., "Wukong: Towards a Scaling Law for Large-Scale Recommendation" (ICML 2024), in the form of
the WHALE seed write-up: 13 x D tokens -> 8 x D -> head, reading no history (the history-free reference). The
rest: docs/architectures.md, "What the seed models compute, and every adaptation".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from architectures import register
from protocols.schema import Batch, FeatureSpec

from .blocks.config_checks import CheckedConfig
from .blocks.embeddings import FieldEmbeddings, NonSequenceTokens
from .blocks.mlp import PredictionHead
from .blocks.wukong import wukong_stack


@dataclass
class WukongConfig(CheckedConfig):
    """Wukong model size. `None` widths default to 2 * dim."""

    dim: int = 64  # embedding and token width D
    num_layers: int = 2  # Wukong layers
    history_len: int = 128  # the model contract's field; Wukong reads no history
    fmb_tokens: int = 4  # tokens produced by the FMB of each layer
    lcb_tokens: int = 4  # tokens produced by the LCB of each layer
    fmb_hidden: int | None = None  # hidden width of the FMB MLP
    head_hidden: int | None = None  # hidden width of the prediction head


@register("wukong", config=WukongConfig)
class Wukong(nn.Module):
    reads_history = False

    def __init__(self, spec: FeatureSpec, cfg: WukongConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embeddings = FieldEmbeddings(spec, cfg.dim)
        self.tokens = NonSequenceTokens(spec, cfg.dim, self.embeddings)
        self.layers = wukong_stack(self.tokens.num_tokens, cfg.dim, cfg.num_layers, fmb_tokens=cfg.fmb_tokens,
                                   lcb_tokens=cfg.lcb_tokens, hidden=cfg.fmb_hidden)
        self.head = PredictionHead((cfg.fmb_tokens + cfg.lcb_tokens) * cfg.dim, cfg.head_hidden or 2 * cfg.dim,
                                   spec.num_tasks)

    def forward(self, batch: Batch) -> torch.Tensor:
        x = self.layers(self.tokens(batch))  # [B, 13, D] -> [B, 8, D]
        return self.head(x)  # [B] or [B, T]
