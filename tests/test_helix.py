"""HELIX: correctness checks, ablation switches, Gather/Truncate and hard search against brute force,
the candidate-independence of the encoder and the exactness of request-level reuse."""
from __future__ import annotations

import typing

import pytest
import torch
from model_checks import (
    assert_empty_history_runs,
    assert_label_not_input,
    assert_pad_invariant,
    assert_trains,
    batch_for,
    with_related_history,
)

import architectures
from architectures.blocks.history import hard_search, most_recent
from architectures.blocks.swiglu import SOFTCAP, normalise_branch
from architectures.blocks.token_mixing import mixup
from architectures.flops import count_flops, count_params
from architectures.helix import ABLATIONS, AblationName, HelixConfig
from core.typed_config import ConfigError
from protocols.schema import CAT_FIELDS, default_test_spec

L = 24


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models, shared cores


SPEC = default_test_spec(history_len=L)
#: A small HELIX: width 32, 4 mix tokens, quotas smaller than the history so compression matters.
TINY = dict(dim=32, mix_tokens=4, num_heads=2, num_layers=2, mixformer_layers=1, gather_quotas=(8, 4, 4),
            retained_tokens=(12, 6), hard_search_len=8, embed_dim=16, history_len=L)
SWITCHES = [
    {},
    {"interaction": "self_attention"},
    {"cross_attention_kv": "mix_and_sequence"},
    {"kv_cache": "per_layer"},
    {"compression": "uniform_pool"},
    {"compression": "segment_pool"},
    {"gate_up_norm": "softcap"},
    {"gate_up_norm": "none"},
    {"kv_heads": 1},
    {"layerscale": True},
    {"mix_tokens_map": "dense"},
    {"reuse_requests": True},
]


def build(**over):
    torch.manual_seed(0)
    return architectures.build("helix", SPEC, {**TINY, **over})


@pytest.mark.parametrize("switch", SWITCHES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "default")
def test_every_switch_passes_the_correctness_checks(switch):
    model = build(**switch)
    batch = with_related_history(batch_for(SPEC, 8, requests=3, min_len=2))
    assert_pad_invariant(model, batch, SPEC)
    assert_label_not_input(model, batch)
    assert_empty_history_runs(model, batch)
    assert_trains(model, batch)


def test_switches_change_the_computation():
    batch = batch_for(SPEC, 6, min_len=L - 2)
    with torch.no_grad():
        ref = build()(batch)
        for switch in SWITCHES[1:-1]:
            assert not torch.allclose(build(**switch)(batch), ref), switch


def test_empty_history_reads_zero_from_the_cache():
    model = build().eval()
    batch = batch_for(SPEC, 4)
    for k in ("hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask"):
        batch[k] = torch.zeros_like(batch[k])
    with torch.no_grad():
        (kv,) = model.encode(batch)
        assert not kv.mask.any()
        mix = torch.randn(4, TINY["mix_tokens"], TINY["dim"])
        assert torch.equal(model.decoder[0].read(mix, kv), torch.zeros_like(mix))


def test_encoder_output_is_identical_for_all_candidates_of_a_request():
    model = build().eval()
    batch = batch_for(SPEC, 9, requests=3, min_len=4)  # candidate i belongs to request i % 3
    with torch.no_grad():
        (kv,) = model.encode(batch)
        for r in range(3):
            rows = torch.arange(r, 9, 3)
            for i in rows[1:]:
                assert torch.equal(kv.k[i], kv.k[rows[0]]) and torch.equal(kv.v[i], kv.v[rows[0]])
        # candidate-side inputs do not reach the encoder; the history does
        other = dict(batch, cat=batch["cat"].clone(), num=torch.randn_like(batch["num"]))
        other["cat"][:, 5:] = torch.randint(2, 8, other["cat"][:, 5:].shape)
        assert torch.equal(model.encode(other)[0].k, kv.k)
        changed = dict(batch, hist_age=batch["hist_age"] + batch["hist_mask"].float())
        assert not torch.allclose(model.encode(changed)[0].k, kv.k)


@pytest.mark.parametrize("kv_cache", ["last_layer", "per_layer"])
def test_reuse_path_gives_the_no_reuse_logits_and_gradients(kv_cache):
    model = build(kv_cache=kv_cache)
    batch = with_related_history(batch_for(SPEC, 12, requests=4, min_len=2))
    results = []
    for reuse in (False, True):
        model.cfg.reuse_requests = reuse
        model.zero_grad()
        logits = model(batch)
        logits.sum().backward()
        results.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (y0, g0), (y1, g1) = results
    torch.testing.assert_close(y1, y0, rtol=0, atol=1e-5)
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-4, atol=1e-6, msg=n)


def _brute_gather(mask_row, fb_row, quotas, retained):
    """Python reference of Gather's packed stream: (position, sequence) pairs, most recent first."""
    n = int(mask_row.sum())
    seqs = [list(range(n)), [p for p in range(n) if fb_row[p, 0] == 3], [p for p in range(n) if fb_row[p, 1] == 3]]
    picked = [(p, s) for s, (seq, k) in enumerate(zip(seqs, quotas)) for p in reversed(seq[-k:] if k else [])]
    picked.sort(key=lambda ps: (-ps[0], ps[1]))  # most recent first, ties in sequence order
    return picked[:retained]


def test_gather_picks_the_most_recent_events_per_sequence_and_packs_them_by_recency():
    model = build()
    enc = model.encoder
    batch = batch_for(SPEC, 5, min_len=3)
    B = batch["hist_mask"].shape[0]
    events = torch.eye(L).expand(B, L, L) * 10.0  # token of position p is 10 * e_p
    with torch.no_grad():
        enc.sequence_type.zero_()
        q, valid = model.encoder.first_queries(torch.nn.functional.pad(events, (0, TINY["dim"] - L)), batch)
    for b in range(B):
        expected = _brute_gather(batch["hist_mask"][b], batch["hist_fb"][b], TINY["gather_quotas"],
                                 TINY["retained_tokens"][0])
        got = [int(t[:L].argmax()) for t, ok in zip(q[b], valid[b]) if ok]
        assert got == [p for p, _ in expected]
        assert int(valid[b].sum()) == len(expected) and not valid[b, len(expected):].any()


def test_hard_search_matches_a_python_loop():
    batch = batch_for(SPEC, 6, min_len=5)
    batch["hist_cat"][:, ::3, 3] = batch["cat"][:, None, CAT_FIELDS.index("category_level_two")]  # force matches
    batch["hist_cat"] = torch.where(batch["hist_mask"][..., None], batch["hist_cat"], 0)
    idx, valid = hard_search(batch, 4)
    for b in range(6):
        c2, au = batch["cat"][b, 8].item(), batch["cat"][b, 6].item()
        n = int(batch["hist_mask"][b].sum())
        hits = [p for p in range(n)
                if (c2 > 1 and batch["hist_cat"][b, p, 3] == c2) or (au > 1 and batch["hist_cat"][b, p, 1] == au)]
        want = list(reversed(hits))[:4]
        assert idx[b][valid[b]].tolist() == want


def test_most_recent():
    mask = torch.tensor([[True, True, True, False, False], [False] * 5])
    idx, valid = most_recent(mask, 7)
    assert idx[0, :3].tolist() == [2, 1, 0] and valid.sum(1).tolist() == [3, 0] and idx.shape == (2, 7)


def test_a_shorter_history_len_keeps_the_most_recent_events():
    """history_len 6 on a 24-event batch = the same model on the 6 most recent events, cut by hand."""
    model = build(history_len=6).eval()
    batch = batch_for(SPEC, 4, min_len=10)
    n = batch["hist_mask"].sum(1)
    idx = (n[:, None] - 6) + torch.arange(6)  # [B, 6]
    rows = torch.arange(4)[:, None]
    cut = dict(batch, **{k: batch[k][rows, idx] for k in ("hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask")})
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model(cut), rtol=0, atol=1e-6)


def test_mixup_matches_the_worked_example_and_is_an_involution():
    # 3 tokens of 6 channels: token 1 after Mixup = [a1 a2 | b1 b2 | c1 c2]
    x = torch.arange(18.0).view(1, 3, 6)  # a = 0..5, b = 6..11, c = 12..17
    y = mixup(x)
    assert y[0, 0].tolist() == [0, 1, 6, 7, 12, 13] and y[0, 1].tolist() == [2, 3, 8, 9, 14, 15]
    assert torch.equal(mixup(y), x)


def test_gate_up_normalisations():
    x = torch.randn(5, 16) * 40
    rms = normalise_branch(x, "rms")
    torch.testing.assert_close(rms.pow(2).mean(-1), torch.ones(5))
    capped = normalise_branch(x, "softcap")
    assert capped.abs().max() <= SOFTCAP and (capped.abs() > 0.9 * SOFTCAP).any()
    small = torch.linspace(-0.1, 0.1, 9)
    torch.testing.assert_close(normalise_branch(small, "softcap"), small, rtol=1e-3, atol=0)  # identity near 0
    assert torch.equal(normalise_branch(x, "none"), x)


def test_sizes_resolve_validate_and_grow():
    assert HelixConfig(size="M").resolved().dim == 96 and HelixConfig(size="M", dim=64).resolved().dim == 64
    with pytest.raises(ConfigError, match=r"model\.dim: 60 is not allowed \(allowed: multiples of model\.mix_tokens=8"):
        architectures.make_config("helix", {"dim": 60})
    with pytest.raises(ConfigError, match=r"model\.retained_tokens: \(8, 16\) is not allowed \(allowed: a non-empty"):
        HelixConfig(retained_tokens=(8, 16))
    with pytest.raises(ConfigError, match=r"model\.retained_tokens: .*first entry <= sum\(model\.gather_quotas\)=16"):
        HelixConfig(gather_quotas=(8, 4, 4), retained_tokens=(17,))
    assert HelixConfig(gather_quotas=(8, 4, 4), retained_tokens=(17,),
                       compression="uniform_pool").resolved().retained_tokens == (17,)
    with pytest.raises(ConfigError, match=r"model\.gather_quotas: \(8, 4\) is not allowed \(allowed: 3 entries"):
        HelixConfig(gather_quotas=(8, 4))
    with pytest.raises(ConfigError, match=r"model\.size: 'XXL' is not allowed \(allowed: \['XS', 'S', 'M', 'L'"):
        HelixConfig(size="XXL")
    with pytest.raises(ConfigError, match="unknown key"):
        architectures.make_config("helix", {"sizes": "M"})
    assert set(typing.get_args(AblationName)) == set(ABLATIONS)
    assert HelixConfig(ablation="uniform_pool").resolved().compression == "uniform_pool"
    with pytest.raises(ConfigError, match=r"model\.gate_up_norm: 'none' is not allowed with model\.ablation='softcap'"):
        HelixConfig(ablation="softcap", gate_up_norm="none")
    params = [count_params(architectures.build("helix", SPEC,
                                               {"size": s}))["non_embedding"] for s in ("S", "M", "L", "XL")]
    assert params == sorted(params) and len(set(params)) == 4


def test_flops_match_the_analytic_mptf_count_and_reuse_amortises_the_user_side():
    model = build()
    n = 8
    batch = with_related_history(batch_for(SPEC, n, requests=1, min_len=L))  # one request, n candidates
    plain = count_flops(model, batch)
    W, T, H = TINY["dim"], TINY["mix_tokens"], 2 * TINY["dim"]
    assert plain.by_module["decoder.0.interact"] == 2 * T * 3 * W * H  # gate, up, down per token
    model.cfg.reuse_requests = True
    reused = count_flops(model, batch)
    user_side = sum(plain.by_module[m] for m in ("events", "event_proj", "encoder", "cache_kv"))
    assert user_side > 0.3 * plain.per_target
    assert reused.per_target == pytest.approx(plain.per_target - user_side * (1 - 1 / n), rel=1e-9)
    p = count_params(model)
    assert p["embedding"] == sum(v * TINY["embed_dim"] for v in SPEC.vocab_sizes.values()) + 2 * 4 * TINY["embed_dim"]
