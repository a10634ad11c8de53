"""HSTU block: time buckets, read masks and one layer against brute-force loops on tiny inputs."""
from __future__ import annotations

import math

import torch

from architectures.blocks.embeddings import FieldEmbeddings
from architectures.blocks.history_branch import HistoryBranch
from architectures.blocks.hstu import HSTULayer, history_layout, mask_to_bias, sequence_layout, time_bucket
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


def _layer_reference(layer: HSTULayer, x, valid, mask, buckets):
    """Loops over batch, heads, queries and keys, written from the HSTU layer formula (blocks/hstu.py docstring)."""
    B, N, D = x.shape
    H, d, Lmax = layer.num_heads, layer.head_dim, layer.max_len
    W, Wo, bo = layer.uvqk.weight, layer.out.weight, layer.out.bias
    pos_w, time_w = layer.bias.position, layer.bias.time
    out = torch.zeros_like(x)
    for b in range(B):
        for i in range(N):
            xi = x[b, i]
            z = torch.nn.functional.silu(W @ ((xi - xi.mean()) / torch.sqrt(xi.var(unbiased=False) + 1e-5)))
            u = z[: H * d]
            heads = []
            for h in range(H):
                acc = torch.zeros(d)
                for j in range(N):
                    xj = x[b, j]
                    zj = torch.nn.functional.silu(W @ ((xj - xj.mean()) / torch.sqrt(xj.var(unbiased=False) + 1e-5)))
                    vj = zj[H * d: 2 * H * d][h * d:(h + 1) * d]
                    kj = zj[3 * H * d:][h * d:(h + 1) * d]
                    qi = z[2 * H * d: 3 * H * d][h * d:(h + 1) * d]
                    s = qi @ kj + pos_w[j - i + Lmax - 1] + time_w[buckets[b, i, j]]
                    acc = acc + torch.nn.functional.silu(s) / Lmax * float(mask[b, i, j]) * vj
                heads.append(acc)
            a = torch.cat(heads)
            a = (a - a.mean()) / torch.sqrt(a.var(unbiased=False) + 1e-5)
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
