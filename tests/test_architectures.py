"""The five seed architectures: behaviour every ranker must have (seed sections 5-9)."""
from __future__ import annotations

import pytest
import torch

import architectures
from architectures.blocks.fusion import CrossAttentionRead, Fusion, MeanPoolRead
from architectures.blocks.history_window import HISTORY_KEYS, recent_history
from protocols.schema import UNK, default_test_spec, random_batch
from protocols.typed_config import ConfigError

L = 12
SMALL = {"dim": 16, "num_layers": 2, "history_len": L, "num_heads": 2, "head_dim": 8}
SEED_ARCHS = ("wukong", "hstu", "shallow_hybrid", "whale", "whale_meanpool")
HISTORY_ARCHS = SEED_ARCHS[1:]


def _cfg(name: str) -> dict:
    return {"dim": 16, "num_layers": 2} if name == "wukong" else dict(SMALL)


def _model(name: str, seed: int = 0, **over) -> torch.nn.Module:
    torch.manual_seed(seed)
    return architectures.build(name, default_test_spec(L), {**_cfg(name), **over})


def _batch(B: int = 6, seed: int = 0, **kw) -> dict[str, torch.Tensor]:
    return random_batch(default_test_spec(L), B, generator=torch.Generator().manual_seed(seed), **kw)


@pytest.mark.parametrize("name", SEED_ARCHS)
def test_forward_backward_reaches_every_parameter(name):
    model = _model(name)
    batch = _batch(requests=3)
    logits = model(batch)
    assert logits.shape == (6,) and torch.isfinite(logits).all()
    torch.nn.functional.binary_cross_entropy_with_logits(logits, batch["label"]).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    if name == "wukong":  # registers the feedback tables like every model (same embedding count), reads none
        missing = [n for n in missing if not n.startswith("embeddings.feedback.")]
    assert not missing, f"parameters without gradient: {missing}"


@pytest.mark.parametrize("name", HISTORY_ARCHS)
def test_pad_positions_change_nothing(name):
    model = _model(name).eval()
    batch = _batch(B=8, min_len=0)
    pad = ~batch["hist_mask"]
    assert pad.any() and batch["hist_mask"].any()
    noisy = dict(batch)
    g = torch.Generator().manual_seed(7)
    noisy["hist_cat"] = torch.where(pad[..., None], torch.randint(1, 8, batch["hist_cat"].shape, generator=g),
                                    batch["hist_cat"])
    noisy["hist_fb"] = torch.where(pad[..., None], torch.randint(1, 4, batch["hist_fb"].shape, generator=g),
                                   batch["hist_fb"])
    noisy["hist_ts"] = torch.where(pad, torch.randint(0, 2 * 10**12, pad.shape, generator=g), batch["hist_ts"])
    noisy["hist_age"] = torch.where(pad, torch.rand(pad.shape, generator=g) * 20, batch["hist_age"])
    with torch.no_grad():
        torch.testing.assert_close(model(noisy), model(batch), rtol=0, atol=1e-6)
        valid = dict(noisy, hist_age=torch.where(pad, noisy["hist_age"], noisy["hist_age"] + 1.0))
        assert not torch.allclose(model(valid), model(batch))  # and valid positions do matter


@pytest.mark.parametrize("name", SEED_ARCHS)
def test_label_is_not_an_input(name):
    model = _model(name).eval()
    batch = _batch()
    with torch.no_grad():
        a = model(batch)
        b = model(dict(batch, label=1.0 - batch["label"]))
        c = model({k: v for k, v in batch.items() if k not in ("label", "event_id")})
    assert torch.equal(a, b) and torch.equal(a, c)


@pytest.mark.parametrize("name", SEED_ARCHS)
def test_gradients_reach_unk_rows(name):
    model = _model(name)
    batch = _batch()
    batch["cat"][:, 5] = UNK  # candidate video unknown
    batch["cat"][:2, 6] = UNK  # some authors unknown
    model(batch).sum().backward()
    tables = model.embeddings.tables
    assert tables["video_id"].weight.grad[UNK].abs().sum() > 0
    assert tables["author_id"].weight.grad[UNK].abs().sum() > 0


@pytest.mark.parametrize("name", HISTORY_ARCHS)
def test_empty_history_runs(name):
    model = _model(name)
    batch = _batch(min_len=0)
    batch["hist_mask"][:] = False
    for key in ("hist_cat", "hist_fb", "hist_ts"):
        batch[key].zero_()
    batch["hist_age"].zero_()
    logits = model(batch)
    assert torch.isfinite(logits).all()
    logits.sum().backward()


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
            n = fusion.ffn(nt + fusion.proj(torch.cat([nt, torch.zeros_like(nt)], dim=-1)))
        torch.testing.assert_close(model(batch), model.head(n))


def test_meanpool_is_a_config_value_of_whale():
    assert architectures.make_config("whale_meanpool").fusion_read == "mean"
    a = _model("whale_meanpool", seed=3).eval()
    b = _model("whale", seed=3, fusion_read="mean").eval()
    batch = _batch()
    with torch.no_grad():
        assert torch.equal(a(batch), b(batch))
    assert not any(isinstance(m, CrossAttentionRead) for m in a.modules())


@pytest.mark.parametrize("name", ["whale", "whale_meanpool"])
def test_request_reuse_gives_the_same_logits_and_gradients(name):
    batch = _batch(B=9, requests=3)
    outs = []
    for reuse in (False, True):
        model = _model(name, seed=5, reuse_history_per_request=reuse)
        logits = model(batch)
        logits.sum().backward()
        outs.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(outs[0][0], outs[1][0])
    for n, g in outs[0][1].items():
        torch.testing.assert_close(g, outs[1][1][n], rtol=1e-4, atol=1e-6, msg=n)


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
                torch.testing.assert_close(seq[b, 2 * k + 1], model.action(emb.feedback_tokens(batch["hist_fb"][b, k]).flatten()))
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


def test_model_reads_at_most_history_len_events():
    model = _model("whale").eval()
    long_spec = default_test_spec(2 * L)
    batch = random_batch(long_spec, 4, min_len=2 * L - 2, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model(recent_history(batch, L)))


def test_config_values_are_validated():
    with pytest.raises(ConfigError, match="model.dim"):
        architectures.make_config("whale", {"dim": 0})
    with pytest.raises(ConfigError, match="fusion_read"):
        architectures.make_config("whale", {"fusion_read": "max"})
    with pytest.raises(ConfigError, match="unknown key"):
        architectures.make_config("wukong", {"num_heads": 4})
