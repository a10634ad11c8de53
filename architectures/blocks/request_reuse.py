"""Compute a candidate-independent function once per request, then give every candidate its result.

Candidates of one request share the user, the request time and the history (DESIGN batch schema,
`request_idx`). A history encoder that does not look at the candidate therefore gives the same
output for all of them; running it once per unique request and gathering the result back is exact
and saves (candidates per request - 1) / (candidates per request) of that work.

    groups = RequestGroups.of(batch["request_idx"])          # R unique requests among B candidates
    h = encoder(groups.select(batch["hist_cat"]), ...)       # [R, L, D], computed once per request
    h = groups.expand(h)                                     # [B, L, D]

or in one call: `per_request(encoder, batch["request_idx"], hist_cat, hist_ts, ...)`.

The caller guarantees that the selected inputs are equal across candidates of one request (true of
every batch built by the loader and by `protocols.schema.random_batch`); `select` keeps the first
candidate of each request. Gradients flow back through `expand` (an index gather, whose backward
sums the candidates' gradients into their request's row).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch


@dataclass(frozen=True)
class RequestGroups:
    """Grouping of a batch's candidates by request.

    first:   int64 [R]  index (into the batch) of the first candidate of each unique request
    inverse: int64 [B]  request slot (into 0..R-1) of every candidate
    """

    first: torch.Tensor
    inverse: torch.Tensor

    @classmethod
    def of(cls, request_idx: torch.Tensor) -> "RequestGroups":
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

    def select_keys(self, batch: dict[str, torch.Tensor], keys: Iterable[str]) -> dict[str, torch.Tensor]:
        """The listed batch entries, one row per request."""
        return {k: self.select(batch[k]) for k in keys}

    def expand_all(self, ys: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """`expand` applied to each tensor of a sequence."""
        return tuple(self.expand(y) for y in ys)


def per_request(
    fn: Callable[..., torch.Tensor],
    request_idx: torch.Tensor,
    *inputs: torch.Tensor,
    enabled: bool = True,
) -> torch.Tensor:
    """`fn(*inputs)` evaluated once per unique request and gathered back to the B candidates.

    With `enabled=False` (or when every candidate is its own request) `fn` runs on the full batch;
    the result is the same either way when the inputs are request-level.
    """
    if not enabled:
        return fn(*inputs)
    groups = RequestGroups.of(request_idx)
    if groups.is_trivial:
        return fn(*inputs)
    return groups.expand(fn(*(groups.select(x) for x in inputs)))
