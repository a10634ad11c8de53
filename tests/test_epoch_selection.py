"""Resume means resume, and a longer run tests its best validation epoch.

- `--resume` on a folder that does not exist is exit 2 naming it (it used to start a fresh run silently);
- a run of several epochs validates after every epoch and is tested with the best validation epoch's
  weights (`train.select_epoch: best_valid`, the default); metrics.json records `selected_epoch`.
  Checked independently: runs of 1, 2, 3 and 4 epochs with `select_epoch: last` give each epoch's
  validation and test AUC (the learning rate is constant and batch k depends only on (seed, epoch, k), so
  a K-epoch run ends where a longer one stands after K epochs); the 4-epoch default run must pick the
  argmax of those validation AUCs and report that run's test AUC;
- a one-epoch run is the same whatever `select_epoch` says (nothing extra is evaluated);
- `select_epoch` counts as a config difference on resume only when the run has several epochs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.checkpoint import config_differences
from harness.config import load_run_config
from harness.train import train_run
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)

REPO = Path(__file__).resolve().parents[1]
TRAIN = {"lr": 0.003, "num_threads": 1, "batch_size": 128}


def _run(art: Path, out: Path, **train) -> dict:
    cfg = load_run_config(None, {"model": {"dim": 8}, "train": {**TRAIN, **train}}, arch="wukong", data=str(art))
    return train_run(cfg, out, progress=False)


@pytest.mark.fault
def test_resume_of_a_folder_that_does_not_exist_is_an_error(tiny_artifact, tmp_path):  # noqa: F811
    out = tmp_path / "mistyped"
    proc = subprocess.run([sys.executable, "-m", "cli", "train", "--arch", "wukong", "--data",
                           str(tiny_artifact), "--set", "dim=8", "--out", str(out), "--resume", "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RECSCALE_MALLOC_REEXEC": "1"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"recscale train: error: {out}: --resume: no such run folder, so nothing to "
                                   "resume; check --out, or leave out --resume to start a new run there")
    assert not out.exists()


@pytest.mark.fault
def test_several_epochs_test_the_best_validation_epoch(tiny_artifact, tmp_path):  # noqa: F811
    per_epoch = [_run(tiny_artifact, tmp_path / f"last{k}", epochs=k, select_epoch="last") for k in (1, 2, 3, 4)]
    valid = [m["valid_auc"] for m in per_epoch]
    best = max(range(4), key=lambda e: valid[e])
    assert best != 3, "the check needs a run whose last epoch is not its best"
    got = _run(tiny_artifact, tmp_path / "best", epochs=4)
    assert got["selected_epoch"] == best
    assert got["valid_auc"] == valid[best] and got["test_auc"] == per_epoch[best]["test_auc"]
    assert [h["valid_auc"] for h in got["epoch_history"]] == valid
    last = per_epoch[3]
    assert last["selected_epoch"] == 3 and "valid_auc" not in last["epoch_history"][0]
    assert json.loads((tmp_path / "best" / "metrics.json").read_text())["selected_epoch"] == best


def test_one_epoch_run_is_the_same_under_either_rule(tiny_artifact, tmp_path):  # noqa: F811
    a = _run(tiny_artifact, tmp_path / "a", epochs=1)
    b = _run(tiny_artifact, tmp_path / "b", epochs=1, select_epoch="last")
    keys = [k for k in a if k.startswith(("valid_", "test_", "oracle_")) or k in ("train_loss", "epoch_history")]
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
    assert a["selected_epoch"] == b["selected_epoch"] == 0
    for split in ("valid", "test"):
        assert (tmp_path / "a" / f"predictions_{split}.parquet").read_bytes() == \
            (tmp_path / "b" / f"predictions_{split}.parquet").read_bytes()


@pytest.mark.parametrize("epochs,differs", [(1, False), (2, True)])
def test_select_epoch_counts_as_a_difference_only_when_there_are_several_epochs(epochs, differs):
    saved = {"train": {"epochs": epochs, "lr": 0.001, "select_epoch": "last"}, "seed": 0}
    current = {"train": {"epochs": epochs, "lr": 0.001, "select_epoch": "best_valid"}, "seed": 0}
    diffs = config_differences(saved, current)
    assert diffs == (["train.select_epoch: 'last' -> 'best_valid'"] if differs else [])
    assert config_differences(saved, {"train": {**current["train"], "select_epoch": "last"}, "seed": 0}) == []
