"""HSTU layer: pointwise-gated aggregation with relative position and time-bucket biases, after Zhai et al.,
"Actions Speak Louder than Words" (ICML 2024), as the WHALE seed write-up specifies it (docs/architectures.md,
"HSTU layer", "Shared history branch" and "HSTU-only"). X [B, N, D] -> [B, N, D]; the read mask and the bucket
matrix are built once per batch and shared by every layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from protocols.schema import FeatureSpec

from .embeddings import FieldEmbeddings, HistoryEventTokenizer
from .history import History
from .pointwise_attention import Span, explicit_pointwise_attention, key_spans, pointwise_attention

DEFAULT_NUM_BUCKETS = 128
BUCKET_DIVISOR = 0.301
#: eps of both layer norms of an HSTU layer: torch's default; why it stays against generative-recommenders' 1e-6:
#: docs/architectures.md, "Configuration".
DEFAULT_LAYER_NORM_EPS = 1e-5
#: Additive score bias of a masked pair. sigmoid(MASKED + s) is exactly 0 in float32 for any |s| < 1e29, so
#: SiLU gives -0.0 and a zero gradient there: the same as multiplying by a 0/1 mask, without the extra pass.
MASKED = -1e30


@dataclass(frozen=True)
class HSTUKernel:
    """How an HSTU encoder computes its attention and time bias; the defaults are what every committed result
    trained with."""

    #: The CPU fast ops (`pointwise_attention`, `table_lookup`); False: the plain reference ops
    #: (`explicit_pointwise_attention`, `table[index]`), bit-identical at one thread (tests/test_cpu_kernels.py).
    fast: bool = True
    #: Every (query, key) pair computed at any thread count (no `key_spans`): the nominal matrix FLOPs.
    every_pair: bool = False
    #: Elements of one block's score map at most; None: `block_budget_mib` at torch's thread count.
    block_elements: int | None = None


def set_hstu_kernel(model: nn.Module, kernel: HSTUKernel) -> nn.Module:
    """Set `kernel` on every HSTU encoder of `model` (itself included); returns `model`."""
    for module in model.modules():
        if isinstance(module, HSTUEncoder):
            module.kernel = kernel
    return model


def time_bucket(dt_ms: torch.Tensor, *, num_buckets: int = DEFAULT_NUM_BUCKETS) -> torch.Tensor:
    """clamp(floor(ln(max(|dt_ms|, 1)) / BUCKET_DIVISOR), 0, num_buckets) as int64 (computed in float64)."""
    x = dt_ms.abs().clamp_(min=1).to(torch.float64).log_().div_(BUCKET_DIVISOR)  # >= 0, so floor is truncation
    return x.to(torch.int64).clamp_(max=num_buckets)


def history_layout(ts: torch.Tensor, valid: torch.Tensor, *,
                   num_buckets: int = DEFAULT_NUM_BUCKETS) -> tuple[torch.Tensor, torch.Tensor]:
    """Read mask [B, N, N] (bool; query i, key j) and time buckets [B, N, N] of the shared history branch."""
    N = ts.shape[1]
    earlier = ts.unsqueeze(1) < ts.unsqueeze(2)  # [B, N, N]: t_j < t_i
    itself = torch.eye(N, dtype=torch.bool, device=ts.device)
    mask = earlier.logical_or_(itself).logical_and_(valid.unsqueeze(2)).logical_and_(valid.unsqueeze(1))
    buckets = time_bucket(ts.unsqueeze(2) - ts.unsqueeze(1), num_buckets=num_buckets)
    return mask, buckets


def sequence_layout(ts: torch.Tensor, valid: torch.Tensor, *, event: torch.Tensor | None = None,
                    num_buckets: int = DEFAULT_NUM_BUCKETS) -> tuple[torch.Tensor, torch.Tensor]:
    """Read mask and time buckets of a left-aligned token sequence (HSTU-only).

    Position i reads j <= i when both are valid. With `event [B, N]` (the history event each token comes
    from), i additionally reads j only at a strictly earlier time or within the same event. The query time
    is that of the next valid position (its own time at the last valid position).
    """
    N = ts.shape[1]
    pos = torch.arange(N, device=ts.device)
    mask = (pos.unsqueeze(0) <= pos.unsqueeze(1)) & valid.unsqueeze(2) & valid.unsqueeze(1)  # [B, N, N]
    if event is not None:
        same_event = event.unsqueeze(2) == event.unsqueeze(1)
        mask &= (ts.unsqueeze(1) < ts.unsqueeze(2)) | same_event
    next_valid = torch.cat([valid[:, 1:], torch.zeros_like(valid[:, :1])], dim=1)  # [B, N]
    ts_next = torch.where(next_valid, torch.roll(ts, -1, dims=1), ts)  # [B, N]
    buckets = time_bucket(ts_next.unsqueeze(2) - ts.unsqueeze(1), num_buckets=num_buckets)
    return mask, buckets


def mask_to_bias(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """bool read mask [B, N, N] -> additive bias: 0 where read, MASKED where not."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, MASKED)


# `table_lookup`: `table[index]` on CPU as an `index_select` forward and a `scatter_add_` backward in fixed rows
# of partial sums; CUDA keeps plain indexing. Why, and the rounding: docs/training.md, "CPU kernels".
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


class RelativeBias(nn.Module):
    """b_pos[j - i] + b_time[bucket_ij] for sequences of at most `max_len` positions -> [B, N, N]."""

    def __init__(self, max_len: int, num_buckets: int = DEFAULT_NUM_BUCKETS) -> None:
        super().__init__()
        self.max_len = max_len
        self.position = nn.Parameter(torch.empty(2 * max_len - 1).normal_(std=0.02))
        self.time = nn.Parameter(torch.empty(num_buckets + 1).normal_(std=0.02))

    def forward(self, buckets: torch.Tensor, fast: bool = True) -> torch.Tensor:
        """buckets [B, N, N]; `fast`: the time table read with `table_lookup` (else `table[index]`)."""
        N = buckets.shape[-1]
        if N > self.max_len:
            raise ValueError(f"sequence of {N} positions exceeds the bias tables' max_len {self.max_len}")
        pos = torch.arange(N, device=buckets.device)
        offset = pos.unsqueeze(0) - pos.unsqueeze(1) + (self.max_len - 1)  # [N, N]: j - i, shifted
        time = table_lookup(self.time, buckets) if fast else self.time[buckets]  # [B, N, N]
        return self.position[offset] + time


class HSTULayer(nn.Module):
    """One HSTU layer: [B, N, D] -> [B, N, D]; `eps` is that of both layer norms."""

    def __init__(self, dim: int, *, num_heads: int, head_dim: int, max_len: int,
                 num_buckets: int = DEFAULT_NUM_BUCKETS, eps: float = DEFAULT_LAYER_NORM_EPS) -> None:
        super().__init__()
        self.dim, self.num_heads, self.head_dim, self.max_len = dim, num_heads, head_dim, max_len
        self.eps = eps
        inner = num_heads * head_dim
        self.uvqk = nn.Linear(dim, 4 * inner, bias=False)
        self.out = nn.Linear(inner, dim)
        self.bias = RelativeBias(max_len, num_buckets)

    def forward(self, x: torch.Tensor, valid: torch.Tensor, mask_bias: torch.Tensor, buckets: torch.Tensor,
                spans: list[Span] | None = None, kernel: HSTUKernel = HSTUKernel()) -> torch.Tensor:
        """x [B, N, D]; valid [B, N]; mask_bias [B, N, N] (0 where read, MASKED elsewhere); buckets [B, N, N];
        spans: the read mask's `key_spans` (None: every pair); kernel: the ops that compute it."""
        B, N, _ = x.shape
        H, d = self.num_heads, self.head_dim
        uvqk = F.silu(self.uvqk(F.layer_norm(x, (self.dim,), eps=self.eps)))  # [B, N, 4 H d]
        # split as a [B N, 4 H d] matrix: its backward then concatenates 2-D gradients, which torch does
        # about 4x faster on CPU than the same concatenation of [B, N, .] tensors (same values)
        u, v, q, k = (t.view(B, N, H * d) for t in uvqk.flatten(0, 1).split(H * d, dim=-1))  # each [B, N, H d]
        q, k, v = (t.view(B, N, H, d).transpose(1, 2) for t in (q, k, v))  # each [B, H, N, d]
        bias = self.bias(buckets, kernel.fast) + mask_bias  # [B, N, N]
        if kernel.fast:
            attn = pointwise_attention(q, k, v, bias, spans, block_elements=kernel.block_elements)  # [B, H, N, d]
        else:
            attn = explicit_pointwise_attention(q, k, v, bias)  # [B, H, N, d]
        attn = attn.transpose(1, 2).reshape(B, N, H * d) / self.max_len  # [B, N, H d]
        y = x + self.out(F.layer_norm(attn, (H * d,), eps=self.eps) * u)  # [B, N, D]
        return y * valid.unsqueeze(-1).to(y.dtype)


class HSTUEncoder(nn.Module):
    """A stack of HSTU layers sharing one read mask and bucket matrix; `forward` returns every layer's output,
    computed with the encoder's `kernel`."""

    def __init__(self, dim: int, num_layers: int, *, num_heads: int, head_dim: int, max_len: int,
                 num_buckets: int = DEFAULT_NUM_BUCKETS, eps: float = DEFAULT_LAYER_NORM_EPS,
                 kernel: HSTUKernel = HSTUKernel()) -> None:
        super().__init__()
        self.kernel = kernel
        self.layers = nn.ModuleList(
            [HSTULayer(dim, num_heads=num_heads, head_dim=head_dim, max_len=max_len, num_buckets=num_buckets,
                       eps=eps)
             for _ in range(num_layers)]
        )

    def forward(self, x: torch.Tensor, valid: torch.Tensor, mask: torch.Tensor,
                buckets: torch.Tensor) -> list[torch.Tensor]:
        """x [B, N, D] (0 at PAD), valid [B, N], mask [B, N, N] -> outputs of layers 1..num_layers, each [B, N, D]."""
        mask_bias = mask_to_bias(mask, x.dtype)  # [B, N, N]
        spans = key_spans(mask, every_pair=self.kernel.every_pair)  # query ranges, their keys (None at one thread)
        outs = []
        for layer in self.layers:
            x = layer(x, valid, mask_bias, buckets, spans, self.kernel)
            outs.append(x)
        return outs


class HistoryBranch(nn.Module):
    """The shared history branch of WHALE and Shallow-hybrid: event tokens, then HSTU layers with the
    `history_layout` mask; it never sees the candidate. History keys -> per-layer outputs [B, L, D]."""

    def __init__(self, spec: FeatureSpec, embeddings: FieldEmbeddings, *, dim: int, num_layers: int,
                 num_heads: int, head_dim: int, max_len: int, num_buckets: int, event_hidden: int | None,
                 eps: float = DEFAULT_LAYER_NORM_EPS) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.events = HistoryEventTokenizer(spec, dim, embeddings, hidden=event_hidden)
        self.hstu = HSTUEncoder(dim, num_layers, num_heads=num_heads, head_dim=head_dim, max_len=max_len,
                                num_buckets=num_buckets, eps=eps)

    def forward(self, hist: History) -> list[torch.Tensor]:
        valid = hist["hist_mask"]  # [B, L]
        tokens = self.events(hist)  # [B, L, D], 0 at PAD
        mask, buckets = history_layout(hist["hist_ts"], valid, num_buckets=self.num_buckets)  # [B, L, L] x2
        return self.hstu(tokens, valid, mask, buckets)
