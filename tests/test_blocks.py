"""Wukong layer, fusion layer and request grouping against direct computations on tiny inputs."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from architectures.blocks.fusion import Fusion
from architectures.blocks.request_reuse import RequestGroups, per_request
from architectures.blocks.wukong import WukongLayer


def _ln(x, norm):
    return (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + norm.eps) * norm.weight + norm.bias


def test_wukong_layer_matches_the_formula():
    torch.manual_seed(0)
    n, D = 5, 6
    for n_in in (n, 8):  # 5 -> 8 needs the token projection; 8 -> 8 uses X itself
        layer = WukongLayer(n_in, D, fmb_tokens=4, lcb_tokens=4, hidden=7)
        x = torch.randn(2, n_in, D)
        got = layer(x)
        for b in range(2):
            X = x[b]
            gram = torch.tensor([[float(X[i] @ X[j]) for j in range(n_in)] for i in range(n_in)])
            lin1, lin2 = layer.fmb[0], layer.fmb[2]
            f = lin2(torch.relu(lin1(_ln(gram.flatten(), layer.gram_norm)))).view(4, D)
            c = torch.stack([sum(layer.lcb[t, i] * X[i] for i in range(n_in)) for t in range(4)])
            r = X if n_in == 8 else torch.stack([sum(layer.residual[t, i] * X[i] for i in range(n_in)) for t in range(8)])
            want = torch.stack([_ln(row, layer.out_norm) for row in torch.cat([f, c]) + r])
            torch.testing.assert_close(got[b], want, rtol=1e-5, atol=1e-5)


def test_fusion_layer_matches_the_formula():
    torch.manual_seed(0)
    D = 8
    fusion = Fusion(D, ffn_hidden=12, read="attention")
    n, h = torch.randn(2, 3, D), torch.randn(2, 5, D)
    valid = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    got = fusion(n, fusion.memory(h, valid), valid)
    r = fusion.read
    for b in range(2):
        hv = r.kv_norm(h[b, valid[b]])
        a = torch.softmax(r.q(r.query_norm(n[b])) @ r.k(hv).T / D**0.5, dim=-1) @ r.v(hv)
        z = n[b] + torch.cat([n[b], a], dim=-1) @ fusion.proj.weight.T
        zn = fusion.ffn.norm(z)
        want = z + (F.silu(zn @ fusion.ffn.gate.weight.T) * (zn @ fusion.ffn.up.weight.T)) @ fusion.ffn.down.weight.T
        torch.testing.assert_close(got[b], want)


def test_request_groups_select_and_expand():
    request_idx = torch.tensor([7, 3, 7, 9, 3, 7])
    g = RequestGroups.of(request_idx)
    assert g.num_requests == 3
    # every candidate maps to a representative of its own request
    assert torch.equal(request_idx[g.first][g.inverse], request_idx)
    assert torch.equal(g.first, torch.tensor([1, 0, 3]))  # first candidate of requests 3, 7, 9
    calls = []

    def fn(x):
        calls.append(x.shape[0])
        return x * 2

    x = request_idx.float()[:, None].repeat(1, 4)
    torch.testing.assert_close(per_request(fn, request_idx, x), x * 2)
    assert calls == [3]
    assert RequestGroups.of(torch.arange(4)).is_trivial
