"""Which kernel computes the softmax attentions: the explicit matmuls written in each block (the reference op) or
torch's fused `scaled_dot_product_attention` (`sdpa_attention`, with the explicit ops' masking rule exactly); an op
takes it as an argument and a module holds it (docs/architectures.md, "Shared blocks"; docs/training.md, "Speed").
"""
from __future__ import annotations

from typing import Literal, cast, get_args

import torch
import torch.nn as nn
import torch.nn.functional as F

AttentionKernel = Literal["auto", "sdpa", "explicit"]
KERNELS: tuple[str, ...] = get_args(AttentionKernel)


def use_sdpa(q: torch.Tensor, kernel: AttentionKernel) -> bool:
    """Whether the attention on `q` runs through SDPA under `kernel` ("auto": on CUDA tensors only)."""
    return kernel == "sdpa" or (kernel == "auto" and q.is_cuda)


class UsesAttentionKernel:
    """Mixin of the modules that run a softmax attention: `attention_kernel` is the kernel they pass to the
    attention op ("auto" until `set_attention_kernel` sets another)."""

    attention_kernel: AttentionKernel = "auto"


def set_attention_kernel(model: nn.Module, kernel: str) -> nn.Module:
    """Set `kernel` ("auto" | "sdpa" | "explicit") on every softmax-attention module of `model` (itself
    included); returns `model`; an unknown `kernel` is a ValueError naming the allowed values."""
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel {kernel!r} is not one of {', '.join(KERNELS)}")
    for module in model.modules():
        if isinstance(module, UsesAttentionKernel):
            module.attention_kernel = cast(AttentionKernel, kernel)
    return model


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                   scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v over allowed keys; q [.., Nq, E], k [.., Nk, E], v [.., Nk, Ev], `allowed`
    bool broadcasting to [.., Nq, Nk]. A query with no allowed key reads exactly zero. -> [.., Nq, Ev]"""
    any_key = allowed.any(dim=-1, keepdim=True)  # [.., Nq, 1]
    mask = allowed | ~any_key  # an empty row reads every key (finite), then is zeroed
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out * any_key.to(out.dtype)
