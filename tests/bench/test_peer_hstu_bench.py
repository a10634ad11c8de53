"""Our HSTU training step side by side with Meta's generative-recommenders (tests/bench/peer_bench.py).

One row per peer (its research HSTU layer, its production STU layer), torch thread count (1, 2) and load
(quiet, one core kept busy): targets/s of ours and of the peer (median and best over interleaved rounds), the
paired ratio peer step time / ours with its 95% bootstrap interval (above 1: ours is faster), the matrix-FLOP
ratio the comparison was checked at (within the peer's FLOP_TOLERANCE, or the row fails), the share of its
nominal matrix FLOPs ours runs (below 1 with 2 threads: key spans), and the memory of each at the row's
thread count, measured alone in its own process: the process's peak resident memory (ru_maxrss) and the part
its training steps added (that peak minus the resident memory just before the first step). Shapes: B = 256
sequences of 257 tokens, D = 64, 2 layers of 4 heads x 16, fp32; forward, backward, one AdamW step. Every
measurement runs in a fresh process with the malloc settings training uses (harness/perf.MALLOC_ENV).

Needs a local checkout of github.com/meta-recsys/generative-recommenders named by RECSCALE_GR_CHECKOUT
(tested at the commit in tests/bench/peer_hstu.TESTED_COMMIT) and `pip install -e ".[peer]"`; skipped otherwise.
On a quiet machine with about 6 GB free (the peers peak near 5.4 GB; 15 to 30 minutes on 2 cores):

    RECSCALE_GR_CHECKOUT=/path/to/generative-recommenders make bench ARGS="-k peer_hstu"

RECSCALE_PEER_BENCH_ARGS adds options to every measurement, e.g. "--batch 8 --rounds 3" for a quick check
of the pipeline (the table then records batch 8; keep such a table out of the docs).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from harness.perf import MALLOC_ENV
from tests.bench.peer_hstu import FLOP_TOLERANCE, PeerUnavailable, import_peer

REPO = Path(__file__).resolve().parents[2]
#: Keys of a time measurement that go into the table (the rest: shapes, which the docstring states).
TABLE_KEYS = ("batch", "ours_targets_per_s_median", "ours_targets_per_s_best", "peer_targets_per_s_median",
              "peer_targets_per_s_best", "ratio_peer_time_over_ours", "ratio_low", "ratio_high", "flop_ratio",
              "ours_run_flop_fraction", "peer_commit")


def _run(*args: str, threads: int = 0) -> dict:
    env = {**os.environ, **MALLOC_ENV}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    extra = shlex.split(os.environ.get("RECSCALE_PEER_BENCH_ARGS", ""))
    cmd = [sys.executable, "-m", "tests.bench.peer_bench", *args, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=1800)
    if proc.returncode != 0:
        pytest.fail(f"{shlex.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def peer_available() -> None:
    try:
        import_peer()
    except PeerUnavailable as e:
        pytest.skip(f"generative-recommenders not available: {e}")


@pytest.fixture(scope="module")
def memory_mb(peer_available) -> dict[tuple[str, int], dict]:
    """Peak resident memory of each implementation's process and what its training steps added to the
    resident memory before them, each alone in a fresh process (tests/bench/peer_bench.py `memory`), at 1 and 2
    threads (ours keeps more with 2: larger blocks)."""
    return {(impl, threads): _run("memory", "--impl", impl, "--threads", str(threads), threads=threads)
            for impl in ("ours", "research", "stu") for threads in (1, 2)}


@pytest.mark.bench
@pytest.mark.parametrize("load", ["quiet", "busy"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("peer", ["research", "stu"])
def test_peer_hstu(benchmark, memory_mb, peer, threads, load):
    args = ("time", "--peer", peer, "--threads", str(threads), "--load", load)
    result = benchmark.pedantic(_run, args=args, kwargs={"threads": threads}, rounds=1, iterations=1)
    print(json.dumps(result))
    assert abs(result["flop_ratio"] - 1) <= FLOP_TOLERANCE[peer]  # the measurement exits 3 past it too
    benchmark.extra_info.update({k: result[k] for k in TABLE_KEYS})
    for side, impl in (("ours", "ours"), ("peer", peer)):
        benchmark.extra_info[f"{side}_peak_rss_mb"] = memory_mb[impl, threads]["peak_rss_mb"]
        benchmark.extra_info[f"{side}_step_peak_mb"] = memory_mb[impl, threads]["step_peak_mb"]
