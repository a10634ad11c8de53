"""Which CPU kernels this process computes with, and an environment that makes a child process use others.

Two CPU kinds differ, for the numbers recscale computes, in three places: OpenBLAS's kernel (chosen per CPU;
OPENBLAS_CORETYPE forces one), numpy's SIMD loops (dispatched per CPU; NPY_DISABLE_CPU_FEATURES limits them)
and ATen's kernels (ATEN_CPU_CAPABILITY). Forcing all three in a child process reproduces, on one machine,
what moving a computation to another CPU kind does to its floats."""
from __future__ import annotations

import importlib

from threadpoolctl import threadpool_info

#: numpy's CPU dispatch tables (the extensions it was built to dispatch to, and which this CPU has).
_UMATH = importlib.import_module("numpy._core._multiarray_umath")


def kernels() -> str:
    """This process's OpenBLAS kernel and the numpy SIMD extensions it dispatches to beyond its baseline."""
    blas = sorted({str(lib.get("architecture")) for lib in threadpool_info() if lib["user_api"] == "blas"})
    return f"blas={blas} simd={_dispatched()}"


def other_kernels() -> dict[str, str]:
    """Environment variables for a child process: OpenBLAS forced to its AVX kernel (Sandybridge; Haswell
    where this process already runs Sandybridge), numpy's SIMD limited to its baseline, ATen's scalar kernels."""
    coretype = "Haswell" if "Sandybridge" in kernels() else "Sandybridge"
    return {"OPENBLAS_CORETYPE": coretype, "ATEN_CPU_CAPABILITY": "default",
            "NPY_DISABLE_CPU_FEATURES": " ".join(_dispatched())}


def _dispatched() -> list[str]:
    return [k for k in _UMATH.__cpu_dispatch__ if _UMATH.__cpu_features__.get(k)]
