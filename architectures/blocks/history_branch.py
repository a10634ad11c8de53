"""The shared history branch of WHALE and Shallow-hybrid: event tokens, then a stack of HSTU layers.

Each history event becomes one token (5 item + 2 feedback embeddings + rho -> MLP, zero at PAD); a stack
of HSTU layers then encodes the tokens, a position reading itself and events at strictly earlier request
times. The branch never sees the candidate, so its output is shared by all candidates of a request.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from protocols.schema import FeatureSpec

from .embeddings import FieldEmbeddings, HistoryEventTokenizer
from .history_window import History
from .hstu import DEFAULT_LAYER_NORM_EPS, HSTUEncoder, history_layout


class HistoryBranch(nn.Module):
    """history keys of a batch -> per-layer outputs [B, L, D] (num_layers of them)."""

    def __init__(self, spec: FeatureSpec, embeddings: FieldEmbeddings, *, dim: int, num_layers: int,
                 num_heads: int, head_dim: int, max_len: int, num_buckets: int, event_hidden: int | None,
                 eps: float = DEFAULT_LAYER_NORM_EPS) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.events = HistoryEventTokenizer(spec, dim, embeddings, hidden=event_hidden)
        self.hstu = HSTUEncoder(dim, num_layers, num_heads=num_heads, head_dim=head_dim, max_len=max_len,
                                num_buckets=num_buckets, eps=eps)

    def forward(self, hist: History) -> list[torch.Tensor]:
        valid = hist["hist_mask"]  # [B, L]
        tokens = self.events(hist)  # [B, L, D], 0 at PAD
        mask, buckets = history_layout(hist["hist_ts"], valid, num_buckets=self.num_buckets)  # [B, L, L] x2
        return self.hstu(tokens, valid, mask, buckets)
