"""Learning curves: train_run writes TensorBoard event files with the documented tags at every
`log_every_steps` global step without changing any number of the run, and `recscale analyze` draws one
learning-curve figure per family from them."""
from __future__ import annotations

import json
import math

import pandas as pd
import pyarrow.parquet as pq
import yaml

from core.results_layout import CURVES_DIR
from harness.config import load_run_config
from harness.curves import read_curves
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
