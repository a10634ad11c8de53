"""Resumable training checkpoints and the checks a resume must pass (only `config.RESUME_SAFE_KEYS` may change):
docs/training.md ("Checkpoints and resume"). Loading runs no code from the file (`torch.load(weights_only=True)`,
`_numpy_globals`): docs/reliability.md ("What we load and how").
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.atomic_write import atomic_write
from core.errors import RecscaleError
from core.typed_config import flat_keys

from .config import LAYER_NORM_EPS_BEFORE, LAYER_NORM_EPS_KEY, RESUME_SAFE_KEYS, SELECT_EPOCH_KEY

FORMAT_VERSION = 1


class ResumeRefused(RecscaleError):
    """The checkpoint was written by a different config or for different data."""


@dataclass
class Position:
    """Where training stands (the next batch to run is `batch` of `epoch`), early-stopping state included."""

    epoch: int = 0
    batch: int = 0
    targets_seen: int = 0
    loss_sum: float = 0.0
    epoch_loss_sum: float = 0.0
    train_seconds: float = 0.0
    valid_seconds: float = 0.0  # early-stopping evaluations
    wall_seconds: float = 0.0
    best_metric: float | None = None
    best_epoch: int | None = None  # the epoch whose weights `best_model` holds
    epochs_without_improvement: int = 0
    finished: bool = False
    history: list[dict[str, float]] = field(default_factory=list)


def rng_states() -> dict[str, Any]:
    """Every random state a run may consume: Python, numpy, torch CPU and each CUDA device."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _effective(flat: dict[str, Any]) -> dict[str, Any]:
    """`train.select_epoch` as it acts: in a one-epoch run it has no effect, so it is left out of the comparison.
    `model.layer_norm_eps` absent (written before the key existed) is the eps those runs trained with; models
    without the key read it on both sides alike."""
    out = dict(flat)
    out.setdefault(LAYER_NORM_EPS_KEY, LAYER_NORM_EPS_BEFORE)
    if out.get("train.epochs", 1) == 1:
        out.pop(SELECT_EPOCH_KEY, None)
    return out


def config_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human-readable `key: saved -> current` lines for every result-relevant difference."""
    a, b = _effective(flat_keys(saved)), _effective(flat_keys(current))
    keys = sorted((set(a) | set(b)) - set(RESUME_SAFE_KEYS))
    return [f"{k}: {a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r}" for k in keys if a.get(k) != b.get(k)]


def refuse_config_differences(path: Path, saved: dict[str, Any], current: dict[str, Any], whose: str) -> None:
    """ResumeRefused naming `path` and listing `config_differences` from `saved`, the config of `whose`."""
    diffs = config_differences(saved, current)
    if diffs:
        raise ResumeRefused(f"{path}: refusing to resume: the config differs from {whose}:\n  " + "\n  ".join(diffs))


def save_checkpoint(
    path: Path,
    *,
    config: dict[str, Any],
    data_fingerprint: str,
    model: torch.nn.Module,
    optimizers: list[torch.optim.Optimizer],
    position: Position,
    best_model_state: dict[str, torch.Tensor] | None = None,
) -> None:
    """Atomically write a resumable checkpoint to `path`."""
    payload = {
        "format_version": FORMAT_VERSION,
        "config": config,
        "data_fingerprint": data_fingerprint,
        "model": model.state_dict(),
        "optimizers": [opt.state_dict() for opt in optimizers],
        "position": position.__dict__,
        "rng": rng_states(),
        "best_model": best_model_state,
    }
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # through a Python file: a full disk is then an OSError(ENOSPC) in the chain
            torch.save(payload, f)

    try:
        atomic_write(path, write)  # `path` keeps the previous one on failure
    except BaseException as e:  # an error, or a second signal (harness.train.TrainingAborted), mid-write
        signalled: BaseException | None = e
        while signalled is not None and isinstance(signalled, Exception):
            signalled = signalled.__context__
        if signalled is not None and signalled is not e:
            # torch's writer fails to close the half-written zip after the signal's exception; the signal wins
            raise signalled from None
        raise


def _numpy_globals() -> list[Any]:
    """The numpy globals of a pickled ndarray (`np.random.get_state()`'s key array), under the module name
    this numpy pickles them with and under numpy 1's (`numpy.core`), so older checkpoints load too."""
    reconstruct = (np._core.multiarray._reconstruct if hasattr(np, "_core")
                   else np.core.multiarray._reconstruct)  # type: ignore[attr-defined]  # numpy 1 only
    return [reconstruct, (reconstruct, "numpy.core.multiarray._reconstruct"), np.ndarray, np.dtype,
            type(np.dtype(np.uint32))]


def _refusal(path: Path, error: Exception) -> str:
    """One line: why torch's weights-only reader refused `path` (the global it named, when it did)."""
    text = str(error)
    named = re.search(r"GLOBAL (\S+)", text)
    if named:
        return (f"{path}: refusing to load: the file names {named.group(1)}, which a recscale checkpoint never "
                "holds (it may run code); delete the file (or the run folder) if you did not write it")
    if "Weights only load failed" in text:
        lines = [ln.strip() for ln in text.splitlines()[1:] if ln.strip() and "weights_only" not in ln
                 and "torch.load" not in ln]
        return f"{path}: refusing to load: {lines[0] if lines else 'not a plain tensor checkpoint'}"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(error).__name__)
    return f"{path}: unreadable checkpoint ({first}); the file is truncated or not a checkpoint"


def read_checkpoint_file(path: Path) -> dict[str, Any]:
    """The checkpoint's payload, read with torch's weights-only unpickler (no code runs); ResumeRefused
    with one line naming the file when it is unreadable or names a global outside the allowed ones."""
    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated, foreign or unsafe file
        raise ResumeRefused(_refusal(path, e)) from None
    if not isinstance(payload, dict):
        raise ResumeRefused(f"{path}: not a recscale checkpoint (holds a {type(payload).__name__}, not a mapping)")
    return payload


def load_checkpoint(path: Path, *, config: dict[str, Any], data_fingerprint: str) -> dict[str, Any]:
    """Read a checkpoint, refusing it when the config or the data differ from the current run."""
    if not path.exists():
        raise ResumeRefused(f"{path}: no checkpoint to resume from")
    payload = read_checkpoint_file(path)
    if payload.get("format_version") != FORMAT_VERSION:
        raise ResumeRefused(f"{path}: checkpoint format {payload.get('format_version')} != {FORMAT_VERSION}")
    if payload["data_fingerprint"] != data_fingerprint:
        raise ResumeRefused(
            f"{path}: refusing to resume: the checkpoint was trained on data {payload['data_fingerprint']}, "
            f"this run uses {data_fingerprint}"
        )
    refuse_config_differences(path, payload["config"], config, "the checkpoint's")
    payload["position"] = Position(**payload["position"])
    return payload
