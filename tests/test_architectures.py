"""The WHALE seed write-up's models (Wukong, HSTU-only, Shallow-hybrid, WHALE, WHALE MeanPool): fusion reads,
HSTU-only's sequence, the history window and config validation, against direct computations.

What every model must do (padding, labels, empty history, training, FLOPs, request reuse) is checked for
every registered architecture by tests/test_model_conformance.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

import architectures
from architectures.blocks.history import HISTORY_KEYS, recent_history
from architectures.whale import CrossAttentionRead, MeanPoolRead, WhaleConfig
from core.typed_config import ConfigError
from protocols.schema import default_test_spec, random_batch

L = 12
SMALL = {"dim": 16, "num_layers": 2, "history_len": L, "num_heads": 2, "head_dim": 8}


def _model(name: str, seed: int = 0, **over) -> torch.nn.Module:
    torch.manual_seed(seed)
    return architectures.build(name, default_test_spec(L), {**SMALL, **over})


def _batch(B: int = 6, seed: int = 0, **kw) -> dict[str, torch.Tensor]:
    return random_batch(default_test_spec(L), B, generator=torch.Generator().manual_seed(seed), **kw)


@pytest.mark.parametrize("read_cls", [CrossAttentionRead, MeanPoolRead])
def test_fusion_reads_zero_for_an_empty_history(read_cls):
    torch.manual_seed(0)
    read = read_cls(8)
    h = torch.randn(3, 5, 8)
    valid = torch.tensor([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0]], dtype=torch.bool)
    n = torch.randn(3, 4, 8)
    a = read(n, read.memory(h, valid), valid)
    assert torch.equal(a[1], torch.zeros(4, 8))
    assert a[0].abs().sum() > 0 and a[2].abs().sum() > 0


def test_cross_attention_read_matches_softmax_over_valid_positions():
    torch.manual_seed(0)
    read = CrossAttentionRead(8)
    h, n = torch.randn(2, 6, 8), torch.randn(2, 3, 8)
    valid = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    got = read(n, read.memory(h, valid), valid)
    for b in range(2):
        hv = read.kv_norm(h[b, valid[b]])  # only the valid rows exist for the reference
        q, k, v = read.q(read.query_norm(n[b])), read.k(hv), read.v(hv)
        want = torch.softmax(q @ k.T / 8**0.5, dim=-1) @ v
        torch.testing.assert_close(got[b], want)


def test_whale_empty_history_equals_fusion_with_zero_read():
    model = _model("whale").eval()
    batch = _batch(min_len=0)
    batch["hist_mask"][:] = False
    with torch.no_grad():
        n = model.tokens(batch)
        for wukong, fusion in zip(model.wukong, model.fusions):
            nt = wukong(n)
            z = nt + fusion.proj(torch.cat([nt, torch.zeros_like(nt)], dim=-1))
            n = z + fusion.ffn(z)
        torch.testing.assert_close(model(batch), model.head(n))


def test_meanpool_is_a_config_value_of_whale():
    assert architectures.make_config("whale_meanpool").fusion_read == "mean"
    a = _model("whale_meanpool", seed=3).eval()
    b = _model("whale", seed=3, fusion_read="mean").eval()
    batch = _batch()
    with torch.no_grad():
        assert torch.equal(a(batch), b(batch))
    assert not any(isinstance(m, CrossAttentionRead) for m in a.modules())


def test_hstu_sequence_interleaves_items_actions_and_candidate():
    model = _model("hstu").eval()
    batch = _batch(B=4, min_len=0)
    with torch.no_grad():
        seq, ts, valid, cand_pos = model.sequence(batch)
        emb = model.embeddings
        for b in range(4):
            n = int(batch["hist_mask"][b].sum())
            assert cand_pos[b].item() == 2 * n and valid[b].sum().item() == 2 * n + 1
            for k in range(n):
                item_in = torch.cat([emb.item_tokens(batch["hist_cat"][b, k]).flatten(), batch["hist_age"][b, k:k + 1]])
                torch.testing.assert_close(seq[b, 2 * k], model.item(item_in))
                torch.testing.assert_close(seq[b, 2 * k + 1],
                                           model.action(emb.feedback_tokens(batch["hist_fb"][b, k]).flatten()))
                assert ts[b, 2 * k] == ts[b, 2 * k + 1] == batch["hist_ts"][b, k]
            one = {key: v[b:b + 1] for key, v in batch.items()}
            torch.testing.assert_close(seq[b, 2 * n], model.candidate(model.tokens(one).flatten()))
            assert ts[b, 2 * n] == batch["request_ts"][b]
            assert seq[b, 2 * n + 1:].abs().sum() == 0


def test_hstu_candidate_reads_history_but_history_not_candidate():
    model = _model("hstu").eval()
    batch = _batch(B=4, min_len=3)
    other = dict(batch, cat=batch["cat"].clone())
    other["cat"][:, 5] = (batch["cat"][:, 5] + 1) % 200  # another candidate video
    with torch.no_grad():
        seq_a, ts, valid, cand_pos = model.sequence(batch)
        seq_b, *_ = model.sequence(other)
        from architectures.blocks.hstu import sequence_layout

        mask, buckets = sequence_layout(ts, valid)
        out_a = model.encoder(seq_a, valid, mask, buckets)[-1]
        out_b = model.encoder(seq_b, valid, mask, buckets)[-1]
    before = torch.arange(out_a.shape[1])[None, :, None] < cand_pos[:, None, None]
    torch.testing.assert_close(out_a * before, out_b * before, rtol=0, atol=0)
    assert not torch.allclose(model(batch), model(other))


def test_recent_history_keeps_the_most_recent_events():
    spec = default_test_spec(10)
    batch = random_batch(spec, 5, min_len=0, generator=torch.Generator().manual_seed(2))
    cut = recent_history(batch, 4)
    for b in range(5):
        n = int(batch["hist_mask"][b].sum())
        keep = list(range(max(n - 4, 0), n))
        for key in HISTORY_KEYS:
            want = batch[key][b, keep]
            assert torch.equal(cut[key][b, : len(keep)], want)
        assert cut["hist_mask"][b].sum() == len(keep)
    assert recent_history(batch, 10) is batch


def test_config_values_are_validated():
    with pytest.raises(ConfigError, match=r"model\.dim: 0 is not allowed \(allowed: integers >= 1\)"):
        architectures.make_config("whale", {"dim": 0})
    with pytest.raises(ConfigError, match="fusion_read"):
        architectures.make_config("whale", {"fusion_read": "max"})
    with pytest.raises(ConfigError,
                       match=r"model\.fusion_read: 'max' is not allowed \(allowed: \['attention', 'mean'\]"):
        WhaleConfig(fusion_read="max")  # built in code, without typed_config
    with pytest.raises(ConfigError, match="unknown key"):
        architectures.make_config("wukong", {"num_heads": 4})
    # one name for the request-reuse switch: WHALE's former name is refused
    with pytest.raises(ConfigError, match=r"unknown key\(s\) model\.reuse_history_per_request.*reuse_requests"):
        architectures.make_config("whale", {"reuse_history_per_request": True})
    assert architectures.make_config("whale", {"reuse_requests": True}).reuse_requests is True


@pytest.mark.parametrize("name, key, value", [
    ("din", "attention_hidden", (16, 0)), ("din", "mlp_width", 0), ("deepfm", "num_layers", 0),
    ("onetrans", "seq_queries", (4, -1)), ("rankmixer_transformer", "seq_layers", -1),
    ("hstu", "head_dim", 0), ("wukong", "history_len", 0),
])
def test_every_config_names_the_key_and_the_allowed_values(name, key, value):
    with pytest.raises(ConfigError, match=rf"model\.{key}: .* is not allowed \(allowed: .*>= [01]"):
        architectures.make_config(name, {key: value})


def test_divisibility_errors_name_both_keys():
    for name, over in [("onetrans", {"dim": 30, "num_heads": 4}), ("rankmixer_transformer", {"dim": 36}),
                       ("helix", {"dim": 60})]:
        with pytest.raises(ConfigError, match=r"model\.dim: \d+ is not allowed \(allowed: multiples of model\.\w+="):
            architectures.make_config(name, over)


def test_registration_refuses_configs_that_break_the_contract():
    @dataclass
    class NoHistoryLen:
        dim: int = 8

    @dataclass
    class OtherReuseName:
        history_len: int = 8
        reuse_history_per_request: bool = False

    @dataclass
    class NoDefault:
        history_len: int

    @dataclass
    class ReuseOnByDefault:
        history_len: int = 8
        reuse_requests: bool = True

    for cls, message in [(NoHistoryLen, "history_len"), (OtherReuseName, "named `reuse_requests`"),
                         (NoDefault, "need defaults"), (ReuseOnByDefault, "defaulting to False")]:
        with pytest.raises(TypeError, match=message):
            architectures.register("never_registered", config=cls)
    assert "never_registered" not in architectures.names()
