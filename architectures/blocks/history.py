"""The history part of a batch (`HISTORY_KEYS`, `History`: what candidate-independent code such as the history
encoders may read): cut to the model's history length (`recent_history`), computed once per request
(`history_per_request`, behind every model's `reuse_requests` switch), and vectorised selections over it for
HELIX (`user_only_masks`, `hard_search`, over `most_recent`): docs/architectures.md, "The model contract" and
"Configuration"; docs/helix.md, "HELIX in recscale". Valid events are left-aligned in ascending time
(`protocols/schema.py`), so the most recent k of a row with n valid events sit at positions max(n - k, 0) .. n - 1.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import torch

from protocols.schema import CAT_FIELDS, FEEDBACK_OFFSET, HIST_CAT_FIELDS, UNK, Batch

HistoryKey = Literal["hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask"]
HISTORY_KEYS: tuple[HistoryKey, ...] = ("hist_cat", "hist_fb", "hist_ts", "hist_age", "hist_mask")
#: The `HISTORY_KEYS` entries of a batch (a `protocols.schema.Batch` is one too).
History = Mapping[str, torch.Tensor]
#: Names of the user-only sequences of `user_only_masks`, in order.
USER_ONLY_SEQUENCES: tuple[str, ...] = ("exposures", "effective_views", "long_views")
_POSITIVE = FEEDBACK_OFFSET + 1  # encoded feedback value 1
R = TypeVar("R")


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


@dataclass(frozen=True)
class RequestGroups:
    """Grouping of a batch's candidates by request."""

    first: torch.Tensor  # int64 [R]: index (into the batch) of the first candidate of each unique request
    inverse: torch.Tensor  # int64 [B]: request slot (into 0..R-1) of every candidate

    @classmethod
    def of(cls, request_idx: torch.Tensor) -> RequestGroups:
        """Group candidates by `request_idx [B]` (any int64 ids, order irrelevant)."""
        if request_idx.dim() != 1:
            raise ValueError(f"request_idx must be 1-D [B], got shape {tuple(request_idx.shape)}")
        uniq, inverse = torch.unique(request_idx, return_inverse=True)  # [R], [B]
        B = request_idx.shape[0]
        positions = torch.arange(B, device=request_idx.device)
        first = torch.full((uniq.shape[0],), B, dtype=torch.int64, device=request_idx.device)
        first = first.scatter_reduce(0, inverse, positions, reduce="amin")  # [R]
        return cls(first=first, inverse=inverse)

    @property
    def num_requests(self) -> int:
        return int(self.first.shape[0])

    @property
    def is_trivial(self) -> bool:
        """True when every candidate is its own request (no work to save)."""
        return self.first.shape[0] == self.inverse.shape[0]

    def select(self, x: torch.Tensor) -> torch.Tensor:
        """[B, ...] -> [R, ...]: one row per request."""
        return x.index_select(0, self.first)

    def expand(self, y: torch.Tensor) -> torch.Tensor:
        """[R, ...] -> [B, ...]: every candidate gets its request's row."""
        return y.index_select(0, self.inverse)

    def expand_tree(self, y: Any) -> Any:
        """`expand` on every leaf of `y`: tensors, tuples / lists of leaves, objects with `index_rows`."""
        if isinstance(y, torch.Tensor):
            return self.expand(y)
        if isinstance(y, (tuple, list)):
            return type(y)(self.expand_tree(v) for v in y)
        if hasattr(y, "index_rows"):
            return y.index_rows(self.inverse)
        raise TypeError(f"cannot gather a {type(y).__name__} back to the candidates")


def history_per_request(
    fn: Callable[[History], R],
    batch: Mapping[str, Any],  # a Batch (a TypedDict is a Mapping[str, object], not [str, Tensor])
    *,
    enabled: bool,
) -> R:
    """`fn(history)` for every candidate, computed once per unique request when `enabled`.

    `history` holds only the `HISTORY_KEYS` entries of `batch`, so `fn` cannot read the candidate. With
    `enabled=False`, or when every candidate is its own request, `fn` runs on the full batch; the result is the
    same either way when the history is request-level.
    """
    history: dict[str, torch.Tensor] = {k: batch[k] for k in HISTORY_KEYS}
    if not enabled:
        return fn(history)
    groups = RequestGroups.of(batch["request_idx"])
    if groups.is_trivial:
        return fn(history)
    return groups.expand_tree(fn({k: groups.select(v) for k, v in history.items()}))


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
