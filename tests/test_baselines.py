"""RankMixer+Transformer, OneTrans, DIN and DeepFM: correctness checks, FLOPs/params, and each model's
defining computation against an independent reference."""
from __future__ import annotations

import itertools

import pytest
import torch

import architectures
from architectures.flops import count_flops, count_params
from model_checks import assert_empty_history_runs, assert_label_not_input, assert_pad_invariant, assert_trains, batch_for
from protocols.schema import default_test_spec

L = 20
SPEC = default_test_spec(history_len=L)
SMALL = {
    "rankmixer_transformer": dict(dim=32, mix_tokens=4, num_heads=2, embed_dim=16, history_len=L),
    "onetrans": dict(dim=32, num_heads=2, embed_dim=16, history_len=L),
    "din": dict(dim=16, mlp_width=32, attention_hidden=(16, 8), history_len=L),
    "deepfm": dict(dim=16, mlp_width=32, history_len=L),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models, shared cores


def build(name: str, **over):
    torch.manual_seed(0)
    return architectures.build(name, SPEC, {**SMALL[name], **over})


@pytest.mark.parametrize("name", list(SMALL))
def test_correctness_checks(name):
    assert name in architectures.names()
    model = build(name)
    batch = batch_for(SPEC, 8, requests=3, min_len=2)
    assert_pad_invariant(model, batch, SPEC)
    assert_label_not_input(model, batch)
    assert_empty_history_runs(model, batch)
    assert_trains(model, batch)


@pytest.mark.parametrize("name", list(SMALL))
def test_history_matters_and_flops_params_are_reported(name):
    model = build(name).eval()
    batch = batch_for(SPEC, 6, min_len=4)
    changed = dict(batch, hist_fb=torch.where(batch["hist_mask"][..., None], 5 - batch["hist_fb"], 0))
    with torch.no_grad():
        assert not torch.allclose(model(changed), model(batch))
    flops = count_flops(model, batch)
    params = count_params(model)
    assert flops.per_target > 0 and params["non_embedding"] > 0 and params["embedding"] > 0


def test_rankmixer_transformer_reuse_is_exact():
    model = build("rankmixer_transformer")
    batch = batch_for(SPEC, 9, requests=3, min_len=1)
    with torch.no_grad():
        plain = model(batch)
        model.cfg.reuse_requests = True
        torch.testing.assert_close(model(batch), plain, rtol=0, atol=1e-5)


def test_onetrans_pyramid_and_causality():
    from architectures.onetrans import OneTransConfig

    assert OneTransConfig(num_layers=3, history_len=128).pyramid() == (128, 64, 0)
    assert OneTransConfig(num_layers=1).pyramid() == (0,)
    # causal: the oldest valid event's output after layer 1 must not depend on newer events
    model = build("onetrans", num_layers=2, seq_queries=(L, 0)).eval()
    batch = batch_for(SPEC, 4, min_len=L)  # full histories: right-aligned = as stored
    x_seen = {}

    def grab(_, __, out):
        x_seen["h"] = out[0]

    handle = model.layers[0].register_forward_hook(grab)
    newer = dict(batch, hist_age=batch["hist_age"].clone())
    newer["hist_age"][:, 1:] += 1.0
    with torch.no_grad():
        model(batch)
        first = x_seen["h"][:, 0].clone()
        model(newer)
    handle.remove()
    torch.testing.assert_close(x_seen["h"][:, 0], first, rtol=0, atol=0)
    assert not torch.allclose(x_seen["h"][:, 1], first)


def test_deepfm_second_order_term_matches_the_pairwise_sum():
    model = build("deepfm").eval()
    batch = batch_for(SPEC, 3, min_len=3)
    with torch.no_grad():
        v = model.fields(batch)  # [B, F, E]
        pairwise = sum((v[:, i] * v[:, j]).sum(-1) for i, j in itertools.combinations(range(v.shape[1]), 2))
        first = sum(model.first_order[f](batch["cat"][:, i]).squeeze(-1) for i, f in enumerate(SPEC.cat_fields))
        first = first + model.first_order_num(batch["num"]).squeeze(-1)
        expected = first + pairwise + model.deep(v.flatten(1)).squeeze(-1)
        torch.testing.assert_close(model(batch), expected, rtol=1e-5, atol=1e-5)


def test_din_weights_follow_the_candidate():
    """Changing only the candidate's item ids changes the history read (candidate-dependent pooling)."""
    model = build("din").eval()
    batch = batch_for(SPEC, 4, min_len=5)
    other = dict(batch, cat=batch["cat"].clone())
    other["cat"][:, 5] = (batch["cat"][:, 5] + 7) % SPEC.vocab_sizes["video_id"]
    seen = []
    handle = model.activation.register_forward_hook(lambda _, __, out: seen.append(out.squeeze(-1)))
    with torch.no_grad():
        model(batch), model(other)
    handle.remove()
    assert not torch.allclose(seen[0], seen[1])
