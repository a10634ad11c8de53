"""Recompute a finished run's metrics from its prediction files (the check behind
`recscale metrics RUN --recompute`).

The predictions are joined with the prepared dataset's targets (named by the run's config.yaml) and
every split metric, oracle metric and grouped metric is computed again with `harness.metrics`.
`compare` lists every value that differs from metrics.json.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core import results_layout as layout
from core.errors import RecscaleError
from harness.runs_columns import DATA_FINGERPRINT
from harness.train import open_dataset

from . import run_folder as RF
from .evaluate import split_metrics, target_columns


def recompute_metrics(run_dir: Path, *, data: str | None = None) -> dict[str, Any]:
    """{`<split>_auc`, ..., `oracle_<split>_...`, `groups`: {split: {...}}} from the prediction files."""
    config_path = run_dir / layout.CONFIG_FILE
    config = RF.read_config(run_dir)
    if config is None:
        raise RF.RunFolderError(f"{config_path}: not found")
    if "data" not in config and data is None:
        raise RF.RunFolderError(f"{config_path}: no `data` key; pass --data ARTIFACT")
    dataset = open_dataset(data or config["data"])
    saved = RF.read_metrics(run_dir)
    saved_fp = saved.get(DATA_FINGERPRINT)
    if saved_fp is not None and saved_fp != dataset.fingerprint:
        raise RecscaleError(f"{run_dir}: trained on data {saved_fp}, but {dataset.fingerprint} was given")
    out: dict[str, Any] = {"groups": {}}
    for split in layout.PREDICTION_SPLITS:
        table = RF.read_predictions(run_dir, split, metrics=saved)  # size and checksum checked
        flat, groups = split_metrics(
            split,
            table.column("event_id").to_numpy(),
            table.column("label").to_numpy(),
            table.column("score").to_numpy(),
            target_columns(dataset, split),
        )
        out.update(flat)
        out["groups"][split] = groups
    # the same JSON normalisation as metrics.json (NaN -> null, numpy scalars -> Python)
    return json.loads(json.dumps(RF.json_safe(out), allow_nan=False))


def leaves(d: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in d.items():
        if isinstance(v, dict):
            yield from leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def compare(saved: dict[str, Any], fresh: dict[str, Any], *, tol: float = 0.0) -> list[str]:
    """`key: saved -> recomputed` for every recomputed value that differs from the saved one."""
    saved_leaves = dict(leaves(saved))
    diffs = []
    for key, value in leaves(fresh):
        old = saved_leaves.get(key, "<absent>")
        same = old == value or (
            isinstance(old,
                       (int,
                        float)) and isinstance(value, (int, float)) and math.isclose(old, value, rel_tol=0, abs_tol=tol)
        )
        if not same:
            diffs.append(f"{key}: {old!r} -> {value!r}")
    return diffs
