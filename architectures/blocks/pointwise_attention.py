"""HSTU's pointwise attention, `SiLU(q k^T + bias) v`, computed in blocks of targets on CPU.

For B targets, H heads, N positions and head width d, the explicit form materialises four [B, H, N, N]
tensors per layer in training (scores, SiLU output, their gradients): 270 MB each at the seed's HSTU
(B = 256, H = 4, N = 257). Here the work is split into blocks of targets whose [b, H, N, N] maps stay within
a memory budget (see "Block size"), and the backward pass recomputes each block's scores from q, k and
the bias instead of storing them (as FlashAttention does), so no [B, H, N, N] tensor is kept for the
backward. Heads are batched into every product; each block issues 2 batched products forward and 5
backward (one recomputing the scores), so a step issues 7 x blocks x layers of them. q, k and v are
copied once, to the layouts `torch.matmul` gives them in the explicit form (k as k^T); the output and the
gradients are written token-major ([B, N, H, d] in memory), the layout of the projections, so the caller's
reshape and the projection's backward need no further copies.

Block size. Each block's products and element-wise passes are OpenMP regions, and with more than one thread
every region ends at a barrier where a thread waits for the others; when another process holds a core (a
sweep's second trial), the waits, not the arithmetic, set the pace, so fewer, larger blocks are faster. At
one thread there is no barrier, and cache-sized blocks keep the element-wise passes in cache. So the budget
of one block's map depends on the thread count (`block_budget_mib`): 4 MiB at one thread, 64 MiB with more.
Chosen by timing training steps at `recscale bench` shapes (B = 256, 4 heads; HSTU N = 257, WHALE N = 128)
at budgets of 4, 16, 64 and 256 MiB, interleaved round by round on a shared, loaded 2-core machine (median
of 5 rounds, ratio to 4 MiB paired by round), without and with one core kept busy:

| threads | HSTU 16 / 64 / 256 MiB | WHALE 16 / 64 / 256 MiB |
| --- | --- | --- |
| 1 | 1.00 / 1.04 / 0.93; busy 1.05 / 0.91 / 1.01 | 0.96 / 0.94 / 0.92; busy 0.97 / 0.94 / 0.92 |
| 2 | 1.13 / 1.34 / 1.31; busy 0.90 / 1.39 / 1.87 | 1.62 / 1.52 / 1.78 |

At 2 threads 64 MiB issues 84 products per HSTU step instead of 224 and runs WHALE's in one block; 256 MiB
gains a little more in some cases at four times the memory (the backward holds about four maps at once).

Numbers: every block runs the same operations on the same values as the explicit form does on the whole
batch (batched matrix products treat each target separately, and block sizes keep element-wise kernels on
the same vector/scalar paths, see `ALIGN_ELEMENTS`), so at one thread the output and all gradients are
bit-identical to autograd through the explicit form (tested), whatever the budget; one thread, where every
committed CPU result trained, keeps the 4 MiB blocks it always had. At more threads, batched products of
another batch size may split their work differently, so the last bits may change with the budget (the
seed's HSTU at 2 threads: parameters differ after 3 steps between 4 and 64 MiB; WHALE's agreed).

FLOPs: under `torch.no_grad` (which is how fvcore traces models) the blocked forward is plain tensor code,
so fvcore counts the same batched products, block by block, for the same total.

The blocked form is used on CPU only; on CUDA the explicit form runs (its kernels are not cache-bound in
the same way, and `torch.compile` can fuse it there).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

#: Memory budget of one block's [b, H, N, N] fp32 score map, in MiB, at one torch thread and with more (the
#: module docstring says how they were chosen).
ONE_THREAD_BUDGET_MIB = 4
MANY_THREADS_BUDGET_MIB = 64
#: Elements of one block's score map at most, when set (tests set it); None: from `block_budget_mib`.
BLOCK_ELEMENTS: int | None = None
#: Every block but the last holds a multiple of this many map elements. torch's element-wise CPU kernels
#: (SiLU among them) run a vectorised loop over whole groups of 2 vectors (at most 32 floats) and a scalar
#: loop over the remainder, which rounds differently; blocks whose sizes are multiples of 64 put every
#: element on the same path as in the whole-batch tensor, which keeps the results bit-identical.
ALIGN_ELEMENTS = 64


def block_budget_mib(threads: int) -> int:
    """MiB of one block's fp32 score map at `threads` torch threads."""
    return ONE_THREAD_BUDGET_MIB if threads <= 1 else MANY_THREADS_BUDGET_MIB


def _block_size(q: torch.Tensor, num_keys: int) -> int:
    """Targets per block for queries q [B, H, Nq, d] over `num_keys` keys: at most the budget's map elements
    (BLOCK_ELEMENTS, else `block_budget_mib` at torch's thread count), in a multiple of the targets whose maps
    fill whole ALIGN_ELEMENTS groups (at least one such multiple)."""
    per_target = q.shape[1] * q.shape[2] * num_keys
    unit = ALIGN_ELEMENTS // math.gcd(per_target, ALIGN_ELEMENTS)
    elements = BLOCK_ELEMENTS or block_budget_mib(torch.get_num_threads()) * (1 << 20) // 4
    size = elements // per_target
    return max(unit, size - size % unit)


def _token_major_like(t: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """An uninitialised [B, H, N, width] tensor laid out as [B, N, H, width] in memory (a transposed view)."""
    B, H, N, d = t.shape
    return t.new_empty(B, N, H, width or d).transpose(1, 2)


def _scores(q: torch.Tensor, kt: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """q k^T + bias for one block: q [b, H, N, d], kt = k^T [b, H, d, N], bias [b, N, N] -> [b, H, N, N]."""
    return torch.matmul(q, kt).add_(bias.unsqueeze(1))


def _operands(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k^T and v as contiguous tensors, as `torch.matmul` lays them out for the explicit form's batched
    products (and autograd then reads them, transposed where needed): the same layouts give the same
    rounding. -> q [B, H, N, d], kt [B, H, d, N], v [B, H, N, dv]."""
    return q.contiguous(), k.transpose(2, 3).contiguous(), v.contiguous()


def blocked_forward(q: torch.Tensor, kt: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """SiLU(q k^T + bias) v, block by block, on `_operands` -> [B, H, N, dv] (token-major memory)."""
    out = _token_major_like(q, v.shape[-1])  # [B, H, N, dv]
    step = _block_size(q, kt.shape[3])
    for s in range(0, q.shape[0], step):
        e = s + step
        out[s:e] = torch.matmul(F.silu(_scores(q[s:e], kt[s:e], bias[s:e])), v[s:e])
    return out


class _BlockedPointwiseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias):
        q, kt, v = _operands(q, k, v)  # one copy each, not one per block
        ctx.save_for_backward(q, kt, v, bias)
        return blocked_forward(q, kt, v, bias)

    @staticmethod
    def backward(ctx, grad_out):
        q, kt, v, bias = ctx.saved_tensors  # contiguous: q [B, H, N, d], kt [B, H, d, N], v [B, H, N, dv]
        grad_out = grad_out.contiguous()
        dq, dk, dv = _token_major_like(q), _token_major_like(q), _token_major_like(v)
        dbias = torch.empty_like(bias)  # [B, N, N]
        step = _block_size(q, kt.shape[3])
        for s in range(0, q.shape[0], step):  # the products autograd takes through the explicit form
            e = s + step
            qb, ktb, vb, g = q[s:e], kt[s:e], v[s:e], grad_out[s:e]
            scores = _scores(qb, ktb, bias[s:e])  # [b, H, N, N], recomputed
            dv[s:e] = torch.matmul(F.silu(scores).transpose(2, 3), g)
            dscores = torch.ops.aten.silu_backward(torch.matmul(g, vb.transpose(2, 3)), scores)
            torch.sum(dscores, dim=1, out=dbias[s:e])  # [b, N, N]
            dq[s:e] = torch.matmul(dscores, ktb.transpose(2, 3))
            dk[s:e] = torch.matmul(qb.transpose(2, 3), dscores).transpose(2, 3)  # (d k^T)^T
        return dq, dk, dv, dbias


def explicit_pointwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 bias: torch.Tensor) -> torch.Tensor:
    """The plain form: SiLU(q k^T + bias[:, None]) v with autograd through every op -> [B, H, N, dv]."""
    return torch.matmul(F.silu(_scores(q, k.transpose(2, 3), bias)), v)


def pointwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """SiLU(q k^T + bias) v: q, k [B, H, N, d], v [B, H, N, dv], bias [B, N, N] (shared by heads) -> [B, H, N, dv]."""
    if q.device.type != "cpu":
        return explicit_pointwise_attention(q, k, v, bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, bias)):
        return _BlockedPointwiseAttention.apply(q, k, v, bias)
    return blocked_forward(*_operands(q, k, v), bias)
