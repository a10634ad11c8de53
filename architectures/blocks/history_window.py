"""Cut a batch's history to the model's history length, keeping the most recent valid events.

Valid events are left-aligned in ascending time (DESIGN batch schema), so the most recent k of a row with
n valid events sit at positions max(n - k, 0) .. n - 1. A batch prepared with a longer history than a model
was configured for is therefore usable as is: one prepared dataset serves a sweep over `history_len`.
"""
from __future__ import annotations

import torch

HISTORY_KEYS: tuple[str, ...] = ("hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask")


def recent_history(batch: dict[str, torch.Tensor], max_len: int) -> dict[str, torch.Tensor]:
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
    return out
