"""`recscale bench` (loader and training-step figures) and the wall-time estimate of `recscale sweep
--dry-run` (training steps timed now): checked against a real training run of the same configuration,
the formulas computed here from the timed steps, and a brute-force schedule."""
from __future__ import annotations

import itertools
import json
import re

import pytest

from architectures.flops import count_flops
from cli.main import main as cli_main
from harness.config import RunConfig, TrainConfig
from harness.sweep import dry_run
from harness.sweep.dry_run import estimate_sweep
from harness.sweep.plan import plan_sweep
from harness.sweep.schema import parse_sweep
from harness.train import train_run
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)

SWEEP = """
name: est
data: {source: synthetic, scale: tiny, history_len: 8, n_train: 1000, n_valid: 200, n_test: 100}
model: {dim: 8}
grid:
  arch: [wukong, whale]
  seed: [0, 1, 2]
resources: {cpu: 1, gpu: 0}
max_concurrent: 2
"""


def test_bench_reports_loader_and_training(tiny_artifact, capsys):  # noqa: F811
    rc = cli_main(["bench", "--data", str(tiny_artifact), "--arch", "wukong", "--set", "dim=8",
                   "--set", "train.num_threads=1", "--steps", "2", "--batches", "3", "--json"])
    assert rc == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert captured.err.splitlines() == [  # a line before each measurement: never silent for seconds
        "recscale bench: timing the loader: 3 batches of 256 targets, and this machine's copy rate ...",
        "recscale bench: timing wukong: 3 warm-up and 2 training steps, and this machine's matmul rate ..."]
    assert out["loader_targets_per_s"] > 0 and out["train_targets_per_s"] > 0 and out["device"] == "cpu"
    assert 0 < out["loader_copy_ratio"] and out["peak_memory_bytes"] > 0
    # utilisation is 3 x forward FLOPs/target x targets/s / matmul rate, with the FLOPs fvcore counts
    assert out["utilisation"] == pytest.approx(3 * out["flops_per_target"] * out["train_targets_per_s"]
                                               / out["matmul_flops_per_s"])
    import architectures
    from protocols.artifact import PreparedDataset
    from protocols.schema import random_batch

    spec = PreparedDataset.open(tiny_artifact).spec
    model = architectures.build("wukong", spec, architectures.make_config("wukong", {"dim": 8})).eval()
    assert out["flops_per_target"] == count_flops(model, random_batch(spec, 4, min_len=spec.history_len)).per_target


def test_a_bf16_bench_is_measured_against_the_bf16_matmul_rate(capsys):
    rc = cli_main(["bench", "--arch", "wukong", "--set", "dim=8", "--set", "train.num_threads=1",
                   "--set", "train.bf16=true", "--steps", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bf16"] is True and out["matmul_dtype"] == "bfloat16"
    assert out["utilisation"] == pytest.approx(3 * out["flops_per_target"] * out["train_targets_per_s"]
                                               / out["matmul_flops_per_s"])


def test_matmul_rate_times_products_for_at_least_the_asked_seconds():
    import time

    import torch

    from harness.speed import matmul

    t0 = time.perf_counter()
    rate = matmul.matmul_rate(torch.device("cpu"), n=128, min_seconds=0.3)
    assert time.perf_counter() - t0 >= 0.3
    assert 0 < rate < float("inf")


def test_bench_needs_something_to_measure(capsys):
    assert cli_main(["bench"]) == 2
    assert "--data" in capsys.readouterr().err


def test_bench_takes_the_set_spellings_of_train(capsys):
    """`bench --set` parses like `train --set`: a bare key is a model field, training keys need `train.`,
    and a field the architecture lacks is refused naming it (exit 2, before anything is measured)."""
    assert cli_main(["bench", "--arch", "wukong", "--set", "num_threads=1"]) == 2
    assert "for training write train.num_threads" in capsys.readouterr().err
    assert cli_main(["bench", "--arch", "wukong", "--set", "model.num_heads=2"]) == 2
    err = capsys.readouterr().err
    assert "num_heads" in err and "wukong" in err


def _makespan(durations: list[float], slots: int) -> float:
    """Brute force: every trial starts, in order, on the slot that frees first."""
    ends = [0.0] * slots
    for d in durations:
        i = min(range(slots), key=lambda j: (ends[j], j))
        ends[i] += d
    return max(ends)


def test_timed_steps_predict_a_real_training_run(tiny_artifact, tmp_path):  # noqa: F811
    """The estimate's training rate (steps timed on random batches) against a real training run of the same
    configuration on the prepared data, with the same vocabularies, thread and batch size: within a factor
    (the two are timed at different moments of a shared machine)."""
    from protocols.artifact import PreparedDataset
    from tests.fixtures_data import TINY_HISTORY_LEN, TINY_SPLITS

    sizes = ", ".join(f"{k}: {v}" for k, v in TINY_SPLITS.items())
    plan = plan_sweep(parse_sweep(f"""
name: est
data: {{source: synthetic, scale: tiny, history_len: {TINY_HISTORY_LEN}, {sizes}}}
model: {{dim: 8}}
train: {{batch_size: 64}}
grid: {{arch: [whale], seed: [0]}}
resources: {{cpu: 1, gpu: 0}}
"""))
    (trial,) = plan.trials
    vocab = {trial.dataset.dataset_id: dict(PreparedDataset.open(tiny_artifact).spec.vocab_sizes)}
    est = estimate_sweep(plan, num_cpus=1, vocab=vocab)
    assert est.notes[0].startswith("1 configuration(s) timed now on cpu") and "synth --scale small" not in est.notes[0]
    e = est.trials[trial.trial_id]
    steps = -(-TINY_SPLITS["n_train"] // 64)
    estimated_rate = steps * 64 / e.train_s
    train = TrainConfig(batch_size=64, device="cpu", num_threads=1)
    metrics = train_run(RunConfig(arch="whale", data=str(tiny_artifact), model=dict(trial.model), train=train),
                        tmp_path / "run", progress=False)
    ratio = estimated_rate / metrics["train_targets_per_s"]
    assert 1 / 3 < ratio < 3, (estimated_rate, metrics["train_targets_per_s"])
    # evaluation: valid and test targets at 3x the training rate
    assert e.eval_s == pytest.approx((TINY_SPLITS["n_valid"] + TINY_SPLITS["n_test"]) / (3 * steps * 64 / e.train_s))


def test_dry_run_times_each_configuration_once_and_packs_the_trials(tmp_path, capsys):
    path = tmp_path / "est.yaml"
    path.write_text(SWEEP.replace("seed: [0, 1, 2]", "seed: [0, 1, 2]\n  model.dim: [4, 8]")
                    + "analysis:\n  scaling:\n    reference: {arch: wukong, model.dim: 8}\n")
    assert cli_main(["sweep", str(path), "--dry-run", "--json", "--num-cpus", "4",
                     "--results", str(tmp_path / "results")]) == 0
    out = json.loads(capsys.readouterr().out)
    notes = out["estimate"]["notes"]
    assert notes[0].startswith("4 configuration(s) timed now on cpu")  # arch x width; seeds share a configuration
    assert "synth --scale small" in notes[0]  # nothing prepared under --results
    assert out["estimate"]["concurrent_trials"] == 2  # 4 CPUs / 1 per trial, capped by max_concurrent
    by_config: dict[tuple, set] = {}
    for t in out["trials"]:
        by_config.setdefault((t["arch"], t["model.dim"]), set()).add(t["estimated_train_s"])
        step_s = t["estimated_train_s"] / 4  # ceil(1000 / 256) steps: one epoch of batch 256
        assert step_s > 0
        assert t["estimated_eval_s"] == pytest.approx(300 * step_s / 256 / 3)
        assert t["estimated_total_s"] == pytest.approx(t["estimated_train_s"] + t["estimated_eval_s"]
                                                       + dry_run.OVERHEAD_S)
    assert len(by_config) == 4 and all(len(v) == 1 for v in by_config.values())
    wall = _makespan([t["estimated_total_s"] for t in out["trials"]], 2) + dry_run.START_S
    assert out["estimated_wall_s"] == pytest.approx(wall)
    lo, hi = dry_run.RANGE
    assert out["estimated_wall_range_s"] == pytest.approx([wall * lo, wall * hi]) and hi / lo <= 4
    assert cli_main(["sweep", str(path), "--dry-run", "--num-cpus", "4", "--results", str(tmp_path / "results")]) == 0
    captured = capsys.readouterr()
    assert re.search(r"estimated wall time: [0-9.]+ s \(between [0-9.]+ s and [0-9.]+ s\) for the sweep with 2 "
                     r"trial\(s\) at a time on cpu", captured.out)  # timed again: another number
    assert "timing training steps" in captured.err  # progress while timing


def test_a_gpu_sweep_without_cuda_times_nothing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    plan = plan_sweep(parse_sweep(SWEEP.replace("resources: {cpu: 1, gpu: 0}", "resources: {cpu: 1, gpu: 0.5}")))
    est = estimate_sweep(plan, num_cpus=2)
    assert est.wall_s is None and est.wall_range_s is None and "nothing timed" in est.notes[0]


def test_known_vocabularies_come_from_the_artifacts_an_earlier_launch_prepared(tmp_path, tiny_artifact):  # noqa: F811
    from core.results_layout import DATASETS_FILE
    from harness.sweep.dry_run import known_vocabularies
    from protocols.artifact import PreparedDataset

    sweep = parse_sweep(SWEEP.replace("n_test: 100}", f"n_test: 100, out: {tiny_artifact.parent}}}"))
    sweep_dir = tmp_path / "est"
    assert known_vocabularies(sweep, sweep_dir) == {}  # never launched
    sweep_dir.mkdir()
    (sweep_dir / DATASETS_FILE).write_text(json.dumps({"datasets": {
        "d-here": {"artifact": tiny_artifact.name}, "d-gone": {"artifact": "synthetic-exposure-0000"}}}))
    vocab = dict(PreparedDataset.open(tiny_artifact).spec.vocab_sizes)
    assert known_vocabularies(sweep, sweep_dir) == {"d-here": vocab}


def test_makespan_matches_brute_force_over_orders():
    from harness.sweep.dry_run import _makespan as fast

    for durations in itertools.permutations([3.0, 1.0, 2.0, 5.0, 0.5]):
        for slots in (1, 2, 3):
            assert fast(list(durations), slots) == pytest.approx(_makespan(list(durations), slots))
