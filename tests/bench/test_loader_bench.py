"""Benchmarks of the batch loader (training split, batch 256, L = 128, ID masking on).

- throughput: targets/s assembled (np.take gathers, masking, tensor conversion), with and without
  prefetch threads and narrow integer types, each also as a ratio to this machine's memory-copy rate of
  the same bytes per target (`harness.speed.throughput.copy_rate`), which makes the figure comparable across
  machines and loads;
- hidden loading: a consumer that sleeps a fixed time per batch (three times the loader's own time per
  batch, at least 10 ms)
  takes, with prefetch, within 10% of its own time per epoch slice; without prefetch it pays both.

Uses the artifact named by RECSCALE_BENCH_ARTIFACT when set (it must have L = 128 to read the figures as
such); otherwise prepares a hand-made log of about 60k exposures (tests/tiny_logs.py) at L = 128 into a
temporary folder. Run with `make bench` or
`pytest tests/bench/test_loader_bench.py -m bench --benchmark-enable -s`.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loader_reference import reference_batches  # noqa: E402
from tiny_logs import random_log  # noqa: E402

from harness.speed.throughput import copy_rate, loader_rate  # noqa: E402
from protocols.artifact import PreparedDataset  # noqa: E402
from protocols.prepare import PrepareConfig, prepare_log  # noqa: E402

BATCH = 256
N_BATCHES = 100
MODES = {
    "reference": None,  # the loader before np.take, prefetch and narrow types (tests/loader_reference.py)
    "plain": {},
    "prefetch": {"prefetch": 2},
    "prefetch_2workers": {"prefetch": 4, "workers": 2},
    "narrow_prefetch": {"prefetch": 2, "narrow": True},
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> PreparedDataset:
    if os.environ.get("RECSCALE_BENCH_ARTIFACT"):
        return PreparedDataset.open(os.environ["RECSCALE_BENCH_ARTIFACT"])
    log = random_log(0, n_users=300, n_requests=15_000, span_ms=37 * 86_400_000, grid_ms=1000, max_exposures=8)
    cfg = PrepareConfig.of(source="synthetic", root="unused", n_train=40_000, n_valid=1000, n_test=1000,
                        history_len=128, out=str(tmp_path_factory.mktemp("loader")))
    return PreparedDataset.open(prepare_log(log, cfg))


@pytest.mark.bench
@pytest.mark.parametrize("mode", list(MODES))
def test_loader_throughput(benchmark, dataset, mode):
    options = MODES[mode]
    if options is None:
        options = {"via": reference_batches}
    result = benchmark.pedantic(loader_rate, args=(dataset, BATCH, N_BATCHES), kwargs={"repeats": 3, **options},
                                rounds=1, iterations=1)
    copy = copy_rate(result["bytes_per_target"] * BATCH) / result["bytes_per_target"]  # targets/s of memcpy
    load = os.getloadavg()[0]
    benchmark.extra_info.update({**result, "copy_targets_per_s": copy, "ratio_to_copy": result["targets_per_s"] / copy,
                                 "loadavg_1min": load})
    print(f"\nloader {mode}: {result['targets_per_s']:,.0f} targets/s, {result['bytes_per_target']:,.0f} B/target, "
          f"{result['targets_per_s'] / copy:.3f} x the memory-copy rate of the same bytes ({copy:,.0f} targets/s); "
          f"L={dataset.spec.history_len}, load average {load:.2f}")
    assert result["targets_per_s"] > 5_000


def hidden_loading(ds: Any, batch_size: int, n_batches: int, consumer_s: float, **options: Any) -> dict[str, float]:
    """Wall time of `n_batches` training batches through a consumer sleeping `consumer_s` per batch,
    against the consumer's own time (n_batches x consumer_s)."""
    n_batches = max(1, min(n_batches, ds.num_batches("train", batch_size)))
    it = ds.batches("train", batch_size, seed=0, **options)
    t0 = time.perf_counter()
    for _ in range(n_batches):
        next(it)
        time.sleep(consumer_s)
    wall = time.perf_counter() - t0
    it.close()
    own = n_batches * consumer_s
    return {"wall_s": wall, "consumer_s": own, "ratio": wall / own}


@pytest.mark.bench
def test_loading_hides_behind_the_consumer(benchmark, dataset):
    own = loader_rate(dataset, BATCH, 40, repeats=2)
    consumer_s = max(0.01, 3.0 * BATCH / own["targets_per_s"])  # a third of the consumer's time would load
    hidden = benchmark.pedantic(hidden_loading, args=(dataset, BATCH, 60, consumer_s), kwargs={"prefetch": 4},
                                rounds=1, iterations=1)
    serial = hidden_loading(dataset, BATCH, 60, consumer_s)
    benchmark.extra_info.update({"consumer_s_per_batch": consumer_s, "prefetch_ratio": hidden["ratio"],
                                 "serial_ratio": serial["ratio"], "loadavg_1min": os.getloadavg()[0]})
    print(f"\nconsumer {consumer_s * 1e3:.1f} ms/batch: epoch slice / consumer time = {hidden['ratio']:.3f} with "
          f"prefetch, {serial['ratio']:.3f} without (load average {os.getloadavg()[0]:.2f})")
    assert hidden["ratio"] < 1.10
