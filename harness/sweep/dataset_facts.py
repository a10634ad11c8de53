"""`datasets.json`: what the prepared datasets of a sweep hold, and how every two of them differ, written by the sweep
driver right after preparing (docs/sweeps.md, "Datasets are prepared once").
"""
from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from core import atomic_write
from core.results_layout import DATASETS_FILE, EXPOSURE_EVENT_ID_FILE, targets_file
from protocols.artifact import PreparedDataset, load_array
from protocols.split import SPLITS

FORMAT = 1


def history_event_ids(ds: PreparedDataset, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Target event_ids [n] (ascending) and each target's history as event_ids [n, L] (-1 at PAD)."""
    event_id = pq.read_table(ds.path / targets_file(split), columns=["event_id"]).column("event_id").to_numpy()
    rows = ds.history_rows(split)  # [n, L] exposure rows, -1 PAD
    exposure_event_id = load_array(ds.path / EXPOSURE_EVENT_ID_FILE)
    hist = np.where(rows >= 0, exposure_event_id[np.maximum(rows, 0)], -1)  # [n, L]
    order = np.argsort(event_id, kind="stable")
    return event_id[order], hist[order]


def _entry_keys(hist: np.ndarray, rank: np.ndarray, width: int) -> np.ndarray:
    """Distinct int64 keys target_position * width + event rank of the valid entries of `hist` [n, L]."""
    pos = np.nonzero(hist >= 0)[0]
    keys = np.sort(pos.astype(np.int64) * width + rank)  # sort-based: numpy's hashed unique is slower here
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys


def membership_difference(hist_a: np.ndarray, hist_b: np.ndarray) -> dict[str, float]:
    """Statistics of two histories of the same targets (rows aligned), compared as sets of event_ids
    (an event listed twice in one history counts once)."""
    n = len(hist_a)
    valid_a, valid_b = hist_a[hist_a >= 0], hist_b[hist_b >= 0]  # row-major: same order as np.nonzero
    _, rank = np.unique(np.concatenate([valid_a, valid_b]), return_inverse=True)
    width = int(rank.max(initial=0)) + 1
    keys_a = _entry_keys(hist_a, rank[: len(valid_a)], width)
    keys_b = _entry_keys(hist_b, rank[len(valid_a):], width)
    len_a, len_b = np.bincount(keys_a // width, minlength=n), np.bincount(keys_b // width, minlength=n)
    common = np.bincount(np.intersect1d(keys_a, keys_b, assume_unique=True) // width, minlength=n)
    differs = (common != len_a) | (common != len_b)

    def mean(x: np.ndarray) -> float:
        return float(x.mean()) if n else 0.0

    return {"targets_history_differs": int(differs.sum()), "share_history_differs": mean(differs),
            "mean_valid_length_a": mean(len_a), "mean_valid_length_b": mean(len_b),
            "mean_common_events": mean(common)}


def dataset_facts(datasets: Mapping[str, Mapping[str, Any]], paths: Mapping[str, str | Path]) -> dict[str, Any]:
    """The content of datasets.json for datasets `{id: prepare settings}` prepared at `paths[id]`."""
    opened = {d: PreparedDataset.open(paths[d]) for d in datasets}
    split_of = {(d, split): history_event_ids(opened[d], split) for d in datasets for split in SPLITS}

    out: dict[str, Any] = {"format": FORMAT, "datasets": {}, "pairs": []}
    for d, prep in datasets.items():
        ds = opened[d]
        splits = {}
        for split in SPLITS:
            event_id, hist = split_of[d, split]
            lengths = (hist >= 0).sum(axis=1)
            digest = hashlib.sha1(np.ascontiguousarray(event_id, dtype=np.int64).tobytes()).hexdigest()
            splits[split] = {"targets": int(len(event_id)), "event_ids_sha1": digest,
                             "mean_valid_length": float(lengths.mean()) if len(lengths) else 0.0,
                             "empty_history_targets": int((lengths == 0).sum())}
        out["datasets"][d] = {
            "protocol": str(prep["protocol"]),
            "delay_s": prep.get("delay_s"),  # a dataset holds only its protocol's parameters
            "history_len": int(ds.spec.history_len), "artifact": ds.path.name, "fingerprint": ds.fingerprint,
            "protocol_diagnostics": ds.manifest.get("protocol_diagnostics", {}), "splits": splits}
    for a, b in itertools.combinations(list(datasets), 2):
        pair: dict[str, Any] = {"a": a, "b": b, "splits": {}}
        for split in SPLITS:
            (ids_a, hist_a), (ids_b, hist_b) = split_of[a, split], split_of[b, split]
            shared, ia, ib = np.intersect1d(ids_a, ids_b, assume_unique=True, return_indices=True)
            pair["splits"][split] = {"targets_a": int(len(ids_a)), "targets_b": int(len(ids_b)),
                                     "shared_targets": int(len(shared)), "only_a": int(len(ids_a) - len(shared)),
                                     "only_b": int(len(ids_b) - len(shared)),
                                     **membership_difference(hist_a[ia], hist_b[ib])}
        out["pairs"].append(pair)
    return out


def write_dataset_facts(sweep_dir: Path | str, datasets: Mapping[str, Mapping[str, Any]],
                        paths: Mapping[str, str | Path]) -> Path:
    """Compute and atomically write `sweep_dir/datasets.json`."""
    target = Path(sweep_dir) / DATASETS_FILE
    atomic_write.write_text(target, json.dumps(dataset_facts(datasets, paths), indent=1, sort_keys=True) + "\n")
    return target
