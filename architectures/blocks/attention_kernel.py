"""Which kernel computes the softmax attentions: the explicit matmuls written in each block, or torch's
fused `scaled_dot_product_attention` (SDPA: flash / memory-efficient kernels on GPUs).

The choice is an execution setting (`train.attention`), not part of a model: `auto` (the default) uses
SDPA on CUDA tensors and the explicit matmuls on CPU, where they are what the committed results were
computed with (SDPA's CPU kernels round differently, so its logits agree only within float tolerance).
`sdpa` and `explicit` force one path everywhere. Blocks ask `use_sdpa(q)` and, when it is true, call
`sdpa_attention`, which keeps their masking rule exactly: keys that are not allowed get zero weight, and
a query with no allowed key reads exactly zero (SDPA alone would return NaN for such a row, so the row
is given every key and its output is then zeroed).

FLOPs: fvcore sees `aten::scaled_dot_product_attention` and counts it with the handle in
`architectures/flops.py` (score and value products, the same multiply-adds as the explicit matmuls).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
import torch.nn.functional as F

AttentionKernel = Literal["auto", "sdpa", "explicit"]
KERNELS: tuple[str, ...] = ("auto", "sdpa", "explicit")

_kernel: str = "auto"


@contextmanager
def attention_kernel(kernel: str) -> Iterator[None]:
    """Use `kernel` ("auto" | "sdpa" | "explicit") for every softmax attention run inside the block."""
    global _kernel
    if kernel not in KERNELS:
        raise ValueError(f"attention kernel {kernel!r} is not one of {', '.join(KERNELS)}")
    before, _kernel = _kernel, kernel
    try:
        yield
    finally:
        _kernel = before


def use_sdpa(q: torch.Tensor) -> bool:
    """Whether the attention on `q` runs through SDPA under the current setting."""
    return _kernel == "sdpa" or (_kernel == "auto" and q.is_cuda)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                   scale: float | None = None) -> torch.Tensor:
    """softmax(q k^T * scale) v over allowed keys; q [.., Nq, E], k [.., Nk, E], v [.., Nk, Ev], `allowed`
    bool broadcasting to [.., Nq, Nk]. A query with no allowed key reads exactly zero. -> [.., Nq, Ev]"""
    any_key = allowed.any(dim=-1, keepdim=True)  # [.., Nq, 1]
    mask = allowed | ~any_key  # an empty row reads every key (finite), then is zeroed
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return out * any_key.to(out.dtype)
