"""FLOP and parameter accounting; what is counted and how: docs/architectures.md, "FLOPs and parameters".
fvcore (jit trace) counts 1 per multiply-add: its totals are doubled here, only its matrix-op handles are kept,
and handles are replaced or added for matmul (broadcast batch dimensions), `baddbmm` and
`scaled_dot_product_attention`. Shared tensors are counted once.
"""
from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from math import prod
from typing import Any

import torch
import torch.nn as nn

with warnings.catch_warnings():  # fvcore.nn scripts a few losses at import: torch.jit.script deprecation noise
    warnings.simplefilter("ignore", DeprecationWarning)
    from fvcore.nn import FlopCountAnalysis
    from fvcore.nn.jit_handles import (
        addmm_flop_jit,
        bmm_flop_jit,
        conv_flop_jit,
        einsum_flop_jit,
        get_shape,
        linear_flop_jit,
        matmul_flop_jit,
    )


def _matmul_macs(inputs: list[Any], outputs: list[Any]) -> int:
    """torch.matmul with broadcasting: every output element is one length-K dot product."""
    return prod(get_shape(outputs[0])) * get_shape(inputs[0])[-1]


def _baddbmm_macs(inputs: list[Any], outputs: list[Any]) -> int:
    """baddbmm(input, b1 [n, c, t], b2 [n, t, d])."""
    n, c, t = get_shape(inputs[1])
    return n * c * t * get_shape(inputs[2])[-1]


def _sdpa_macs(inputs: list[Any], outputs: list[Any]) -> int:
    """scaled_dot_product_attention(q [.., Nq, E], k [.., Nk, E], v [.., Nk, Ev]): scores + value products."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    return prod(q[:-1]) * k[-2] * (q[-1] + v[-1])


#: Multiply-add counters of matrix ops; every other op (norms, pooling, element-wise) is not counted.
MATRIX_OP_HANDLES = {
    "aten::addmm": addmm_flop_jit,
    "aten::bmm": bmm_flop_jit,
    "aten::_convolution": conv_flop_jit,
    "aten::einsum": einsum_flop_jit,
    "aten::mm": matmul_flop_jit,
    "aten::linear": linear_flop_jit,
    "aten::matmul": _matmul_macs,
    "aten::baddbmm": _baddbmm_macs,
    "aten::scaled_dot_product_attention": _sdpa_macs,
}


@dataclass(frozen=True)
class FlopReport:
    """Forward matrix FLOPs (2 per multiply-add) per target, in total and by module / operator.

    `by_module` uses fvcore's dotted module names ("" is the whole model); parents include their children.
    """

    per_target: float
    by_module: dict[str, float]
    by_operator: dict[str, float] = field(default_factory=dict)
    batch_size: int = 0


def count_flops(model: nn.Module, batch: dict[str, torch.Tensor]) -> FlopReport:
    """Trace one forward pass of `model` on `batch` (eval mode, no grad) and count its matrix FLOPs per target."""
    B = int(batch["label"].shape[0]) if "label" in batch else int(next(iter(batch.values())).shape[0])
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jit tracer / deprecation chatter from fvcore's tracing
            analysis = FlopCountAnalysis(model, (batch,))
            analysis.clear_op_handles().set_op_handle(**MATRIX_OP_HANDLES)
            analysis.unsupported_ops_warnings(False)
            analysis.uncalled_modules_warnings(False)
            by_module = {name: 2.0 * macs / B for name, macs in analysis.by_module().items()}
            by_operator = {op: 2.0 * macs / B for op, macs in Counter(analysis.by_operator()).items()}
            total = 2.0 * analysis.total() / B
    finally:
        model.train(was_training)
    return FlopReport(per_target=total, by_module=by_module, by_operator=by_operator, batch_size=B)


def count_params(model: nn.Module) -> dict[str, int]:
    """{"embedding": weights of nn.Embedding modules, "non_embedding": all other parameters}."""
    embedding = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding)}
    everything = {id(p): p.numel() for p in model.parameters()}
    n_emb = sum(embedding.values())
    return {"embedding": n_emb, "non_embedding": sum(everything.values()) - n_emb}
