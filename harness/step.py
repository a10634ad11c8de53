"""One optimisation step (forward, loss, backward, clip, optimiser update), shared by the training
loop and the throughput benchmark so both measure the same work.

The loss is BCE-with-logits summed over the batch and divided by the nominal batch size: every
target weighs the same 1 / batch_size, including those of the last, partial batch.
"""
from __future__ import annotations

import contextlib
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import TrainConfig
from .optim import build_optimizers, clip_gradients


class TrainStep:
    """Callable `step(batch) -> summed loss` (a detached 0-d tensor; no device synchronisation)."""

    def __init__(self, model: nn.Module, tc: TrainConfig, device: torch.device) -> None:
        self.model = model
        self.forward: nn.Module = cast(nn.Module,
                                       torch.compile(model)) if tc.compile else model  # compiled: an OptimizedModule
        self.optimizers = build_optimizers(model, tc, device)
        self.batch_size = tc.batch_size
        self.grad_clip = tc.grad_clip
        self.device_type = device.type
        self.bf16 = tc.use_bf16(device)
        self.grad_norm: torch.Tensor | None = None  # of the last step (harness/curves.py logs it)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.bf16:
            return torch.autocast(self.device_type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def __call__(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with self.autocast():  # attentions run with the model's kernel (architectures.build(attention=...))
            logits = self.forward(batch)  # [B]
        loss_sum = F.binary_cross_entropy_with_logits(logits.float(), batch["label"], reduction="sum")
        (loss_sum / self.batch_size).backward()
        self.grad_norm = clip_gradients(self.model, self.grad_clip)  # before clipping; None without clipping
        for opt in self.optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss_sum.detach()
