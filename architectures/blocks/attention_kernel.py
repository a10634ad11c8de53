"""Which kernel computes the softmax attentions: the explicit matmuls written in each block (the plain
PyTorch reference op), or torch's fused `scaled_dot_product_attention` (SDPA: flash / memory-efficient
kernels on GPUs; `sdpa_attention` here is the fast op).

The choice is explicit, as in Meta's generative-recommenders (an op takes its kernel as an argument, a
module holds the kernel it passes, `set_hammer_kernel` sets it on a whole model): the ops (`attend` in
`masked_attention.py`, `CrossAttentionRead` in `whale.py`) take `kernel` as an argument; the modules that
call them (`UsesAttentionKernel` subclasses) hold it in `attention_kernel`, set on a whole model by
`set_attention_kernel`, which `architectures.build(..., attention=...)` calls with the run's
`train.attention` (a typed, validated field of `harness.config.TrainConfig`). There is no module-level
setting: a model computes its attentions with its own kernel wherever it is called from.

Kernels: `auto` (the default) uses SDPA on CUDA tensors and the explicit matmuls on CPU, where they are what
the committed results were computed with (SDPA's CPU kernels round differently, so its logits agree only
within float tolerance). `sdpa` and `explicit` force one path everywhere. A block asks `use_sdpa(q, kernel)`
and, when it is true, calls `sdpa_attention`, which keeps its masking rule exactly: keys that are not
allowed get zero weight, and a query with no allowed key reads exactly zero (SDPA alone would return NaN
for such a row, so the row is given every key and its output is then zeroed). tests/test_attention_kernels.py
compares the fast op with each reference op, forward and backward.

FLOPs: fvcore sees `aten::scaled_dot_product_attention` and counts it with the handle in
`architectures/flops.py` (score and value products, the same multiply-adds as the explicit matmuls).
"""
from __future__ import annotations

from typing import Literal, cast, get_args

import torch
import torch.nn as nn
import torch.nn.functional as F

AttentionKernel = Literal["auto", "sdpa", "explicit"]
KERNELS: tuple[str, ...] = get_args(AttentionKernel)


def check_kernel(kernel: str) -> AttentionKernel:
    """`kernel` when it is one of `KERNELS`, else a ValueError naming the allowed values."""
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel {kernel!r} is not one of {', '.join(KERNELS)}")
    return cast(AttentionKernel, kernel)


def use_sdpa(q: torch.Tensor, kernel: AttentionKernel) -> bool:
    """Whether the attention on `q` runs through SDPA under `kernel` ("auto": on CUDA tensors only)."""
    return kernel == "sdpa" or (kernel == "auto" and q.is_cuda)


class UsesAttentionKernel:
    """Mixin of the modules that run a softmax attention: `attention_kernel` is the kernel they pass to the
    attention op ("auto" until `set_attention_kernel` sets another)."""

    attention_kernel: AttentionKernel = "auto"


def set_attention_kernel(model: nn.Module, kernel: str) -> nn.Module:
    """Set `kernel` ("auto" | "sdpa" | "explicit") on every softmax-attention module of `model` (itself
    included); returns `model`."""
    checked = check_kernel(kernel)
    for module in model.modules():
        if isinstance(module, UsesAttentionKernel):
            module.attention_kernel = checked
    return model


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                   scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v over allowed keys; q [.., Nq, E], k [.., Nk, E], v [.., Nk, Ev], `allowed`
    bool broadcasting to [.., Nq, Nk]. A query with no allowed key reads exactly zero. -> [.., Nq, Ev]"""
    any_key = allowed.any(dim=-1, keepdim=True)  # [.., Nq, 1]
    mask = allowed | ~any_key  # an empty row reads every key (finite), then is zeroed
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out * any_key.to(out.dtype)
