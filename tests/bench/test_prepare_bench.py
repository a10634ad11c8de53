"""Benchmark: `recscale prepare` on the full-size synthetic log (38.2M exposures; 3.0M / 0.1M / 0.2M
targets; L = 128; exposure protocol, 60 s delay). Goal: <= 10 min wall and <= 12 GiB peak RSS on the
2-core reference machine.

The log is the folder named by the environment variable RECSCALE_FULL_LOG (written by `recscale synth
--scale full --out DIR`); the benchmark skips when the variable is unset or the folder holds no log.
`prepare` runs in a child process (the real CLI), into a fresh output folder, so the wall time and the
child's peak RSS are those of one cold prepare, source loading included. Run with `make bench` or
`pytest tests/bench/test_prepare_bench.py -m bench --benchmark-enable -s`.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

FULL_LOG_ENV = "RECSCALE_FULL_LOG"
GOAL_WALL_S = 600
GOAL_RSS_GIB = 12


@pytest.mark.bench
def test_prepare_full_log(benchmark, tmp_path):
    if not os.environ.get(FULL_LOG_ENV):
        pytest.skip(f"set {FULL_LOG_ENV} to the folder of a full synthetic log (recscale synth --scale full)")
    full_log = Path(os.environ[FULL_LOG_ENV])
    if not (full_log / "realshow").is_dir():
        pytest.skip(f"no synthetic log in {full_log} ({FULL_LOG_ENV})")
    out = Path(os.environ.get("RECSCALE_BENCH_OUT", tmp_path)) / f"prepare-bench-{os.getpid()}"
    cmd = [sys.executable, "-m", "cli", "prepare", "--source", "synthetic", "--root", str(full_log),
           "--out", str(out), "--history-len", "128", "--delay-s", "60", "--no-progress", "--json"]
    result = {}

    def run_once():
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
        result["wall_s"] = time.perf_counter() - t0
        assert proc.returncode == 0, proc.stderr[-2000:]
        result["summary"] = json.loads(proc.stdout)

    benchmark.pedantic(run_once, rounds=1, iterations=1)
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 2**30  # Linux: KiB
    summary = result["summary"]
    benchmark.extra_info.update({"wall_s": result["wall_s"], "peak_rss_gib": peak_gib,
                                 "num_targets": summary["num_targets"], "membership": summary["membership"]})
    print(f"\nprepare full: {result['wall_s']:.1f} s wall, {peak_gib:.2f} GiB peak RSS, "
          f"targets {summary['num_targets']}, artifact {summary['path']}")
    if os.environ.get("RECSCALE_BENCH_KEEP") != "1":
        subprocess.run(["rm", "-rf", str(out)], check=False)
    assert result["wall_s"] <= GOAL_WALL_S * 1.5 and peak_gib <= GOAL_RSS_GIB * 1.25  # regression guard
