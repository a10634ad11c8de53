"""A sweep with a tuning stage, through the real `recscale sweep` / `recscale analyze` commands and Ray.

The sweep: Wukong and DeepFM on the tiny synthetic log, a learning rate chosen per architecture from 3
log-spaced values with 1 tuning seed, then 2 measurement seeds at the chosen rate.

- uninterrupted: tuning trials land in tuning/ only; tuning.json's choice is the best valid AUC of each
  architecture, recomputed here from tuning/runs.parquet; every measurement run trained at its
  architecture's chosen rate (its config.yaml, runs.parquet's train.lr and `tuned`); the run of tuning seed 0
  is the tuning run copied, not trained again, and training its config afresh gives the same predictions;
  the report and analysis.json list the chosen rates;
- interrupted (Ctrl-C) in the tuning stage, resumed, interrupted in the measurement stage, resumed: no
  trial trains twice, the finished stage is not run again (its choice is read back), and the choice and
  every measurement metric equal the uninterrupted sweep's.

Each launch starts Ray (10-30 s here), so both tests are slow.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.sweep.trainable import read_events
from tests.sweep_files import sweep_cmd, tiny_sweep, write_sweep

VENV_BIN = Path(sys.executable).parent
LRS = [1e-4, 1e-3, 1e-2]
ARCHS = ["wukong", "deepfm"]
TUNING_TRIALS = {f"{a}-seed0-lr{lr:g}" for a in ARCHS for lr in LRS}
GRID_TRIALS = {f"{a}-seed{s}" for a in ARCHS for s in (0, 1)}

pytestmark = pytest.mark.slow


def _sweep_file(folder: Path, name: str, cache: Path) -> Path:
    return write_sweep(folder, tiny_sweep(
        name, cache, data={"n_train": 768, "n_valid": 256, "n_test": 256},
        train={"eval_batch_size": 256, "checkpoint_every_batches": 2}, model={"num_layers": 1},
        grid={"arch": ARCHS, "seed": [0, 1]},
        tuning={"param": "train.lr", "grid": {"log_min": LRS[0], "log_max": LRS[-1], "points": 3}, "run_seeds": [0],
                "metric": "valid_auc"}))


def _trained(events: list[dict]) -> list[str]:
    return [e["trial"] for e in events if e["event"] == "end" and not e["reused"]]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The sweep run once without interruption; returns its folder."""
    root = tmp_path_factory.mktemp("tuning")
    path = _sweep_file(root, "tuned", root / "cache")
    done = subprocess.run(sweep_cmd(path, root / "results"), cwd=root, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tuning: 6/6 trials finished" in done.stdout and "4/4 trials finished" in done.stdout, done.stdout
    assert "2 copied from the tuning stage" in done.stdout, done.stdout
    return root / "results" / "tuned"


def test_tuning_then_measurement_at_the_chosen_rates(uninterrupted):
    sweep_dir = uninterrupted
    tuning_rows = pd.read_parquet(sweep_dir / "tuning" / "runs.parquet")
    runs = pd.read_parquet(sweep_dir / "runs.parquet")
    assert set(tuning_rows["trial_id"]) == TUNING_TRIALS and set(tuning_rows["stage"]) == {"tuning"}
    assert set(runs["trial_id"]) == GRID_TRIALS and set(runs["stage"]) == {"grid"}  # no tuning row mixed in
    assert not (sweep_dir / "runs" / "wukong-seed0-lr0.001").exists()

    choice = json.loads((sweep_dir / "tuning.json").read_text())
    chosen = {s["setting"]: s["chosen"] for s in choice["settings"]}
    for arch in ARCHS:  # the best valid AUC of the architecture's tuning runs (one seed: the mean is the value)
        mine = tuning_rows[tuning_rows["arch"] == arch]
        assert chosen[arch] == mine.loc[mine["valid_auc"].idxmax(), "train.lr"]
        edge = {LRS[0]: "low", LRS[-1]: "high"}.get(chosen[arch])
        assert next(s for s in choice["settings"] if s["setting"] == arch)["edge"] == edge
    for row in runs.itertuples():
        assert row.tuned == "train.lr"
        assert runs.loc[runs["trial_id"] == row.trial_id, "train.lr"].item() == chosen[row.arch]
        config = yaml.safe_load((sweep_dir / row.run_dir / "config.yaml").read_text())
        assert config["train"]["lr"] == chosen[row.arch]
    # the measurement run of seed 0 is the tuning run of seed 0 at the chosen rate (the same config): copied, not
    # trained again; training its config afresh gives the same predictions, so the copy is that run
    events = read_events(sweep_dir)
    assert sorted(_trained(events)) == sorted([*TUNING_TRIALS, *(t for t in GRID_TRIALS if "seed1" in t)])
    assert {e["trial"]: e["copied_from"] for e in events if e.get("copied_from")} == {
        f"{a}-seed0": f"tuning/runs/{a}-seed0-lr{chosen[a]:g}" for a in ARCHS}
    for arch in ARCHS:
        run = sweep_dir / "runs" / f"{arch}-seed0"
        fresh = sweep_dir.parent / f"fresh-{arch}"
        done = subprocess.run([str(VENV_BIN / "recscale"), "train", "--config", str(run / "config.yaml"), "--out",
                               str(fresh), "--no-progress"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        for split in ("valid", "test"):
            name = f"predictions_{split}.parquet"
            pd.testing.assert_frame_equal(pd.read_parquet(fresh / name), pd.read_parquet(run / name))

    done = subprocess.run([str(VENV_BIN / "recscale"), "analyze", str(sweep_dir)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    report = (sweep_dir / "report.md").read_text()
    table = report[report.index("## Tuning"):].split("\n## ")[0]
    for arch in ARCHS:
        assert f"| {arch} | {chosen[arch]:g} |" in table
    analysis = json.loads((sweep_dir / "analysis.json").read_text())
    assert {s["setting"]: s["chosen"] for s in analysis["tuning"]["settings"]} == chosen
    edges = [a for a in ARCHS if chosen[a] in (LRS[0], LRS[-1])]
    # one warning per edge choice, and one per setting chosen with no healthy value (these tiny runs may not learn)
    fallbacks = [s for s in choice["settings"] if s["fallback"]]
    assert sum(w.startswith("tuning: ") for w in analysis["warnings"]) == len(edges) + len(fallbacks)


def _interrupt_when(cmd: list[str], cwd: Path, sweep_dir: Path, ready) -> tuple[int, str]:
    """Run `cmd`, send it SIGINT once `ready(events)` holds; its exit status and output."""
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None  # PIPE
    try:
        deadline = time.time() + 600
        while not ready(read_events(sweep_dir)):
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "the sweep did not get there in time"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        return proc.returncode, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_resume_after_interrupts_in_either_stage(uninterrupted, tmp_path):
    path = _sweep_file(tmp_path, "tuned", uninterrupted.parent.parent / "cache")
    results = tmp_path / "results"
    sweep_dir = results / "tuned"

    # 1. Ctrl-C in the tuning stage, once two tuning trials finished
    code, out = _interrupt_when(sweep_cmd(path, results), tmp_path, sweep_dir,
                                lambda ev: len(_trained(ev)) >= 2)
    assert code == 130, out
    assert not (sweep_dir / "tuning.json").exists() and not list((sweep_dir / "runs").glob("*/metrics.json"))
    tuned_before = {p.parent.name for p in (sweep_dir / "tuning" / "runs").glob("*/metrics.json")}
    assert 2 <= len(tuned_before) < len(TUNING_TRIALS), out
    first = len(read_events(sweep_dir))

    # 2. --resume finishes the tuning stage; Ctrl-C once the first measurement trial started
    code, out = _interrupt_when(sweep_cmd(path, results, "--resume"), tmp_path, sweep_dir,
                                lambda ev: any(e["trial"] in GRID_TRIALS for e in ev[first:]))
    assert code == 130, out
    events = read_events(sweep_dir)
    assert sorted(t for t in _trained(events) if t in TUNING_TRIALS) == sorted(TUNING_TRIALS)  # each once
    measured_before = {p.parent.name for p in (sweep_dir / "runs").glob("*/metrics.json")}
    assert len(measured_before) < len(GRID_TRIALS)
    stored = (sweep_dir / "tuning.json").read_text()
    mtimes = {t: (sweep_dir / "runs" / t / "metrics.json").stat().st_mtime_ns for t in measured_before}
    second = len(events)

    # 3. --resume reads the choice back (no tuning trial starts) and finishes the measurement trials
    done = subprocess.run(sweep_cmd(path, results, "--resume"), cwd=tmp_path, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4/4 trials finished" in done.stdout, done.stdout
    events = read_events(sweep_dir)
    assert not [e for e in events[second:] if e["trial"] in TUNING_TRIALS]
    assert (sweep_dir / "tuning.json").read_text() == stored
    # each once: trained, or (tuning seed 0) copied from its tuning run
    assert sorted(t for t in _trained(events) if t in GRID_TRIALS) == sorted(t for t in GRID_TRIALS if "seed1" in t)
    assert sorted(e["trial"] for e in events if e.get("copied_from")) == sorted(t for t in GRID_TRIALS if "seed0" in t)
    assert {t: (sweep_dir / "runs" / t / "metrics.json").stat().st_mtime_ns for t in measured_before} == mtimes

    # the end result is the uninterrupted sweep's: the same choice and the same measurements
    assert json.loads(stored) == json.loads((uninterrupted / "tuning.json").read_text())
    cols = ["trial_id", "train.lr", "valid_auc", "test_auc", "test_logloss"]
    got = pd.read_parquet(sweep_dir / "runs.parquet")[cols].sort_values("trial_id").reset_index(drop=True)
    want = pd.read_parquet(uninterrupted / "runs.parquet")[cols].sort_values("trial_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
