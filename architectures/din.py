"""DIN: the candidate weights the user's history through a local activation unit.

Paper: Zhou et al., "Deep Interest Network for Click-Through Rate Prediction", KDD 2018 (seed 000 §12.1:
a candidate-dependent read of the history, the idea WHALE's fusion generalises).

Forward pass (B candidates, L history events, E-dim embeddings):
1. Query: the candidate's 5 item embeddings concatenated, q [B, 5E]; keys: each event's 5 item
   embeddings, k [B, L, 5E] (tables shared with the candidate).
2. Activation unit: MLP([k; q; k - q; k * q]) -> one weight per event (no softmax, as in the paper);
   PAD events get weight 0, so an empty history reads 0.
3. Interest: sum over events of weight x [item embeddings; 2 feedback embeddings] -> [B, 7E].
4. Deep network: [13 non-sequence tokens; interest] -> MLP with `num_layers` hidden layers of width
   `mlp_width`, halving each layer, ReLU -> 1 logit.

Adaptations to RecFlow: the paper's history holds clicked items only; RecFlow's exposure history holds
every shown video, so each event's feedback embeddings (effective_view, long_view) join the pooled value
(they do not enter the activation weight). ReLU replaces PReLU/Dice; no mini-batch-aware
regularisation (the harness's optimiser settings apply).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from protocols.schema import ITEM_FIELD_INDEX, FeatureSpec

from . import register
from .blocks.embeddings import FieldEmbeddings, NonSequenceTokens
from .blocks.history_window import recent_history


def relu_mlp(in_dim: int, widths: list[int], out_dim: int) -> nn.Sequential:
    """in -> widths... -> out with ReLU between layers."""
    layers: list[nn.Module] = []
    for w in widths:
        layers += [nn.Linear(in_dim, w), nn.ReLU()]
        in_dim = w
    return nn.Sequential(*layers, nn.Linear(in_dim, out_dim))


@dataclass
class DinConfig:
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
        self.activation = relu_mlp(4 * n_item * E, list(cfg.attention_hidden), 1)
        in_dim = self.non_sequence.num_tokens * E + (n_item + 2) * E
        widths = [max(1, cfg.mlp_width // 2**i) for i in range(cfg.num_layers)]
        self.deep = relu_mlp(in_dim, widths, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        mask = batch["hist_mask"].to(torch.float32)  # [B, L]
        q = self.embeddings.item_tokens(batch["cat"][:, list(ITEM_FIELD_INDEX)]).flatten(1)  # [B, 5E]
        k = self.embeddings.item_tokens(batch["hist_cat"]).flatten(2)  # [B, L, 5E]
        fb = self.embeddings.feedback_tokens(batch["hist_fb"]).flatten(2)  # [B, L, 2E]
        qe = q[:, None].expand_as(k)
        weight = self.activation(torch.cat([k, qe, k - qe, k * qe], -1)).squeeze(-1) * mask  # [B, L]
        interest = torch.einsum("bl,bld->bd", weight, torch.cat([k, fb], -1))  # [B, 7E]
        x = torch.cat([self.non_sequence(batch).flatten(1), interest], 1)
        return self.deep(x).squeeze(-1)  # [B]
