"""HSTU block: time buckets, read masks and one layer against brute-force loops on tiny inputs."""
from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

import architectures
from architectures.blocks.embeddings import FieldEmbeddings
from architectures.blocks.hstu import (
    HistoryBranch,
    HSTULayer,
    history_layout,
    mask_to_bias,
    sequence_layout,
    time_bucket,
)
from core.typed_config import ConfigError
from harness.checkpoint import config_differences
from protocols.schema import default_test_spec, random_batch


def _bucket_ref(dt: int) -> int:
    return min(128, max(0, math.floor(math.log(max(abs(dt), 1)) / 0.301)))


def test_time_bucket_matches_formula():
    values = [0, 1, -1, 2, 3, 59_999, 60_000, -3_600_000, 86_400_000, 10**13, -(10**13)]
    values += [int(math.exp(0.301 * k)) + s for k in (5, 20, 40) for s in (-1, 0, 1)]
    got = time_bucket(torch.tensor(values, dtype=torch.int64)).tolist()
    assert got == [_bucket_ref(v) for v in values]
    assert time_bucket(torch.tensor([2**62])).item() == 128  # clamped at the top


def test_history_layout_brute_force():
    ts = torch.tensor([[10, 20, 20, 35, 0], [5, 5, 5, 0, 0]])
    valid = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    mask, buckets = history_layout(ts, valid)
    for b in range(2):
        for i in range(5):
            for j in range(5):
                want = bool(valid[b, i] and valid[b, j] and (ts[b, j] < ts[b, i] or i == j))
                assert mask[b, i, j].item() == want, (b, i, j)
                assert buckets[b, i, j].item() == _bucket_ref(int(ts[b, i] - ts[b, j]))


def test_sequence_layout_next_event_time_and_causality():
    ts = torch.tensor([[100, 100, 300, 300, 1000, 0, 0]])
    valid = torch.tensor([[1, 1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    mask, buckets = sequence_layout(ts, valid)
    for i in range(7):
        t_next = ts[0, i + 1].item() if i + 1 < 7 and valid[0, i + 1] else ts[0, i].item()
        for j in range(7):
            assert mask[0, i, j].item() == bool(valid[0, i] and valid[0, j] and j <= i)
            assert buckets[0, i, j].item() == _bucket_ref(t_next - int(ts[0, j]))
    # with events: position 2 (event 1) must not read an earlier event at the same time
    ts2 = torch.tensor([[100, 100, 100, 100, 1000]])
    m2, _ = sequence_layout(ts2, torch.ones(1, 5, dtype=torch.bool), event=torch.tensor([[0, 0, 1, 1, 2]]))
    assert m2[0, 3].tolist() == [False, False, True, True, False]
    assert m2[0, 4].tolist() == [True] * 5


def _layer_reference(layer: HSTULayer, x, valid, mask, buckets, eps: float = 1e-5):
    """Loops over batch, heads, queries and keys, written from the HSTU layer formula (blocks/hstu.py docstring),
    with layer norms of the given eps."""
    B, N, D = x.shape
    H, d, Lmax = layer.num_heads, layer.head_dim, layer.max_len
    W, Wo, bo = layer.uvqk.weight, layer.out.weight, layer.out.bias
    pos_w, time_w = layer.bias.position, layer.bias.time
    out = torch.zeros_like(x)
    for b in range(B):
        for i in range(N):
            xi = x[b, i]
            z = torch.nn.functional.silu(W @ ((xi - xi.mean()) / torch.sqrt(xi.var(unbiased=False) + eps)))
            u = z[: H * d]
            heads = []
            for h in range(H):
                acc = torch.zeros(d)
                for j in range(N):
                    xj = x[b, j]
                    zj = torch.nn.functional.silu(W @ ((xj - xj.mean()) / torch.sqrt(xj.var(unbiased=False) + eps)))
                    vj = zj[H * d: 2 * H * d][h * d:(h + 1) * d]
                    kj = zj[3 * H * d:][h * d:(h + 1) * d]
                    qi = z[2 * H * d: 3 * H * d][h * d:(h + 1) * d]
                    s = qi @ kj + pos_w[j - i + Lmax - 1] + time_w[buckets[b, i, j]]
                    acc = acc + torch.nn.functional.silu(s) / Lmax * float(mask[b, i, j]) * vj
                heads.append(acc)
            a = torch.cat(heads)
            a = (a - a.mean()) / torch.sqrt(a.var(unbiased=False) + eps)
            out[b, i] = (xi + Wo @ (a * u) + bo) * float(valid[b, i])
    return out


def test_hstu_layer_matches_brute_force():
    torch.manual_seed(0)
    layer = HSTULayer(6, num_heads=2, head_dim=3, max_len=7, num_buckets=128)
    B, N = 2, 5
    x = torch.randn(B, N, 6)
    ts = torch.tensor([[1_000, 5_000, 5_000, 90_000, 0], [10, 20, 0, 0, 0]])
    valid = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    x = x * valid.unsqueeze(-1)
    mask, buckets = history_layout(ts, valid)
    got = layer(x, valid, mask_to_bias(mask), buckets)
    want = _layer_reference(layer, x, valid, mask, buckets)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _branch(L: int = 12) -> tuple[HistoryBranch, dict]:
    torch.manual_seed(1)
    spec = default_test_spec(L)
    branch = HistoryBranch(spec, FieldEmbeddings(spec, 16), dim=16, num_layers=2, num_heads=2, head_dim=8,
                           max_len=L, num_buckets=128, event_hidden=None)
    batch = random_batch(spec, 3, min_len=L)
    return branch, batch


def test_history_branch_later_positions_do_not_affect_earlier():
    branch, batch = _branch()
    k = 5
    changed = {key: v.clone() for key, v in batch.items()}
    changed["hist_cat"][:, k + 1:] = torch.randint(2, 8, changed["hist_cat"][:, k + 1:].shape)
    changed["hist_fb"][:, k + 1:] = 5 - changed["hist_fb"][:, k + 1:]  # flip feedback 2 <-> 3
    changed["hist_age"][:, k + 1:] += 3.0
    a, b = branch(batch)[-1], branch(changed)[-1]
    torch.testing.assert_close(a[:, : k + 1], b[:, : k + 1], rtol=0, atol=0)
    assert not torch.allclose(a[:, k + 1:], b[:, k + 1:])


def test_history_branch_equal_request_times_do_not_read_each_other():
    branch, batch = _branch()
    batch["hist_ts"][:, 4] = batch["hist_ts"][:, 3]  # events 3 and 4 share a request time
    changed = {key: v.clone() for key, v in batch.items()}
    changed["hist_cat"][:, 3] = torch.randint(2, 8, changed["hist_cat"][:, 3].shape)
    a, b = branch(batch)[-1], branch(changed)[-1]
    torch.testing.assert_close(a[:, 4], b[:, 4], rtol=0, atol=0)  # 4 does not read 3
    assert not torch.allclose(a[:, 3], b[:, 3]) and not torch.allclose(a[:, 5], b[:, 5])  # 5 does


def _tiny_layer_inputs():
    B, N = 2, 5
    ts = torch.tensor([[1_000, 5_000, 5_000, 90_000, 0], [10, 20, 0, 0, 0]])
    valid = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    x = torch.randn(B, N, 6) * valid.unsqueeze(-1)
    mask, buckets = history_layout(ts, valid)
    return x, valid, mask, buckets


def test_layer_norm_eps_default_is_torchs():
    # the default is the eps the layer norms used before it was a setting (F.layer_norm's own default), so a
    # model built without it computes what it computed before, bit for bit
    torch_default = inspect.signature(F.layer_norm).parameters["eps"].default
    assert HSTULayer(6, num_heads=2, head_dim=3, max_len=7).eps == torch_default == 1e-5


def test_layer_norm_eps_reaches_both_layer_norms():
    torch.manual_seed(0)
    layer = HSTULayer(6, num_heads=2, head_dim=3, max_len=7, eps=1e-6)
    x, valid, mask, buckets = _tiny_layer_inputs()
    got = layer(x, valid, mask_to_bias(mask), buckets)
    torch.testing.assert_close(got, _layer_reference(layer, x, valid, mask, buckets, eps=1e-6), rtol=1e-5, atol=1e-6)
    # the 1/L_max-scaled attention output has a variance comparable to eps, so eps changes the numbers visibly
    other = _layer_reference(layer, x, valid, mask, buckets, eps=1e-5)
    assert (got - other).abs().max() > 1e-3


@pytest.mark.parametrize("arch", ["hstu", "whale", "whale_meanpool"])
def test_layer_norm_eps_config_field_reaches_every_hstu_layer(arch):
    L = 6
    spec = default_test_spec(L)
    size = {"dim": 8, "num_layers": 2, "history_len": L, "num_heads": 2, "head_dim": 4}
    torch.manual_seed(0)
    default = architectures.build(arch, spec, size)
    tuned = architectures.build(arch, spec, {**size, "layer_norm_eps": 1e-6})
    tuned.load_state_dict(default.state_dict())  # same weights: only eps differs
    layers = [m for m in tuned.modules() if isinstance(m, HSTULayer)]
    assert len(layers) == 2 and all(m.eps == 1e-6 for m in layers)
    assert all(m.eps == 1e-5 for m in default.modules() if isinstance(m, HSTULayer))
    batch = random_batch(spec, 4, min_len=L)
    with torch.no_grad():
        a, b = default(batch), tuned(batch)
    assert (a - b).abs().max() > 1e-6  # the logits move: the setting is not ignored


@pytest.mark.parametrize("bad", [0.0, -1e-6, float("inf"), float("nan")])
def test_layer_norm_eps_must_be_a_positive_number(bad):
    with pytest.raises(ConfigError, match=r"model\.layer_norm_eps"):
        architectures.build("hstu", default_test_spec(4), {"history_len": 4, "layer_norm_eps": bad})


def test_run_folders_from_before_the_eps_setting_resume():
    saved = {"arch": "hstu", "model": {"dim": 64}, "seed": 0}  # written before model.layer_norm_eps existed
    assert config_differences(saved, {"arch": "hstu", "model": {"dim": 64, "layer_norm_eps": 1e-5}, "seed": 0}) == []
    assert config_differences(saved, {"arch": "hstu", "model": {"dim": 64, "layer_norm_eps": 1e-6}, "seed": 0}) == [
        "model.layer_norm_eps: 1e-05 -> 1e-06"]
