"""HSTU's pointwise attention, `SiLU(q k^T + bias) v`, computed in pieces on CPU (`pointwise_attention`), and the
plain reference op beside it (`explicit_pointwise_attention`), which it equals bit for bit at one thread. Every
setting is an argument of the op, defaulting to what every committed result trained with; the pieces, and why
each choice, with its measurements: docs/training.md, "CPU kernels".
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F

#: Memory budget of one block's [b, H, rows, keys] fp32 score map, in MiB, at one torch thread and with more.
ONE_THREAD_BUDGET_MIB = 4
MANY_THREADS_BUDGET_MIB = 64
#: Every block but the last holds a multiple of this many map elements, so torch's element-wise CPU kernels
#: (vectorised over groups of up to 32 floats, scalar over the remainder) take the path, and give the rounding,
#: of the whole-batch tensor (docs/training.md, "CPU kernels": Numbers).
ALIGN_ELEMENTS = 64
#: Query ranges per sequence when spans are used (more than one thread): the causal HSTU map then costs
#: (1 + 1/QUERY_CHUNKS) / 2 of the full one.
QUERY_CHUNKS = 4

#: Spans are used only where they pay: maps of at least MIN_SPAN_KEYS keys, and at least MIN_SKIPPED of their
#: pairs left out (docs/training.md, "CPU kernels", key spans).
MIN_SPAN_KEYS = 64
MIN_SKIPPED = 0.25
#: A layer whose score maps take at most this many MiB in all also keeps their SiLU: the backward reuses it.
KEEP_ACTIVATED_MIB = 32

#: (first query, end query, first key, end key) of one query range and the keys any of its queries reads.
Span = tuple[int, int, int, int]


def block_budget_mib(threads: int) -> int:
    """MiB of one block's fp32 score map at `threads` torch threads."""
    return ONE_THREAD_BUDGET_MIB if threads <= 1 else MANY_THREADS_BUDGET_MIB


def key_spans(mask: torch.Tensor, chunks: int = QUERY_CHUNKS, *, every_pair: bool = False,
              min_keys: int = MIN_SPAN_KEYS, min_skipped: float = MIN_SKIPPED) -> list[Span] | None:
    """The query ranges of a read mask [B, N, N] (query i, key j) and, for each, the smallest key range that
    holds every key one of its queries reads in any target; None where spans are not used (docs/training.md,
    "CPU kernels", key spans): `every_pair` (the nominal matrix FLOPs), one torch thread, not on CPU, under a
    jit trace, or where they would not pay (fewer than `min_keys` keys, less than `min_skipped` of the pairs
    left out)."""
    N = mask.shape[-1]
    if (every_pair or mask.device.type != "cpu" or torch.get_num_threads() <= 1 or torch.jit.is_tracing()
            or N < min_keys):
        return None  # under a jit trace (fvcore) too: FLOP counts are those of the full maps at any thread count
    reads = mask.any(dim=0)  # [N, N]: query i reads key j in some target
    bounds = [round(c * N / chunks) for c in range(chunks + 1)]
    spans = []
    for r0, r1 in zip(bounds, bounds[1:]):
        if r1 <= r0:
            continue
        keys = reads[r0:r1].any(dim=0).nonzero().flatten()  # keys read by some query of the range
        k0, k1 = (int(keys[0]), int(keys[-1]) + 1) if len(keys) else (0, 0)
        spans.append((r0, r1, k0, k1))
    kept = sum((r1 - r0) * (k1 - k0) for r0, r1, k0, k1 in spans)
    return spans if kept <= (1 - min_skipped) * N * mask.shape[-2] else None


def _block_size(q: torch.Tensor, num_keys: int, num_queries: int | None = None,
                block_elements: int | None = None) -> int:
    """Targets per block for queries q [B, H, Nq, d] over `num_keys` keys (maps of `num_queries` rows, Nq when
    None): at most `block_elements` map elements (None: `block_budget_mib` at torch's thread count), in a
    multiple of the targets whose maps fill whole ALIGN_ELEMENTS groups (at least one such multiple)."""
    per_target = q.shape[1] * (num_queries or q.shape[2]) * num_keys
    unit = ALIGN_ELEMENTS // math.gcd(per_target, ALIGN_ELEMENTS)
    elements = block_elements or block_budget_mib(torch.get_num_threads()) * (1 << 20) // 4
    size = elements // max(per_target, 1)
    return max(unit, size - size % unit)


def _token_major_like(t: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """An uninitialised [B, H, N, width] tensor laid out as [B, N, H, width] in memory (a transposed view)."""
    B, H, N, d = t.shape
    return t.new_empty(B, N, H, width or d).transpose(1, 2)


def _scores(q: torch.Tensor, kt: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """q k^T + bias for one block: q [b, H, n, d], kt = k^T [b, H, d, m], bias [b, n, m] -> [b, H, n, m]."""
    return torch.matmul(q, kt).add_(bias.unsqueeze(1))


def _operands(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k^T and v as contiguous tensors, as `torch.matmul` lays them out for the explicit form's batched
    products (and autograd then reads them, transposed where needed): the same layouts give the same
    rounding. -> q [B, H, N, d], kt [B, H, d, N], v [B, H, N, dv]."""
    return q.contiguous(), k.transpose(2, 3).contiguous(), v.contiguous()


Piece = tuple[slice, Span]


def _one_full_map_per_block(pieces: list[Piece], num_queries: int, num_keys: int) -> bool:
    """Whether each piece is a whole block's full map (no spans): every output and gradient entry is then
    written exactly once."""
    return bool(pieces) and all(span == (0, num_queries, 0, num_keys) for _, span in pieces)


def _pieces(q: torch.Tensor, kt: torch.Tensor, spans: list[Span] | None,
            block_elements: int | None = None) -> Iterator[Piece]:
    """(target slice, span) of every piece of the work, block by block (`_block_size`), skipping spans with no
    keys; one full span per block when `spans` is None."""
    full = spans is None
    spans = [(0, q.shape[2], 0, kt.shape[3])] if spans is None else [s for s in spans if s[3] > s[2]]
    if not spans:
        return
    rows, keys = max(((r1 - r0, k1 - k0) for r0, r1, k0, k1 in spans), key=lambda rk: rk[0] * rk[1])
    B = q.shape[0]
    step = _block_size(q, keys, None if full else rows, block_elements)
    if not full:  # equal blocks, not full ones and a ragged rest: no near-empty last block
        blocks = -(-B // step)
        step = -(-B // blocks)
    for s in range(0, B, step):
        for span in spans:
            yield slice(s, s + step), span


def _keeps_activated(q: torch.Tensor, pieces: list[Piece], budget_mib: float) -> bool:
    """Whether the layer's maps, every piece's [b, H, n, m] for q [B, H, N, d], take at most `budget_mib`
    (their SiLU is then kept too)."""
    B, H = q.shape[0], q.shape[1]
    elements = sum((min(t.stop, B) - t.start) * H * (r1 - r0) * (k1 - k0) for t, (r0, r1, k0, k1) in pieces)
    return elements * q.element_size() <= budget_mib * (1 << 20)


def blocked_forward(q: torch.Tensor, kt: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, pieces: list[Piece],
                    keep: list[torch.Tensor] | None = None, keep_activated: bool = False) -> torch.Tensor:
    """SiLU(q k^T + bias) v, piece by piece (`_pieces`), on `_operands` -> [B, H, N, dv] (token-major memory);
    each piece's score map is appended to `keep` when given (for the backward), followed by its SiLU with
    `keep_activated`."""
    out = _token_major_like(q, v.shape[-1])  # [B, H, N, dv]
    if not _one_full_map_per_block(pieces, q.shape[2], kt.shape[3]):
        out.zero_()  # spans: queries that read no key in any target are left out of every piece
    for t, (r0, r1, k0, k1) in pieces:
        scores = _scores(q[t, :, r0:r1], kt[t, :, :, k0:k1], bias[t, r0:r1, k0:k1])  # [b, H, n, m]
        activated = F.silu(scores)  # [b, H, n, m]
        if keep is not None:
            keep.extend((scores, activated) if keep_activated else (scores,))
        out[t, :, r0:r1] = torch.matmul(activated, v[t, :, k0:k1])
    return out


class _BlockedPointwiseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, spans, block_elements, keep_activated_mib):
        q, kt, v = _operands(q, k, v)  # one copy each, not one per block
        pieces = list(_pieces(q, kt, spans, block_elements))
        kept: list[torch.Tensor] = []
        ctx.keeps_activated = _keeps_activated(q, pieces, keep_activated_mib)
        out = blocked_forward(q, kt, v, bias, pieces, kept, ctx.keeps_activated)
        ctx.save_for_backward(q, kt, v, *kept)
        ctx.pieces = pieces  # the backward's pieces are the forward's
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, kt, v, *kept = ctx.saved_tensors  # contiguous: q [B, H, N, d], kt [B, H, d, N], v [B, H, N, dv]
        pieces = ctx.pieces
        grad_out = grad_out.contiguous()
        dq, dk, dv = _token_major_like(q), _token_major_like(q), _token_major_like(v)
        B, N, M = q.shape[0], q.shape[2], kt.shape[3]
        full = _one_full_map_per_block(pieces, N, M)
        if full:  # one piece per block: every gradient entry written once
            dbias = q.new_empty(B, N, M)
        else:  # pieces add into the key gradients, and leave out pairs no target reads
            dbias = q.new_zeros(B, N, M)
            for t in (dq, dk, dv):
                t.zero_()
        per_piece = 2 if ctx.keeps_activated else 1  # the score map, then its SiLU when kept
        for i, (t, (r0, r1, k0, k1)) in enumerate(pieces):  # the products of the explicit form
            scores = kept[per_piece * i]  # [b, H, n, m]
            activated = kept[per_piece * i + 1] if ctx.keeps_activated else F.silu(scores)  # the same values
            qb, ktb, vb, g = q[t, :, r0:r1], kt[t, :, :, k0:k1], v[t, :, k0:k1], grad_out[t, :, r0:r1]
            dv_piece = torch.matmul(activated.transpose(2, 3), g)  # [b, H, m, dv]
            dscores = torch.ops.aten.silu_backward(torch.matmul(g, vb.transpose(2, 3)), scores)  # [b, H, n, m]
            torch.sum(dscores, dim=1, out=dbias[t, r0:r1, k0:k1])  # [b, n, m]
            dq[t, :, r0:r1] = torch.matmul(dscores, ktb.transpose(2, 3))
            dk_piece = torch.matmul(qb.transpose(2, 3), dscores).transpose(2, 3)  # (d k^T)^T: [b, H, m, d]
            if full:
                dv[t], dk[t] = dv_piece, dk_piece
            else:
                dv[t, :, k0:k1] += dv_piece
                dk[t, :, k0:k1] += dk_piece
        return dq, dk, dv, dbias, None, None, None


def explicit_pointwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                                 spans: list[Span] | None = None) -> torch.Tensor:
    """The plain form: SiLU(q k^T + bias[:, None]) v with autograd through every op -> [B, H, N, dv]
    (`spans` ignored: every pair is computed)."""
    return torch.matmul(F.silu(_scores(q, k.transpose(2, 3), bias)), v)


def pointwise_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                        spans: list[Span] | None = None, *, block_elements: int | None = None,
                        keep_activated_mib: float = KEEP_ACTIVATED_MIB) -> torch.Tensor:
    """SiLU(q k^T + bias) v: q, k [B, H, N, d], v [B, H, N, dv], bias [B, N, N] (shared by heads) -> [B, H, N, dv].
    `spans` (from `key_spans` of the read mask) restricts each query range to the keys it can read;
    `block_elements` caps a block's map (None: `block_budget_mib`); a layer whose maps take at most
    `keep_activated_mib` keeps their SiLU for the backward."""
    if q.device.type != "cpu":
        return explicit_pointwise_attention(q, k, v, bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, bias)):
        return _BlockedPointwiseAttention.apply(q, k, v, bias, spans, block_elements, keep_activated_mib)
    q, kt, v = _operands(q, k, v)
    return blocked_forward(q, kt, v, bias, list(_pieces(q, kt, spans, block_elements)))
