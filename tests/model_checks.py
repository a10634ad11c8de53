"""The model-contract checks (architectures/contract.py), run for every registered architecture by
tests/test_model_conformance.py and for HELIX's switches by tests/test_helix.py.

Each check builds its inputs independently of the model under test: PAD positions are overwritten with
random ids/values, labels are flipped or removed, histories emptied, valid events changed, and the
model's outputs (or parameters, after one optimiser step) are compared.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from architectures.blocks.history import HISTORY_KEYS
from architectures.contract import reads_history
from architectures.flops import count_flops, count_params
from protocols.schema import CAT_FIELDS, HIST_CAT_FIELDS, FeatureSpec, random_batch


def batch_for(spec: FeatureSpec, n: int = 6, *, requests: int | None = None, min_len: int = 0, seed: int = 0):
    return random_batch(spec, n, generator=torch.Generator().manual_seed(seed), min_len=min_len, requests=requests)


def with_related_history(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy whose candidates share category_level_two with their first history event and the author
    with their second, as real candidates often do (so candidate-history matches, e.g. HELIX's hard
    search, find several events). Needs at least two valid events per row."""
    assert batch["hist_mask"][:, :2].all(), "every row needs two valid history events"
    out = dict(batch, cat=batch["cat"].clone())
    for event, field in ((0, "category_level_two"), (1, "author_id")):
        out["cat"][:, CAT_FIELDS.index(field)] = batch["hist_cat"][:, event, HIST_CAT_FIELDS.index(field)]
    return out


def scramble_pad(batch: dict[str, torch.Tensor], spec: FeatureSpec, seed: int = 1) -> dict[str, torch.Tensor]:
    """A copy with random values at every PAD history position (valid positions untouched)."""
    g = torch.Generator().manual_seed(seed)
    pad = ~batch["hist_mask"]
    assert pad.any(), "the batch has no PAD position to scramble"
    out = dict(batch)
    rand_cat = torch.stack(
        [torch.randint(0, spec.vocab_sizes[f], pad.shape, generator=g) for f in spec.hist_cat_fields], -1
    )
    out["hist_cat"] = torch.where(pad[..., None], rand_cat, batch["hist_cat"])
    out["hist_fb"] = torch.where(pad[..., None], torch.randint(0, 4, batch["hist_fb"].shape, generator=g),
                                 batch["hist_fb"])
    out["hist_ts"] = torch.where(pad, torch.randint(0, 2**40, pad.shape, generator=g), batch["hist_ts"])
    out["hist_age"] = torch.where(pad, torch.rand(pad.shape, generator=g) * 20, batch["hist_age"])
    return out


def empty_history(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy in which no target has a valid history event (every history tensor zero)."""
    out = dict(batch)
    for k in HISTORY_KEYS:
        out[k] = torch.zeros_like(batch[k])
    return out


def changed_valid_events(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A copy in which every valid history event has the opposite feedback (encoded 2 <-> 3) and a
    rho one unit larger; PAD positions untouched."""
    valid = batch["hist_mask"]
    return dict(batch, hist_fb=torch.where(valid[..., None], 5 - batch["hist_fb"], batch["hist_fb"]),
                hist_age=torch.where(valid, batch["hist_age"] + 1.0, batch["hist_age"]))


def assert_pad_invariant(model: nn.Module, batch, spec) -> None:
    """PAD history positions never change the logits (and, for models that read history, valid ones do)."""
    model.eval()
    with torch.no_grad():
        ref = model(batch)
        torch.testing.assert_close(model(scramble_pad(batch, spec)), ref, rtol=0, atol=1e-6)
        moved = model(changed_valid_events(batch))
    if reads_history(model):
        assert not torch.allclose(moved, ref), "changing valid history events left the logits unchanged"
    else:
        torch.testing.assert_close(moved, ref, rtol=0, atol=0)


def assert_label_not_input(model: nn.Module, batch) -> None:
    """Flipping the label, or removing `label` and `event_id`, leaves the logits bit-identical."""
    model.eval()
    no_label = {k: v for k, v in batch.items() if k not in ("label", "event_id")}
    flipped = dict(batch, label=1.0 - batch["label"])
    with torch.no_grad():
        ref = model(no_label)
        torch.testing.assert_close(model(flipped), ref, rtol=0, atol=0)
        torch.testing.assert_close(model(batch), ref, rtol=0, atol=0)


def assert_empty_history_runs(model: nn.Module, batch) -> torch.Tensor:
    """An empty history gives finite logits [B] and finite gradients."""
    model.train()
    model.zero_grad()
    y = model(empty_history(batch))
    assert y.shape == (batch["cat"].shape[0],) and torch.isfinite(y).all()
    y.sum().backward()
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    assert not bad, f"non-finite gradients on an empty history: {bad}"
    model.zero_grad()
    return y.detach()


def assert_trains(model: nn.Module, batch) -> None:
    """One AdamW step on the BCE loss: the loss is finite, and every parameter gets a finite, non-zero
    gradient and changes. Only a model that reads no history may leave embedding tables (the feedback
    tables every model registers) without a gradient."""
    model.train()
    model.zero_grad()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    logits = model(batch)
    assert logits.shape == batch["label"].shape and logits.dtype == torch.float32  # [B], or [B, T] for T tasks
    loss = nn.functional.binary_cross_entropy_with_logits(logits, batch["label"])
    assert torch.isfinite(loss)
    loss.backward()
    may_skip = set() if reads_history(model) else {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    unused = [n for n, p in model.named_parameters() if p.grad is None and id(p) not in may_skip]
    assert not unused, f"parameters without a gradient: {unused}"
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    bad = [n for n, g in grads.items() if not torch.isfinite(g).all()]
    assert not bad, f"parameters with a non-finite gradient: {bad}"
    silent = [n for n, g in grads.items() if g.abs().sum() == 0]
    assert not silent, f"parameters with an all-zero gradient: {silent}"
    torch.optim.AdamW(model.parameters(), lr=1e-3).step()
    unchanged = [n for n, p in model.named_parameters() if n in grads and torch.equal(p.detach(), before[n])]
    assert not unchanged, f"parameters unchanged by one optimiser step: {unchanged}"
    model.zero_grad()


def assert_reuse_exact(build: Callable[[bool], nn.Module], batch) -> None:
    """`build(reuse)` with reuse on gives the no-reuse logits and gradients on a batch whose candidates
    of one request share their history."""
    assert torch.unique(batch["request_idx"]).numel() < batch["request_idx"].numel(), "no request has 2 candidates"
    results = []
    for reuse in (False, True):
        model = build(reuse)
        model.train()
        model.zero_grad()
        logits = model(batch)
        logits.sum().backward()
        results.append((logits.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (y0, g0), (y1, g1) = results
    torch.testing.assert_close(y1, y0, rtol=0, atol=1e-5)
    assert g0.keys() == g1.keys()
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-4, atol=1e-6, msg=n)


def assert_flops_countable(model: nn.Module, batch) -> None:
    """fvcore traces the forward pass; matrix FLOPs and both parameter counts are positive."""
    report = count_flops(model, batch)
    params = count_params(model)
    assert report.per_target > 0 and report.by_module[""] == report.per_target
    assert params["embedding"] > 0 and params["non_embedding"] > 0
    assert params["embedding"] + params["non_embedding"] == sum(p.numel() for p in model.parameters())
