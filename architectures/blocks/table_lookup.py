"""Look-ups in a small 1-D parameter table by a large index tensor (`table[index]`), fast on CPU.

HSTU's time bias reads a table of 129 entries at every (query, key) pair of every target: 4.2M indices
per layer at the seed configuration (B = 256, L = 128). On CPU, advanced indexing takes ~10 ms for that
and its autograd backward, `index_put_(accumulate=True)`, about 60 ms, a tenth of a whole WHALE training
step per layer. Here the forward is `index_select` (~2 ms, the same values) and the backward
`index_add_` (~4-7 ms): one sequential pass adding the gradient entries into each slot in memory order.

Numbers: with one thread (the setting every committed CPU sweep ran with) `index_put_` adds in that same
order, so results are bit-identical to plain indexing (tested). With more threads `index_put_` adds with
atomics in parallel, so its sums vary from run to run; `index_add_` stays sequential and deterministic.
On CUDA plain indexing is kept: its backward is deterministic (sorted), while CUDA's `index_add_` uses
atomics and would make resumed runs differ.
"""
from __future__ import annotations

import torch


class _CpuTableLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.table_size = table.shape[0]
        return _gather(table, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (index,) = ctx.saved_tensors
        flat = grad.contiguous().view(-1)  # [numel(index)]
        table_grad = flat.new_zeros(ctx.table_size).index_add_(0, index.reshape(-1), flat)  # [table_size]
        return table_grad, None


def _gather(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table[index] via index_select (about 5x faster than advanced indexing on CPU; the same values)."""
    return table.index_select(0, index.reshape(-1)).view(index.shape)


def table_lookup(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """`table[index]` for a 1-D `table` [T] and an integer `index` of any shape -> index.shape."""
    if table.device.type != "cpu":
        return table[index]
    if table.requires_grad and torch.is_grad_enabled():
        return _CpuTableLookup.apply(table, index)
    return _gather(table, index)
