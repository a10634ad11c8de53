"""Benchmark: targets per second assembled by the batch loader (training split, batch 256, L = 128,
ID masking on), i.e. fancy indexing into the memory-mapped artifact plus tensor conversion.

Uses the artifact named by RECSCALE_BENCH_ARTIFACT when set; otherwise prepares a hand-made log of
about 60k exposures (tests/tiny_logs.py) into a temporary folder. Run with `make bench` or
`pytest tests/bench/test_loader_bench.py -m bench --benchmark-enable -s`.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocols.artifact import PreparedDataset  # noqa: E402
from protocols.prepare import PrepareConfig, prepare_log  # noqa: E402
from tiny_logs import random_log  # noqa: E402

BATCH = 256


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> PreparedDataset:
    if os.environ.get("RECSCALE_BENCH_ARTIFACT"):
        return PreparedDataset.open(os.environ["RECSCALE_BENCH_ARTIFACT"])
    log = random_log(0, n_users=300, n_requests=15_000, span_ms=37 * 86_400_000, grid_ms=1000, max_exposures=8)
    cfg = PrepareConfig(source="synthetic", root="unused", n_train=40_000, n_valid=1000, n_test=1000,
                        history_len=128, out=str(tmp_path_factory.mktemp("loader")))
    return PreparedDataset.open(prepare_log(log, cfg))


@pytest.mark.bench
def test_loader_throughput(benchmark, dataset):
    n_batches = min(100, dataset.num_batches("train", BATCH))

    def epoch_slice():
        it = dataset.batches("train", BATCH, seed=0, id_mask_prob=0.05)
        return sum(len(next(it)["label"]) for _ in range(n_batches))

    t0 = time.perf_counter()
    targets = benchmark.pedantic(epoch_slice, rounds=3, iterations=1)
    rate = targets / benchmark.stats.stats.min if benchmark.stats else targets / (time.perf_counter() - t0)
    benchmark.extra_info["targets_per_s"] = rate
    print(f"\nloader: {rate:,.0f} targets/s (batch {BATCH}, L={dataset.spec.history_len}, masking on)")
    assert rate > 5_000  # training consumes ~1-3k targets/s on this machine
