"""Process settings and accounting of a training process: the glibc malloc settings it starts with
(`MALLOC_ENV`, why and how: docs/training.md, "Speed") and its peak memory (the matmul rate and utilisation are
`harness.speed.matmul`).
"""
from __future__ import annotations

import os
import platform
import resource
import sys
from collections.abc import Sequence

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
    """Replace this process by `python PYTHON_ARGS` with MALLOC_ENV set (the command line passes `-m cli ARGV`,
    `cli.main.reexec_under_malloc`); returns at once when the variables are already set, when re-exec is disabled
    (REEXEC_MARKER set) or without glibc."""
    if malloc_env_active() or os.environ.get(REEXEC_MARKER) or platform.libc_ver()[0] != "glibc":
        return
    env = {**os.environ, **MALLOC_ENV, REEXEC_MARKER: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *python_args], env)


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
