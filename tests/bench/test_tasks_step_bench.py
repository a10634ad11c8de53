"""A two-task training step against the one-task step (docs/tasks.md; issue 41's target: at most 1.15x).

WHALE at the seed configuration (dim 64, 2 layers, history 128, B = 256), each step `harness.step.TrainStep`
(forward, the loss, backward, clipping, AdamW) on a random schema batch with full histories, the two-task step
with labels [B, 2] and the weighted loss. The steps alternate in one process (one, two, one, two, ...), so a
machine whose speed drifts (a shared one) slows both alike: `ratio` is the median of the per-pair ratios, with
their min and max. Run with `make bench ARGS=tests/bench/test_tasks_step_bench.py`.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import architectures  # noqa: E402
from harness.config import TaskConfig, TrainConfig  # noqa: E402
from harness.evaluate import move_batch  # noqa: E402
from harness.step import TrainStep, place  # noqa: E402
from protocols.schema import default_test_spec, random_batch  # noqa: E402

SEED = {"dim": 64, "num_layers": 2, "history_len": 128}
BATCH_SIZE, PAIRS = 256, 7
TWO_TASKS = [TaskConfig("effective_view"), TaskConfig("long_view")]


def make_step(tasks: list[TaskConfig]) -> Callable[[], float]:
    """A timed-call closure: one training step of WHALE (seed configuration) with `tasks` ([]: one task)."""
    tc = TrainConfig(tasks=tasks)
    device = place(tc)
    spec = dataclasses.replace(default_test_spec(SEED["history_len"]), num_tasks=max(len(tasks), 1))
    torch.manual_seed(0)
    model = architectures.build("whale", spec, SEED, attention=tc.attention).to(device)
    batch = random_batch(spec, BATCH_SIZE, min_len=SEED["history_len"])
    if tasks:
        batch["label"] = torch.stack([batch["label"], 1 - batch["label"]], dim=1)  # [B, 2]
    batch = move_batch(batch, device)
    step = TrainStep(model, tc, device)

    def timed() -> float:
        t = time.perf_counter()
        float(step(batch))  # reading the loss waits for the device
        return time.perf_counter() - t

    return timed


@pytest.mark.bench
def test_two_task_step_against_the_one_task_step(benchmark):
    one, two = make_step([]), make_step(TWO_TASKS)
    for _ in range(2):  # warm-up
        one(), two()
    pairs = [(one(), two()) for _ in range(PAIRS)]
    ratios = [b / a for a, b in pairs]
    benchmark.pedantic(two, rounds=3, iterations=1)
    benchmark.extra_info.update(
        one_task_s=statistics.median(a for a, _ in pairs), two_task_s=statistics.median(b for _, b in pairs),
        ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios), pairs=PAIRS,
        device=str(place(TrainConfig())), threads=torch.get_num_threads(), load_average=os.getloadavg()[0])
