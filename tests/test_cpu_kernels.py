"""The CPU fast paths of the HSTU block against the plain autograd forms they replace.

- `table_lookup` (time-bias look-up with an `index_add_` backward) against `table[index]` through autograd:
  the same values and, at one thread (how every CPU sweep trains), bit-identical gradients; at two threads
  against a float64 sum.
- The blocked pointwise attention against the explicit `SiLU(q k^T + bias) v`: bit-identical outputs and
  gradients with several blocks, a ragged last block, masked pairs and rows with no readable key, and
  against a float64 reference; its blocks, at 1 and 2 threads, the largest aligned ones within the budget
  (found by search).
- Whole models (WHALE, HSTU, Shallow-hybrid) with the fast paths against the same models with the plain
  forms (`HSTUKernel(fast=False)`): bit-identical logits and parameter gradients at one thread, so committed
  CPU results do not move.
- `time_bucket` at every bucket boundary against the closed form evaluated in Python floats.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import architectures
from architectures.blocks import pointwise_attention as PA
from architectures.blocks.hstu import MASKED, HSTUEncoder, HSTUKernel, set_hstu_kernel, table_lookup, time_bucket
from protocols.schema import default_test_spec, random_batch

pytestmark = pytest.mark.usefixtures("one_thread")


def test_table_lookup_values_and_gradient_bit_identical_at_one_thread():
    g = torch.Generator().manual_seed(0)
    index = torch.randint(0, 129, (8, 33, 33), generator=g)
    grad = torch.randn(8, 33, 33, generator=g)
    fast_table = torch.randn(129, generator=g, requires_grad=True)
    plain_table = fast_table.detach().clone().requires_grad_()
    fast, plain = table_lookup(fast_table, index), plain_table[index]
    assert torch.equal(fast, plain)
    fast.backward(grad)
    plain.backward(grad)
    assert torch.equal(fast_table.grad, plain_table.grad)
    with torch.no_grad():
        assert torch.equal(table_lookup(fast_table, index), plain)


@pytest.mark.parametrize("shape", [(64, 50, 50), (7, 13, 11)])  # whole rows of partial sums; a ragged end
def test_table_lookup_gradient_at_two_threads_matches_float64_sum(shape):
    g = torch.Generator().manual_seed(1)
    index = torch.randint(0, 17, shape, generator=g)
    grad = torch.randn(shape, generator=g)
    table = torch.zeros(17, requires_grad=True)
    torch.set_num_threads(2)
    try:
        table_lookup(table, index).backward(grad)
    finally:
        torch.set_num_threads(1)  # the module's one_thread fixture is module-scoped
    ref = np.zeros(17)
    np.add.at(ref, index.numpy().ravel(), grad.numpy().astype(np.float64).ravel())
    np.testing.assert_allclose(table.grad.numpy(), ref, rtol=1e-5, atol=1e-3)


def _attention_inputs(B: int, H: int, N: int, d: int, seed: int):
    """q, k, v as the strided views HSTULayer makes ([B, N, 4 H d] split, viewed, transposed) and a bias
    with masked pairs; target 0 has one query that reads no key at all."""
    g = torch.Generator().manual_seed(seed)
    uvqk = torch.randn(B, N, 4 * H * d, generator=g)
    _, v, q, k = (t.view(B, N, H, d).transpose(1, 2) for t in uvqk.split(H * d, dim=-1))
    bias = torch.randn(B, N, N, generator=g) * 0.1
    bias.masked_fill_(torch.rand(B, N, N, generator=g) < 0.4, MASKED)
    bias[0, 3, :] = MASKED
    return [t.detach().clone().requires_grad_() for t in (q, k, v, bias)]


@pytest.mark.parametrize("keep_activated_mib", [PA.KEEP_ACTIVATED_MIB, 0])  # SiLU maps kept, and recomputed
@pytest.mark.parametrize(("B", "N", "block_elements"), [
    (7, 8, 1),  # maps of 128 elements: one target per block
    (70, 9, 1),  # maps of 162 elements: blocks of 32 targets (whole 64-element groups), ragged last block
    (7, 9, 1 << 20),  # a single block
])
def test_blocked_attention_bit_identical_to_explicit(B, N, block_elements, keep_activated_mib):
    settings = {"block_elements": block_elements, "keep_activated_mib": keep_activated_mib}
    H, d = 2, 4
    fast_in = _attention_inputs(B, H, N, d, seed=2)
    plain_in = [t.detach().clone().requires_grad_() for t in fast_in]
    grad = torch.randn(B, H, N, d, generator=torch.Generator().manual_seed(3))
    fast = PA.pointwise_attention(*fast_in, **settings)
    plain = PA.explicit_pointwise_attention(*plain_in)
    assert torch.equal(fast, plain)
    fast.backward(grad)
    plain.backward(grad)
    for a, b in zip(fast_in, plain_in):
        assert torch.equal(a.grad, b.grad)
    with torch.no_grad():
        assert torch.equal(PA.pointwise_attention(*fast_in, **settings), plain)
    assert torch.equal(fast[0, :, 3], torch.zeros(H, d))  # a query that reads nothing reads exactly zero


@pytest.mark.parametrize("threads", [1, 2])
def test_block_size_within_budget_and_aligned(threads):
    budget = PA.block_budget_mib(threads) * (1 << 20) // 4  # map elements
    for H, N in [(4, 257), (4, 128), (2, 33), (4, 33), (1, 9), (3, 7), (64, 1024)]:
        q = torch.empty(256, H, N, 1)
        torch.set_num_threads(threads)
        try:
            size, per_target = PA._block_size(q, N), H * N * N
        finally:
            torch.set_num_threads(1)  # the module's setting
        assert size >= 1 and size * per_target % PA.ALIGN_ELEMENTS == 0
        # the largest aligned block within the budget, or the smallest aligned block when none fits
        aligned = [b for b in range(1, 1 << 18) if b * per_target % PA.ALIGN_ELEMENTS == 0]
        fits = [b for b in aligned if b * per_target <= budget]
        assert size == (max(fits) if fits else min(aligned))


def test_blocked_attention_matches_float64_reference():
    q, k, v, bias = _attention_inputs(5, 2, 9, 4, seed=4)
    out = PA.pointwise_attention(q, k, v, bias, block_elements=2 * 2 * 9 * 9)
    q64, k64, v64, b64 = (t.detach().double().numpy() for t in (q, k, v, bias))
    s = np.einsum("bhnd,bhmd->bhnm", q64, k64) + b64[:, None]
    ref = np.einsum("bhnm,bhmd->bhnd", s / (1 + np.exp(-np.clip(s, -700, 700))), v64)
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-5, atol=1e-5)


#: (arch, model settings, batch, L, block_elements): small blocks with a ragged last one, and the demo's
#: width-4 setting at its batch size with the default blocks.
MODEL_CASES = [
    ("whale", {"dim": 16}, 40, 24, 4 * 2 * 24 * 24),
    ("hstu", {"dim": 16}, 40, 24, 4 * 2 * 24 * 24),
    ("shallow_hybrid", {"dim": 16}, 40, 24, 4 * 2 * 24 * 24),
    ("whale_meanpool", {"dim": 4, "num_heads": 2, "head_dim": 2}, 256, 16, None),
    ("hstu", {"dim": 8, "num_heads": 2, "head_dim": 4}, 256, 16, None),
]


@pytest.mark.parametrize(("arch", "settings", "B", "L", "block_elements"), MODEL_CASES)
def test_models_bit_identical_with_and_without_cpu_fast_paths(arch, settings, B, L, block_elements):
    spec = default_test_spec(history_len=L)
    batch = random_batch(spec, B, generator=torch.Generator().manual_seed(5), min_len=1)

    def step(fast: bool):
        torch.manual_seed(0)
        model = architectures.build(arch, spec, architectures.make_config(arch, {**settings, "history_len": L}))
        kernels = [m.kernel for m in model.modules() if isinstance(m, HSTUEncoder)]
        assert kernels and all(k == HSTUKernel() for k in kernels)  # built with the fast ops by default
        set_hstu_kernel(model, HSTUKernel(fast=fast, block_elements=block_elements))
        logits = model(batch)
        logits.square().sum().backward()
        return logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    fast_logits, fast_grads = step(True)
    plain_logits, plain_grads = step(False)
    assert torch.equal(fast_logits, plain_logits)
    assert fast_grads.keys() == plain_grads.keys()
    assert [n for n in fast_grads if not torch.equal(fast_grads[n], plain_grads[n])] == []


def test_time_bucket_exact_at_every_boundary():
    # the least integer of each bucket, found with Python floats, and its neighbours
    edges = [next(x for x in range(max(1, int(math.exp(0.301 * b)) - 2), 10**7)
                  if math.floor(math.log(x) / 0.301) >= b) for b in range(1, 40)]
    values = [s * (e + o) for e in edges for o in (-1, 0, 1) for s in (1, -1)] + [0, 1, 2**62, -(2**62)]
    want = [min(128, math.floor(math.log(max(abs(x), 1)) / 0.301)) for x in values]
    assert time_bucket(torch.tensor(values, dtype=torch.int64)).tolist() == want


def _masked_inputs(B: int, H: int, N: int, d: int, mask: torch.Tensor, seed: int):
    """Attention inputs whose bias is MASKED wherever the read mask [B, N, N] is False."""
    q, k, v, bias = _attention_inputs(B, H, N, d, seed)
    bias = bias.detach().clone().masked_fill_(~mask, MASKED).requires_grad_()
    return [q, k, v, bias]


def _spans_brute_force(mask: torch.Tensor, chunks: int) -> list[tuple[int, int, int, int]]:
    N = mask.shape[-1]
    out = []
    for c in range(chunks):
        r0, r1 = round(c * N / chunks), round((c + 1) * N / chunks)
        read = [j for j in range(N) if any(bool(mask[b, i, j]) for b in range(mask.shape[0]) for i in range(r0, r1))]
        if r1 > r0:
            out.append((r0, r1, read[0], read[-1] + 1) if read else (r0, r1, 0, 0))
    return out


@pytest.mark.parametrize("keep_activated_mib", [PA.KEEP_ACTIVATED_MIB, 0])
@pytest.mark.parametrize("layout", ["causal", "anti-causal", "window", "none-read"])
def test_key_spans_and_attention_over_them_at_two_threads(layout, keep_activated_mib):
    B, H, N, d = 6, 2, 13, 4
    i, j = torch.arange(N).unsqueeze(1), torch.arange(N).unsqueeze(0)
    base = {"causal": j <= i, "anti-causal": j >= i, "window": (i - j).abs() <= 2,
            "none-read": (j <= i) & (i < 9)}[layout]  # none-read: queries 9.. read nothing in any target
    mask = base.expand(B, N, N) & (torch.rand(B, N, N, generator=torch.Generator().manual_seed(6)) < 0.8)
    settings = {"block_elements": 2 * H * 4 * N, "keep_activated_mib": keep_activated_mib}  # several blocks
    pays = {"min_keys": 0, "min_skipped": 0.0}  # spans at this small N, which they would not pay at
    torch.set_num_threads(2)
    try:
        spans = PA.key_spans(mask, **pays)
        assert spans == _spans_brute_force(mask, PA.QUERY_CHUNKS)
        assert PA.key_spans(mask, every_pair=True, **pays) is None
        fast_in = _masked_inputs(B, H, N, d, mask, seed=7)
        fast = PA.pointwise_attention(*fast_in, spans, **settings)
        grad = torch.randn(fast.shape, generator=torch.Generator().manual_seed(8))
        fast.backward(grad)
        with torch.no_grad():
            no_grad_out = PA.pointwise_attention(*fast_in, spans, **settings)
    finally:
        torch.set_num_threads(1)
    # against the explicit form in float64 (autograd), which computes every pair
    ref_in = [t.detach().double().requires_grad_() for t in fast_in]
    ref = PA.explicit_pointwise_attention(*ref_in)
    ref.backward(grad.double())
    np.testing.assert_allclose(fast.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(no_grad_out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    for a, b in zip(fast_in, ref_in):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-5)
    if layout == "none-read":
        assert torch.equal(fast[:, :, 9:], torch.zeros(B, H, N - 9, d))


def test_key_spans_only_with_more_than_one_thread_where_they_pay_and_never_under_a_trace():
    N = PA.MIN_SPAN_KEYS
    q = N // 4
    mask = torch.ones(2, N, N, dtype=torch.bool).tril()
    assert PA.key_spans(mask) is None  # this module trains at one thread
    torch.set_num_threads(2)
    try:
        assert PA.key_spans(mask) == [(c * q, (c + 1) * q, 0, (c + 1) * q) for c in range(4)]  # 3/8 left out
        assert PA.key_spans(mask[:, 1:, 1:]) is None  # fewer keys than MIN_SPAN_KEYS
        assert PA.key_spans(torch.ones(2, N, N, dtype=torch.bool)) is None  # nothing to leave out
        gap = (torch.arange(N).unsqueeze(1) - torch.arange(N)).abs()
        # a band of half-width N / 4: ranges read 2, 3, 3, 2 quarters of the keys, 3/8 of the pairs left out
        assert PA.key_spans((gap <= q).expand(2, N, N)) == [(0, q, 0, 2 * q), (q, 2 * q, 0, 3 * q),
                                                             (2 * q, 3 * q, q, N), (3 * q, N, 2 * q, N)]
        # half-width N / 2: 3, 4, 4, 3 quarters, 1/8 left out, below MIN_SKIPPED
        assert PA.MIN_SKIPPED > 1 / 8 and PA.key_spans((gap <= 2 * q).expand(2, N, N)) is None
        traced = []
        torch.jit.trace(lambda m: traced.append(PA.key_spans(m)) or m.float(), (mask,), check_trace=False)
        assert traced == [None]
    finally:
        torch.set_num_threads(1)


def test_flop_counts_do_not_depend_on_the_thread_count():
    from architectures.flops import count_flops

    spec = default_test_spec(history_len=16)
    batch = random_batch(spec, 8, generator=torch.Generator().manual_seed(9), min_len=1)
    counts = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        try:
            for arch in ("hstu", "whale"):
                torch.manual_seed(0)
                model = architectures.build(arch, spec, architectures.make_config(arch, {"dim": 8, "history_len": 16}))
                counts.append(count_flops(model, batch).per_target)
        finally:
            torch.set_num_threads(1)
    assert counts[:2] == counts[2:]


def test_silu_maps_kept_only_within_their_budget():
    B, H, N, d = 8, 2, 16, 4
    inputs = _attention_inputs(B, H, N, d, seed=9)
    layer_mib = B * H * N * N * 4 / (1 << 20)  # the layer's fp32 score maps
    for budget, maps_per_piece in ((layer_mib, 2), (layer_mib / 2, 1)):
        node = PA.pointwise_attention(*inputs, keep_activated_mib=budget).grad_fn
        assert len(node.saved_tensors) == 3 + maps_per_piece * len(node.pieces), budget  # q, k^T, v, then maps
