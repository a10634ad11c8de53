"""Per-machine speed calibration: what `recscale bench` measured here, kept for later commands
(`sweep --dry-run` turns it into wall-time estimates).

The cache is one JSON file, `calibration.json`, in the user cache folder: `$RECSCALE_CACHE_DIR` when set,
else `$XDG_CACHE_HOME/recscale`, else `~/.cache/recscale` (outside the repository, never committed).
Entries are filed under a machine and code key (`machine_key`): the facts of
`harness.fingerprint.machine_fingerprint()` that decide speed (CPU model, its kernel-relevant instruction
sets, torch's version, the CPUs this process may use, the device: the CUDA device's name and version when
one is used) and the version of recscale's code (`harness.code_version`: a hash of its sources). So one
cache shared by several machines, clones or users never mixes them: a sweep's overhead and rates measured
by other code, or on another machine, are never used. Within an entry:

- `matmul["<device>/<threads>"]`: fp32 matmul FLOP/s (`matmul_key`);
- `loader["L=<L>/B=<batch>/<device>"]`: loader targets/s (with prefetch, as training reads batches)
  (`loader_key`);
- `train["<arch>/<device>/<threads>"]`: the last timed training step of that architecture: targets/s,
  forward FLOPs/target, utilisation and the model settings it ran with (`train_key`);
- `trial_rate[...]`: training targets/s of one sweep trial configuration, recorded by a finished sweep or
  timed by `sweep --dry-run --measure` (keys and sources: `harness.speed.trial_rates`);
- `sweep["overhead_in_trial_s" | "overhead_per_trial_s"]`: the last sweep's per-trial overhead, inside the
  trials and seen from outside them (written by the sweep launcher).

Steps that autocast to bfloat16 are filed apart, under keys ending in `/bf16` (their matmul rate is the
bf16 rate, and their utilisation is against it), so an fp32 estimate never mixes with a bf16 measurement.

A missing cache is empty. A cache that exists but is not a JSON object (damaged, or planted: it is
never executed, only parsed as JSON) is refused with `CalibrationError` (exit 2) naming the file, so an
estimate never silently loses its calibration; delete the file and `recscale bench` measures again.
Writes are atomic.
"""
from __future__ import annotations

import json
import os
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.atomic_write import write_json
from core.errors import RecscaleError, one_line
from harness.code_version import code_version
from harness.fingerprint import PREFIX, machine_fingerprint

CACHE_FILE = "calibration.json"


def cache_dir() -> Path:
    if os.environ.get("RECSCALE_CACHE_DIR"):
        return Path(os.environ["RECSCALE_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "recscale"


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@lru_cache(maxsize=4)
def machine_key(device: str = "cpu") -> str:
    """This machine (for CUDA, its first device) and this code, as a cache key: `machine_fingerprint`'s
    cpu, cpu_flags, torch and device, the CPUs this process may use, and `code_version()`.

    The fingerprint's `threads` is torch's current setting, which `recscale bench` and trials change before
    they record (their figures are filed per thread count inside the entry); the key takes the thread
    count torch starts with instead, the CPUs this process may use."""
    fp = machine_fingerprint("cuda:0" if device.startswith("cuda") else "cpu")
    return "|".join([*(f"{k}={fp[PREFIX + k]}" for k in ("cpu", "cpu_flags", "torch", "device")),
                     f"threads={_usable_cpus()}", f"code={code_version()}"])


def loader_key(history_len: int, batch_size: int, device: str) -> str:
    return f"L={history_len}/B={batch_size}/{device}"


def matmul_key(device: str, threads: int, bf16: bool) -> str:
    return f"{device}/{threads}" + ("/bf16" if bf16 else "")


def train_key(arch: str, device: str, threads: int, bf16: bool) -> str:
    return f"{arch}/{device}/{threads}" + ("/bf16" if bf16 else "")


def is_bf16_key(key: str) -> bool:
    return key.endswith("/bf16")


class CalibrationError(RecscaleError):
    """The calibration cache exists but cannot be used (not JSON, not an object)."""


def load() -> dict[str, Any]:
    """The whole cache ({} when there is none); CalibrationError naming the file when it is damaged."""
    path = cache_path()
    if not path.exists():
        return {}
    advice = "delete it; `recscale bench` (or the next sweep) measures again"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:  # ValueError: bad JSON or bytes that are not UTF-8
        raise CalibrationError(f"{path}: unreadable calibration cache ({one_line(e)}); {advice}") from None
    if not isinstance(data, dict):
        raise CalibrationError(f"{path}: not a calibration cache (a JSON {type(data).__name__}, not an object); "
                               f"{advice}")
    return data


def entry(device: str = "cpu") -> dict[str, Any]:
    """This machine's calibration for `device` ({} when nothing was measured here)."""
    found = load().get(machine_key(device), {})
    return found if isinstance(found, dict) else {}


def record(device: str, section: str, key: str, value: Any) -> Path:
    """Store `value` under section/key of this machine's calibration for `device`; returns the file."""
    data = load()
    machine = data.setdefault(machine_key(device), {})
    part = machine.setdefault(section, {})
    part[key] = value
    machine["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, data, indent=1, sort_keys=True)
    return path
