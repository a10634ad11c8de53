"""Optimisers and gradient clipping of a run.

Dense mode (default): one AdamW over every parameter (fused kernel where torch supports it), with
weight decay on the embedding tables too unless `decay_embeddings=false` (then embeddings form a
second parameter group with decay 0).

Sparse mode (`sparse_embeddings=true`): every `nn.Embedding` produces sparse gradients, updated by
SparseAdam, which touches only the rows present in the batch (lazy moments, no weight decay); the
other parameters keep AdamW. This is a different optimiser for the tables; its AUC effect is
measured in docs/training.md.

Clipping is always over the global norm of all gradients (dense and sparse together). It computes what
`torch.nn.utils.clip_grad_norm_` does, except that on CPU it skips the multiplication by exactly 1.0 when the
norm is within the bound (the same bits; a pass over every gradient, the embedding tables' included, saved).
"""
from __future__ import annotations

import torch
import torch.nn as nn

from .config import TrainConfig


def embedding_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Parameters of the model's nn.Embedding modules (each once)."""
    seen: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            for p in module.parameters(recurse=False):
                seen.setdefault(id(p), p)
    return list(seen.values())


def _adamw(params: list, tc: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    try:
        return torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay, fused=True)
    except (RuntimeError, ValueError):  # fused kernel not available for this device / dtype
        return torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay, foreach=device.type != "cpu")


def build_optimizers(model: nn.Module, tc: TrainConfig, device: torch.device) -> list[torch.optim.Optimizer]:
    """The optimisers stepping every trainable parameter of `model` exactly once."""
    emb = embedding_parameters(model)
    emb_ids = {id(p) for p in emb}
    dense = [p for p in model.parameters() if p.requires_grad and id(p) not in emb_ids]
    if tc.sparse_embeddings:
        for module in model.modules():
            if isinstance(module, nn.Embedding):
                module.sparse = True
        return [_adamw(dense, tc, device), torch.optim.SparseAdam(emb, lr=tc.lr)]
    if tc.decay_embeddings:
        return [_adamw(dense + emb, tc, device)]
    groups = [{"params": dense}, {"params": emb, "weight_decay": 0.0}]
    return [_adamw(groups, tc, device)]


@torch.no_grad()
def clip_gradients(model: nn.Module, max_norm: float) -> torch.Tensor | None:
    """Scale all gradients so their global L2 norm is at most `max_norm`; returns the norm before (a tensor:
    with dense gradients on CUDA no device synchronisation happens here)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if max_norm <= 0 or not grads:
        return None
    dense = [g for g in grads if not g.is_sparse]
    sparse = [g for g in grads if g.is_sparse]
    if not sparse:
        total = torch.nn.utils.get_total_norm(dense, foreach=True)
        if total.device.type == "cpu" and bool(max_norm / (total + 1e-6) >= 1.0):
            return total  # torch would multiply every gradient by exactly 1.0: a pass over them for nothing
        torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, total, foreach=True)
        return total
    squares = [torch.nn.utils.get_total_norm(dense, foreach=True) ** 2] if dense else []
    for p in model.parameters():
        if p.grad is not None and p.grad.is_sparse:
            p.grad = p.grad.coalesce()  # duplicate rows summed, so the norm is that of the dense gradient
            squares.append(p.grad._values().pow(2).sum())
    total = torch.sqrt(torch.stack(squares).sum())
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(coef)
    return total
