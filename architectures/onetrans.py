"""OneTrans: one causal Transformer over [sequence tokens | non-sequence tokens] [B, L + 13, W], with mixed
parameters (shared for sequence tokens, per token for the 13 non-sequence tokens) and pyramid query pruning.

Paper: Zhang et al., "OneTrans: Unified Feature Interaction and Sequence Modeling with One Transformer in
Industrial Recommender" (ByteDance, 2025). The forward pass and the adaptations to RecFlow: docs/helix.md,
"Baselines".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from core.typed_config import ConfigError
from protocols.schema import Batch, FeatureSpec

from . import register
from .blocks.config_checks import CheckedConfig, require_divisible
from .blocks.embeddings import FieldEmbeddings, HistoryEventTokenizer, NonSequenceTokens
from .blocks.history import gather_rows, recent_history
from .blocks.masked_attention import UsesAttentionKernel, attend, merge_heads, split_heads
from .blocks.mlp import PredictionHead
from .blocks.token_mixing import PerTokenLinear


@dataclass
class OneTransConfig(CheckedConfig):
    dim: int = 64
    num_layers: int = 2
    num_heads: int = 4
    embed_dim: int = 64
    history_len: int = 128
    ffn_mult: int = 2
    seq_queries: tuple[int, ...] | None = None  # sequence queries per layer (pyramid); None = linear L -> 0

    NON_NEGATIVE = ("seq_queries",)

    def __post_init__(self) -> None:
        super().__post_init__()
        require_divisible(self, "dim", "num_heads")
        s = self.seq_queries
        if s is not None and (len(s) != self.num_layers or any(b > a for a, b in zip(s, s[1:]))):
            raise ConfigError(f"model.seq_queries: {s!r} is not allowed (allowed: None, or model.num_layers="
                              f"{self.num_layers} non-increasing counts >= 0)")

    def pyramid(self) -> tuple[int, ...]:
        if self.seq_queries is not None:
            return tuple(min(s, self.history_len) for s in self.seq_queries)
        n, L = self.num_layers, self.history_len
        return tuple(round(L * (n - 1 - i) / (n - 1)) for i in range(n)) if n > 1 else (0,)


class MixedLinear(nn.Module):
    """Shared weights for the S sequence tokens, per-token weights for the N non-sequence tokens.

    x [B, S + N, in] -> [B, S + N, out]; the last N positions are the non-sequence tokens. With
    `shared=False` (a layer whose outputs hold no sequence token) S must be 0.
    """

    def __init__(self, ns_tokens: int, in_dim: int, out_dim: int, shared: bool = True) -> None:
        super().__init__()
        self.ns_tokens = ns_tokens
        self.shared = nn.Linear(in_dim, out_dim, bias=False) if shared else None
        self.per_token = PerTokenLinear(ns_tokens, in_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        S = x.shape[1] - self.ns_tokens
        ns = self.per_token(x[:, S:])
        if self.shared is None:
            assert S == 0, "this layer has no sequence-token weights"
            return ns
        return torch.cat([self.shared(x[:, :S]), ns], dim=1)


class OneTransLayer(UsesAttentionKernel, nn.Module):
    """Causal mixed-parameter layer; keeps the last `n_seq_out` sequence tokens and all NS tokens as queries.
    Its attention runs with the module's `attention_kernel`."""

    def __init__(self, ns_tokens: int, width: int, heads: int, hidden: int, seq_outputs: bool = True) -> None:
        super().__init__()
        self.ns_tokens, self.heads = ns_tokens, heads
        self.norm_attn, self.norm_ffn = nn.RMSNorm(width), nn.RMSNorm(width)
        self.kv = MixedLinear(ns_tokens, width, 2 * width)
        self.q = MixedLinear(ns_tokens, width, width, shared=seq_outputs)
        # a layer that keeps no sequence query needs no sequence weights after the K/V projection
        self.out = MixedLinear(ns_tokens, width, width, shared=seq_outputs)
        self.gate_up = MixedLinear(ns_tokens, width, 2 * hidden, shared=seq_outputs)
        self.down = MixedLinear(ns_tokens, hidden, width, shared=seq_outputs)

    def forward(self, x: torch.Tensor, valid: torch.Tensor, n_seq_out: int) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, S + N, W], valid [B, S + N] -> ([B, n_seq_out + N, W], [B, n_seq_out + N])."""
        B, S_N, W = x.shape
        S = S_N - self.ns_tokens
        keep = torch.arange(S - n_seq_out, S_N, device=x.device)  # query positions
        normed = self.norm_attn(x)
        k, v = self.kv(normed).split(W, dim=-1)  # [B, S + N, W] each
        q = split_heads(self.q(normed[:, keep]), self.heads)  # [B, H, Nq, dh], queries only where kept
        causal = keep[:, None] >= torch.arange(S_N, device=x.device)[None, :]  # [Nq, S + N]
        allowed = causal[None, None] & valid[:, None, None, :]  # [B, 1, Nq, S + N]
        read = merge_heads(attend(q, split_heads(k, self.heads), split_heads(v, self.heads), allowed,
                                  kernel=self.attention_kernel))  # [B, Nq, W]
        h = x[:, keep] + self.out(read)
        g, u = self.gate_up(self.norm_ffn(h)).chunk(2, dim=-1)
        h = h + self.down(F.silu(g) * u)
        v_out = valid[:, keep]
        return h * v_out[..., None].to(h.dtype), v_out


@register("onetrans", config=OneTransConfig)
class OneTrans(nn.Module):
    def __init__(self, spec: FeatureSpec, cfg: OneTransConfig) -> None:
        super().__init__()
        self.cfg = cfg
        W, E = cfg.dim, cfg.embed_dim
        self.embeddings = FieldEmbeddings(spec, E)
        self.non_sequence = NonSequenceTokens(spec, E, self.embeddings)
        self.events = HistoryEventTokenizer(spec, E, self.embeddings)
        self.seq_proj = nn.Linear(E, W)
        self.ns_proj = PerTokenLinear(self.non_sequence.num_tokens, E, W)
        N = self.non_sequence.num_tokens
        self.layers = nn.ModuleList(
            [OneTransLayer(N, W, cfg.num_heads, cfg.ffn_mult * W, seq_outputs=n > 0) for n in cfg.pyramid()]
        )
        self.head_norm = nn.RMSNorm(W)
        self.head = PredictionHead(N * W, W, spec.num_tasks)

    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        mask = batch["hist_mask"]  # [B, L], left-aligned
        L = mask.shape[1]
        # right-align: position p holds event p - (L - n), so the most recent event is at L - 1
        n = mask.sum(1, keepdim=True)  # [B, 1]
        src = torch.arange(L, device=mask.device)[None, :] - (L - n)  # [B, L]
        seq_valid = src >= 0
        seq = gather_rows(self.seq_proj(self.events(batch)), src.clamp(min=0)) * seq_valid[..., None].to(torch.float32)
        ns = self.ns_proj(self.non_sequence(batch))  # [B, 13, W]
        x = torch.cat([seq, ns], 1)  # [B, L + 13, W]
        valid = torch.cat([seq_valid, torch.ones(ns.shape[:2], dtype=torch.bool, device=ns.device)], 1)
        for layer, n_seq in zip(self.layers, self.cfg.pyramid()):
            x, valid = layer(x, valid, min(n_seq, x.shape[1] - ns.shape[1]))
        out = x[:, -ns.shape[1]:]  # [B, 13, W]
        return self.head(self.head_norm(out))  # [B] or [B, T]
