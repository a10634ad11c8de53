"""Input tokenizers shared by every model: the 13 non-sequence tokens (10 field embeddings, the item-side tables
shared with the history events, + 3 numeric-group tokens) and the history event token (docs/architectures.md,
"Inputs"). Public API (used by every model file): keep the names and signatures stable.
"""
from __future__ import annotations

from typing import cast

import torch
import torch.nn as nn

from protocols.schema import HIST_FB_FIELDS, Batch, FeatureSpec

from .history import History
from .mlp import MLP


class FieldEmbeddings(nn.Module):
    """Embedding tables of every categorical field plus the two feedback tables."""

    def __init__(self, spec: FeatureSpec, dim: int) -> None:
        super().__init__()
        self.spec = spec
        self.dim = dim
        self.tables = nn.ModuleDict({f: nn.Embedding(spec.vocab_sizes[f], dim) for f in spec.cat_fields})
        self.feedback = nn.ModuleDict({f: nn.Embedding(spec.feedback_vocab, dim) for f in HIST_FB_FIELDS})
        for t in list(self.tables.values()) + list(self.feedback.values()):
            nn.init.normal_(cast(nn.Embedding, t).weight, std=0.02)

    def cat_tokens(self, cat: torch.Tensor) -> torch.Tensor:
        """[B, 10] -> [B, 10, D]"""
        return torch.stack([self.tables[f](cat[:, i]) for i, f in enumerate(self.spec.cat_fields)], dim=1)

    def item_tokens(self, hist_cat: torch.Tensor) -> torch.Tensor:
        """[..., 5] item-side ids -> [..., 5, D] (tables shared with the candidate)."""
        return torch.stack([self.tables[f](hist_cat[..., i]) for i, f in enumerate(self.spec.hist_cat_fields)], dim=-2)

    def feedback_tokens(self, hist_fb: torch.Tensor) -> torch.Tensor:
        """[..., 2] -> [..., 2, D]"""
        return torch.stack([self.feedback[f](hist_fb[..., i]) for i, f in enumerate(HIST_FB_FIELDS)], dim=-2)


class NumericTokenizer(nn.Module):
    """One MLP per numeric group: [B, 8] -> [B, 3, D]."""

    def __init__(self, spec: FeatureSpec, dim: int) -> None:
        super().__init__()
        self.groups = spec.num_groups
        self.mlps = nn.ModuleList([MLP(stop - start, dim, dim) for _, start, stop in spec.num_groups])

    def forward(self, num: torch.Tensor) -> torch.Tensor:
        return torch.stack([mlp(num[:, a:b]) for mlp, (_, a, b) in zip(self.mlps, self.groups)], dim=1)


class NonSequenceTokens(nn.Module):
    """The 13 non-sequence tokens: 10 categorical embeddings then 3 numeric-group tokens, [B, 13, D]."""

    def __init__(self, spec: FeatureSpec, dim: int, embeddings: FieldEmbeddings) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.numeric = NumericTokenizer(spec, dim)
        self.num_tokens = len(spec.cat_fields) + len(spec.num_groups)

    def forward(self, batch: Batch) -> torch.Tensor:
        return torch.cat([self.embeddings.cat_tokens(batch["cat"]), self.numeric(batch["num"])], dim=1)


class HistoryEventTokenizer(nn.Module):
    """Joint event token: concat(5 item emb, 2 feedback emb, rho) -> MLP -> [B, L, D], 0 at PAD."""

    def __init__(self, spec: FeatureSpec, dim: int, embeddings: FieldEmbeddings, hidden: int | None = None) -> None:
        super().__init__()
        self.embeddings = embeddings
        self.mlp = MLP((len(spec.hist_cat_fields) + len(HIST_FB_FIELDS)) * dim + 1, hidden or 2 * dim, dim)

    def forward(self, batch: History) -> torch.Tensor:
        item = self.embeddings.item_tokens(batch["hist_cat"]).flatten(-2)  # [B, L, 5D]
        fb = self.embeddings.feedback_tokens(batch["hist_fb"]).flatten(-2)  # [B, L, 2D]
        rho = batch["hist_age"].unsqueeze(-1)  # [B, L, 1]
        tok = self.mlp(torch.cat([item, fb, rho], dim=-1))  # [B, L, D]
        return tok * batch["hist_mask"].unsqueeze(-1).to(tok.dtype)
