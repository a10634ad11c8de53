"""The counted cost of a model (`count_cost`: forward matrix FLOPs per target and parameters, on one batch), the
matrix-multiply rate of a device in the dtype a step's products run in (`matmul_rate`, `matmul_rate_cached`)
and the counted-FLOP utilisation against it (`utilisation`): docs/training.md ("Metrics", "Speed"). A bf16 step
measured against the fp32 rate would read 4.6x too high on this machine's CPU (905 against 198 GFLOP/s).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported lazily: `recscale train` re-executes itself before loading it
    import torch


def count_cost(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    """Forward matrix FLOPs per target of `model` on `batch` (counted in eval mode without gradients; the
    model's mode is restored) and its embedding / non-embedding parameters."""
    import torch

    from architectures.flops import count_flops, count_params

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            flops = float(count_flops(model, batch).per_target)
    finally:
        model.train(was_training)
    params = count_params(model)
    return {"flops_per_target": flops, "params_embedding": int(params["embedding"]),
            "params_non_embedding": int(params["non_embedding"])}


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
    """Best observed matmul FLOP/s of an n x n x n product in `dtype` (default float32) on `device` (2 n^3 FLOPs each; n
    from MATMUL_SIDE unless given), over at least `repeats` products and `min_seconds` of them.

    The best of a longer run is the steadier estimate of what the device can do: measured here (2 cores, 2 threads), the
    first products of a process ran 10-15 % slow and single products now and then at 60 %, so a best of three read
    anywhere from 109 to 181 GFLOP/s, while the best over 3 s was 184."""
    import torch

    n = n or MATMUL_SIDE.get(device.type, MATMUL_SIDE["cpu"])
    g = torch.Generator().manual_seed(0)  # never touch the global RNG a run depends on
    a = torch.randn(n, n, generator=g).to(device, dtype or torch.float32)
    b = torch.randn(n, n, generator=g).to(device, dtype or torch.float32)
    torch.mm(a, b)  # warm up (thread pool, cuBLAS handle)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    best = float("inf")
    done, start = 0, time.perf_counter()
    while done < repeats or time.perf_counter() - start < min_seconds:
        sync()
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync()
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
