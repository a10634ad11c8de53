"""Correctness checks every architecture must pass (issue 4), shared by test_helix.py and test_baselines.py.

Each check builds its inputs independently of the model under test: PAD positions are overwritten with
random ids/values, labels are removed, histories emptied, and the model's outputs are compared.
"""
from __future__ import annotations

import torch
import torch.nn as nn

from protocols.schema import FeatureSpec, random_batch


def batch_for(spec: FeatureSpec, n: int = 6, *, requests: int | None = None, min_len: int = 0, seed: int = 0):
    return random_batch(spec, n, generator=torch.Generator().manual_seed(seed), min_len=min_len, requests=requests)


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
    out["hist_fb"] = torch.where(pad[..., None], torch.randint(0, 4, batch["hist_fb"].shape, generator=g), batch["hist_fb"])
    out["hist_ts"] = torch.where(pad, torch.randint(0, 2**40, pad.shape, generator=g), batch["hist_ts"])
    out["hist_age"] = torch.where(pad, torch.rand(pad.shape, generator=g) * 20, batch["hist_age"])
    return out


def empty_history(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = dict(batch)
    for k in ("hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask"):
        out[k] = torch.zeros_like(batch[k])
    return out


def assert_pad_invariant(model: nn.Module, batch, spec) -> None:
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(scramble_pad(batch, spec)), model(batch), rtol=0, atol=1e-6)


def assert_label_not_input(model: nn.Module, batch) -> None:
    model.eval()
    no_label = {k: v for k, v in batch.items() if k != "label"}
    flipped = dict(batch, label=1.0 - batch["label"])
    with torch.no_grad():
        ref = model(no_label)
        torch.testing.assert_close(model(flipped), ref, rtol=0, atol=0)


def assert_empty_history_runs(model: nn.Module, batch) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        y = model(empty_history(batch))
    assert y.shape == (batch["cat"].shape[0],) and torch.isfinite(y).all()
    return y


def assert_trains(model: nn.Module, batch) -> None:
    """Forward + backward: finite loss, and every parameter receives a finite, non-zero gradient somewhere."""
    model.train()
    model.zero_grad()
    logits = model(batch)
    assert logits.shape == (batch["cat"].shape[0],)
    loss = nn.functional.binary_cross_entropy_with_logits(logits, batch["label"])
    loss.backward()
    dead = [n for n, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not dead, f"parameters without a finite gradient: {dead}"
    silent = [n for n, p in model.named_parameters() if p.grad.abs().sum() == 0]
    assert not silent, f"parameters with an all-zero gradient: {silent}"
