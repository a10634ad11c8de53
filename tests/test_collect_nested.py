"""runs.parquet spells nested trial settings (a `train.schedule` mapping) as one scalar column per leaf."""
from __future__ import annotations

import json

import pandas as pd

from core.results_layout import METRICS_FILE, RUNS_DIR, TRIAL_RECORD_FILE
from core.typed_config import flat_keys
from harness.sweep.collect import collect_runs


def test_a_record_is_spelled_one_key_per_leaf_and_keeps_scalars():
    record = {"arch": "whale", "train.lr": 0.01,
              "train.schedule": {"kind": "cosine", "floor": 0.1, "extra": {"a": 1}}}
    assert flat_keys(record) == {"arch": "whale", "train.lr": 0.01, "train.schedule.kind": "cosine",
                                 "train.schedule.floor": 0.1, "train.schedule.extra.a": 1}


def test_collected_table_has_only_hashable_cells(tmp_path):
    for seed in (0, 1):
        run = tmp_path / RUNS_DIR / f"whale-seed{seed}"
        run.mkdir(parents=True)
        record = {"trial_id": run.name, "stage": "grid", "arch": "whale", "seed": seed,
                  "train.schedule": {"kind": "cosine", "warmup_fraction": 0.05}}
        (run / TRIAL_RECORD_FILE).write_text(json.dumps(record))
        (run / METRICS_FILE).write_text(json.dumps({"test_auc": 0.6 + seed / 100}))
    table = collect_runs(tmp_path)
    assert table["train.schedule.kind"].tolist() == ["cosine", "cosine"]
    assert "train.schedule" not in table.columns
    assert not table.duplicated(subset=["train.schedule.kind", "train.schedule.warmup_fraction", "seed"]).any()
    assert pd.read_parquet(tmp_path / "runs.parquet")["train.schedule.warmup_fraction"].tolist() == [0.05, 0.05]
