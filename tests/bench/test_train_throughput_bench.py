"""WHALE training throughput and counted-FLOP utilisation at the seed configuration
(d = 64, 2 layers, L = 128, batch 256), with and without the glibc malloc settings.

Run with `make bench` (or `pytest tests/bench -m bench --benchmark-enable`). Each measurement runs in
a fresh process, because glibc reads the malloc variables only at start-up; the numbers are
attached to the benchmark record (`extra_info`) and printed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.perf import MALLOC_ENV, REEXEC_MARKER


def measure_in_subprocess(malloc: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
    env[REEXEC_MARKER] = "1"
    if malloc:
        env.update(MALLOC_ENV)
    cmd = [sys.executable, "-c", "import json; from harness.speed.throughput import measure; "
           "print(json.dumps(measure('whale', steps=20)))"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.bench
@pytest.mark.parametrize("malloc", [True, False], ids=["malloc_env", "default_malloc"])
def test_whale_train_throughput(benchmark, malloc):
    result = benchmark.pedantic(measure_in_subprocess, args=(malloc,), rounds=1, iterations=1)
    benchmark.extra_info.update(result)
    print(json.dumps(result))
    assert result["targets_per_s"] > 0 and result["utilisation"] > 0
