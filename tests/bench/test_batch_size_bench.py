"""What a larger batch buys the demo's trials, and what it costs them: the demo's 15 configurations (one seed,
tests/bench/trial_seconds.py: whole `train_run`s, two at once at one thread each, as the demo's sweep runs them)
at batch 256 (the recipe), 512 and 1024, the learning rate scaled by the square root of the batch ratio, and at
1024 also linearly. One row per variant: seconds per run, its ratio to batch 256 in the same round, and the mean
test AUC over the 15 configurations with its paired change from batch 256 (one seed: a cost/quality reading, not
a test). Table: docs/benchmarks/batch_size.md; docs/training.md says what the recipe keeps and why.

    make bench ARGS="-k batch_size"   # about 4 min on a quiet 2-core machine
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from tests.bench import trial_seconds as TS

REPO = Path(__file__).resolve().parents[2]
BASE_LR = 3.0e-3
VARIANTS = {"256": (256, BASE_LR), "512-sqrt": (512, BASE_LR * 2 ** 0.5), "1024-sqrt": (1024, BASE_LR * 2),
            "1024-linear": (1024, BASE_LR * 4)}


@pytest.fixture(scope="module")
def measured():
    data = TS.demo_data()
    if not Path(data).is_dir():
        pytest.skip(f"{data}: the demo's prepared dataset is missing (run `make demo` or set RECSCALE_BENCH_ARTIFACT)")
    out = {}
    for name, (batch, lr) in VARIANTS.items():
        out[name] = TS.run(str(REPO), data, overrides=[f"batch_size={batch}", f"lr={lr!r}"])
    return out, os.getloadavg()[0]


@pytest.mark.bench
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_batch_size(benchmark, measured, variant):
    records, load = measured
    base, mine = records["256"], records[variant]
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the figures are the runs' (extra columns)
    auc_change = [m["test_auc"] - b["test_auc"] for m, b in zip(mine, base)]  # paired by configuration
    batch, lr = VARIANTS[variant]
    benchmark.extra_info.update({
        "batch_size": batch, "lr": lr, "s_per_run": statistics.fmean(r["wall_s"] for r in mine),
        "train_s_per_run": statistics.fmean(r["train_s"] for r in mine),
        "over_batch_256": statistics.fmean(r["wall_s"] for r in mine) / statistics.fmean(r["wall_s"] for r in base),
        "mean_test_auc": statistics.fmean(r["test_auc"] for r in mine),
        "auc_change_mean": statistics.fmean(auc_change), "auc_change_worst": min(auc_change),
        "loadavg_1min": load})
    assert all(r["wall_s"] > 0 for r in mine)
