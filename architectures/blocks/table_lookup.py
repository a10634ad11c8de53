"""Look-ups in a small 1-D parameter table by a large index tensor (`table[index]`), fast on CPU.

HSTU's time bias reads a table of 129 entries at every (query, key) pair of every target: 4.2M indices
per layer at the seed configuration (B = 256, L = 128), 17M at the seed's HSTU-only model. On CPU, advanced
indexing takes ~10 ms for the first and its autograd backward, `index_put_(accumulate=True)`, about 60 ms, a
tenth of a whole WHALE training step per layer. Here the forward is `index_select` (~2 ms, the same values)
and the backward `scatter_add_` (`_scatter_sum`): at one thread one sequential pass adding the gradient
entries into each slot in memory order (14 ms for 17M entries, where `index_add_`, the same pass, takes 24);
with more threads `ROWS_PER_THREAD` rows per thread, each a sequential pass over consecutive entries, summed
at the end (7 ms at 2 threads; `index_add_` into a 1-D table runs on one thread).

Numbers: with one thread (the setting every committed CPU sweep ran with) `index_put_` adds in that same
order, so results are bit-identical to plain indexing (tested). With more threads `index_put_` adds with
atomics in parallel, so its sums vary from run to run; the rows here are fixed by the thread count, so the
sums are deterministic at a given thread count (and round differently from one thread's).
On CUDA plain indexing is kept: its backward is deterministic (sorted), while CUDA's `index_add_` uses
atomics and would make resumed runs differ.
"""
from __future__ import annotations

import torch

#: Rows of partial sums per torch thread in the backward with more than one thread (`_scatter_sum`).
ROWS_PER_THREAD = 8


class _CpuTableLookup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.table_size = table.shape[0]
        return _gather(table, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (index,) = ctx.saved_tensors
        return _scatter_sum(grad.contiguous().view(-1), index.reshape(-1), ctx.table_size), None


def _scatter_sum(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """[size] sums of `values` by `index` (both 1-D): at one thread one sequential pass in memory order; with
    more, `ROWS_PER_THREAD` rows per thread of consecutive entries, each summed sequentially, then the rows."""
    threads = torch.get_num_threads()
    rows = threads * ROWS_PER_THREAD
    if threads <= 1 or values.numel() < rows * size:
        return values.new_zeros(size).scatter_add_(0, index, values)
    whole = values.numel() // rows * rows
    sums = values.new_zeros(rows + 1, size)  # [rows + 1, size]: the last row takes the ragged end
    sums[:rows].scatter_add_(1, index[:whole].view(rows, -1), values[:whole].view(rows, -1))
    sums[rows].scatter_add_(0, index[whole:], values[whole:])
    return sums.sum(dim=0)


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
