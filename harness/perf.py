"""Speed and cost accounting for training processes.

- glibc malloc settings (`MALLOC_ENV`): with mmap disabled and a large trim threshold, the allocator
  keeps freed activation buffers instead of returning them to the kernel after every step; this made
  CPU training 1.5-2.4x faster here. One arena (`MALLOC_ARENA_MAX=1`) extends that to threads: a Ray
  Tune trial trains in a worker thread, and a thread's own arena still maps (and unmaps) every chunk
  larger than its 64 MiB heaps. glibc reads the settings once at process start, so `recscale train`
  re-executes itself with them set (`reexec_with_malloc_env`), and the sweep launcher passes
  `MALLOC_ENV` to Ray workers (`runtime_env={"env_vars": MALLOC_ENV}`).
- `matmul_rate`: fp32 matrix-multiply FLOP/s measured at start-up on the training device
  (`matmul_rate_cached`: once per process, device and thread count).
- `utilisation`: counted-FLOP utilisation = 3 x forward FLOPs/target x targets/s / matmul rate
  (3 = forward + backward, the backward pass costing about twice the forward).
- `peak_rss_bytes`: peak resident memory of this process.
"""
from __future__ import annotations

import os
import platform
import resource
import sys
import time
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # torch is imported lazily so that `recscale train` can re-execute before loading it
    import torch

#: Environment every training process should start with (glibc reads it at start-up only).
MALLOC_ENV: dict[str, str] = {
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_TRIM_THRESHOLD_": str(1 << 34),  # 16 GiB: effectively never trim the heap top
    "MALLOC_ARENA_MAX": "1",  # every thread allocates from the main heap, which the two lines above govern
}
#: Set in the re-executed process so it never re-executes again; set it to 1 to disable re-exec.
REEXEC_MARKER = "RECSCALE_MALLOC_REEXEC"


def malloc_env_active() -> bool:
    """True when this process started with every MALLOC_ENV variable set as recommended."""
    return all(os.environ.get(k) == v for k, v in MALLOC_ENV.items())


def reexec_with_malloc_env(argv: Sequence[str]) -> None:
    """Replace this process by `python -m harness.cli ARGV` with MALLOC_ENV set (glibc Linux only).

    Returns without doing anything when the variables are already set, when re-exec is disabled
    (REEXEC_MARKER set) or on platforms without glibc.
    """
    if malloc_env_active() or os.environ.get(REEXEC_MARKER) or platform.libc_ver()[0] != "glibc":
        return
    env = {**os.environ, **MALLOC_ENV, REEXEC_MARKER: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "harness.cli", *argv], env)


def matmul_rate(device: "torch.device", *, n: int = 1024, repeats: int = 3) -> float:
    """Best observed fp32 matmul FLOP/s of an n x n x n product on `device` (2 n^3 FLOPs each)."""
    import torch

    g = torch.Generator().manual_seed(0)  # never touch the global RNG a run depends on
    a = torch.randn(n, n, generator=g).to(device)
    b = torch.randn(n, n, generator=g).to(device)
    torch.mm(a, b)  # warm up (thread pool, cuBLAS handle)
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


_RATES: dict[tuple[str, int], float] = {}


def matmul_rate_cached(device: "torch.device") -> float:
    """`matmul_rate` measured once per process for each (device, torch thread count): a sweep worker
    training one trial after another reuses its first measurement."""
    import torch

    key = (str(device), torch.get_num_threads())
    if key not in _RATES:
        _RATES[key] = matmul_rate(device)
    return _RATES[key]


def utilisation(flops_per_target: float, targets_per_s: float, rate: float) -> float:
    """Counted-FLOP utilisation of training: 3 x forward FLOPs/target x targets/s / matmul rate."""
    return 3.0 * flops_per_target * targets_per_s / rate


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
