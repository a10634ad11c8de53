"""One optimisation step (forward, loss, backward, clip, update) with its optimisers and device: shared by the training
loop (harness/train.py) and the step timings (harness/speed/), so both measure the same work. The loss (with
`train.tasks`: harness/tasks.py), the optimisers and the clipping: docs/training.md ("Training rules").
"""
from __future__ import annotations

import contextlib
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from core.errors import RecscaleError

from .config import TrainConfig
from .tasks import weighted_loss


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RecscaleError("train.device=cuda but no CUDA device is available")
    return torch.device(name)


def place(tc: TrainConfig) -> torch.device:
    """The device `tc` trains on, with torch's TF32 switches (CUDA) and thread count set as `tc` asks."""
    device = resolve_device(tc.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tc.tf32
        torch.backends.cudnn.allow_tf32 = tc.tf32
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    return device


class TrainStep:
    """Callable `step(batch) -> summed loss` (a detached 0-d tensor; no device synchronisation)."""

    def __init__(self, model: nn.Module, tc: TrainConfig, device: torch.device) -> None:
        self.model = model
        self.forward: nn.Module = cast(nn.Module,
                                       torch.compile(model)) if tc.compile else model  # compiled: an OptimizedModule
        self.optimizers = build_optimizers(model, tc, device)
        self.batch_size = tc.batch_size
        self.grad_clip = tc.grad_clip
        self.bf16 = tc.use_bf16(device)
        self.autocast: contextlib.AbstractContextManager = (  # entered around every forward, as in evaluate.predict
            torch.autocast(device.type, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext())
        self.grad_norm: torch.Tensor | None = None  # of the last step (train.CurveLogger logs it)
        self.task_weights = torch.tensor([t.weight for t in tc.tasks], device=device) if tc.tasks else None
        self.task_losses: torch.Tensor | None = None  # [T] summed loss of each task in the last step

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        loss_sum = self.forward_loss(batch)
        self.backward(loss_sum)
        self.update()
        return loss_sum.detach()

    # the step's three phases, called in turn by __call__ and timed one by one by `bench --breakdown`

    def forward_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The batch's summed loss (with its graph)."""
        with self.autocast:  # attentions run with the model's kernel (architectures.build(attention=...))
            logits = self.forward(batch)  # [B]
        if self.task_weights is None:
            return F.binary_cross_entropy_with_logits(logits.float(), batch["label"], reduction="sum")
        loss_sum, task_losses = weighted_loss(logits, batch["label"], self.task_weights)  # [B, T]
        self.task_losses = task_losses.detach()
        return loss_sum

    def backward(self, loss_sum: torch.Tensor) -> None:
        (loss_sum / self.batch_size).backward()

    def update(self) -> None:
        """Clip the gradients, step every optimiser and drop the gradients."""
        self.grad_norm = clip_gradients(self.model, self.grad_clip)  # before clipping; None without clipping
        for opt in self.optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)


def _adamw(params: list, tc: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    try:
        return torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay, fused=True)
    except (RuntimeError, ValueError):  # fused kernel not available for this device / dtype
        return torch.optim.AdamW(params, lr=tc.lr, weight_decay=tc.weight_decay, foreach=device.type != "cpu")


def build_optimizers(model: nn.Module, tc: TrainConfig, device: torch.device) -> list[torch.optim.Optimizer]:
    """The optimisers stepping every trainable parameter of `model` exactly once: one AdamW (embeddings in a
    no-decay group with `decay_embeddings=false`), or with `sparse_embeddings` SparseAdam for the tables."""
    emb_modules = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    emb = list({id(p): p for m in emb_modules for p in m.parameters(recurse=False)}.values())  # each once
    emb_ids = {id(p) for p in emb}
    dense = [p for p in model.parameters() if p.requires_grad and id(p) not in emb_ids]
    if tc.sparse_embeddings:
        for module in emb_modules:
            module.sparse = True
        return [_adamw(dense, tc, device), torch.optim.SparseAdam(emb, lr=tc.lr)]
    if tc.decay_embeddings:
        return [_adamw(dense + emb, tc, device)]
    groups = [{"params": dense}, {"params": emb, "weight_decay": 0.0}]
    return [_adamw(groups, tc, device)]


@torch.no_grad()
def clip_gradients(model: nn.Module, max_norm: float) -> torch.Tensor | None:
    """Scale all gradients so their global L2 norm (dense and sparse together) is at most `max_norm`; returns
    the norm before (a tensor: with dense gradients on CUDA no device synchronisation happens here)."""
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
