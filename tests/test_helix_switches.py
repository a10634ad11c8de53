"""HELIX's GQA, LayerScale, per-segment mix tokens and the parameter-matched self-attention ablation, each
checked against an independent computation (tiled key/value weights, a hand-cut segment map, an analytic
FLOP count), plus the parameter / FLOP match of `interaction=self_attention` at every named size."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from model_checks import batch_for, with_related_history

import architectures
from architectures.blocks.helix_encoder import LAYERSCALE_INIT
from architectures.blocks.masked_attention import MultiHeadAttention
from architectures.flops import count_flops, count_params
from architectures.helix import SIZES
from core.typed_config import ConfigError
from protocols.schema import default_test_spec, random_batch

pytestmark = pytest.mark.usefixtures("one_thread")

L = 24
SPEC = default_test_spec(history_len=L)
TINY = dict(dim=32, mix_tokens=4, num_heads=4, num_layers=2, mixformer_layers=1, gather_quotas=(8, 4, 4),
            retained_tokens=(12, 6), hard_search_len=8, embed_dim=16, history_len=L)


def build(**over):
    torch.manual_seed(0)
    return architectures.build("helix", SPEC, {**TINY, **over})


def test_kv_heads_equal_to_num_heads_is_the_default_model_bit_for_bit():
    batch = batch_for(SPEC, 6, min_len=4)
    with torch.no_grad():
        assert torch.equal(build(kv_heads=4)(batch), build()(batch))


def test_gqa_equals_full_attention_with_tiled_key_value_weights():
    torch.manual_seed(0)
    W, H, G, dh = 32, 4, 2, 8
    gqa = MultiHeadAttention(W, H, kv_heads=G)
    full = MultiHeadAttention(W, H)
    shared = {k: v for k, v in gqa.state_dict().items() if k not in ("kv.k.weight", "kv.v.weight")}
    full.load_state_dict(shared, strict=False)  # norms, W_Q, W_O
    with torch.no_grad():  # query head h reads key/value head h // (H / G): tile each group's rows
        for name in ("k", "v"):
            w = getattr(gqa.kv, name).weight.view(G, dh, W)  # [G, dh, W]
            getattr(full.kv, name).weight.copy_(w.repeat_interleave(H // G, dim=0).reshape(W, W))
    x, kv = torch.randn(3, 5, W), torch.randn(3, 7, W)
    mask = torch.rand(3, 7) > 0.3
    torch.testing.assert_close(gqa(x, kv, mask), full(x, kv, mask))


def test_kv_heads_lowers_parameters_and_key_value_flops_exactly():
    batch = with_related_history(batch_for(SPEC, 4, min_len=L))
    full, gqa = build(), build(kv_heads=1)
    W, kvW, K = TINY["dim"], TINY["dim"] // TINY["num_heads"], TINY["hard_search_len"]
    f_full, f_gqa = count_flops(full, batch), count_flops(gqa, batch)
    assert f_gqa.by_module["sequence_kv"] == 2 * K * W * 2 * kvW  # K hard-search rows, W_K and W_V
    assert f_full.by_module["sequence_kv"] == 2 * K * W * 2 * W
    n_kv = sum(isinstance(m, nn.Linear) and n.endswith((".k", ".v")) for n, m in full.named_modules())
    drop = count_params(full)["non_embedding"] - count_params(gqa)["non_embedding"]
    assert drop == n_kv * W * (W - kvW)
    with pytest.raises(ConfigError,
                       match=r"model\.num_heads: 4 is not allowed \(allowed: multiples of model\.kv_heads=3"):
        architectures.make_config("helix", {**TINY, "kv_heads": 3})


def test_layerscale_adds_two_scales_per_encoder_layer_and_scales_the_residual_branches():
    plain, scaled = build(), build(layerscale=True)
    n_enc = len(TINY["retained_tokens"])
    added = count_params(scaled)["non_embedding"] - count_params(plain)["non_embedding"]
    assert added == 2 * n_enc * TINY["dim"]
    layer = scaled.encoder.layers[0]
    assert torch.equal(layer.scale_attn, torch.full((TINY["dim"],), LAYERSCALE_INIT))
    batch = batch_for(SPEC, 5, min_len=4)
    with torch.no_grad():
        assert not torch.allclose(scaled(batch), plain(batch))
        for lyr in scaled.encoder.layers:  # scales of 1 are the plain encoder
            lyr.scale_attn.fill_(1.0)
            lyr.scale_ffn.fill_(1.0)
        scaled.load_state_dict(plain.state_dict(), strict=False)
        torch.testing.assert_close(scaled(batch), plain(batch))
    assert count_flops(scaled, batch).per_target == count_flops(plain, batch).per_target


def test_segment_map_cuts_whole_tokens_with_one_linear_map_each():
    model = build(mix_tokens=8)  # 13 tokens -> segments of 2, 2, 2, 2, 2, 1, 1, 1
    cuts = [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 11), (11, 12), (12, 13)]
    x = torch.randn(3, 13, TINY["embed_dim"])
    with torch.no_grad():
        out = model.mix_tokenizer(x)  # [B, T, W]
        for t, (a, b) in enumerate(cuts):
            lin = model.mix_tokenizer.proj[t]
            assert lin.in_features == (b - a) * TINY["embed_dim"]
            torch.testing.assert_close(out[:, t], x[:, a:b].flatten(1) @ lin.weight.T + lin.bias)
    batch = batch_for(SPEC, 2, min_len=L)
    E, W, T = TINY["embed_dim"], TINY["dim"], 8
    assert count_flops(model, batch).by_module["mix_tokenizer"] == 2 * 13 * E * W
    dense = build(mix_tokens=8, mix_tokens_map="dense")
    assert count_flops(dense, batch).by_module["mix_tokenizer"] == 2 * 13 * E * T * W
    assert isinstance(dense.mix_tokenizer.proj, nn.Linear) and dense.mix_tokenizer.proj.weight.shape == (T * W, 13 * E)
    with pytest.raises(ConfigError, match=r"model\.mix_tokens: 16 is not allowed with model\.mix_tokens_map='segment'"):
        build(mix_tokens=16)


def test_self_attention_interaction_flops_follow_the_formula():
    model = build(interaction="self_attention")
    batch = with_related_history(batch_for(SPEC, 2, min_len=L))
    W, T, H = TINY["dim"], TINY["mix_tokens"], 2 * TINY["dim"]
    hidden = model.decoder[0].interact.ffn.gate.weight.shape[-1]
    attn_params = 4 * W * W + 4 * W  # W_Q, W_K, W_V, W_O and two LayerNorms
    assert hidden == round(H - attn_params / (3 * T * W))
    macs = 4 * T * W * W + 2 * T * T * W + 3 * T * W * hidden  # projections, scores + values, per-token SwiGLU
    assert count_flops(model, batch).by_module["decoder.0.interact"] == 2 * macs


@pytest.mark.slow
@pytest.mark.parametrize("size", list(SIZES))
def test_self_attention_is_matched_to_mptf_at_every_named_size(size):
    spec = default_test_spec(128)
    batch = random_batch(spec, 1, min_len=128)
    counts = {}
    for interaction in ("mptf", "self_attention"):
        torch.manual_seed(0)
        model = architectures.build("helix", spec, {"size": size, "interaction": interaction})
        counts[interaction] = (count_params(model)["non_embedding"], count_flops(model, batch).per_target)
    (p0, f0), (p1, f1) = counts["mptf"], counts["self_attention"]
    assert abs(p1 / p0 - 1) < 0.02 and abs(f1 / f0 - 1) < 0.05, (size, p0, p1, f0, f1)


def test_matched_compute_sweep_matches_params_and_flops_within_5_percent_of_helix():
    from pathlib import Path

    from harness.sweep.dry_run import estimate_costs, format_plan
    from harness.sweep.plan import plan_sweep
    from harness.sweep.schema import load_sweep

    plan = plan_sweep(load_sweep(Path(__file__).resolve().parents[1] / "sweeps" / "matched_compute.yaml"))
    seed0 = [t for t in plan.trials if t.seed == 0]
    costs = estimate_costs(seed0)
    by = {(t.arch, t.point["model"]["name"]): costs[t.trial_id] for t in seed0}
    assert {level for _, level in by} == {"c1", "c2"} and len(by) == 6
    for level in ("c1", "c2"):
        helix = by[("helix", level)]
        for arch in ("onetrans", "rankmixer_transformer"):
            other = by[(arch, level)]
            assert abs(other.params_non_embedding / helix.params_non_embedding - 1) < 0.05, (arch, level)
            assert abs(other.flops_per_target / helix.flops_per_target - 1) < 0.05, (arch, level)
    table = format_plan(plan, costs, Path("results/matched_compute"))
    assert "non-emb. params" in table and f"{by[('helix', 'c1')].params_non_embedding:,}" in table
