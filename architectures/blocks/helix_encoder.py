"""HELIX's SeqFormer encoder over the user-only sequences, with Gather / Truncate compression or the pooling
compressions (`window_pool`): docs/helix.md, "HELIX in recscale". It reads only history keys of the batch (so
it can run once per request); layer l has n_l = `retained[l]` query tokens, zeroed at invalid slots.
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn as nn

from .history import USER_ONLY_SEQUENCES, History, gather_rows, most_recent, user_only_masks
from .masked_attention import MultiHeadAttention
from .swiglu import GateUpNorm, SwiGLU

Compression = Literal["gather_truncate", "uniform_pool", "segment_pool"]
#: Initial value of every LayerScale channel.
LAYERSCALE_INIT = 0.1


def window_pool(x: torch.Tensor, mask: torch.Tensor, n_out: int, lengths: torch.Tensor | None = None):
    """Masked means over n_out contiguous windows of the N positions of x [B, N, W].

    Windows are fixed (position i -> floor(i * n_out / N)) or, when `lengths` [B] is given, adaptive to
    each row's valid length (rank r < length -> floor(r * n_out / length)). Returns ([B, n_out, W], [B, n_out]).
    """
    B, N, _ = x.shape
    pos = torch.arange(N, device=x.device)
    if lengths is None:
        window = (pos * n_out // N).expand(B, N)  # [B, N]
    else:
        window = pos[None, :] * n_out // lengths.clamp(min=1)[:, None]  # [B, N]
    member = (window[:, None, :] == torch.arange(n_out, device=x.device)[None, :, None]) & mask[:, None, :]
    member = member.to(x.dtype)  # [B, n_out, N]
    count = member.sum(-1)  # [B, n_out]
    pooled = torch.matmul(member, x) / count.clamp(min=1)[..., None]  # [B, n_out, W]
    return pooled, count > 0


class EncoderLayer(nn.Module):
    """Queries [B, Nq, W] attend over keys/values [B, Nk, W]; then SwiGLU. Invalid query slots -> 0."""

    def __init__(
        self, width: int, heads: int, hidden: int, gate_up_norm: GateUpNorm, kv_heads: int | None = None,
        layerscale: bool = False,
    ) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(width, heads, kv_heads)
        self.norm = nn.RMSNorm(width)
        self.ffn = SwiGLU(width, hidden, gate_up_norm)
        # with `layerscale`, per-channel scales of the two residual branches
        self.scale_attn = nn.Parameter(torch.full((width,), LAYERSCALE_INIT)) if layerscale else None
        self.scale_ffn = nn.Parameter(torch.full((width,), LAYERSCALE_INIT)) if layerscale else None

    def forward(self, q: torch.Tensor, q_mask: torch.Tensor, kv: torch.Tensor, kv_mask: torch.Tensor) -> torch.Tensor:
        a = self.attn(q, kv, kv_mask)  # [B, Nq, W]
        h = q + (a if self.scale_attn is None else self.scale_attn * a)
        f = self.ffn(self.norm(h))  # [B, Nq, W]
        h = h + (f if self.scale_ffn is None else self.scale_ffn * f)
        return h * q_mask[..., None].to(h.dtype)


class HelixEncoder(nn.Module):
    """SeqFormer encoder; `forward(events, batch)` -> [(tokens [B, n_l, W], mask [B, n_l]) per layer]."""

    def __init__(
        self,
        *,
        width: int,
        heads: int,
        hidden: int,
        quotas: tuple[int, ...],
        retained: tuple[int, ...],
        compression: Compression = "gather_truncate",
        gate_up_norm: GateUpNorm = "rms",
        kv_heads: int | None = None,
        layerscale: bool = False,
    ) -> None:
        super().__init__()
        if len(quotas) != len(USER_ONLY_SEQUENCES):
            raise ValueError(f"quotas needs one entry per sequence {USER_ONLY_SEQUENCES}, got {quotas}")
        if compression != "uniform_pool" and retained[0] > sum(quotas):
            raise ValueError(f"retained[0]={retained[0]} exceeds the gathered stream sum(quotas)={sum(quotas)}")
        if any(b > a for a, b in zip(retained, retained[1:])) or min(retained) < 1:
            raise ValueError(f"retained tokens must be positive and non-increasing, got {retained}")
        self.quotas, self.retained, self.compression = tuple(quotas), tuple(retained), compression
        self.sequence_type = nn.Parameter(torch.randn(len(USER_ONLY_SEQUENCES), width) * 0.02)
        self.layers = nn.ModuleList(
            [EncoderLayer(width, heads, hidden, gate_up_norm, kv_heads, layerscale) for _ in retained]
        )

    def first_queries(self, events: torch.Tensor, batch: History) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer 1's query stream: ([B, n_1, W], [B, n_1])."""
        masks = user_only_masks(batch)  # [B, 3, L]
        if self.compression == "uniform_pool":
            idx, valid = most_recent(masks[:, 0], events.shape[1])  # recency order, [B, L]
            return window_pool(gather_rows(events, idx) + self.sequence_type[0], valid, self.retained[0])
        token_parts: list[torch.Tensor] = []
        valid_parts: list[torch.Tensor] = []
        recency: list[torch.Tensor] = []
        for s, k in enumerate(self.quotas):
            if self.compression == "gather_truncate":
                idx, ok = most_recent(masks[:, s], k)  # [B, k]
                tok = gather_rows(events, idx)
                recency.append(torch.where(ok, idx, torch.full_like(idx, -1)))
            else:  # segment_pool
                idx, ok = most_recent(masks[:, s], events.shape[1])  # [B, L]
                tok, ok = window_pool(gather_rows(events, idx), ok, k, lengths=ok.sum(-1))
            token_parts.append(tok + self.sequence_type[s])
            valid_parts.append(ok)
        tokens, valid = torch.cat(token_parts, 1), torch.cat(valid_parts, 1)  # [B, sum k, W], [B, sum k]
        if self.compression == "gather_truncate":  # pack most recent first (stable: ties keep sequence order)
            order = torch.cat(recency, 1).sort(dim=1, descending=True, stable=True).indices
            tokens, valid = gather_rows(tokens, order), gather_rows(valid, order)
        n = self.retained[0]
        return tokens[:, :n], valid[:, :n]

    def forward(self, events: torch.Tensor, batch: History) -> list[tuple[torch.Tensor, torch.Tensor]]:
        q, q_mask = self.first_queries(events, batch)  # [B, n_1, W]
        kv, kv_mask = events, batch["hist_mask"]  # layer 1 reads all valid events
        outputs: list[tuple[torch.Tensor, torch.Tensor]] = []
        for layer, n in zip(self.layers, self.retained):
            if outputs:  # layers > 1: compress the previous output into n queries
                if self.compression == "gather_truncate":
                    q, q_mask = kv[:, :n], kv_mask[:, :n]  # Truncate: keep the most recent
                else:
                    q, q_mask = window_pool(kv, kv_mask, n)
            out = layer(q, q_mask, kv, kv_mask)  # [B, n, W]
            outputs.append((out, q_mask))
            kv, kv_mask = out, q_mask
        return outputs
