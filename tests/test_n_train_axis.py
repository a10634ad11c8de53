"""`data.n_train` as a sweep axis: planned datasets, the trial record's column, runs.parquet and the analysis' config
columns, the dry-run table, and errors naming the grid key."""
from __future__ import annotations

import json

import pytest
import yaml

from analysis.collect import config_columns
from core.typed_config import ConfigError
from harness.sweep.collect import collect_runs, write_trial_record
from harness.sweep.dry_run import estimate_costs, format_plan
from harness.sweep.plan import plan_sweep
from harness.sweep.schema import parse_sweep

BASE = {
    "name": "t",
    "data": {"source": "synthetic", "scale": "tiny", "history_len": 8, "n_valid": 50, "n_test": 50},
    "model": {"dim": 8},
    "grid": {"arch": ["whale"], "model.dim": [4, 8], "data.n_train": [80, 40], "seed": [0, 1]},
}


def _plan(**grid):
    raw = json.loads(json.dumps(BASE))
    raw["grid"].update(grid)
    return plan_sweep(parse_sweep(yaml.safe_dump(raw)))


def test_each_n_train_is_its_own_dataset_and_record_column():
    plan = _plan()
    assert len(plan.trials) == 8
    assert sorted(d.prepare["n_train"] for d in plan.datasets) == [40, 80]
    for t in plan.trials:
        record = t.record()
        assert record["data.n_train"] == t.dataset.prepare["n_train"] == t.point["data.n_train"]
    assert len({t.trial_id for t in plan.trials}) == 8
    assert any("-n_train40" in t.trial_id for t in plan.trials)


def test_sweeps_without_a_data_axis_record_the_same_columns_as_before():
    raw = json.loads(json.dumps(BASE))
    raw["data"]["n_train"] = 80
    del raw["grid"]["data.n_train"]
    (t, *_) = plan_sweep(parse_sweep(yaml.safe_dump(raw))).trials
    assert not [k for k in t.record() if k.startswith("data.")]


def test_dry_run_table_shows_the_axis(tmp_path):
    plan = _plan()
    text = format_plan(plan, estimate_costs(plan.trials), tmp_path)
    assert "data.n_train" in text
    assert "n_train/valid/test=40/50/50" in text and "n_train/valid/test=80/50/50" in text


def test_bad_n_train_values_name_the_grid_key():
    with pytest.raises(ConfigError, match=r"^grid\.data\.n_train"):
        _plan(**{"data.n_train": [80, "lots"]})


def test_runs_parquet_and_analysis_carry_n_train_as_a_data_setting(tmp_path):
    for t in _plan().trials:
        run = tmp_path / "runs" / t.trial_id
        write_trial_record(run, t.record())
        (run / "metrics.json").write_text(json.dumps({"valid_logloss": 0.5,
                                                      "train_targets": t.dataset.prepare["n_train"]}))
    table = collect_runs(tmp_path)
    assert sorted(table["data.n_train"].unique()) == [40, 80]
    assert "data.n_train" in config_columns(table)
