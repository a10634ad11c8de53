"""Learning curves: train_run writes TensorBoard event files with the documented tags at every
`log_every_steps` global step without changing any number of the run, and `recscale analyze` draws one
learning-curve figure per family from them (a validation panel only where a run evaluated twice or more)."""
from __future__ import annotations

import json
import math

import pandas as pd
import pyarrow.parquet as pq
import yaml

from core.results_layout import CURVES_DIR
from harness.config import load_run_config
from harness.run_folder import read_curves
from harness.train import train_run
from tests.fixtures_data import TINY_SPLITS, tiny_artifact, tiny_log  # noqa: F401

STEPS = math.ceil(TINY_SPLITS["n_train"] / 256)  # per epoch


def _cfg(data, dim=16, seed=0, **train):
    over = {"model": {"dim": dim}, "train": {"device": "cpu", "num_threads": 1, "epochs": 2, **train}, "seed": seed}
    return load_run_config(None, over, arch="whale", data=str(data))


def test_logging_writes_curves_and_changes_no_number(tiny_artifact, tmp_path):
    off = train_run(_cfg(tiny_artifact, log_every_steps=0), tmp_path / "off", progress=False)
    on = train_run(_cfg(tiny_artifact, log_every_steps=3), tmp_path / "on", progress=False)
    assert not (tmp_path / "off" / CURVES_DIR).exists()
    quality = lambda m: {k: v for k, v in m.items() if k.startswith(("valid_", "test_", "train_loss"))}  # noqa: E731
    assert quality(on) == quality(off)
    for split in ("valid", "test"):
        assert pq.read_table(tmp_path / "on" / f"predictions_{split}.parquet").equals(
            pq.read_table(tmp_path / "off" / f"predictions_{split}.parquet"))
    curves = read_curves(tmp_path / "on")
    assert {"train/loss", "train/lr", "train/grad_norm", "train/targets_per_s", "valid/auc", "valid/ne"} <= set(curves)
    assert [s for s, _ in curves["train/loss"]] == list(range(3, 2 * STEPS + 1, 3))
    assert all(v == 1e-3 for _, v in curves["train/lr"]) or all(abs(v - 1e-3) < 1e-9 for _, v in curves["train/lr"])
    # two epochs: validated after each (the best is tested, harness/train.py), each logged once
    assert [s for s, _ in curves["valid/auc"]] == [STEPS, 2 * STEPS]
    assert abs(curves["valid/auc"][on["selected_epoch"]][1] - on["valid_auc"]) < 1e-6  # stored as float32


def test_analyze_draws_one_learning_curve_figure_per_family(tiny_artifact, tmp_path):
    root = tmp_path / "sweep"
    rows = []
    for dim in (8, 16):
        for seed in (0, 1):
            trial = f"whale-seed{seed}-dim{dim}"
            m = train_run(_cfg(tiny_artifact, dim=dim, seed=seed, log_every_steps=1), root / "runs" / trial,
                          progress=False)
            rows.append({"trial_id": trial, "run_dir": f"runs/{trial}", "arch": "whale", "seed": seed,
                         "model.dim": dim, **{k: v for k, v in m.items() if not isinstance(v, (dict, list))}})
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "sweep", "base": {"arch": "whale"}}))
    from analysis.pipeline import analyze

    res = analyze(root, progress=False, plots=True)
    assert [k for k in res.plots if k.startswith("curves_")] == ["curves_whale"]
    assert (root / res.plots["curves_whale"]).stat().st_size > 10_000
    assert "## Learning curves" in (root / "report.md").read_text()
    assert json.loads((root / "analysis.json").read_text())["plots"]["curves_whale"] == "plots/curves_whale.png"


def test_mid_epoch_validation_is_logged_and_changes_no_trained_number(tiny_artifact, tmp_path):
    """`train.eval_every_steps`: the validation split evaluated every N global steps and logged, the run's
    predictions bit-for-bit those of a run without it, and the still-falling check reads that curve."""
    runs = {}
    for name, every in (("off", 0), ("on", 4)):
        runs[name] = train_run(_cfg(tiny_artifact, batch_size=64, log_every_steps=1, eval_every_steps=every),
                               tmp_path / name, progress=False)
    for split in ("valid", "test"):
        assert pq.read_table(tmp_path / "on" / f"predictions_{split}.parquet").equals(
            pq.read_table(tmp_path / "off" / f"predictions_{split}.parquet"))
    quality = lambda m: {k: v for k, v in m.items()  # noqa: E731
                         if k.startswith(("valid_", "test_", "train_loss", "epoch_history", "selected_epoch"))}
    assert quality(runs["on"]) == quality(runs["off"])
    steps = math.ceil(TINY_SPLITS["n_train"] / 64)  # 19 per epoch; two epochs, validated after each
    on, off = read_curves(tmp_path / "on"), read_curves(tmp_path / "off")
    assert on["train/loss"] == off["train/loss"]
    assert [s for s, _ in on["valid/ne"]] == sorted({*range(4, 2 * steps + 1, 4), steps, 2 * steps})
    assert [s for s, _ in off["valid/ne"]] == [steps, 2 * steps]
    # the epoch-end evaluations are the same with or without the ones in between
    assert dict(on["valid/ne"])[steps] == dict(off["valid/ne"])[steps]
    assert runs["on"]["loss_fall_curve"].startswith("valid/ne steps ")
    assert runs["off"]["loss_fall_curve"].startswith("not checked: 2 epochs and 2 validation evaluation(s)")


def test_a_mid_epoch_evaluation_draws_no_random_number_and_leaves_the_model_training(tiny_artifact, tmp_path):
    """No registered model draws random numbers in its forward pass, so the run above could not show an
    evaluation that consumed the global random state; this checks it directly."""
    import time

    import numpy as np
    import torch

    from harness.checkpoint import rng_states
    from harness.config import run_config_dict
    from harness.train import CurveLogger, build, open_dataset, validate_mid_epoch

    cfg = _cfg(tiny_artifact, log_every_steps=1, eval_every_steps=1)
    session = build(cfg, tmp_path, run_config_dict(cfg), open_dataset(cfg.data), time.perf_counter())
    session.model.train()
    weights = {k: v.clone() for k, v in session.model.state_dict().items()}
    before = rng_states()
    curves = CurveLogger(tmp_path, 1, torch.device("cpu"))
    assert validate_mid_epoch(session, curves, 3) > 0
    curves.close()
    after = rng_states()
    assert after["python"] == before["python"] and torch.equal(after["torch"], before["torch"])
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
               for a, b in zip(after["numpy"], before["numpy"]))
    assert session.model.training
    assert all(torch.equal(v, weights[k]) for k, v in session.model.state_dict().items())
    assert [s for s, _ in read_curves(tmp_path)["valid/ne"]] == [3]


def test_a_validation_panel_needs_two_evaluations(tmp_path):
    """Runs that evaluated validation once (one epoch) get no validation-NE panel (one point is no curve): the
    figure is the training-loss panel alone; with two evaluations the panel is drawn beside it."""
    from PIL import Image
    from torch.utils.tensorboard import SummaryWriter

    from analysis.pipeline import analyze

    widths = {}
    for evaluations in (1, 2):
        root = tmp_path / f"eval{evaluations}"
        rows = []
        for seed in (0, 1):
            trial = f"whale-seed{seed}"
            with SummaryWriter(str(root / "runs" / trial / CURVES_DIR)) as writer:
                for step in range(1, 9):
                    writer.add_scalar("train/loss", 0.7 - 0.01 * step, step)
                for step in (8, 4)[:evaluations]:
                    writer.add_scalar("valid/ne", 0.95, step)
            rows.append({"trial_id": trial, "run_dir": f"runs/{trial}", "arch": "whale", "seed": seed,
                         "model.dim": 8, "test_auc": 0.7, "test_logloss": 0.5})
        pd.DataFrame(rows).to_parquet(root / "runs.parquet")
        (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "sweep", "base": {"arch": "whale"}}))
        res = analyze(root, progress=False, plots=True)
        widths[evaluations] = Image.open(root / res.plots["curves_whale"]).size[0]
    assert widths == {1: 6.5 * 110, 2: 11 * 110}  # figure inches x dpi: one panel, then two
