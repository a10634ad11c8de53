"""`harness.speed.throughput.profile_steps`, `phase_times` and `recscale bench --breakdown`: the products' executed
FLOPs (counted by `torch.utils.flop_counter`) are checked against the profiler's own C++ count over the same training
steps, and the split against the profiler's total; the phases are the training step itself (the same weights as
whole steps), with the loader's wait on a real prepared dataset."""
from __future__ import annotations

import contextlib
import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import architectures
from cli.main import main as cli_main
from harness.config import TrainConfig
from harness.evaluate import open_dataset
from harness.speed.throughput import PHASES, PRODUCT_OPS, phase_times, profile_steps, training_batches
from harness.step import TrainStep
from protocols.schema import FeatureSpec, random_batch
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)

SPEC = FeatureSpec(vocab_sizes={"user_id": 50, "device_id": 20, "age": 5, "gender": 3, "province": 9,
                                "video_id": 300, "author_id": 80, "category_level_one": 7,
                                "category_level_two": 15, "upload_type": 4}, history_len=16)


@pytest.mark.parametrize("arch", ["whale", "wukong"])
def test_products_execute_the_flops_the_profiler_counts_over_the_same_steps(arch):
    torch.manual_seed(0)
    model = architectures.build(arch, SPEC, architectures.make_config(arch, {"dim": 16}))
    g = torch.Generator().manual_seed(0)
    batches = [random_batch(SPEC, 32, generator=g, min_len=SPEC.history_len) for _ in range(2)]
    step = TrainStep(model, TrainConfig(), torch.device("cpu"))
    step(batches[0])  # warm-up (optimizer state)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:  # an independent count
        step(batches[0])
        step(batches[1])
    expected = sum(e.flops for e in prof.key_averages() if e.key in PRODUCT_OPS) / 2
    assert expected > 0
    bd = profile_steps(step, batches, torch.device("cpu"), steps=2, top=5)
    assert bd.product_flops == pytest.approx(expected, rel=1e-12)
    assert bd.product_ms + bd.other_ms == pytest.approx(bd.total_ms)
    assert 0 < bd.product_share < 1 and bd.product_flops_per_s > 0
    others = [o.ms_per_step for o in bd.top_other]
    assert others == sorted(others, reverse=True) and len(others) == 5
    assert not {o.op for o in bd.top_other} & PRODUCT_OPS
    assert sum(others) <= bd.other_ms + 1e-9


def test_phases_are_the_training_step_and_time_the_loader(tiny_artifact):  # noqa: F811
    dataset = open_dataset(str(tiny_artifact))
    tc = TrainConfig(batch_size=32)
    steps = []
    for _ in range(2):
        torch.manual_seed(0)
        model = architectures.build("whale", dataset.spec, architectures.make_config("whale", {"dim": 8}))
        steps.append(TrainStep(model, tc, torch.device("cpu")))
    by_phase, whole = steps
    batches = training_batches(dataset, tc, seed=0)
    ms = phase_times(by_phase, batches, torch.device("cpu"), steps=3)
    batches.close()
    assert list(ms) == list(PHASES) and all(v >= 0 for v in ms.values())
    assert min(ms["forward"], ms["backward"], ms["optimizer"], ms["loader_wait"]) > 0
    with contextlib.closing(training_batches(dataset, tc, seed=0)) as again:  # the same batches, whole steps
        for _, batch in zip(range(3), again):
            whole(batch)
    for a, b in zip(by_phase.model.parameters(), whole.model.parameters()):
        assert torch.equal(a, b)


def test_bench_breakdown_prints_the_split_and_the_ceiling(capsys):
    args = ["bench", "--arch", "wukong", "--set", "dim=8", "--set", "train.num_threads=1", "--steps", "2",
            "--breakdown", "1"]
    assert cli_main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    bd = out["breakdown"]
    assert bd["steps"] == 1 and bd["time_kind"] == "cpu self time"
    assert list(out["phases_ms"]) == list(PHASES) and out["loader_measured"] is False
    # the ceiling is the utilisation at the rate the products alone would allow
    products_only_rate = out["batch_size"] / (bd["product_ms"] / 1e3)
    assert out["utilisation_if_only_products"] == pytest.approx(
        3 * out["flops_per_target"] * products_only_rate / out["matmul_flops_per_s"])
    assert cli_main(args) == 0
    text = capsys.readouterr().out
    assert "matrix products" in text and "utilisation if only the products took time" in text
    assert "forward" in text and "give --data to time the loader" in text
