"""The history part of a batch (`HISTORY_KEYS`, `History`: what candidate-independent code such as the history
encoders may read), cutting it to the model's history length (`recent_history`; why: docs/architectures.md,
"The model contract"), and vectorised selections over it (topk / gather, no per-row Python): HELIX's user-only
sequences (`user_only_masks`) and user x candidate hard search (`hard_search`), over `most_recent`
(docs/helix.md, "HELIX in recscale"). Valid events are left-aligned in ascending time (`protocols/schema.py`), so
the most recent k of a row with n valid events sit at positions max(n - k, 0) .. n - 1.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch

from protocols.schema import CAT_FIELDS, FEEDBACK_OFFSET, HIST_CAT_FIELDS, UNK, Batch

HistoryKey = Literal["hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask"]
HISTORY_KEYS: tuple[HistoryKey, ...] = ("hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask")
#: The `HISTORY_KEYS` entries of a batch (a `protocols.schema.Batch` is one too).
History = Mapping[str, torch.Tensor]
#: Names of the user-only sequences of `user_only_masks`, in order.
USER_ONLY_SEQUENCES: tuple[str, ...] = ("exposures", "effective_views", "long_views")
_POSITIVE = FEEDBACK_OFFSET + 1  # encoded feedback value 1


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


def gather_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x [B, L, ...], idx [B, K] -> [B, K, ...]"""
    rows = torch.arange(x.shape[0], device=x.device)[:, None]
    return x[rows, idx]


def most_recent(mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """mask [..., L] bool -> (positions [..., k] most recent first, valid [..., k]); invalid slots point at 0."""
    L = mask.shape[-1]
    position = torch.arange(L, device=mask.device).expand_as(mask)
    key = torch.where(mask, position, torch.full_like(position, -1))
    top, idx = key.topk(min(k, L), dim=-1)  # sorted descending = most recent first
    valid = top >= 0
    idx = torch.where(valid, idx, torch.zeros_like(idx))
    if k > L:  # more slots than history: pad with invalid slots
        pad = list(mask.shape[:-1]) + [k - L]
        idx = torch.cat([idx, idx.new_zeros(pad)], -1)
        valid = torch.cat([valid, valid.new_zeros(pad)], -1)
    return idx, valid


def user_only_masks(batch: History) -> torch.Tensor:
    """[B, 3, L]: all valid exposures, effective views, long views (in USER_ONLY_SEQUENCES order)."""
    m = batch["hist_mask"]
    fb = batch["hist_fb"]
    return torch.stack([m, m & (fb[..., 0] == _POSITIVE), m & (fb[..., 1] == _POSITIVE)], dim=1)


def hard_search(batch: Batch, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """User x candidate sequence positions [B, k] (most recent first) and validity [B, k]."""
    cat, hist = batch["cat"], batch["hist_cat"]
    matches = []
    for field in ("category_level_two", "author_id"):
        cand = cat[:, CAT_FIELDS.index(field)]  # [B]
        known = (cand > UNK)[:, None]
        matches.append(known & (hist[..., HIST_CAT_FIELDS.index(field)] == cand[:, None]))
    return most_recent(batch["hist_mask"] & (matches[0] | matches[1]), k)
