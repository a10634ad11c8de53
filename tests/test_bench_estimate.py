"""`recscale bench` (loader and training-step figures, the calibration cache) and the wall-time estimate
of `recscale sweep --dry-run`, checked against the formulas computed here from the calibration's own
numbers and a brute-force schedule."""
from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest

from architectures.flops import count_flops
from cli.main import main as cli_main
from harness.speed import calibration, sweep_estimate
from harness.speed.sweep_estimate import estimate_sweep, format_seconds
from harness.speed.trial_cost import estimate_costs
from harness.sweep.plan import plan_sweep
from harness.sweep.schema import parse_sweep
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


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RECSCALE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / calibration.CACHE_FILE


def test_bench_reports_loader_and_training_and_stores_a_calibration(tiny_artifact, cache, capsys):  # noqa: F811
    rc = cli_main(["bench", "--data", str(tiny_artifact), "--arch", "wukong", "--set", "dim=8",
                   "--set", "train.num_threads=1", "--steps", "2", "--batches", "3", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
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
    stored = json.loads(cache.read_text())[calibration.machine_key("cpu")]
    assert stored["train"]["wukong/cpu/1"]["targets_per_s"] == out["train_targets_per_s"]
    assert stored["matmul"]["cpu/1"] == out["matmul_flops_per_s"]
    assert stored["loader"][f"L={spec.history_len}/B=256/cpu"]["targets_per_s"] == out["loader_targets_per_s"]


def test_a_bf16_bench_is_measured_against_the_bf16_matmul_rate_and_filed_apart(cache, capsys):
    rc = cli_main(["bench", "--arch", "wukong", "--set", "dim=8", "--set", "train.num_threads=1",
                   "--set", "train.bf16=true", "--steps", "2", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bf16"] is True and out["matmul_dtype"] == "bfloat16"
    assert out["utilisation"] == pytest.approx(3 * out["flops_per_target"] * out["train_targets_per_s"]
                                               / out["matmul_flops_per_s"])
    stored = json.loads(cache.read_text())[calibration.machine_key("cpu")]
    assert stored["matmul"] == {"cpu/1/bf16": out["matmul_flops_per_s"]}  # never under the fp32 key
    assert list(stored["train"]) == ["wukong/cpu/1/bf16"]


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


def test_bench_takes_the_set_spellings_of_train(cache, capsys):
    """`bench --set` parses like `train --set`: a bare key is a model field, training keys need `train.`,
    and a field the architecture lacks is refused naming it (exit 2, before anything is measured)."""
    assert cli_main(["bench", "--arch", "wukong", "--set", "num_threads=1", "--no-save"]) == 2
    assert "for training write train.num_threads" in capsys.readouterr().err
    assert cli_main(["bench", "--arch", "wukong", "--set", "model.num_heads=2", "--no-save"]) == 2
    err = capsys.readouterr().err
    assert "num_heads" in err and "wukong" in err


def _makespan(durations: list[float], slots: int) -> float:
    """Brute force: every trial starts, in order, on the slot that frees first."""
    ends = [0.0] * slots
    for d in durations:
        i = min(range(slots), key=lambda j: (ends[j], j))
        ends[i] += d
    return max(ends)


def test_dry_run_estimate_follows_the_calibration(cache, capsys):
    u, rate, overhead = 0.2, 1.0e10, 0.7
    calibration.record("cpu", "matmul", "cpu/1", rate)
    calibration.record("cpu", "train", "whale/cpu/1", {"targets_per_s": 1.0, "utilisation": u, "flops_per_target": 1.0})
    calibration.record("cpu", "train", "wukong/cpu/1",
                       {"targets_per_s": 1.0, "utilisation": 2 * u, "flops_per_target": 1.0})
    calibration.record("cpu", "sweep", "overhead_in_trial_s", {"value": overhead})
    calibration.record("cpu", "sweep", "ray_start_s", {"value": 3.0})
    plan = plan_sweep(parse_sweep(SWEEP))
    costs = estimate_costs(plan.trials)
    est = estimate_sweep(plan, costs, num_cpus=4)
    assert est.slots == 2  # 4 CPUs / 1 per trial, capped by max_concurrent
    totals = []
    for t in plan.trials:
        f = costs[t.trial_id].flops_per_target
        util = u if t.arch == "whale" else 2 * u
        train_s = 1000 * 3 * f / (util * rate)
        e = est.trials[t.trial_id]
        assert e.train_s == pytest.approx(train_s) and e.eval_s == pytest.approx(300 * f / (util * rate))
        assert e.overhead_s == overhead
        totals.append(e.total_s)
    assert est.wall_s == pytest.approx(_makespan(totals, 2) + 3.0)  # Ray's start as the last sweep measured it
    assert not any("assumed (no sweep" in a for a in est.assumptions)
    # rates from bench utilisations, not from the trials' own configurations: uncalibrated, a range around it
    assert not est.calibrated and est.uncalibrated == [
        "6 of 6 trial(s) without a rate measured for their configuration (rate from bench of this architecture)"]
    lo, hi = est.wall_range_s
    low, high = sweep_estimate.RATE_SPREAD["bench of this architecture"]
    works = [e.train_s + e.eval_s for e in est.trials.values()]
    assert lo == pytest.approx(_makespan([w * low + overhead for w in works], 2) + 3.0)
    assert hi == pytest.approx(_makespan([w * high + overhead for w in works], 2) + 3.0)
    assert lo < est.wall_s < hi

    path = cache.parent.parent / "est.yaml"
    path.write_text(SWEEP)
    assert cli_main(["sweep", str(path), "--dry-run", "--num-cpus", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimated_wall_s"] == pytest.approx(est.wall_s)
    assert out["estimated_wall_range_s"] == pytest.approx(list(est.wall_range_s)) and out["calibrated"] is False
    assert out["estimate"]["concurrent_trials"] == 2
    assert cli_main(["sweep", str(path), "--dry-run", "--num-cpus", "4"]) == 0
    text = capsys.readouterr().out
    assert f"estimated wall time: UNCALIBRATED, between {format_seconds(lo)} and {format_seconds(hi)}" in text
    assert "2 trial(s) at a time on cpu" in text
    # the overhead seen from outside the trials (Ray's scheduling included), when recorded, wins
    calibration.record("cpu", "sweep", "overhead_per_trial_s", {"value": 1.1})
    assert {e.overhead_s for e in estimate_sweep(plan, costs, num_cpus=4).trials.values()} == {1.1}


def test_dry_run_estimates_bf16_trials_from_bf16_calibration_and_fp32_trials_from_fp32(cache):
    u32, r32, u16, r16 = 0.2, 1.0e10, 0.05, 4.0e10
    calibration.record("cpu", "matmul", "cpu/1", r32)
    calibration.record("cpu", "matmul", "cpu/1/bf16", r16)
    for arch in ("whale", "wukong"):
        calibration.record("cpu", "train", f"{arch}/cpu/1", {"utilisation": u32})
        calibration.record("cpu", "train", f"{arch}/cpu/1/bf16", {"utilisation": u16})
    for extra, u, r in (("", u32, r32), ("train: {bf16: true}\n", u16, r16)):
        plan = plan_sweep(parse_sweep(SWEEP + extra))
        costs = estimate_costs(plan.trials)
        est = estimate_sweep(plan, costs, num_cpus=2)
        for t in plan.trials:
            f = costs[t.trial_id].flops_per_target
            assert est.trials[t.trial_id].train_s == pytest.approx(1000 * 3 * f / (u * r))


def test_dry_run_without_calibration_says_what_it_assumed(cache):
    plan = plan_sweep(parse_sweep(SWEEP))
    est = estimate_sweep(plan, estimate_costs(plan.trials), num_cpus=1)
    ray_start = sweep_estimate.ASSUMED_RAY_START_S
    assert est.slots == 1 and est.wall_s == pytest.approx(sum(e.total_s for e in est.trials.values()) + ray_start)
    text = "\n".join(est.assumptions)
    assert "measured now" in text and "utilisation 0.1 assumed" in text and "overhead per trial" in text
    # uncalibrated: says why, and the range spans the assumed utilisation's spread, overhead and Ray start ranges
    assert not est.calibrated and len(est.uncalibrated) == 2
    assert "no sweep of this code has run on this machine" in est.uncalibrated[0]
    works = [e.train_s + e.eval_s for e in est.trials.values()]
    (low, high), (o_lo, o_hi) = sweep_estimate.RATE_SPREAD["assumed utilisation"], sweep_estimate.OVERHEAD_RANGE_S
    r_lo, r_hi = sweep_estimate.RAY_START_RANGE_S
    assert est.wall_range_s == pytest.approx((sum(w * low + o_lo for w in works) + r_lo,
                                              sum(w * high + o_hi for w in works) + r_hi))


def _record_a_sweep(plan, rate: float) -> None:
    """What a finished sweep records: every configuration's rate, the overhead and Ray's start."""
    from harness.speed import trial_rates

    for t in plan.trials:
        key = trial_rates.rate_key(t, "cpu", 1, False, dataset=True)
        calibration.record("cpu", trial_rates.SECTION, key, {"targets_per_s": rate, "source": "sweep est",
                                                             "trials": 3, "concurrent_trials": 2})
    calibration.record("cpu", "sweep", "overhead_per_trial_s", {"value": 1.5})
    calibration.record("cpu", "sweep", "ray_start_s", {"value": 4.0})


def test_after_a_sweep_the_estimate_is_calibrated_and_one_number(cache, capsys):
    plan = plan_sweep(parse_sweep(SWEEP))
    _record_a_sweep(plan, 500.0)
    est = estimate_sweep(plan, estimate_costs(plan.trials), num_cpus=2)
    assert est.calibrated and est.wall_range_s is None
    per_trial = 1000 / 500.0 + 300 / (3 * 500.0) + 1.5
    assert est.wall_s == pytest.approx(3 * per_trial + 4.0)  # 6 trials, 2 at a time, then Ray's start
    path = cache.parent.parent / "est.yaml"
    path.write_text(SWEEP)
    assert cli_main(["sweep", str(path), "--dry-run", "--num-cpus", "2"]) == 0
    text = capsys.readouterr().out
    assert f"{format_seconds(est.wall_s)} for the sweep with 2 trial(s) at a time on cpu, Ray's start included " \
           "(calibrated on this machine with this code)" in text and "UNCALIBRATED" not in text


def test_calibration_is_filed_by_machine_fingerprint_and_code_version(cache, monkeypatch):
    """Another clone's code (another code version) or another machine's fingerprint never lends its sweep
    overhead or rates: they are filed under another key, and the estimate is uncalibrated again."""
    from harness import code_version
    from harness.fingerprint import machine_fingerprint

    key = calibration.machine_key("cpu")
    fp = machine_fingerprint("cpu")
    for field in ("cpu", "cpu_flags", "torch", "device"):
        assert f"{field}={fp['env_' + field]}|" in key
    assert key.endswith(f"|code={code_version.code_version()}")
    plan = plan_sweep(parse_sweep(SWEEP))
    _record_a_sweep(plan, 500.0)
    assert estimate_sweep(plan, estimate_costs(plan.trials), num_cpus=2).calibrated

    stored = json.loads(cache.read_text())
    other_code = key.rsplit("|code=", 1)[0] + "|code=0123456789ab"
    cache.write_text(json.dumps({other_code: stored[key]}))  # the same figures, recorded by other code
    est = estimate_sweep(plan, estimate_costs(plan.trials), num_cpus=2)
    assert not est.calibrated and est.wall_range_s is not None
    assert any("overhead per trial 2.0 s assumed" in a for a in est.assumptions)


def test_code_version_follows_the_sources(tmp_path, monkeypatch):
    """The version is a hash of the packages' sources: equal for the same files, different after an edit."""
    import importlib
    import shutil
    import sys

    from harness import code_version

    first = code_version.code_version()
    assert len(first) == 12 and first == code_version.code_version()
    clone = tmp_path / "clone"
    for name in code_version.PACKAGES:
        src = Path(importlib.import_module(name).__file__).parent
        shutil.copytree(src, clone / name, ignore=shutil.ignore_patterns("__pycache__"))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from harness.code_version import code_version; "
             "print(code_version())")
    same = subprocess.run([sys.executable, "-c", probe, str(clone)], capture_output=True, text=True, cwd=tmp_path)
    assert same.stdout.strip() == first, same.stderr
    with (clone / "harness" / "train.py").open("a") as fh:
        fh.write("\n# an edit\n")
    edited = subprocess.run([sys.executable, "-c", probe, str(clone)], capture_output=True, text=True, cwd=tmp_path)
    assert edited.stdout.strip() not in ("", first), edited.stderr


def test_makespan_matches_brute_force_over_orders():
    from harness.speed.sweep_estimate import _makespan as fast

    for durations in itertools.permutations([3.0, 1.0, 2.0, 5.0, 0.5]):
        for slots in (1, 2, 3):
            assert fast(list(durations), slots) == pytest.approx(_makespan(list(durations), slots))
