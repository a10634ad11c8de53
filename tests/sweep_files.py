"""The tiny synthetic sweep that the sweep and fault tests run: one builder, each test overriding only what it
varies, and the `recscale sweep` command line they start."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

RECSCALE = str(Path(sys.executable).parent / "recscale")


def tiny_sweep(name: str, cache: Path, **overrides: Any) -> dict[str, Any]:
    """A sweep of wukong runs on the tiny synthetic log (cached in `cache`), one trial at a time on
    one CPU. An override of a section (data, train, model, grid) updates its keys; any other replaces the key."""
    raw: dict[str, Any] = {
        "name": name,
        "data": {"source": "synthetic", "scale": "tiny", "history_len": 8, "n_train": 600, "n_valid": 200,
                 "n_test": 200, "cache": str(cache)},
        "train": {"device": "cpu", "batch_size": 64, "checkpoint_every_batches": 1},
        "model": {"dim": 8},
        "grid": {"arch": ["wukong"], "seed": [0, 1]},
        "resources": {"cpu": 1},
        "max_concurrent": 1,
    }
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and isinstance(raw.get(key), dict) else value
    return raw


def write_sweep(folder: Path, raw: dict[str, Any], file_name: str | None = None) -> Path:
    """The sweep written to FOLDER/<file_name or its name>.yaml."""
    path = folder / (file_name or f"{raw['name']}.yaml")
    path.write_text(yaml.safe_dump(raw))
    return path


def sweep_cmd(path: Path, results: Path, *extra: str) -> list[str]:
    """`recscale sweep FILE --results RESULTS --num-cpus 1 EXTRA...`."""
    return [RECSCALE, "sweep", str(path), "--results", str(results), "--num-cpus", "1", *extra]
