"""The batch loader as it was before prefetch, np.take gathers and narrow types (row fancy indexing,
int64 everywhere), kept as an independent reference: the current loader must give the same batches."""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from protocols.artifact import _CAT_MASKED, _HIST_MASKED, _MASK_STREAM, DEFAULT_ID_MASK_PROB, PreparedDataset
from protocols.schema import UNK


def reference_assemble(ds: PreparedDataset, split: str, positions: np.ndarray) -> dict[str, np.ndarray]:
    a = ds._split_arrays(split)
    item, feedback, exposure_ts = ds._exposure
    request_idx = a["request_idx"][positions]
    rows = ds._history[request_idx]  # [B, L]
    mask = rows >= 0
    safe = np.where(mask, rows, len(exposure_ts) - 1)
    request_ts = a["request_ts"][positions].astype(np.int64)
    hist_ts = exposure_ts[safe]
    age_s = np.maximum(request_ts[:, None] - hist_ts, 0) / 1000.0
    return {
        "cat": np.asarray(a["cat"][positions], dtype=np.int64),
        "num": np.asarray(a["num"][positions], dtype=np.float32),
        "hist_cat": item[safe].astype(np.int64),
        "hist_fb": feedback[safe].astype(np.int64),
        "hist_ts": hist_ts,
        "hist_age": np.where(mask, np.log1p(age_s), 0.0).astype(np.float32),
        "hist_mask": mask,
        "request_ts": request_ts,
        "request_idx": request_idx.astype(np.int64),
        "label": a["label"][positions].astype(np.float32),
        "event_id": a["event_id"][positions].astype(np.int64),
    }


def reference_mask(batch: dict[str, np.ndarray], p: float, rng: np.random.Generator) -> None:
    cat = batch["cat"]
    sub = cat[:, _CAT_MASKED]
    hit = (rng.random(sub.shape) < p) & (sub > UNK)
    cat[:, _CAT_MASKED] = np.where(hit, UNK, sub)
    hist = batch["hist_cat"]
    sub = hist[:, :, _HIST_MASKED]
    hit = (rng.random(sub.shape) < p) & (sub > UNK) & batch["hist_mask"][..., None]
    hist[:, :, _HIST_MASKED] = np.where(hit, UNK, sub)


def reference_batches(ds: PreparedDataset, split: str, batch_size: int, *, seed: int, epoch: int = 0,
                      start_batch: int = 0, id_mask_prob: float | None = None) -> Iterator[dict[str, torch.Tensor]]:
    p = (DEFAULT_ID_MASK_PROB if id_mask_prob is None else float(id_mask_prob)) if split == "train" else 0.0
    order = ds.order(split, seed=seed, epoch=epoch)
    for b in range(start_batch, ds.num_batches(split, batch_size)):
        batch = reference_assemble(ds, split, order[b * batch_size : (b + 1) * batch_size])
        if p > 0:
            reference_mask(batch, p,
                           np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, b, _MASK_STREAM]))))
        yield {k: torch.from_numpy(v) for k, v in batch.items()}
