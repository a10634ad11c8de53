"""RankMixer+Transformer, OneTrans, DIN and DeepFM: each model's defining computation against an
independent reference (what every model must do is in tests/test_model_conformance.py)."""
from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from model_checks import batch_for

import architectures
from architectures.blocks.history import HISTORY_KEYS
from protocols.schema import ITEM_FIELD_INDEX, default_test_spec

L = 20
SPEC = default_test_spec(history_len=L)
#: Small configurations of the four baselines for the model-specific tests below.
CONFIGS: dict[str, dict[str, Any]] = {
    "onetrans": dict(dim=32, num_heads=2, embed_dim=16, history_len=L),
    "din": dict(dim=16, mlp_width=32, attention_hidden=(16, 8), history_len=L),
    "deepfm": dict(dim=16, mlp_width=32, history_len=L),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models, shared cores


def build(name: str, **over):
    torch.manual_seed(0)
    return architectures.build(name, SPEC, {**CONFIGS[name], **over})


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


def test_rankmixer_summaries_are_the_history_mean_and_a_candidate_query_read():
    """The two tokens the sequence stage hands to RankMixer: the masked mean of the encoded history and
    a multi-head softmax read of it by the candidate's projected item embeddings, written out by hand."""
    W, H = 32, 2
    torch.manual_seed(0)
    model = architectures.build("rankmixer_transformer", SPEC,
                                dict(dim=W, mix_tokens=4, num_heads=H, embed_dim=16, history_len=L)).eval()
    batch = batch_for(SPEC, 4, min_len=3)
    seen = []
    handle = model.tokenize.register_forward_hook(lambda _, inputs, __: seen.append(inputs[0]))
    with torch.no_grad():
        model(batch)
        handle.remove()
        h = model.encode_history({k: batch[k] for k in HISTORY_KEYS})  # [B, L, W]
        for b in range(4):
            valid = batch["hist_mask"][b]
            hv = h[b, valid]  # [n, W], the valid events only
            torch.testing.assert_close(seen[0][b, -2 * W:-W], hv.mean(0), rtol=1e-5, atol=1e-6)
            item = model.embeddings.item_tokens(batch["cat"][b, list(ITEM_FIELD_INDEX)]).flatten()
            attn = model.target_read
            q = attn.read.q(attn.read.norm(model.target_query(item)))  # [W]
            kn = attn.kv.norm(hv)
            k, v = attn.kv.k(kn), attn.kv.v(kn)  # [n, W]
            heads = []
            for i in range(H):
                s = slice(i * W // H, (i + 1) * W // H)
                w = torch.softmax(k[:, s] @ q[s] / (W // H) ** 0.5, dim=0)  # [n]
                heads.append(w @ v[:, s])
            want = attn.read.out(torch.cat(heads))
            torch.testing.assert_close(seen[0][b, -W:], want, rtol=1e-5, atol=1e-6)
