"""Benchmarks of `recscale prepare` (exposure protocol, L = 128, 60 s delay), each a cold run of the real CLI
in a child process into a fresh folder, so wall time and peak RSS are those of one prepare, source loading and
Python start-up included; the peak RSS is the child's own (`os.wait4`), not the largest of every child the
test process ever ran.

- `test_prepare_small_log`: the `small` synthetic log (~1M exposures; generated into a temporary folder first,
  not timed), with the artifact's size on disk and, from `recscale compare-delay`, the share of test targets
  whose history members differ between 0 s and 60 s delay (and that command's wall time).
- `test_prepare_full_log`: the full-size synthetic log (38.2M exposures; 3.0M / 0.1M / 0.2M targets). Goal:
  <= 10 min wall and <= 12 GiB peak RSS on the 2-core reference machine. The log is the folder named by the
  environment variable RECSCALE_FULL_LOG (written by `recscale synth --scale full --out DIR`, about 30 GB);
  the benchmark skips when the variable is unset or the folder holds no log.

Run with `make bench ARGS="-k prepare"` or `pytest tests/bench/test_prepare_bench.py -m bench --benchmark-enable -s`.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from protocols.synthetic import generate

REPO = Path(__file__).resolve().parents[2]
FULL_LOG_ENV = "RECSCALE_FULL_LOG"
GOAL_WALL_S = 600
GOAL_RSS_GIB = 12


def run_cli(args: list[str]) -> tuple[dict, float, float]:
    """`python -m cli ARGS --no-progress --json` in a child -> (its JSON, wall seconds, the child's peak RSS
    in GiB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "cli", *args, "--no-progress", "--json"],
                                stdout=out, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        assert proc.returncode == 0, f"recscale {args[0]} exited {proc.returncode}:\n{err.read()[-2000:]}"
        return json.loads(out.read()), wall, usage.ru_maxrss * 1024 / 2**30  # Linux: ru_maxrss in KiB


def _prepare_args(root: Path, out: Path) -> list[str]:
    return ["prepare", "--source", "synthetic", "--root", str(root), "--out", str(out), "--history-len", "128",
            "--delay-s", "60"]


def _disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


@pytest.mark.bench
def test_prepare_small_log(benchmark, tmp_path):
    log = tmp_path / "synth-small"
    generate("small", log, seed=0, author50=False)
    result: dict = {}

    def run_once():
        result["summary"], result["wall_s"], result["peak_gib"] = run_cli(_prepare_args(log, tmp_path / "art"))

    benchmark.pedantic(run_once, rounds=1, iterations=1)
    delay, delay_wall, _ = run_cli(["compare-delay", "--source", "synthetic", "--root", str(log),
                                    "--delays", "0", "60", "--split", "test"])
    summary = result["summary"]
    benchmark.extra_info.update({
        "wall_s": result["wall_s"], "peak_rss_gib": result["peak_gib"], "num_targets": summary["num_targets"],
        "disk_mb": _disk_mb(Path(summary["path"])), "prepare_step_s": summary.get("prepare_wall_s"),
        "delay_0_vs_60_share_differing": delay["share_differing"], "delay_test_targets": delay["targets"],
        "compare_delay_wall_s": delay_wall})
    assert result["wall_s"] > 0 and 0 < delay["share_differing"] < 1


@pytest.mark.bench
def test_prepare_full_log(benchmark, tmp_path):
    if not os.environ.get(FULL_LOG_ENV):
        pytest.skip(f"set {FULL_LOG_ENV} to the folder of a full synthetic log (recscale synth --scale full)")
    full_log = Path(os.environ[FULL_LOG_ENV])
    if not (full_log / "realshow").is_dir():
        pytest.skip(f"no synthetic log in {full_log} ({FULL_LOG_ENV})")
    out = Path(os.environ.get("RECSCALE_BENCH_OUT", tmp_path)) / f"prepare-bench-{os.getpid()}"
    result: dict = {}

    def run_once():
        result["summary"], result["wall_s"], result["peak_gib"] = run_cli(_prepare_args(full_log, out))

    benchmark.pedantic(run_once, rounds=1, iterations=1)
    summary = result["summary"]
    benchmark.extra_info.update({"wall_s": result["wall_s"], "peak_rss_gib": result["peak_gib"],
                                 "num_targets": summary["num_targets"], "membership": summary["membership"],
                                 "prepare_step_s": summary.get("prepare_wall_s")})
    if os.environ.get("RECSCALE_BENCH_KEEP") != "1":
        shutil.rmtree(out, ignore_errors=True)
    assert result["wall_s"] <= GOAL_WALL_S * 1.5 and result["peak_gib"] <= GOAL_RSS_GIB * 1.25  # regression guard
