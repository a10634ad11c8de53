"""Where a run ran: the machine and software facts that decide which floating-point kernels compute it, and the
thread policy it trained under. `machine_fingerprint()` records them as flat `env_*` keys of metrics.json (one
runs.parquet column each; the keys and why they matter: docs/reproducibility.md, "Where each run ran");
`fingerprint_differences()` names the ones that differ between two runs. Threads: docs/training.md ("Threads").
"""
from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness.runs_columns import ENV_PREFIX as PREFIX  # every key `machine_fingerprint` returns starts with it

#: CPU flags (as /proc/cpuinfo spells them) that change which kernels torch, MKL or OpenBLAS run.
KERNEL_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
#: Environment variables that force a kernel choice; recorded when set.
KERNEL_OVERRIDES = ("ATEN_CPU_CAPABILITY", "OPENBLAS_CORETYPE", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS",
                    "MKL_DEBUG_CPU_TYPE", "OMP_NUM_THREADS")
#: OpenMP variables that pin threads to CPUs; recorded in `cpu_affinity` when set.
BINDING_VARIABLES = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")


@lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    """(model name, flags) of the first processor in /proc/cpuinfo; platform's name and no flags elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), frozenset()
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.+)$", text, re.M)
    return (model.group(1).strip() if model else platform.machine(),
            frozenset(flags.group(1).split()) if flags else frozenset())


def _torch_blas() -> str:
    """torch's BLAS as its build reports it, e.g. `mkl 2024.2` (the library torch's matrix products call)."""
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    mkl = re.search(r"Math Kernel Library Version ([\d.]+)", config)
    name = blas.group(1) if blas else "unknown"
    return f"{name} {mkl.group(1)}" if name == "mkl" and mkl else name


def _numpy_blas() -> str:
    """numpy's BLAS, its version and the kernel it picked for this CPU, e.g. `openblas 0.3.31 Haswell`."""
    import numpy as np
    from threadpoolctl import threadpool_info

    np.ones(2) @ np.ones(2)  # loads numpy's BLAS, so threadpoolctl sees it
    numpy_dir = str(Path(np.__file__).resolve().parent.parent)
    for lib in threadpool_info():
        if lib.get("user_api") == "blas" and str(lib.get("filepath", "")).startswith(numpy_dir) \
                and "scipy.libs" not in str(lib.get("filepath", "")):
            return " ".join(str(lib[k]) for k in ("internal_api", "version", "architecture") if lib.get(k))
    return "unknown"


def _ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> `0-2,5`."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpu_affinity() -> str:
    """The CPUs this process may run on (`0-1`) and any OpenMP binding variable set (`0-1 OMP_PROC_BIND=close`)."""
    try:
        cpus = _ranges(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cpus = f"{os.cpu_count() or 1} cpus"
    return " ".join([cpus, *(f"{k}={os.environ[k]}" for k in BINDING_VARIABLES if os.environ.get(k))])


def machine_fingerprint(device: Any = "cpu") -> dict[str, Any]:
    """The facts that decide a run's floating-point results on `device` (the torch device it trained on), as flat
    `env_*` keys (strings and ints; docs/reproducibility.md)."""
    import numpy as np
    import scipy
    import torch

    model, flags = _cpuinfo()
    dev = str(device)
    if dev.startswith("cuda") and torch.cuda.is_available():
        dev = f"{dev} {torch.cuda.get_device_name(torch.device(dev))} cuda {torch.version.cuda}"
    overrides = ",".join(f"{k}={os.environ[k]}" for k in KERNEL_OVERRIDES if os.environ.get(k))
    return {
        f"{PREFIX}cpu": model,
        f"{PREFIX}cpu_flags": ",".join(f for f in KERNEL_FLAGS if f in flags),
        f"{PREFIX}torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        f"{PREFIX}torch_blas": _torch_blas(),
        f"{PREFIX}numpy_blas": _numpy_blas(),
        f"{PREFIX}threads": int(torch.get_num_threads()),
        f"{PREFIX}omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        f"{PREFIX}cpu_affinity": cpu_affinity(),
        f"{PREFIX}device": dev,
        f"{PREFIX}overrides": overrides,
        f"{PREFIX}python": platform.python_version(),
        f"{PREFIX}torch": torch.__version__,
        f"{PREFIX}numpy": np.__version__,
        f"{PREFIX}scipy": scipy.__version__,
        f"{PREFIX}platform": platform.platform(),
    }


def fingerprint_differences(a: Mapping[str, Any], b: Mapping[str, Any],
                            missing: Any = None) -> list[tuple[str, Any, Any]]:
    """(key without the prefix, a's value, b's value) for every `env_*` entry of two metrics.json dicts or runs.parquet
    rows that differs (a missing entry, as in runs that predate them, reads `missing`)."""
    keys = sorted(k for k in {*a, *b} if str(k).startswith(PREFIX))
    return [(k[len(PREFIX):], a.get(k, missing), b.get(k, missing)) for k in keys if a.get(k) != b.get(k)]
