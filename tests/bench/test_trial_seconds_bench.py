"""Trial-seconds per run of the demo sweep, before (RECSCALE_BENCH_BASE, a git revision) and after (this tree),
paired on the same machine at the same time: the benchmark the cost of a study's seeds is read from.

Each round runs the demo's 15 configurations (one seed; tests/bench/trial_seconds.py: whole `train_run`s, two
trials at once at one thread each, as the demo's sweep runs them) once for each tree, the order swapped every
round, so both see the same drift of a shared machine. One row per configuration, then one for all of them:
the median over rounds of each tree's seconds per run (set-up, training and evaluation of `train_run`; Ray's
time between trials left out) and the median over rounds of the paired ratio after / before, with the load
average. The demo's prepared dataset comes from RECSCALE_BENCH_ARTIFACT, else from artifacts/prepared/ (written
by `make demo`); skipped without it or without RECSCALE_BENCH_BASE. Table: docs/benchmarks/trial_seconds.md.

    RECSCALE_BENCH_BASE=<git revision> make bench ARGS="-k trial_seconds"   # ~2 min a round on a quiet machine

RECSCALE_TRIAL_SECONDS_ROUNDS sets the rounds (default 3).
"""
from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from tests.bench import trial_seconds as TS
from tests.bench.test_concurrent_trials_bench import base_tree  # noqa: F401  (pytest fixture)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def measured(base_tree):  # noqa: F811
    tree, commit = base_tree
    data = TS.demo_data()
    if not Path(data).is_dir():
        pytest.skip(f"{data}: the demo's prepared dataset is missing (run `make demo` or set RECSCALE_BENCH_ARTIFACT)")
    rounds = int(os.environ.get("RECSCALE_TRIAL_SECONDS_ROUNDS", "3"))
    before, after, loads = [], [], []
    for r in range(rounds):
        for which in (("before", "after") if r % 2 == 0 else ("after", "before")):
            records = TS.run(str(tree) if which == "before" else str(REPO), data)
            (before if which == "before" else after).append(records)
        loads.append(os.getloadavg()[0])
    return {"base_commit": commit, "rounds": rounds, "before": before, "after": after, "loads": loads}


def _figures(rounds: list[list[dict]], configs: list[int]) -> list[float]:
    """Seconds per run of `configs` in each round."""
    return [statistics.fmean(r["wall_s"] for r in records if r["config"] in configs) for records in rounds]


@pytest.mark.bench
@pytest.mark.parametrize("config", [*range(len(TS.DEMO_TRIALS)), "all"])
def test_trial_seconds(benchmark, measured, config):
    configs = list(range(len(TS.DEMO_TRIALS))) if config == "all" else [config]
    before, after = _figures(measured["before"], configs), _figures(measured["after"], configs)
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)  # the figures are the rounds' (extra columns)
    arch, settings = TS.DEMO_TRIALS[config] if config != "all" else ("all 15", {"dim": "4-16"})
    benchmark.extra_info.update({
        "arch": arch, "dim": settings["dim"], "base_commit": measured["base_commit"],
        "paired_rounds": measured["rounds"],
        "before_s_per_run": statistics.median(before), "after_s_per_run": statistics.median(after),
        "after_over_before": statistics.median(a / b for a, b in zip(after, before)),
        "loadavg_1min": f"{min(measured['loads']):.1f}-{max(measured['loads']):.1f}"})
    assert min(before) > 0 and min(after) > 0
