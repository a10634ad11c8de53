"""Which kernel computes the softmax attentions: the explicit matmuls written in each block (the plain PyTorch
reference op), or torch's fused `scaled_dot_product_attention` (`sdpa_attention` here, the fast op, with the
explicit ops' masking rule exactly). As in generative-recommenders, an op takes its kernel as an argument; a
module that calls one (`UsesAttentionKernel`) holds it in `attention_kernel`, set on a whole model by
`set_attention_kernel` (`architectures.build(..., attention=)`). The kernels and FLOP counting: docs/training.md,
"Speed"; tests/test_attention_kernels.py compares the fast op with each reference op, forward and backward.
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
