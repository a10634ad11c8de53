"""Retrying an unhealthy run at a lower learning rate (harness/sweep/trainable.py), with real training, without Ray.

The data: the tiny synthetic log prepared with 768 / 256 / 256 targets; DeepFM (dim 8, batch 64, one epoch, one
thread) at a learning rate of 0.16 diverges (validation NE far above 1.5), as it does at 0.08, and no longer at
0.04. With `when: [diverged]`, lr_factor 0.5 and 2 retries, the run takes three attempts.

- every attempt recorded equals that learning rate trained directly (a brute-force recomputation), the retry
  stops at the first status not in `when`, and the run folder holds the final attempt's outputs only;
- a run interrupted in the middle of an attempt, between attempts, or while the final attempt's files are being
  moved up, then resumed, ends bit for bit where the uninterrupted run does, and finished attempts are read back,
  not trained again.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from core import results_layout as layout
from harness import run_folder as RF
from harness.config import RunConfig, TrainConfig
from harness.sweep.schema import RetrySection
from harness.sweep.trainable import attempt_dir, train_with_retries
from harness.train import train_run
from tests.faults import Interrupted, interrupt_training_after

pytestmark = pytest.mark.usefixtures("one_thread")

POLICY = RetrySection(when=["diverged"], lr_factor=0.5, max_retries=2)
LR = 0.16
BATCHES = 768 // 64  # training batches of one attempt
#: metrics.json keys that measure the machine or time, not the model.
VOLATILE = {"wall_s", "train_seconds", "setup_seconds", "eval_seconds", "train_targets_per_s", "matmul_flops_per_s",
            "utilisation", "peak_rss_bytes", "peak_gpu_bytes", "integrity"}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    from protocols.prepare import PrepareConfig, prepare
    from protocols.synthetic import generate

    root = tmp_path_factory.mktemp("retry_data")
    log = generate("tiny", root / "log", seed=0)
    cfg = PrepareConfig.of(source="synthetic", root=str(log), protocol="exposure", history_len=8, sample_seed=42,
                           out=str(root / "prepared"), n_train=768, n_valid=256, n_test=256)
    return str(prepare(cfg, progress=False))


def _cfg(data: str, lr: float) -> RunConfig:
    return RunConfig(arch="deepfm", data=data, model={"dim": 8}, seed=0,
                     train=TrainConfig(lr=lr, batch_size=64, eval_batch_size=256, device="cpu", num_threads=1,
                                       checkpoint_every_batches=2))


def _numbers(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k not in VOLATILE}


def _predictions(run_dir: Path) -> list[pd.DataFrame]:
    return [pd.read_parquet(run_dir / layout.predictions_file(s)) for s in layout.PREDICTION_SPLITS]


def _same_run(a: Path, b: Path, *, metrics: bool = True) -> None:
    if metrics:
        assert _numbers(RF.read_metrics(a)) == _numbers(RF.read_metrics(b))
    for x, y in zip(_predictions(a), _predictions(b)):
        pd.testing.assert_frame_equal(x, y)
    assert RF.read_config(a) == RF.read_config(b)


def _retried(data: str, run_dir: Path, events: list | None = None) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    return train_with_retries(_cfg(data, LR), run_dir, POLICY, final_checkpoint=False,
                              on_attempt=None if events is None else events.append)


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("retry") / "run"
    events: list = []
    _retried(data, run_dir, events)
    assert [e["reused"] for e in events] == [False] * len(events)
    return run_dir


def test_attempts_equal_each_rate_trained_directly(data, uninterrupted, tmp_path):
    m = RF.read_metrics(uninterrupted)
    recorded = m["retry"]["attempts"]
    # brute force: train LR, LR/2, ... directly until a status other than diverged, or 3 attempts
    direct, k = [], 0
    while True:
        lr = LR * 0.5 ** k
        d = train_run(_cfg(data, lr), tmp_path / f"lr{lr:g}", progress=False, final_checkpoint=False)
        direct.append({"attempt": k, "lr": lr, **{key: d[key] for key in
                                                   ("health_status", "health_reasons", "valid_auc", "valid_ne",
                                                    "train_loss")}})
        k += 1
        if d["health_status"] != "diverged" or k == 3:
            break
    assert recorded == direct
    assert [a["health_status"] for a in recorded] == ["diverged", "diverged", "undertrained"]  # the data's facts
    final = tmp_path / f"lr{direct[-1]['lr']:g}"
    expected = {**_numbers(RF.read_metrics(final)),
                "retry_attempts": 2, "retry_lr_initial": LR, "retry_lr_used": LR / 4,
                "retry_history": "0.16 diverged → 0.08 diverged → 0.04 undertrained"}
    assert {k: v for k, v in _numbers(m).items() if k != "retry"} == expected
    assert m["retry"]["policy"] == dataclasses.asdict(POLICY)
    _same_run(uninterrupted, final, metrics=False)  # predictions and config (the metrics: just above)
    # the run folder holds the final attempt only: no attempt folders, no checkpoint, its config at LR / 4
    assert not (uninterrupted / layout.ATTEMPTS_DIR).exists()
    assert not (uninterrupted / layout.CHECKPOINT_FILE).exists()
    assert RF.read_config(uninterrupted)["train"]["lr"] == LR / 4
    assert sorted(os.listdir(uninterrupted)) == sorted(os.listdir(final))


def test_a_healthy_run_is_trained_once(data, tmp_path):
    m = train_with_retries(_cfg(data, 0.01), tmp_path, POLICY, final_checkpoint=False)
    assert (m["retry_attempts"], m["retry_history"], m["retry_lr_used"]) == (0, "0.01 ok", 0.01)


@pytest.mark.fault
def test_interrupted_mid_attempt_resumes_to_the_same_run(data, uninterrupted, tmp_path):
    run_dir = tmp_path / "run"
    with interrupt_training_after(BATCHES + 5), pytest.raises(Interrupted):  # attempt 1, after 5 batches
        _retried(data, run_dir)
    assert RF.is_finished(attempt_dir(run_dir, 0)) and not RF.is_finished(run_dir)
    assert (attempt_dir(run_dir, 1) / layout.CHECKPOINT_FILE).exists()
    events: list = []
    _retried(data, run_dir, events)
    assert [(e["attempt"], e["reused"]) for e in events] == [(0, True), (1, False), (2, False)]
    _same_run(run_dir, uninterrupted)


@pytest.mark.fault
def test_interrupted_between_attempts_and_while_promoting(data, uninterrupted, tmp_path):
    run_dir = tmp_path / "run"

    def stop_after_last(a: dict[str, Any]) -> None:
        if a["attempt"] == 2:
            raise Interrupted("killed once the last attempt finished")

    with pytest.raises(Interrupted):
        train_with_retries(_cfg(data, LR), run_dir, POLICY, final_checkpoint=False, on_attempt=stop_after_last)
    # a kill in the middle of the promotion: the predictions and curves already moved up, nothing else
    last = attempt_dir(run_dir, 2)
    for name in (*(layout.predictions_file(s) for s in layout.PREDICTION_SPLITS), layout.CURVES_DIR):
        os.replace(last / name, run_dir / name)
    assert not RF.is_finished(run_dir)
    events: list = []
    _retried(data, run_dir, events)
    assert [e["reused"] for e in events] == [True, True, True]  # nothing trained again
    _same_run(run_dir, uninterrupted)
    assert not (run_dir / layout.ATTEMPTS_DIR).exists()
    # a kill after metrics.json but before the attempts were removed: read back, attempts cleaned up
    shutil.copytree(uninterrupted, tmp_path / "copy")
    (tmp_path / "copy" / layout.ATTEMPTS_DIR / "0").mkdir(parents=True)
    before = RF.read_metrics(tmp_path / "copy")
    assert _retried(data, tmp_path / "copy") == before
    assert not (tmp_path / "copy" / layout.ATTEMPTS_DIR).exists()
    assert torch.get_num_threads() == 1
