"""Our HSTU layers against generative-recommenders' research HSTU layer, imported from a local checkout
(tests/bench/peer_hstu.py). Skipped unless RECSCALE_GR_CHECKOUT names one and the `peer` extra is installed.

With the weights copied, the peer's `SequentialTransductionUnitJagged` stack computes our layer's function:
the outputs and gradients agree to float32 rounding when both use the same layer-norm eps. The peer's
default eps is 1e-6 and ours 1e-5; at those defaults the outputs differ by far more than rounding.
"""
from __future__ import annotations

import pytest
import torch

from tests.bench import peer_hstu as P

pytestmark = pytest.mark.filterwarnings("ignore:invalid escape sequence:DeprecationWarning")  # the peer's docstrings


@pytest.fixture(scope="module")
def peer():
    try:
        return P.import_peer()
    except P.PeerUnavailable as e:
        pytest.skip(f"generative-recommenders not available: {e}")


SMALL = P.Shapes(batch=3, seq_len=33, dim=16, num_layers=2, num_heads=2, head_dim=8)


def _pair(peer, ours_eps: float, peer_eps: float, shapes: P.Shapes = SMALL):
    data = P.inputs(shapes, seed=1)
    torch.manual_seed(0)
    ours = P.build_ours(shapes, data, eps=ours_eps)
    research = P.build_research(peer, shapes, data, eps=peer_eps)
    P.copy_weights_to_research(ours.module, research.module)
    return ours, research


@pytest.mark.parametrize("eps", [1e-6, 1e-5])
def test_research_layer_equals_ours_with_weights_copied(peer, eps):
    ours, research = _pair(peer, eps, eps)
    a, b = ours.forward(), research.forward()
    assert a.abs().max() > 1  # outputs of order 1, so the tolerance below is float32 rounding
    torch.testing.assert_close(a, b, rtol=0, atol=2e-6)
    a.square().mean().backward()
    b.square().mean().backward()
    for mine, theirs in zip(ours.module.layers, research.module._attention_layers):
        torch.testing.assert_close(mine.uvqk.weight.grad.t(), theirs._uvqk.grad, rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(mine.out.weight.grad, theirs._o.weight.grad, rtol=1e-4, atol=1e-7)
        torch.testing.assert_close(mine.bias.time.grad, theirs._rel_attn_bias._ts_w.grad, rtol=1e-4, atol=1e-7)


def test_default_eps_differ_by_far_more_than_rounding(peer):
    ours, research = _pair(peer, 1e-5, 1e-6)  # each side's default
    assert (ours.forward() - research.forward()).abs().max() > 1e-2


def test_flops_match_at_the_benchmark_shapes(peer):
    # B = 2: FLOPs per target do not depend on the batch size, and the rest is the benchmark's shapes
    per_target, ratios = P.flop_ratios(peer, P.Shapes(), batch=2)
    assert set(ratios) == {"research", "stu"}
    assert all(abs(r - 1) <= P.FLOP_TOLERANCE[name] for name, r in ratios.items())
    # ours and the research layer run the same products (the score maps kept for the backward pass, not
    # recomputed): six N x N x d products per head and layer; the analytic count is exact here
    N, D, H, d, layers = 257, 64, 4, 16, 2
    uvqk, out = 2 * N * D * 4 * H * d, 2 * N * H * d * D  # forward products per target and layer
    linear = layers * 3 * (uvqk + out) - uvqk  # forward, weight and input gradients; the input needs none
    per_product = 2 * N * N * d * H
    assert per_target["ours"] == per_target["research"] == linear + layers * 6 * per_product
    # STU's output projection reads [u, attention, LN(attention) * u], three times our out's inputs, and its
    # first layer norm is affine, so the first UVQK product also takes an input gradient
    assert per_target["stu"] == per_target["ours"] + layers * 3 * 2 * out + uvqk


@pytest.mark.parametrize("threads", [1, 2])
def test_run_flop_fraction_counts_the_key_ranges_left_out(threads):
    shapes = P.Shapes(batch=2, seq_len=64, dim=16, num_heads=2, head_dim=8)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fraction = P.run_flop_fraction(shapes)
    finally:
        torch.set_num_threads(before)
    if threads == 1:
        assert fraction == 1
        return
    # causal: query range c of 4 (16 queries each) reads keys [0, 16 (c + 1)); the attention products scale
    # with the keys read, the projections do not
    N, D, H, d, layers = 64, 16, 2, 8, 2
    uvqk, out = 2 * N * D * 4 * H * d, 2 * N * H * d * D
    linear = layers * 3 * (uvqk + out) - uvqk
    per_product = 2 * N * N * d * H
    kept = sum(16 * 16 * (c + 1) for c in range(4)) / (N * N)  # 10 / 16
    assert fraction == pytest.approx((linear + layers * 6 * per_product * kept) / (linear + layers * 6 * per_product))


def test_stu_trains(peer):
    shapes = P.Shapes(batch=2, seq_len=17, dim=16, num_heads=2, head_dim=8)
    stu = P.build("stu", shapes, P.inputs(shapes), peer)
    before = [p.detach().clone() for p in stu.module.parameters()]
    out = stu.forward()
    assert out.shape == (2 * 17, 16) and torch.isfinite(out).all()
    P.train_step(stu, P.make_optimizer(stu))
    assert any(not torch.equal(a, b) for a, b in zip(before, stu.module.parameters()))
