"""The `tracking:` key of a sweep file: an experiment tracker that receives every trial's metrics and config
besides the sweep folder's own files, and whether it is installed.

    tracking: mlflow                # TRACKERS; default: none (run folders, runs.parquet and TensorBoard only)

A tracker is an optional extra (pyproject.toml, EXTRA): a sweep that names one it cannot import is refused
when the file is loaded, before any dataset is prepared or trial started. What the tracker receives and where
it is stored: `harness.sweep.tracking`. Nothing here imports the tracker or Ray.
"""
from __future__ import annotations

import importlib.util
from typing import Literal, get_args

from core.typed_config import ConfigError

#: The type of the sweep's `tracking` field (None: no tracker).
Tracker = Literal["mlflow"]
#: Trackers a sweep may name.
TRACKERS: tuple[str, ...] = get_args(Tracker)
#: Per tracker: (the module it needs, the recscale extra that installs it).
REQUIREMENTS: dict[str, tuple[str, str]] = {"mlflow": ("mlflow", "tracking")}


def check_installed(tracker: str | None, key: str = "tracking") -> None:
    """Refuse a tracker whose package cannot be imported, naming the extra that installs it."""
    if tracker is None:
        return
    module, extra = REQUIREMENTS[tracker]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        found = False
    if not found:
        raise ConfigError(f"{key}: {tracker} needs the `{module}` package, which is not installed here; install "
                          f"recscale's `{extra}` extra (pip install 'recscale[{extra}]', or -e '.[{extra}]' in a "
                          f"checkout), or remove `{key}:`")
