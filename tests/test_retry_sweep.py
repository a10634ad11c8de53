"""A sweep with a `retry:` policy, through the real `recscale sweep` / `recscale analyze` commands and Ray.

DeepFM on the tiny synthetic log at three learning rates, `retry: {when: [diverged], lr_factor: 0.5,
max_retries: 2}`: 0.01 trains once (ok); 0.16 diverges, diverges again at 0.08 and recovers at 0.04; 100 diverges
at 100, 50 and 25 and stays diverged. Checked against a brute-force recomputation: every recorded attempt equals
its learning rate trained directly (`train_run` on the trial's own config), and each run's metrics and
predictions are bit for bit those of its final rate trained directly. runs.parquet keeps the planned `train.lr`
beside the retry columns, the run folders hold the final attempt only, and the report lists the retried runs
(with the one that never recovered also under Run health). Interrupting the sweep in the middle of a retry and
resuming gives the same runs. Each launch starts Ray (10-30 s here), so the tests are slow.
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

from core import results_layout as layout
from harness import run_folder as RF
from harness.config import load_run_config
from harness.sweep.trainable import read_events
from harness.train import train_run
from tests.sweep_files import sweep_cmd, tiny_sweep, write_sweep

VENV_BIN = Path(sys.executable).parent
LRS = [0.01, 0.16, 100.0]
TRIALS = {lr: f"deepfm-seed0-lr{lr:g}" for lr in LRS}
VOLATILE = {"wall_s", "train_seconds", "setup_seconds", "eval_seconds", "train_targets_per_s", "matmul_flops_per_s",
            "utilisation", "peak_rss_bytes", "peak_gpu_bytes", "integrity", "malloc_env"}  # and env_*: the process

pytestmark = pytest.mark.slow


def _sweep_file(folder: Path, cache: Path) -> Path:
    return write_sweep(folder, tiny_sweep(
        "retried", cache, data={"n_train": 768, "n_valid": 256, "n_test": 256},
        train={"eval_batch_size": 256, "checkpoint_every_batches": 2},
        grid={"arch": ["deepfm"], "seed": [0], "train.lr": LRS},
        retry={"when": ["diverged"], "lr_factor": 0.5, "max_retries": 2}))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("retry_sweep")
    done = subprocess.run(sweep_cmd(_sweep_file(root, root / "cache"), root / "results"), cwd=root,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3/3 trials finished" in done.stdout, done.stdout
    return root / "results" / "retried"


def _numbers(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in VOLATILE and not k.startswith(("retry", "env_"))}


def test_attempts_equal_a_brute_force_recomputation(uninterrupted, tmp_path):
    runs = pd.read_parquet(uninterrupted / layout.RUNS_FILE).set_index("trial_id")
    for lr, trial in TRIALS.items():
        run_dir = uninterrupted / layout.RUNS_DIR / trial
        m = RF.read_metrics(run_dir)
        config = load_run_config(run_dir / layout.CONFIG_FILE)  # the final attempt's (1 thread, as the trial)
        direct, k = [], 0
        while True:  # brute force: the planned rate, halved while it diverges, at most 3 attempts
            rate = lr * 0.5 ** k
            out = tmp_path / f"{trial}-{k}"
            config.train.lr = rate
            d = train_run(config, out, progress=False, final_checkpoint=False)
            direct.append({"attempt": k, "lr": rate, **{key: d[key] for key in
                                                         ("health_status", "health_reasons", "valid_auc", "valid_ne",
                                                          "train_loss")}})
            k += 1
            if d["health_status"] != "diverged" or k == 3:
                break
        assert m["retry"]["attempts"] == direct, trial
        assert _numbers(m) == _numbers(RF.read_metrics(out)), trial  # the run is its final rate trained directly
        for split in layout.PREDICTION_SPLITS:
            pd.testing.assert_frame_equal(pd.read_parquet(run_dir / layout.predictions_file(split)),
                                          pd.read_parquet(out / layout.predictions_file(split)))
        row = runs.loc[trial]
        assert row["train.lr"] == lr  # the planned rate: the setting
        assert (row["retry_attempts"], row["retry_lr_initial"], row["retry_lr_used"]) == (len(direct) - 1, lr, rate)
        assert row["retry_history"] == " → ".join(f"{a['lr']:g} {a['health_status']}" for a in direct)
        assert row["health_status"] == direct[-1]["health_status"]
        assert not (run_dir / layout.ATTEMPTS_DIR).exists() and not (run_dir / layout.CHECKPOINT_FILE).exists()
    statuses = {lr: [a["health_status"] for a in RF.read_metrics(uninterrupted / layout.RUNS_DIR / t)["retry"]
                     ["attempts"]] for lr, t in TRIALS.items()}
    assert statuses == {0.01: ["ok"], 0.16: ["diverged", "diverged", "undertrained"],
                        100.0: ["diverged"] * 3}  # the data's facts: recovers at 0.16 / 4, never at 100
    attempts = [e for e in read_events(uninterrupted) if e["event"] == "attempt"]
    assert sorted((e["trial"], e["attempt"]) for e in attempts) == sorted(
        (TRIALS[lr], k) for lr, n in ((0.01, 1), (0.16, 3), (100.0, 3)) for k in range(n))

    done = subprocess.run([str(VENV_BIN / "recscale"), "analyze", str(uninterrupted)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = (uninterrupted / layout.REPORT_FILE).read_text()
    section = report[report.index("## Retried runs"):].split("\n## ")[0]
    assert report.index("## Run health") < report.index("## Retried runs")
    assert f"| {TRIALS[0.16]} | deepfm, train.lr=0.16 | 0 | 0.16 diverged → 0.08 diverged → 0.04 undertrained | " \
           "undertrained |" in section
    assert f"| {TRIALS[100.0]} | deepfm, train.lr=100.0 | 0 | 100 diverged → 50 diverged → 25 diverged | diverged |" \
           in section
    assert TRIALS[0.01] not in section
    health = report[report.index("## Run health"):].split("\n## ")[0]
    assert f"| {TRIALS[100.0]} | diverged |" in health  # still unhealthy after its retries: listed as today
    analysis = json.loads((uninterrupted / layout.ANALYSIS_FILE).read_text())
    assert [(r["trial"], r["lr_used"], r["status"]) for r in analysis["retried_runs"]] == [
        (TRIALS[0.16], 0.04, "undertrained"), (TRIALS[100.0], 25.0, "diverged")]


@pytest.mark.fault
def test_interrupted_mid_retry_resumes_to_the_same_runs(uninterrupted, tmp_path):
    path = _sweep_file(tmp_path, uninterrupted.parent.parent / "cache")
    results = tmp_path / "results"
    sweep_dir = results / "retried"
    proc = subprocess.Popen(sweep_cmd(path, results), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    try:  # Ctrl-C as soon as a retried trial's first attempt finished
        deadline = time.time() + 600
        while not any(e["event"] == "attempt" and e["health_status"] == "diverged" for e in read_events(sweep_dir)):
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, proc.stdout.read()
    # the retried trial stopped in the middle of its retries: attempts on disk, the run not finished
    mid = [t for t in TRIALS.values() if (sweep_dir / layout.RUNS_DIR / t / layout.ATTEMPTS_DIR).exists()]
    assert mid and not any(RF.is_finished(sweep_dir / layout.RUNS_DIR / t) for t in mid)
    first = len(read_events(sweep_dir))
    done = subprocess.run(sweep_cmd(path, results, "--resume"), cwd=tmp_path, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    resumed = [e for e in read_events(sweep_dir)[first:] if e["event"] == "attempt" and e["trial"] in mid]
    assert resumed and resumed[0]["reused"]  # the finished first attempt was read back, not trained again
    cols = ["trial_id", "train.lr", "retry_history", "retry_lr_used", "valid_auc", "test_auc", "test_logloss"]
    got = pd.read_parquet(sweep_dir / layout.RUNS_FILE)[cols].sort_values("trial_id").reset_index(drop=True)
    want = pd.read_parquet(uninterrupted / layout.RUNS_FILE)[cols].sort_values("trial_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want)
    for t in TRIALS.values():
        a, b = RF.read_metrics(sweep_dir / layout.RUNS_DIR / t), RF.read_metrics(uninterrupted / layout.RUNS_DIR / t)
        assert _numbers(a) == _numbers(b) and a["retry"] == b["retry"]
