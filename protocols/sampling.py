"""Target sampling: uniform without replacement over the exposures of each split, as the prefix of one seeded
permutation per (seed, split), so samples of one seed are nested; and the default sizes (the reference sizes
scaled to the log). Both rules: docs/protocols.md, "Targets".
"""
from __future__ import annotations

from typing import Literal

import numpy as np

from core.errors import RecscaleError

from .split import SPLITS

#: Target counts of the reference protocol on the full RecFlow exposure log.
REFERENCE_SIZES: dict[str, int] = {"train": 3_000_000, "valid": 100_000, "test": 200_000}
REFERENCE_LOG_SIZE = 38_245_315


def default_size(split: str, log_size: int, available: int) -> int:
    """Reference size of `split` scaled to a log of `log_size` exposures, capped at `available`."""
    scaled = max(1, round(REFERENCE_SIZES[split] * log_size / REFERENCE_LOG_SIZE))
    return min(scaled, available)


def resolve_size(split: str, requested: int | Literal["all"] | None, log_size: int, available: int,
                 default: str = "scaled", where: str = "") -> int:
    """The number of targets to draw: `requested` (a count >= 0 or "all", as `PrepareConfig` checked it) or the
    source's `default` ("scaled" or "all"). `where` describes the split's interval in the error message."""
    if requested is None and default != "all":
        return default_size(split, log_size, available)
    if requested is None or requested == "all":
        return available
    if requested > available:
        raise RecscaleError(
            f"n_{split}: {requested:,} targets requested but the {split} split{where} holds only "
            f"{available:,} exposures; lower n_{split} (or set it to 'all')"
        )
    return requested


def sample_rows(split_rows: np.ndarray, n: int, *, seed: int, split: str) -> np.ndarray:
    """`n` rows drawn uniformly without replacement from `split_rows` (the module docstring's rule), ascending."""
    if n > len(split_rows):
        raise RecscaleError(f"cannot draw {n:,} {split} targets from {len(split_rows):,} exposures")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, SPLITS.index(split)])))
    chosen = rng.permutation(len(split_rows))[:n]
    return np.sort(split_rows[chosen])
