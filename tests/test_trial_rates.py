"""`recscale sweep --dry-run --measure`: every distinct trial configuration is timed once, the rates land in
the calibration, and each trial's estimate is its targets over its configuration's rate (checked against
the formula computed here from the stored numbers). A sweep's own recorded rates are checked in
tests/test_sweep_ray.py."""
from __future__ import annotations

import json

import pytest

from cli.main import main as cli_main
from harness.speed import calibration
from harness.speed.trial_rates import SECTION
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)

SWEEP = """
name: rates
data: {source: synthetic, scale: tiny, history_len: 8, n_train: 1000, n_valid: 200, n_test: 100}
model: {dim: 8, num_layers: 1}
train: {batch_size: 64}
grid:
  arch: [wukong, whale]
  seed: [0, 1]
  model.dim: [4, 8]
resources: {cpu: 1, gpu: 0}
max_concurrent: 2
analysis:
  scaling:
    reference: {arch: wukong, model.dim: 8}
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RECSCALE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / calibration.CACHE_FILE


def test_measure_times_each_configuration_once_and_the_estimate_follows_it(tmp_path, cache, capsys):
    path = tmp_path / "rates.yaml"
    path.write_text(SWEEP)
    args = ["sweep", str(path), "--dry-run", "--json", "--num-cpus", "2", "--results", str(tmp_path / "results")]
    assert cli_main(args + ["--measure"]) == 0
    out = json.loads(capsys.readouterr().out)
    rates = json.loads(cache.read_text())[calibration.machine_key("cpu")][SECTION]
    assert len(rates) == 4  # arch x width; seeds share a configuration
    assert {v["source"] for v in rates.values()} == {"dry-run --measure"}
    assert {v["vocabulary"] for v in rates.values()} == {"synth small"}  # nothing prepared under --results
    by_config: dict[tuple, set] = {}
    for t in out["trials"]:
        key = [k for k in rates if k.startswith(f"{t['arch']}/cpu/1/")]
        by_config.setdefault((t["arch"], t["model.dim"]), set()).add(t["estimated_train_s"])
        assert all(rates[k]["targets_per_s"] > 0 for k in key)
    assert all(len(v) == 1 for v in by_config.values())  # both seeds of a configuration: one estimate
    train_times = sorted(t["estimated_train_s"] for t in out["trials"])
    expected = sorted(1000 / v["targets_per_s"] for v in rates.values() for _ in range(2))
    assert train_times == pytest.approx(expected)
    for t in out["trials"]:
        assert t["estimated_eval_s"] == pytest.approx(300 / 3 / (1000 / t["estimated_train_s"]))
    assert any("4 configuration(s) timed now" in a for a in out["estimate"]["assumptions"])
    assert any("8 trial(s) at the training rate measured for their own configuration" in a
               for a in out["estimate"]["assumptions"])

    # a later dry run without --measure reads the stored rates back
    assert cli_main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert [t["estimated_train_s"] for t in again["trials"]] == [t["estimated_train_s"] for t in out["trials"]]

    # once a sweep (two at a time, as planned here) recorded one configuration at 0.8 x its timed-alone
    # rate, that trial uses the sweep's rate and every other timed-alone rate is scaled by 0.8
    from harness.speed.trial_rates import rate_key
    from harness.sweep.plan import plan_sweep
    from harness.sweep.schema import load_sweep

    plan = plan_sweep(load_sweep(path))
    first = plan.trials[0]
    alone = rates[rate_key(first, "cpu", 1, False, dataset=False)]["targets_per_s"]
    calibration.record("cpu", SECTION, rate_key(first, "cpu", 1, False, dataset=True),
                       {"targets_per_s": 0.8 * alone, "source": "sweep rates", "trials": 1, "concurrent_trials": 2})
    assert cli_main(args) == 0
    scaled = {t["trial_id"]: t["estimated_train_s"] for t in json.loads(capsys.readouterr().out)["trials"]}
    before = {t["trial_id"]: t["estimated_train_s"] for t in out["trials"]}
    for trial_id, seconds in scaled.items():
        if trial_id == first.trial_id:
            assert seconds == pytest.approx(1000 / (0.8 * alone))
        else:
            assert seconds == pytest.approx(before[trial_id] / 0.8)


def test_measure_needs_dry_run(tmp_path, cache, capsys):
    path = tmp_path / "rates.yaml"
    path.write_text(SWEEP)
    assert cli_main(["sweep", str(path), "--measure"]) == 2
    assert "--measure goes with --dry-run" in capsys.readouterr().err
    assert not cache.exists()


def test_known_vocabularies_come_from_the_artifacts_an_earlier_launch_prepared(tmp_path, tiny_artifact):  # noqa: F811
    from core.results_layout import DATASETS_FILE
    from harness.speed.trial_rates import known_vocabularies
    from harness.sweep.schema import parse_sweep
    from protocols.artifact import PreparedDataset

    sweep = parse_sweep(SWEEP.replace("n_test: 100}", f"n_test: 100, out: {tiny_artifact.parent}}}"))
    sweep_dir = tmp_path / "rates"
    assert known_vocabularies(sweep, sweep_dir) == {}  # never launched
    sweep_dir.mkdir()
    (sweep_dir / DATASETS_FILE).write_text(json.dumps({"datasets": {
        "d-here": {"artifact": tiny_artifact.name}, "d-gone": {"artifact": "synthetic-exposure-0000"}}}))
    assert known_vocabularies(sweep,
                              sweep_dir) == {"d-here": dict(PreparedDataset.open(tiny_artifact).spec.vocab_sizes)}


def test_measure_on_a_gpu_sweep_without_cuda_times_nothing(tmp_path, cache, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    path = tmp_path / "gpu.yaml"
    path.write_text(SWEEP.replace("resources: {cpu: 1, gpu: 0}", "resources: {cpu: 1, gpu: 0.5}"))
    assert cli_main(["sweep", str(path), "--dry-run", "--measure", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("--measure timed nothing" in a for a in out["estimate"]["assumptions"])
    stored = json.loads(cache.read_text()) if cache.exists() else {}
    assert SECTION not in stored.get(calibration.machine_key("cuda"), {})


def test_a_sweep_records_the_median_of_its_finite_rates_per_configuration(cache):
    from harness.speed.trial_rates import record_sweep_rates

    ends = [{"rate_key": "a", "train_targets_per_s": 10.0}, {"rate_key": "a", "train_targets_per_s": 40.0},
            {"rate_key": "a", "train_targets_per_s": 30.0}, {"rate_key": "a", "train_targets_per_s": float("nan")},
            {"rate_key": "b", "train_targets_per_s": None}, {"train_targets_per_s": 5.0}]
    assert record_sweep_rates("cpu", "s", ends, 2) == 1
    (stored,) = json.loads(cache.read_text())[calibration.machine_key("cpu")][SECTION].values()
    assert stored == {"targets_per_s": 30.0, "source": "sweep s", "trials": 3, "concurrent_trials": 2}
