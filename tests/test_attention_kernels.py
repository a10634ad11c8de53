"""The fused attention op (`sdpa_attention`: torch's scaled_dot_product_attention, `train.attention: sdpa`)
against the plain PyTorch reference ops beside it (`explicit_attend`, `explicit_cross_attention`), and the
kernel as an explicit choice of the model (`architectures.build(attention=)`, `set_attention_kernel`):

- op level: the fast op and each reference op against float64, forward and backward, within n * eps of
  float32 (n: the longest chain of sums behind a value) at the boundary cases: padded keys, queries with no
  allowed key, and lengths that are not a multiple of the CPU flash kernel's query and key blocks;
- model level: the same logits and gradients within float tolerance for every model with a softmax
  attention (WHALE's cross-attention, HELIX, OneTrans, RankMixer+Transformer), rows without any valid key
  included, `auto` bit-identical to `explicit` on CPU, and the kernel given at build time equal to one set
  afterwards;
- the same FLOP count on both paths (fvcore through its SDPA handle, and torch's FlopCounterMode);
- an unknown kernel refused with the allowed values, from the config and from the model API."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

import architectures
from architectures.blocks.masked_attention import (
    UsesAttentionKernel,
    attend,
    explicit_attend,
    sdpa_attention,
    set_attention_kernel,
)
from architectures.flops import count_flops
from architectures.whale import explicit_cross_attention
from protocols.schema import default_test_spec, random_batch
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.usefixtures("one_thread")

L = 16
SPEC = default_test_spec(history_len=L)
#: Models with a softmax attention, with small settings (DIN's activation unit and HSTU's SiLU attention
#: have no softmax, so no fused kernel applies to them).
SOFTMAX_MODELS = {
    "whale": {"dim": 16},
    "helix": {"dim": 16},
    "onetrans": {"dim": 16},
    "rankmixer_transformer": {"dim": 16},
}


def _cpu_sdpa_flops(query_shape, key_shape, value_shape, *_, **__) -> int:
    """torch's own SDPA formula (`sdpa_flop_count`, [B, H, S, E] shapes) for the CPU fused kernel, which
    FlopCounterMode has no entry for; leading dimensions other than the last two are folded into B."""
    def four_d(shape):
        lead = 1
        for n in shape[:-2]:
            lead *= n
        return (lead, 1, *shape[-2:])

    return sdpa_flop_count(four_d(query_shape), four_d(key_shape), four_d(value_shape))


def torch_counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping={
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops})


def _batch(seed: int = 0) -> dict[str, torch.Tensor]:
    batch = random_batch(SPEC, 12, generator=torch.Generator().manual_seed(seed), min_len=0, requests=6)
    batch["hist_mask"][:2] = False  # two candidates (one request) with an empty history
    for key in ("hist_cat", "hist_fb", "hist_ts", "hist_age"):
        batch[key][:2] = 0
    return batch


def _explicit_reference(q, k, v, allowed):
    """Brute force: per row, softmax over the allowed keys only (empty rows read zero), in float64."""
    q, k, v = q.double(), k.double(), v.double()
    allowed = allowed.expand(*q.shape[:-1], k.shape[-2])
    out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=torch.float64)
    for idx in torch.cartesian_prod(*(torch.arange(n) for n in q.shape[:-1])).tolist():
        idx = tuple(idx) if isinstance(idx, list) else (idx,)
        keys = allowed[idx].nonzero().flatten()
        if len(keys):
            s = (k[idx[:-1]][keys] @ q[idx]) / q.shape[-1] ** 0.5
            out[idx] = torch.softmax(s, 0) @ v[idx[:-1]][keys]
    return out


def test_attend_matches_a_brute_force_softmax_on_both_paths():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 3, 4, generator=g) for _ in range(3))
    allowed = torch.rand(2, 1, 3, 3, generator=g) > 0.4
    allowed[0, 0, 1] = False  # a query with no allowed key
    ref = _explicit_reference(q, k, v, allowed)
    for kernel in ("explicit", "sdpa", "auto"):
        out = attend(q, k, v, allowed, kernel=kernel)
        assert torch.allclose(out.double(), ref, atol=1e-6), kernel
        assert torch.all(out[0, :, 1] == 0)  # exactly zero, no NaN
    assert torch.equal(attend(q, k, v, allowed, kernel="auto"), explicit_attend(q, k, v, allowed))  # CPU


#: Float32's machine epsilon. A float32 result that goes through a chain of sums of n terms in all (a score's
#: d-term dot product, the softmax normalisation and weighted sum over Nk keys, and in the backward the sums
#: over Nq queries) differs from the exact value by at most about n * EPS times the magnitude of its terms
#: (Higham's gamma_n bound). Each op is checked against float64 within n * EPS * max|float64 value|, with
#: n = d + Nk + Nq; the errors measured at these sizes are 0.01 to 0.1 of that.
EPS = torch.finfo(torch.float32).eps

#: (B, H, Nq, Nk, d): torch's CPU flash kernel splits queries in blocks of 32 (64 from 192 queries) and keys
#: in blocks of 512 (all keys below that): 33 and 65 queries leave a last block of 1, 200 one of 8, and 600
#: keys one of 88; 1 query is a block of one row.
OP_SHAPES = [(2, 2, 33, 33, 8), (3, 2, 65, 130, 16), (2, 2, 200, 70, 8), (2, 1, 1, 600, 8), (2, 2, 5, 600, 4)]


def _padded_mask(B: int, Nq: int, Nk: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(valid [B, Nk]: each row's keys after its length are padding, row 0 full, the last row empty;
    allowed [B, 1, Nq, Nk]: valid keys, some masked per query, query 1 of row 0 reads none)."""
    lengths = torch.randint(1, Nk + 1, (B,), generator=g)
    lengths[0], lengths[-1] = Nk, 0
    valid = torch.arange(Nk)[None] < lengths[:, None]
    allowed = valid[:, None, None, :] & (torch.rand(B, 1, Nq, Nk, generator=g) > 0.3)
    if Nq > 1:
        allowed[0, 0, 1] = False
    return valid, allowed


def _check_against_float64(op, reference, inputs, grad, n):
    """op (float32) and reference (float32 and float64) on `inputs`, forward and backward: each float32
    result within n * EPS * max|float64 result| of the float64 one; returns the float32 (output, grads)
    of op and of reference."""
    runs = {}
    for name, fn, dtype in (("fast", op, torch.float32), ("ref", reference, torch.float32),
                            ("ref64", reference, torch.float64)):
        xs = [t.detach().to(dtype).requires_grad_() for t in inputs]
        out = fn(*xs)
        out.backward(grad.to(dtype))
        runs[name] = [out.detach()] + [x.grad for x in xs]
    for name in ("fast", "ref"):
        for what, got, exact in zip(("out", "dq", "dk", "dv"), runs[name], runs["ref64"]):
            tol = n * EPS * exact.abs().max().item()
            err = (got.double() - exact).abs().max().item()
            assert err <= tol, (name, what, err, tol)
    return runs["fast"], runs["ref"]


@pytest.mark.parametrize(("B", "H", "Nq", "Nk", "d"), OP_SHAPES)
def test_sdpa_op_matches_explicit_attend_forward_and_backward(B, H, Nq, Nk, d):
    g = torch.Generator().manual_seed(Nq * Nk + d)
    q, k, v = (torch.randn(B, H, n, d, generator=g) for n in (Nq, Nk, Nk))
    valid, allowed = _padded_mask(B, Nq, Nk, g)
    grad = torch.randn(B, H, Nq, d, generator=g)
    fast, ref = _check_against_float64(lambda *x: sdpa_attention(*x, allowed), lambda *x: explicit_attend(*x, allowed),
                                       (q, k, v), grad, d + Nk + Nq)
    for result in (fast, ref):
        out, dq, dk, dv = result
        assert torch.isfinite(out).all() and all(torch.isfinite(t).all() for t in (dq, dk, dv))
        assert torch.all(out[-1] == 0) and torch.all(dq[-1] == 0)  # no valid key: reads zero, no gradient
        assert torch.all(dk[~valid[:, None, :].expand(B, H, Nk)] == 0)  # padding gets no gradient
        assert torch.all(dv[~valid[:, None, :].expand(B, H, Nk)] == 0)
        if Nq > 1:
            assert torch.all(out[0, :, 1] == 0)


@pytest.mark.parametrize(("B", "T", "L", "D"), [(3, 4, 37, 16), (3, 1, 600, 8), (2, 70, 9, 8)])
def test_sdpa_op_matches_explicit_cross_attention_forward_and_backward(B, T, L, D):
    """WHALE's single-head read ([B, T, D] queries, a [B, L] history whose last row is empty)."""
    g = torch.Generator().manual_seed(T * L + D)
    q, k, v = (torch.randn(B, n, D, generator=g) for n in (T, L, L))
    valid, _ = _padded_mask(B, T, L, g)
    grad = torch.randn(B, T, D, generator=g)
    scale = D**-0.5
    fast, ref = _check_against_float64(lambda *x: sdpa_attention(*x, valid.unsqueeze(1), scale=scale),
                                       lambda *x: explicit_cross_attention(*x, valid, scale),
                                       (q, k, v), grad, D + L + T)
    for out, dq, dk, dv in (fast, ref):
        assert torch.all(out[-1] == 0) and torch.all(dq[-1] == 0)
        assert torch.all(dk[~valid] == 0) and torch.all(dv[~valid] == 0)


def _modules_with_kernel(model: torch.nn.Module) -> list[str]:
    return [m.attention_kernel for m in model.modules() if isinstance(m, UsesAttentionKernel)]


@pytest.mark.parametrize("name", sorted(SOFTMAX_MODELS))
def test_sdpa_logits_equal_explicit_ones(name):
    torch.manual_seed(0)
    model = architectures.build(name, SPEC, {"history_len": L, **SOFTMAX_MODELS[name]}).eval()
    assert set(_modules_with_kernel(model)) == {"auto"}  # every softmax attention holds the kernel
    batch = _batch()
    with torch.no_grad():
        explicit = set_attention_kernel(model, "explicit")(batch)
        fused = set_attention_kernel(model, "sdpa")(batch)
        auto = set_attention_kernel(model, "auto")(batch)  # CPU: the explicit path, bit for bit
    assert torch.isfinite(fused).all()
    assert torch.allclose(fused, explicit, rtol=1e-4, atol=1e-5), (fused - explicit).abs().max()
    assert torch.equal(auto, explicit)
    # the kernel given at build time is the one set afterwards
    torch.manual_seed(0)
    built = architectures.build(name, SPEC, {"history_len": L, **SOFTMAX_MODELS[name]}, attention="sdpa").eval()
    assert set(_modules_with_kernel(built)) == {"sdpa"}
    with torch.no_grad():
        assert torch.equal(built(batch), fused)
    # gradients agree as well
    model.train()
    grads = {}
    for kernel in ("explicit", "sdpa"):
        model.zero_grad()
        set_attention_kernel(model, kernel)(batch).sum().backward()
        grads[kernel] = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.allclose(grads["sdpa"], grads["explicit"], rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("name", sorted(SOFTMAX_MODELS))
def test_flop_counts_do_not_depend_on_the_kernel(name):
    torch.manual_seed(0)
    model = architectures.build(name, SPEC, {"history_len": L, **SOFTMAX_MODELS[name]}).eval()
    batch = random_batch(SPEC, 2, min_len=L)
    counts = {}
    for kernel in ("explicit", "sdpa"):
        set_attention_kernel(model, kernel)
        with torch.no_grad():
            counts[kernel] = count_flops(model, batch)
            with torch_counter() as counter:
                model(batch)
        # torch's own counter agrees with fvcore on either path (2 targets in the batch)
        assert counts[kernel].per_target == pytest.approx(counter.get_total_flops() / 2, abs=2.0), kernel
    assert counts["sdpa"].per_target == counts["explicit"].per_target
    assert any("scaled_dot_product_attention" in op for op in counts["sdpa"].by_operator)


def test_unknown_kernel_is_refused():
    from core.typed_config import ConfigError, from_dict
    from harness.config import TrainConfig

    model = architectures.build("whale", SPEC, {"history_len": L, "dim": 16})
    with pytest.raises(ValueError, match="'flash' is not one of auto, sdpa, explicit"):
        set_attention_kernel(model, "flash")
    assert set(_modules_with_kernel(model)) == {"auto"}  # left unchanged
    with pytest.raises(ValueError, match="flash"):
        architectures.build("whale", SPEC, {"history_len": L, "dim": 16}, attention="flash")
    with pytest.raises(ConfigError, match=r"train\.attention: 'flash' is not one of \['auto', 'sdpa', 'explicit'\]"):
        from_dict(TrainConfig, {"attention": "flash"}, prefix="train.")


@pytest.mark.parametrize("kernel", ["explicit", "sdpa"])
def test_train_attention_is_the_kernel_of_the_runs_model(tiny_artifact, tmp_path, kernel):  # noqa: F811
    """`train.attention` reaches every softmax attention of the model a run trains and evaluates."""
    from harness.config import load_run_config, run_config_dict
    from harness.train import build, open_dataset

    cfg = load_run_config(None, {"model": {"dim": 16}, "train": {"attention": kernel}}, arch="whale",
                          data=str(tiny_artifact))
    session = build(cfg, tmp_path, run_config_dict(cfg), open_dataset(cfg.data), started=0.0)
    assert _modules_with_kernel(session.model) and set(_modules_with_kernel(session.model)) == {kernel}
