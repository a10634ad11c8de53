"""The history part of a batch (`HISTORY_KEYS`, `History`: what candidate-independent code such as the history
encoders may read), and cutting it to the model's history length (`recent_history`; why: docs/architectures.md,
"The model contract"). Valid events are left-aligned in ascending time (`protocols/schema.py`), so the most
recent k of a row with n valid events sit at positions max(n - k, 0) .. n - 1.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch

from protocols.schema import Batch

HistoryKey = Literal["hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask"]
HISTORY_KEYS: tuple[HistoryKey, ...] = ("hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask")
#: The `HISTORY_KEYS` entries of a batch (a `protocols.schema.Batch` is one too).
History = Mapping[str, torch.Tensor]


def recent_history(batch: Batch, max_len: int) -> Batch:
    """`batch` with every history tensor cut to the `max_len` most recent valid events (unchanged if short enough)."""
    L = batch["hist_mask"].shape[1]
    if L <= max_len:
        return batch
    lengths = batch["hist_mask"].sum(dim=1)  # [B]
    start = (lengths - max_len).clamp(min=0)  # [B]
    idx = start.unsqueeze(1) + torch.arange(max_len, device=start.device).unsqueeze(0)  # [B, max_len]
    out = dict(batch)
    for key in HISTORY_KEYS:
        x = batch[key]
        gather_idx = idx.view(idx.shape + (1,) * (x.dim() - 2)).expand((-1, -1) + x.shape[2:])
        out[key] = torch.gather(x, 1, gather_idx)
    return out  # type: ignore[return-value]  # a Batch with its history keys cut
