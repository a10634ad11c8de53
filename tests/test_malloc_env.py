"""The glibc malloc settings (`harness.perf.MALLOC_ENV`) do what they are set for, where it matters.

A Ray Tune trial trains in a worker thread, not the main thread. In a fresh process, a thread
allocates, fills and frees a 96 MiB buffer, and the process's resident memory is read before and after.
With the settings the freed memory stays with the allocator (the next step's activations reuse it
instead of faulting in fresh pages from the kernel); with glibc's defaults, and also with only the
mmap and trim settings but a thread arena of its own, the buffer is unmapped on free.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from harness.perf import MALLOC_ENV

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the settings are glibc's")

MIB = 1 << 20

_PROBE = r"""
import json, os, threading
import numpy as np

def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def probe(out):
    before = resident()
    np.ones(24 << 20, dtype=np.float32)  # 96 MiB written, then freed
    out.append(resident() - before)

out = []
t = threading.Thread(target=probe, args=(out,))
t.start(); t.join()
print(json.dumps(out[0]))
"""


def _kept_after_free(env_vars: dict[str, str]) -> int:
    """Bytes of resident memory a worker thread's freed 96 MiB buffer leaves behind."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(env_vars)
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_worker_thread_keeps_freed_memory_only_under_the_full_settings():
    assert _kept_after_free(MALLOC_ENV) > 90 * MIB
    assert _kept_after_free({}) < 8 * MIB  # glibc default: unmapped on free
    without_arena = {k: v for k, v in MALLOC_ENV.items() if k != "MALLOC_ARENA_MAX"}
    assert _kept_after_free(without_arena) < 8 * MIB  # the thread's own arena maps chunks this large
