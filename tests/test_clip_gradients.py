"""harness.step.clip_gradients against torch.nn.utils.clip_grad_norm_ (the computation it must reproduce):
the same norm and bit-identical gradients, whether the norm is within the bound (where it skips torch's
multiplication by 1.0), above it, or not finite."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from harness.step import clip_gradients


def _model_with_grads(scale: float, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(50, 4), nn.Linear(4, 3), nn.Linear(3, 1))
    for p in model.parameters():
        p.grad = torch.randn_like(p) * scale
    return model


@pytest.mark.parametrize("scale", [1e-4, 0.05, 1.0, 30.0, float("inf")])
def test_clip_matches_torch(scale):
    ours = _model_with_grads(scale)
    ref = copy.deepcopy(ours)
    for a, b in zip(ours.parameters(), ref.parameters()):
        b.grad = a.grad.clone()  # deepcopy leaves .grad out
    norm = clip_gradients(ours, 1.0)
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0, foreach=True)
    assert norm is not None
    assert torch.equal(norm, ref_norm) or (norm.isnan() and ref_norm.isnan())
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(a.grad.nan_to_num(), b.grad.nan_to_num()), scale


def test_no_clipping_without_a_bound_or_gradients():
    model = _model_with_grads(5.0)
    before = [p.grad.clone() for p in model.parameters()]
    assert clip_gradients(model, 0.0) is None
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), before))
    assert clip_gradients(nn.Linear(2, 2), 1.0) is None


def test_sparse_and_dense_gradients_clip_to_the_norm_of_the_dense_equivalent():
    sparse_model = _model_with_grads(3.0)
    dense_model = copy.deepcopy(sparse_model)
    for a, b in zip(sparse_model.parameters(), dense_model.parameters()):
        b.grad = a.grad.clone()
    table = sparse_model[0].weight
    table.grad = table.grad.to_sparse()
    norm = clip_gradients(sparse_model, 1.0)
    ref_norm = torch.nn.utils.clip_grad_norm_(dense_model.parameters(), 1.0)
    assert norm is not None
    torch.testing.assert_close(norm, ref_norm, rtol=1e-6, atol=0)  # summed in another order: rounding only
    for a, b in zip(sparse_model.parameters(), dense_model.parameters()):
        torch.testing.assert_close(a.grad.to_dense(), b.grad, rtol=1e-6, atol=1e-9)
