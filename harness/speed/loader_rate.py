"""Loader throughput measurements shared by `recscale bench --data` and tests/bench (docs/training.md,
"`recscale bench`"): the loader's targets/s (`loader_rate`), this machine's memory-copy rate for the same bytes
per target, so that a loader figure reads as a ratio that travels between machines (`copy_rate`).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np


def loader_rate(ds: Any, batch_size: int, n_batches: int, *, repeats: int = 3, via: Any = None,
                **options: Any) -> dict[str, float]:
    """Best-of-`repeats` targets/s of the training split's first `n_batches` batches (masking at the default
    probability); `options` go to `PreparedDataset.batches` (prefetch, workers, narrow, pin_memory), or to
    `via(ds, split, batch_size, seed=0, **options)` when another loader is measured."""
    n_batches = max(1, min(n_batches, ds.num_batches("train", batch_size)))
    best = float("inf")
    targets = nbytes = 0
    for _ in range(repeats):
        it = iter(via(ds, "train", batch_size, seed=0, **options) if via is not None
                  else ds.batches("train", batch_size, seed=0, **options))
        t0 = time.perf_counter()
        targets = nbytes = 0
        for _ in range(n_batches):
            batch = next(it)
            targets += int(batch["label"].shape[0])
            nbytes += sum(v.numel() * v.element_size() for v in batch.values())
        best = min(best, time.perf_counter() - t0)
        if hasattr(it, "close"):
            it.close()
    return {"targets_per_s": targets / best, "bytes_per_target": nbytes / targets, "targets": targets,
            "seconds": best}


def copy_rate(block_bytes: float, *, region_bytes: int = 256 << 20, repeats: int = 3) -> float:
    """Best-of-`repeats` bytes/s of copying `block_bytes` blocks (np.copyto) taken in turn from a region of
    `region_bytes` (larger than the caches, as the loader's sources are) into one destination block."""
    block_bytes = max(1, int(block_bytes))
    n = max(2, region_bytes // block_bytes)
    src = np.ones((n, block_bytes), dtype=np.uint8)
    dst = np.empty(block_bytes, dtype=np.uint8)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(n):
            np.copyto(dst, src[i])
        best = min(best, time.perf_counter() - t0)
    return n * block_bytes / best

