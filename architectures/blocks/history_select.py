"""Vectorised selections (topk / gather, no per-row Python) over the left-aligned history of the batch schema:
HELIX's user-only sequences (`user_only_masks`) and its user x candidate hard search (`hard_search`), over
`most_recent` (docs/helix.md, "HELIX in recscale").
"""
from __future__ import annotations

import torch

from protocols.schema import CAT_FIELDS, FEEDBACK_OFFSET, HIST_CAT_FIELDS, UNK, Batch

from .history_window import History

#: Names of the user-only sequences of `user_only_masks`, in order.
USER_ONLY_SEQUENCES: tuple[str, ...] = ("exposures", "effective_views", "long_views")
_POSITIVE = FEEDBACK_OFFSET + 1  # encoded feedback value 1


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
