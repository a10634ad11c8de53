"""Request reuse: compute the candidate-independent (history) side once per request, on its first candidate, and
gather it back to every candidate (whose gradients the gathers' backward sums); the one implementation behind
every model's `reuse_requests` switch (docs/architectures.md, "Configuration").
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from .history import HISTORY_KEYS, History

R = TypeVar("R")


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
