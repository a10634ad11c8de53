"""WHALE: layer-wise fusion of feature interaction (Wukong) and history encoding (HSTU).

The model of the WHALE seed write-up (docs/architectures.md), whose configuration and counts we reproduce.

Per layer l = 1..num_layers, with non-sequence tokens N (13 x D at the input, 8 x D after the first layer)
and history tokens H (L x D, one per event):

    N~ = Wukong_l(N)                 # feature interaction, [B, 8, D]
    H  = HSTU_l(H)                   # history branch; never receives fusion output
    N  = Fusion_l(N~, H)             # 8 queries cross-attend over the valid history, W_F residual, SwiGLU
    logits = head(flatten(N))        # 8 D -> 2 D -> 1

`whale_meanpool` (the seed's MeanPool control) is the same model with `fusion_read = "mean"`: every query token gets
the masked mean of the projected history values instead of its own attention read (no W_Q, W_K).

Adaptations: the history branch is the seed's (event token; read mask: a position reads itself and
strictly earlier request times); fusion K and V use the history after this layer's HSTU; widths scale with
`dim` (hidden widths 2 D). `reuse_requests = true` computes the history branch and the fusion
K / V (or mean) once per unique `request_idx` in the batch and gathers them back to the candidates
(blocks/request_reuse.py); identical outputs when the candidates of a request carry the same history, which
the seed's per-target training does not assume (training-time ID masking of history ids is per target), so
it is off by default. Non-embedding parameters at the seed configuration: 374,607; FLOPs per target: see
docs/architectures.md (MeanPool 39,231,616).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
import torch.nn as nn

from architectures import register
from protocols.schema import Batch, FeatureSpec

from .blocks.config_checks import check_choices, require_positive, require_positive_number
from .blocks.embeddings import FieldEmbeddings, NonSequenceTokens
from .blocks.fusion import Fusion, Memory
from .blocks.heads import PredictionHead
from .blocks.history_branch import HistoryBranch
from .blocks.history_window import History, recent_history
from .blocks.hstu import DEFAULT_LAYER_NORM_EPS, DEFAULT_NUM_BUCKETS
from .blocks.request_reuse import history_per_request
from .blocks.wukong import WukongLayer, wukong_stack


@dataclass
class WhaleConfig:
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

    def __post_init__(self) -> None:
        check_choices(self)
        require_positive(self, "dim", "num_layers", "history_len", "num_heads", "head_dim", "num_time_buckets",
                         "fmb_tokens", "lcb_tokens", "fmb_hidden", "ffn_hidden", "event_hidden", "head_hidden")
        require_positive_number(self, "layer_norm_eps")


@dataclass
class WhaleMeanPoolConfig(WhaleConfig):
    """WHALE with the mean-pool read (the MeanPool control); only the default of `fusion_read` differs."""

    fusion_read: Literal["attention", "mean"] = "mean"


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
        self.head = PredictionHead(cast(WukongLayer, self.wukong[-1]).n_out * D, cfg.head_hidden or 2 * D)

    def _memories(self, hist: History) -> tuple[torch.Tensor, ...]:
        """Everything candidate-independent: each layer's fusion memory (K, V or the mean), flattened."""
        outs = self.history(hist)  # num_layers x [B, L, D]
        valid = hist["hist_mask"]
        return tuple(t for fusion, h in zip(cast(list[Fusion], self.fusions), outs) for t in fusion.memory(h, valid))

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        flat = history_per_request(self._memories, batch, enabled=self.cfg.reuse_requests)
        per_layer = len(flat) // self.cfg.num_layers
        memories: list[Memory] = [flat[i * per_layer:(i + 1) * per_layer] for i in range(self.cfg.num_layers)]
        valid = batch["hist_mask"]  # [B, L]
        n = self.tokens(batch)  # [B, 13, D]
        for wukong, fusion, memory in zip(self.wukong, self.fusions, memories):
            n = fusion(wukong(n), memory, valid)  # [B, 8, D]
        return self.head(n)  # [B]


register("whale", config=WhaleConfig)(Whale)
register("whale_meanpool", config=WhaleMeanPoolConfig)(Whale)
