"""Wukong layer, fusion layer, SwiGLU, MLP and request reuse against direct computations on tiny inputs."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from architectures.blocks.history import HISTORY_KEYS, RequestGroups, history_per_request
from architectures.blocks.masked_attention import KV
from architectures.blocks.mlp import MLP
from architectures.blocks.swiglu import SwiGLU
from architectures.blocks.wukong import WukongLayer
from architectures.whale import Fusion


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
            r = X if n_in == 8 else torch.stack([sum(layer.residual[t, i] * X[i] for i in range(n_in))
                                                 for t in range(8)])
            want = torch.stack([_ln(row, layer.out_norm) for row in torch.cat([f, c]) + r])
            torch.testing.assert_close(got[b], want, rtol=1e-5, atol=1e-5)


def test_fusion_layer_matches_the_formula():
    torch.manual_seed(0)
    D = 8
    fusion = Fusion(D, ffn_hidden=12, read="attention")
    n, h = torch.randn(2, 3, D), torch.randn(2, 5, D)
    valid = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    got = fusion(n, fusion.read.memory(h, valid), valid)
    r = fusion.read
    for b in range(2):
        hv = r.kv_norm(h[b, valid[b]])
        a = torch.softmax(r.q(r.query_norm(n[b])) @ r.k(hv).T / D**0.5, dim=-1) @ r.v(hv)
        z = n[b] + torch.cat([n[b], a], dim=-1) @ fusion.proj.weight.T
        zn = F.layer_norm(z, (D,), fusion.ffn.norm.weight, fusion.ffn.norm.bias)
        want = z + (F.silu(zn @ fusion.ffn.gate.weight.T) * (zn @ fusion.ffn.up.weight.T)) @ fusion.ffn.down.weight.T
        torch.testing.assert_close(got[b], want)


def test_request_groups_select_and_expand():
    request_idx = torch.tensor([7, 3, 7, 9, 3, 7])
    g = RequestGroups.of(request_idx)
    assert g.num_requests == 3
    # every candidate maps to a representative of its own request
    assert torch.equal(request_idx[g.first][g.inverse], request_idx)
    assert torch.equal(g.first, torch.tensor([1, 0, 3]))  # first candidate of requests 3, 7, 9
    assert RequestGroups.of(torch.arange(4)).is_trivial


def _history_batch(request_idx: torch.Tensor) -> dict[str, torch.Tensor]:
    """A batch whose history keys are equal within a request (value = 10 x request id + position)."""
    B, L = request_idx.shape[0], 3
    base = (10 * request_idx[:, None] + torch.arange(L)).float()  # [B, L]
    return {"hist_cat": base.long()[..., None].repeat(1, 1, 5), "hist_fb": base.long()[..., None].repeat(1, 1, 2),
            "hist_ts": base.long(), "hist_age": base, "hist_mask": torch.ones(B, L, dtype=torch.bool),
            "request_idx": request_idx, "cat": torch.arange(B)[:, None]}


def test_history_per_request_runs_once_per_request_and_gathers_every_result_kind():
    request_idx = torch.tensor([7, 3, 7, 9, 3, 7])
    batch = _history_batch(request_idx)
    seen = []

    def encode(hist):
        seen.append((hist["hist_age"].shape[0], sorted(hist)))
        e = hist["hist_age"] * 2  # [R, L]
        kv = KV(e[:, None, :, None], -e[:, None, :, None], hist["hist_mask"])
        return e, [kv, (e.sum(1),)]

    plain = history_per_request(encode, batch, enabled=False)
    reused = history_per_request(encode, batch, enabled=True)
    # without reuse: the full batch; with reuse: one row per request; never a candidate key
    assert seen == [(6, sorted(HISTORY_KEYS)), (3, sorted(HISTORY_KEYS))]
    e, (kv, (total,)) = reused
    torch.testing.assert_close(e, plain[0], rtol=0, atol=0)
    torch.testing.assert_close(kv.k, plain[1][0].k, rtol=0, atol=0)
    torch.testing.assert_close(kv.v, plain[1][0].v, rtol=0, atol=0)
    assert torch.equal(kv.mask, plain[1][0].mask)
    torch.testing.assert_close(total, (10 * request_idx * 3 + 3).float() * 2, rtol=0, atol=0)
    # every candidate its own request: the full batch, no gather
    seen.clear()
    history_per_request(encode, _history_batch(torch.tensor([4, 1, 2])), enabled=True)
    assert seen[0][0] == 3


def test_history_per_request_sums_candidate_gradients_into_their_request():
    request_idx = torch.tensor([0, 1, 0, 0])
    batch = _history_batch(request_idx)
    batch["hist_age"] = batch["hist_age"].clone().requires_grad_()
    out = history_per_request(lambda h: h["hist_age"] * 3, batch, enabled=True)
    out.sum().backward()
    # candidate 0 stands for request 0 (3 candidates), candidate 1 for request 1; the others get nothing
    want = torch.tensor([9.0, 3.0, 0.0, 0.0])[:, None].expand(4, 3)
    torch.testing.assert_close(batch["hist_age"].grad, want)


def test_swiglu_is_one_formula_shared_or_per_token():
    torch.manual_seed(0)
    W, H, T = 6, 10, 3
    x = torch.randn(2, T, W)
    for norm in ("none", "rms", "softcap"):
        shared = SwiGLU(W, H, norm)
        n = (lambda v: v) if norm == "none" else (
            (lambda v: v / v.pow(2).mean(-1, keepdim=True).add(torch.finfo(v.dtype).eps).sqrt()) if norm == "rms"
            else (lambda v: 10.0 * torch.tanh(v / 10.0)))
        g, u = x @ shared.gate.weight.T, x @ shared.up.weight.T
        torch.testing.assert_close(shared(x), (F.silu(n(g)) * n(u)) @ shared.down.weight.T)
        per_token = SwiGLU(W, H, norm, tokens=T)
        for t in range(T):  # token t uses its own weights, the same formula
            g, u = x[:, t] @ per_token.gate.weight[t], x[:, t] @ per_token.up.weight[t]
            torch.testing.assert_close(per_token(x)[:, t], (F.silu(n(g)) * n(u)) @ per_token.down.weight[t])
    normed = SwiGLU(W, H, input_norm="layer")
    xn = F.layer_norm(x, (W,))  # a fresh LayerNorm has weight 1, bias 0
    want = (F.silu(xn @ normed.gate.weight.T) * (xn @ normed.up.weight.T)) @ normed.down.weight.T
    torch.testing.assert_close(normed(x), want)
    names = [n for n, _ in normed.named_parameters()]
    assert names == ["norm.weight", "norm.bias", "gate.weight", "up.weight", "down.weight"]


def test_mlp_takes_one_or_several_hidden_widths():
    torch.manual_seed(0)
    x = torch.randn(4, 5)
    two = MLP(5, 7, 2)
    assert [type(m).__name__ for m in two] == ["Linear", "ReLU", "Linear"]
    torch.testing.assert_close(two(x), two[2](torch.relu(two[0](x))))
    deep = MLP(5, [7, 3], 1)
    assert [(m.in_features, m.out_features) for m in deep if isinstance(m, torch.nn.Linear)] == [(5, 7), (7, 3), (3, 1)]
    torch.testing.assert_close(deep(x), deep[4](torch.relu(deep[2](torch.relu(deep[0](x))))))
    assert len(MLP(5, [], 1)) == 1
