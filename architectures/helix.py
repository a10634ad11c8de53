"""HELIX: interleaved sequence reads and feature interaction over a candidate-independent K/V cache, with its
MPTF interaction and the parameter-matched self-attention ablation of it.

Paper: "HELIX: Purified and Unified - Rethinking Feature Interaction and Sequence Modeling for Large-Scale
Recommendation" (ByteDance). Mix tokens [B, T, W] -> MixFormer layers -> decoder layers -> head; each stage, the
adaptations to RecFlow's inputs, the switches (`ABLATIONS`) and the named sizes (`SIZES`): docs/helix.md, "HELIX
in recscale".
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Literal, cast

import torch
import torch.nn as nn

from core.typed_config import ConfigError
from protocols.schema import Batch, FeatureSpec

from . import register
from .blocks.config_checks import check_choices, require_at_least, require_divisible
from .blocks.embeddings import FieldEmbeddings, HistoryEventTokenizer, NonSequenceTokens
from .blocks.helix_encoder import Compression, HelixEncoder
from .blocks.history import History, gather_rows, hard_search, history_per_request, recent_history
from .blocks.masked_attention import KV, KVProjection, MultiHeadAttention, QueryRead
from .blocks.mlp import PredictionHead
from .blocks.swiglu import GateUpNorm, SwiGLU
from .blocks.token_mixing import MixTokenizer, SegmentMixTokenizer, mixup

#: Named sizes: width, decoder / MixFormer / encoder depth, heads, Gather quotas and retained tokens.
SIZES: dict[str, dict] = {
    "XS": dict(dim=32, num_layers=2, mixformer_layers=1, num_heads=2, gather_quotas=(16, 8, 8),
               retained_tokens=(16, 8)),
    "S": dict(dim=64, num_layers=2, mixformer_layers=1, num_heads=4, gather_quotas=(32, 16, 16),
              retained_tokens=(64, 32)),
    "M": dict(dim=96, num_layers=2, mixformer_layers=1, num_heads=4, gather_quotas=(48, 24, 24),
              retained_tokens=(96, 64, 32)),
    "L": dict(dim=128, num_layers=3, mixformer_layers=2, num_heads=8, gather_quotas=(64, 32, 32),
              retained_tokens=(128, 96, 64, 48)),
    "XL": dict(dim=192, num_layers=4, mixformer_layers=2, num_heads=8, gather_quotas=(64, 32, 32),
               retained_tokens=(128, 128, 96, 64, 48, 32)),
}


AblationName = Literal[
    "none", "self_attention", "mix_and_sequence_kv", "per_layer_cache", "uniform_pool", "segment_pool", "softcap",
    "no_gate_up_norm", "gqa", "layerscale", "dense_mix_map",
]
#: One-switch ablations by name (`ablation` config value), so a sweep can run them as one grid axis.
ABLATIONS: dict[str, dict[str, object]] = {
    "none": {},
    "self_attention": {"interaction": "self_attention"},
    "mix_and_sequence_kv": {"cross_attention_kv": "mix_and_sequence"},
    "per_layer_cache": {"kv_cache": "per_layer"},
    "uniform_pool": {"compression": "uniform_pool"},
    "segment_pool": {"compression": "segment_pool"},
    "softcap": {"gate_up_norm": "softcap"},
    "no_gate_up_norm": {"gate_up_norm": "none"},
    "gqa": {"kv_heads": 1},  # every query head reads one shared key/value head
    "layerscale": {"layerscale": True},
    "dense_mix_map": {"mix_tokens_map": "dense"},
}


@dataclass
class HelixConfig:
    """HELIX hyper-parameters. `None` fields take the value of the named `size` (see SIZES)."""

    size: Literal["XS", "S", "M", "L", "XL"] = "S"
    dim: int | None = None  # model width W
    num_layers: int | None = None  # decoder layers
    mixformer_layers: int | None = None
    num_heads: int | None = None
    kv_heads: int | None = None  # key/value heads (GQA); None = num_heads
    gather_quotas: tuple[int, ...] | None = None  # per user-only sequence: exposures, effective, long views
    retained_tokens: tuple[int, ...] | None = None  # encoder tokens per layer; its length is the encoder depth
    mix_tokens: int = 8
    embed_dim: int = 64
    history_len: int = 128
    hard_search_len: int = 32
    ffn_mult: int = 2
    interaction: Literal["mptf", "self_attention"] = "mptf"
    cross_attention_kv: Literal["sequence", "mix_and_sequence"] = "sequence"
    kv_cache: Literal["last_layer", "per_layer"] = "last_layer"
    compression: Compression = "gather_truncate"
    gate_up_norm: GateUpNorm = "rms"
    layerscale: bool = False  # learnable per-channel scale on each encoder residual branch
    mix_tokens_map: Literal["segment", "dense"] = "segment"
    reuse_requests: bool = False
    ablation: AblationName = "none"  # a named one-switch ablation (ABLATIONS)

    def __post_init__(self) -> None:
        check_choices(self)
        v = SimpleNamespace(**self._merged())
        require_at_least(v, 1, "dim", "num_layers", "num_heads", "retained_tokens", "mix_tokens", "embed_dim",
                         "history_len", "hard_search_len", "ffn_mult")
        require_at_least(v, 0, "mixformer_layers", "gather_quotas")
        require_divisible(v, "dim", "mix_tokens", "num_heads")  # Mixup; attention heads
        if v.kv_heads is not None:
            require_at_least(v, 1, "kv_heads")
            require_divisible(v, "num_heads", "kv_heads")  # GQA groups
        if len(v.gather_quotas) != 3:
            raise ConfigError(f"model.gather_quotas: {v.gather_quotas!r} is not allowed (allowed: 3 entries, for "
                              "exposures, effective views, long views)")
        rt = v.retained_tokens
        if not rt or any(b > a for a, b in zip(rt, rt[1:])):
            raise ConfigError(f"model.retained_tokens: {rt!r} is not allowed (allowed: a non-empty, non-increasing "
                              "sequence of counts >= 1)")
        if v.compression != "uniform_pool" and rt[0] > sum(v.gather_quotas):
            raise ConfigError(f"model.retained_tokens: {rt!r} is not allowed (allowed: a first entry <= "
                              f"sum(model.gather_quotas)={sum(v.gather_quotas)} with compression={v.compression!r})")

    def resolved(self) -> ResolvedHelixConfig:
        """A copy with every `None` filled from the size preset and the named ablation applied."""
        return cast(ResolvedHelixConfig, HelixConfig(**self._merged()))

    def _merged(self) -> dict:
        """Field values after the size preset and the named ablation (which must not contradict given values)."""
        v = {f.name: getattr(self, f.name) for f in fields(self)}
        v.update({k: p for k, p in SIZES[self.size].items() if v[k] is None})
        defaults = {f.name: f.default for f in fields(self)}
        for key, value in ABLATIONS[self.ablation].items():
            if v[key] not in (value, defaults[key]):
                raise ConfigError(f"model.{key}: {v[key]!r} is not allowed with model.ablation={self.ablation!r} "
                                  f"(allowed: {value!r} or the default {defaults[key]!r})")
            v[key] = value
        return v


class ResolvedHelixConfig(HelixConfig):
    """The static type of `HelixConfig.resolved()`: the same dataclass with every size field set. Never
    instantiated; it only tells the type checker that these fields are no longer None."""

    dim: int
    num_layers: int
    mixformer_layers: int
    num_heads: int
    gather_quotas: tuple[int, ...]
    retained_tokens: tuple[int, ...]


class MPTF(nn.Module):
    """MPTF (Mixup-PerToken-FFN), HELIX's feature interaction (docs/helix.md), pre-norm, both residual:
    S = X + Mixup(X); out = S + SwiGLU_per_token(RMSNorm(S)). [B, T, W] -> [B, T, W]."""

    def __init__(self, tokens: int, width: int, hidden: int, gate_up_norm: GateUpNorm = "rms") -> None:
        super().__init__()
        self.norm = nn.RMSNorm(width)
        self.ffn = SwiGLU(width, hidden, gate_up_norm, tokens=tokens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x + mixup(x)  # [B, T, W]
        return s + self.ffn(self.norm(s))


class SelfAttentionInteraction(nn.Module):
    """Ablation of MPTF, matched in parameters: Mixup replaced by self-attention over the mix tokens, then the
    per-token SwiGLU with a narrower hidden width. [B, T, W] -> [B, T, W]."""

    def __init__(self, tokens: int, width: int, heads: int, hidden: int, gate_up_norm: GateUpNorm,
                 kv_heads: int | None = None) -> None:
        super().__init__()
        self.attn = MultiHeadAttention(width, heads, kv_heads)
        self.norm = nn.RMSNorm(width)
        # the hidden width that gives attention + SwiGLU the MPTF SwiGLU's parameter count (3 T W hidden)
        n_attn = sum(p.numel() for p in self.attn.parameters())
        self.ffn = SwiGLU(width, max(1, round(hidden - n_attn / (3 * tokens * width))), gate_up_norm, tokens=tokens)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        every = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        x = x + self.attn(x, x, every)
        return x + self.ffn(self.norm(x))


class ReadThenInteract(nn.Module):
    """One MixFormer or decoder layer: cross-attention read of a KV, residual, then the interaction."""

    def __init__(self, cfg: ResolvedHelixConfig) -> None:
        super().__init__()
        W, T, hidden = cfg.dim, cfg.mix_tokens, cfg.ffn_mult * cfg.dim
        self.read = QueryRead(W, cfg.num_heads)
        mix_kv = cfg.cross_attention_kv == "mix_and_sequence"
        self.mix_kv = KVProjection(W, cfg.num_heads, cfg.kv_heads) if mix_kv else None
        if cfg.interaction == "mptf":
            self.interact: nn.Module = MPTF(T, W, hidden, cfg.gate_up_norm)
        else:
            self.interact = SelfAttentionInteraction(T, W, cfg.num_heads, hidden, cfg.gate_up_norm, cfg.kv_heads)

    def forward(self, mix: torch.Tensor, kv: KV) -> torch.Tensor:  # mix [B, T, W]
        if self.mix_kv is not None:  # keys/values = [mix tokens; sequence]
            every = torch.ones(mix.shape[:2], dtype=torch.bool, device=mix.device)
            kv = self.mix_kv(mix, every).concat(kv)
        mix = mix + self.read(mix, kv)  # [B, T, W]
        return self.interact(mix)


@register("helix", config=HelixConfig)
class Helix(nn.Module):
    def __init__(self, spec: FeatureSpec, cfg: HelixConfig) -> None:
        super().__init__()
        cfg = cfg.resolved()
        self.cfg = cfg
        W, E = cfg.dim, cfg.embed_dim
        self.embeddings = FieldEmbeddings(spec, E)
        self.non_sequence = NonSequenceTokens(spec, E, self.embeddings)  # [B, 13, E]
        n_in = self.non_sequence.num_tokens
        if cfg.mix_tokens_map == "segment" and cfg.mix_tokens > n_in:
            raise ConfigError(f"model.mix_tokens: {cfg.mix_tokens} is not allowed with model.mix_tokens_map="
                              f"'segment' (allowed: at most the {n_in} non-sequence tokens, or mix_tokens_map=dense)")
        tokenizer = SegmentMixTokenizer if cfg.mix_tokens_map == "segment" else MixTokenizer
        self.mix_tokenizer = tokenizer(n_in, E, cfg.mix_tokens, W)
        self.events = HistoryEventTokenizer(spec, E, self.embeddings)  # [B, L, E]
        self.event_proj = nn.Linear(E, W)
        self.encoder = HelixEncoder(
            width=W,
            heads=cfg.num_heads,
            hidden=cfg.ffn_mult * W,
            quotas=cfg.gather_quotas,
            retained=cfg.retained_tokens,
            compression=cfg.compression,
            gate_up_norm=cfg.gate_up_norm,
            kv_heads=cfg.kv_heads,
            layerscale=cfg.layerscale,
        )
        n_cache = 1 if cfg.kv_cache == "last_layer" else cfg.num_layers
        self.cache_kv = nn.ModuleList([KVProjection(W, cfg.num_heads, cfg.kv_heads) for _ in range(n_cache)])
        self.sequence_kv = KVProjection(W, cfg.num_heads, cfg.kv_heads)  # U x C sequence, projected once
        self.mixformer = nn.ModuleList([ReadThenInteract(cfg) for _ in range(cfg.mixformer_layers)])
        self.decoder = nn.ModuleList([ReadThenInteract(cfg) for _ in range(cfg.num_layers)])
        self.head_norm = nn.RMSNorm(W)
        self.head = PredictionHead(cfg.mix_tokens * W, W, spec.num_tasks)

    # -- candidate-independent part -------------------------------------------------------------
    def user_side(self, batch: History) -> tuple[torch.Tensor, list[KV]]:
        """Event tokens [B, L, W] and the decoder's K/V caches; reads only history keys of `batch`."""
        events = self.event_proj(self.events(batch))  # [B, L, W]
        layers = self.encoder(events, batch)  # [(tokens [B, n_l, W], mask [B, n_l])]
        if self.cfg.kv_cache == "last_layer":
            return events, [self.cache_kv[0](*layers[-1])]  # lazy K/V: projected once
        E, R = len(layers), self.cfg.num_layers
        return events, [proj(*layers[math.ceil((r + 1) * E / R) - 1]) for r, proj in enumerate(self.cache_kv)]

    def encode(self, batch: Batch) -> list[KV]:
        """The K/V cache(s) the decoder reads, one row per candidate (reuse path when configured)."""
        return self._user_side(recent_history(batch, self.cfg.history_len))[1]

    def _user_side(self, batch: Batch) -> tuple[torch.Tensor, list[KV]]:
        return history_per_request(self.user_side, batch, enabled=self.cfg.reuse_requests)

    # -- per-candidate part ---------------------------------------------------------------------
    def forward(self, batch: Batch) -> torch.Tensor:
        batch = recent_history(batch, self.cfg.history_len)
        mix = self.mix_tokenizer(self.non_sequence(batch))  # [B, T, W]
        events, caches = self._user_side(batch)  # [B, L, W], K/V [B, H, n, dh]

        idx, valid = hard_search(batch, self.cfg.hard_search_len)  # [B, K]
        sequence = gather_rows(events, idx) * valid[..., None].to(events.dtype)  # [B, K, W]
        sequence_kv = self.sequence_kv(sequence, valid)
        for layer in self.mixformer:
            mix = layer(mix, sequence_kv)
        for r, layer in enumerate(self.decoder):
            mix = layer(mix, caches[min(r, len(caches) - 1)])
        return self.head(self.head_norm(mix))  # [B] or [B, T]

