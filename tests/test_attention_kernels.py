"""The fused attention path (torch's scaled_dot_product_attention, `train.attention: sdpa`) against the
explicit matmuls: the same logits within float tolerance for every model with a softmax attention
(WHALE's cross-attention, HELIX, OneTrans, RankMixer+Transformer), rows without any valid key included,
the same FLOP count (fvcore through its SDPA handle, and torch's FlopCounterMode), and `auto` keeps the
explicit path on CPU."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

import architectures
from architectures.blocks import attention_kernel as AK
from architectures.blocks.masked_attention import attend
from architectures.flops import count_flops
from protocols.schema import default_test_spec, random_batch

pytestmark = pytest.mark.usefixtures("one_thread")

L = 16
SPEC = default_test_spec(history_len=L)
#: Models with a softmax attention, with small settings (DIN's activation unit and HSTU's SiLU attention
#: have no softmax, so no fused kernel applies to them).
SOFTMAX_MODELS = {
    "whale": {"dim": 16},
    "helix": {"dim": 16},
    "onetrans": {"dim": 16},
    "rankmixer_transformer": {"dim": 16},
}


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, *_, **__) -> int:
    """torch's own SDPA formula (`sdpa_flop_count`, [B, H, S, E] shapes) for the CPU fused kernel, which
    FlopCounterMode has no entry for; leading dimensions other than the last two are folded into B."""
    def four_d(shape):
        lead = 1
        for n in shape[:-2]:
            lead *= n
        return (lead, 1, *shape[-2:])

    return sdpa_flop_count(four_d(query_shape), four_d(key_shape), four_d(value_shape))


def torch_counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping={
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops})


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    batch = random_batch(SPEC, 12, generator=torch.Generator().manual_seed(seed), min_len=0, requests=6)
    batch["hist_mask"][:2] = False  # two candidates (one request) with an empty history
    for key in ("hist_cat", "hist_fb", "hist_ts", "hist_age"):
        batch[key][:2] = 0
    return batch


def _explicit_reference(q, k, v, allowed):
    """Brute force: per row, softmax over the allowed keys only (empty rows read zero), in float64."""
    q, k, v = q.double(), k.double(), v.double()
    allowed = allowed.expand(*q.shape[:-1], k.shape[-2])
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    for idx in torch.cartesian_prod(*(torch.arange(n) for n in q.shape[:-1])).tolist():
        idx = tuple(idx) if isinstance(idx, list) else (idx,)
        keys = allowed[idx].nonzero().flatten()
        if len(keys):
            s = (k[idx[:-1]][keys] @ q[idx]) / q.shape[-1] ** 0.5
            out[idx] = torch.softmax(s, 0) @ v[idx[:-1]][keys]
    return out


def test_attend_matches_a_brute_force_softmax_on_both_paths():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 3, 4, generator=g) for _ in range(3))
    allowed = torch.rand(2, 1, 3, 3, generator=g) > 0.4
    allowed[0, 0, 1] = False  # a query with no allowed key
    ref = _explicit_reference(q, k, v, allowed)
    for kernel in ("explicit", "sdpa"):
        with AK.attention_kernel(kernel):
            out = attend(q, k, v, allowed)
        assert torch.allclose(out.double(), ref, atol=1e-6), kernel
        assert torch.all(out[0, :, 1] == 0)  # exactly zero, no NaN


@pytest.mark.parametrize("name", sorted(SOFTMAX_MODELS))
def test_sdpa_logits_equal_explicit_ones(name):
    torch.manual_seed(0)
    model = architectures.build(name, SPEC, {"history_len": L, **SOFTMAX_MODELS[name]}).eval()
    batch = _batch()
    with torch.no_grad():
        with AK.attention_kernel("explicit"):
            explicit = model(batch)
        with AK.attention_kernel("sdpa"):
            fused = model(batch)
        with AK.attention_kernel("auto"):  # CPU: the explicit path, bit for bit
            auto = model(batch)
    assert torch.isfinite(fused).all()
    assert torch.allclose(fused, explicit, rtol=1e-4, atol=1e-5), (fused - explicit).abs().max()
    assert torch.equal(auto, explicit)
    # gradients agree as well
    model.train()
    grads = {}
    for kernel in ("explicit", "sdpa"):
        model.zero_grad()
        with AK.attention_kernel(kernel):
            model(batch).sum().backward()
        grads[kernel] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.allclose(grads["sdpa"], grads["explicit"], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", sorted(SOFTMAX_MODELS))
def test_flop_counts_do_not_depend_on_the_kernel(name):
    torch.manual_seed(0)
    model = architectures.build(name, SPEC, {"history_len": L, **SOFTMAX_MODELS[name]}).eval()
    batch = random_batch(SPEC, 2, min_len=L)
    counts = {}
    for kernel in ("explicit", "sdpa"):
        with AK.attention_kernel(kernel), torch.no_grad():
            counts[kernel] = count_flops(model, batch)
            with torch_counter() as counter:
                model(batch)
        # torch's own counter agrees with fvcore on either path (2 targets in the batch)
        assert counts[kernel].per_target == pytest.approx(counter.get_total_flops() / 2, abs=2.0), kernel
    assert counts["sdpa"].per_target == counts["explicit"].per_target
    assert any("scaled_dot_product_attention" in op for op in counts["sdpa"].by_operator)


def test_unknown_kernel_is_refused():
    from core.typed_config import ConfigError, from_dict
    from harness.config import TrainConfig

    with pytest.raises(ValueError, match="flash"):
        with AK.attention_kernel("flash"):
            pass
    with pytest.raises(ConfigError, match="attention"):
        from_dict(TrainConfig, {"attention": "flash"}, prefix="train.")
