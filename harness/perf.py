"""Speed and cost accounting for training processes.

- glibc malloc settings (`MALLOC_ENV`): with mmap disabled and a large trim threshold, the allocator
  keeps freed activation buffers instead of returning them to the kernel after every step; this made
  CPU training 1.5-2.4x faster here. One arena (`MALLOC_ARENA_MAX=1`) extends that to threads: a Ray
  Tune trial trains in a worker thread, and a thread's own arena still maps (and unmaps) every chunk
  larger than its 64 MiB heaps. glibc reads the settings once at process start, so `recscale train`
  re-executes itself with them set (`reexec_with_malloc_env`), and the sweep launcher passes
  `MALLOC_ENV` to Ray workers (`runtime_env={"env_vars": MALLOC_ENV}`).
- `matmul_rate`: matrix-multiply FLOP/s measured at start-up on the training device, in the dtype the
  step's products run in (`compute_dtype`: bfloat16 under autocast, else float32, which CUDA runs as
  TF32 where that is allowed); `matmul_rate_cached`: once per process, device, thread count and dtype.
- `utilisation`: counted-FLOP utilisation = 3 x forward FLOPs/target x targets/s / matmul rate
  (3 = forward + backward, the backward pass costing about twice the forward). Against the rate of the
  dtype actually used: a bf16 step measured against the fp32 rate would read 4.6x too high on this
  machine's CPU (905 against 198 GFLOP/s, 2 threads) and more on GPUs.
- `peak_rss_bytes`: peak resident memory of this process.
"""
from __future__ import annotations

import os
import platform
import resource
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

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


def reexec_with_malloc_env(python_args: Sequence[str]) -> None:
    """Replace this process by `python PYTHON_ARGS` with MALLOC_ENV set (glibc Linux only); the caller
    says what to run (the command line passes `-m cli ARGV`, `cli.main.relaunch_args`).

    Returns without doing anything when the variables are already set, when re-exec is disabled
    (REEXEC_MARKER set) or on platforms without glibc.
    """
    if malloc_env_active() or os.environ.get(REEXEC_MARKER) or platform.libc_ver()[0] != "glibc":
        return
    env = {**os.environ, **MALLOC_ENV, REEXEC_MARKER: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *python_args], env)


def compute_dtype(bf16: bool) -> torch.dtype:
    """The dtype a training step's matrix products run in: bfloat16 under autocast, else float32."""
    import torch

    return torch.bfloat16 if bf16 else torch.float32


#: Side of the square products `matmul_rate` times: 1024 keeps a CPU product near 10 ms (here); a GPU
#: needs far larger ones to reach its rate: a 1024^3 product is 2.1 GFLOP, microseconds at the bf16 rates
#: data-centre GPUs are specified for, as short as a kernel launch (not measured: no GPU was lent).
MATMUL_SIDE = {"cpu": 1024, "cuda": 8192}


def matmul_rate(device: torch.device, dtype: torch.dtype | None = None, *, n: int | None = None,
                repeats: int = 3, min_seconds: float = 0.25) -> float:
    """Best observed matmul FLOP/s of an n x n x n product in `dtype` (default float32) on `device`
    (2 n^3 FLOPs each; n from MATMUL_SIDE unless given), over at least `repeats` products and
    `min_seconds` of them.

    The best of a longer run is the steadier estimate of what the device can do: measured here (2 cores,
    2 threads), the first products of a process ran 10-15 % slow and single products now and then at
    60 %, so a best of three read anywhere from 109 to 181 GFLOP/s, while the best over 3 s was 184.
    """
    import torch

    n = n or MATMUL_SIDE.get(device.type, MATMUL_SIDE["cpu"])
    g = torch.Generator().manual_seed(0)  # never touch the global RNG a run depends on
    a = torch.randn(n, n, generator=g).to(device, dtype or torch.float32)
    b = torch.randn(n, n, generator=g).to(device, dtype or torch.float32)
    torch.mm(a, b)  # warm up (thread pool, cuBLAS handle)
    best = float("inf")
    done, start = 0, time.perf_counter()
    while done < repeats or time.perf_counter() - start < min_seconds:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
        done += 1
    return 2.0 * n**3 / best


_RATES: dict[tuple[str, int, str], float] = {}


def matmul_rate_cached(device: torch.device, dtype: torch.dtype | None = None) -> float:
    """`matmul_rate` measured once per process for each (device, torch thread count, dtype): a sweep
    worker training one trial after another reuses its first measurement."""
    import torch

    key = (str(device), torch.get_num_threads(), str(dtype or torch.float32))
    if key not in _RATES:
        _RATES[key] = matmul_rate(device, dtype)
    return _RATES[key]


def utilisation(flops_per_target: float, targets_per_s: float, rate: float) -> float:
    """Counted-FLOP utilisation of training: 3 x forward FLOPs/target x targets/s / matmul rate."""
    return 3.0 * flops_per_target * targets_per_s / rate


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
