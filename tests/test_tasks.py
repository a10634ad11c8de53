"""Tasks: the target label is chosen when a dataset is prepared (`task`: long_view, the default, or
effective_view); the label column is the log's column of that name, the oracle is kept only for long_view,
default-task artifacts and sweep datasets keep their names, and the analysis fits each task separately."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from sklearn.metrics import roc_auc_score

from analysis.pipeline import analyze
from core.typed_config import ConfigError
from harness.config import load_run_config
from harness.sweep.plan import plan_sweep
from harness.sweep.schema import parse_sweep
from harness.train import train_run
from protocols import SOURCES
from protocols.prepare import PrepareConfig, prepare
from tests.fixtures_data import TINY_SPLITS, tiny_log  # noqa: F401  (pytest fixture)


def _prepare(log: Path, out: Path, **task) -> Path:
    cfg = PrepareConfig.of(source="synthetic", root=str(log), protocol="exposure", history_len=16, out=str(out),
                        **TINY_SPLITS, **task)
    return prepare(cfg, progress=False)


def test_effective_view_task_labels_targets_with_the_logs_column_and_drops_the_oracle(tiny_log, tmp_path):  # noqa: F811
    default = _prepare(tiny_log, tmp_path / "a")
    explicit = _prepare(tiny_log, tmp_path / "b", task="long_view")
    effective = _prepare(tiny_log, tmp_path / "c", task="effective_view")
    assert default.name == explicit.name != effective.name  # the default task leaves folder names as before
    assert "task" not in json.loads((default / "manifest.json").read_text())["parameters"]
    assert json.loads((effective / "manifest.json").read_text())["task"] == "effective_view"
    log = SOURCES.get("synthetic")(tiny_log)
    for split in ("train", "valid", "test"):
        lv = pq.read_table(default / f"{split}_targets.parquet").to_pandas()
        ev = pq.read_table(effective / f"{split}_targets.parquet").to_pandas()
        assert lv["event_id"].tolist() == ev["event_id"].tolist()  # same targets, another label
        assert np.array_equal(ev["label"].to_numpy(), log["effective_view"][ev["row"].to_numpy()].astype(np.float32))
        assert np.array_equal(lv["label"].to_numpy(), log["long_view"][lv["row"].to_numpy()].astype(np.float32))
        assert "true_p" in lv.columns and "true_p" not in ev.columns
    assert not np.array_equal(lv["label"].to_numpy(), ev["label"].to_numpy())
    cfg = load_run_config(None, {"model": {"dim": 16}, "train": {"num_threads": 1}}, arch="wukong", data=str(effective))
    metrics = train_run(cfg, tmp_path / "run", progress=False)
    pred = pq.read_table(tmp_path / "run" / "predictions_test.parquet").to_pandas()
    assert metrics["test_auc"] == pytest.approx(roc_auc_score(pred["label"], pred["score"]), abs=1e-9)
    assert not any(k.startswith("oracle_") for k in metrics)
    with pytest.raises(ConfigError, match=r"task: 'click' is not allowed \(allowed: long_view, effective_view\)"):
        PrepareConfig.of(task="click")


SWEEP = {
    "name": "tasks",
    "data": {"source": "synthetic", "scale": "tiny", "history_len": 16, "n_train": 100, "n_valid": 50, "n_test": 50},
    "arch": "wukong",
    "grid": {"task": ["long_view", "effective_view"], "seed": [0]},
}


def _plan(sweep: dict):
    return plan_sweep(parse_sweep(yaml.safe_dump(sweep)))


def test_a_task_axis_makes_one_dataset_per_task_and_a_task_column():
    plan = _plan(SWEEP)
    assert len(plan.datasets) == 2
    assert sorted(t.record()["task"] for t in plan.trials) == ["effective_view", "long_view"]
    one = _plan({**SWEEP, "grid": {"seed": [0]}})
    explicit = _plan({**SWEEP, "grid": {"seed": [0]}, "data": {**SWEEP["data"], "task": "long_view"}})
    assert one.datasets[0].dataset_id == explicit.datasets[0].dataset_id  # the default task is not hashed
    assert one.datasets[0].dataset_id in {d.dataset_id for d in plan.datasets}
    assert "task" not in one.datasets[0].prepare


def test_analysis_fits_each_tasks_scaling_separately(tmp_path):
    """WHALE's dAUC over Wukong follows slope 0.2 on long_view and 0.4 on effective_view (no noise)."""
    rows = []
    flops = {32: 2e6, 64: 8e6, 128: 32e6, 256: 128e6}
    for task, slope, base in (("long_view", 0.2, 0.72), ("effective_view", 0.4, 0.65)):
        for seed in range(3):
            b = base + 1e-4 * seed
            rows.append({"trial_id": f"wukong-{task}-{seed}", "arch": "wukong", "seed": seed, "task": task,
                         "protocol": "exposure", "delay_s": 60, "history_len": 32, "model.dim": 64,
                         "test_auc": b, "flops_per_target": 0.4e6})
            for dim, f in flops.items():
                rows.append({"trial_id": f"whale-{task}-{dim}-{seed}", "arch": "whale", "seed": seed, "task": task,
                             "protocol": "exposure", "delay_s": 60, "history_len": 32, "model.dim": dim,
                             "test_auc": b + np.exp(-4.7) * (f / 1e6) ** slope, "flops_per_target": f})
    root = tmp_path / "tasks"
    root.mkdir()
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    analysis = {"baseline": "wukong", "metrics": ["auc"], "n_resamples": 999,
                "scaling": {"reference": {"arch": "wukong"}, "families": ["whale"]}}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "tasks", "analysis": analysis}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyze(root, progress=False, plots=False)
    fits = {f["family"]: f["fit"]["slope"] for f in json.loads((root / "analysis.json").read_text())["scaling"]
            if f["metric"] == "auc" and f.get("fit")}
    assert fits == {"whale, task=effective_view": pytest.approx(0.4, abs=1e-6),
                    "whale, task=long_view": pytest.approx(0.2, abs=1e-6)}
