"""runs.parquet columns: named in harness/runs_columns.py, written in its order, readable in every reference."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from core.results_layout import METRICS_FILE, RUNS_DIR, RUNS_FILE
from harness import runs_columns as C
from harness.sweep.collect import collect_runs, write_trial_record

REFERENCES = sorted((Path(__file__).resolve().parents[1] / "results" / "reference").glob(f"*/{RUNS_FILE}"))


def _run(sweep: Path, trial: str, seed: int) -> None:
    run_dir = sweep / RUNS_DIR / trial
    write_trial_record(run_dir, {"trial_id": trial, "stage": "grid", "arch": "whale", "seed": seed,
                                 "protocol": "exposure", "delay_s": 60.0, "history_len": 32, "task": "long_view",
                                 "dataset_id": "d-0000abcd", "model.dim": 8, "data.n_train": 100,
                                 "train.lr": 0.01, "ray_node": ""})
    metrics = {"arch": "whale", "seed": seed, "data_fingerprint": "f" * 64, "test_auc": 0.6 + seed / 100,
               "flops_per_target": 10.0, "groups": {"all": {}}}
    (run_dir / METRICS_FILE).write_text(json.dumps(metrics))


def test_collect_writes_the_leading_columns_then_the_settings_then_the_metrics(tmp_path):
    _run(tmp_path, "t1", 1)
    _run(tmp_path, "t0", 0)
    table = collect_runs(tmp_path)
    written = pq.read_schema(tmp_path / RUNS_FILE).names
    assert written == list(table.columns)
    assert written == ["trial_id", "run_dir", "stage", "arch", "seed", "protocol", "delay_s", "history_len", "task",
                       "dataset_id", "data.n_train", "model.dim", "train.lr", "ray_node", "data_fingerprint",
                       "test_auc", "flops_per_target", "row_digest"]
    assert list(C.leading_columns()) == written[:10]
    assert table[C.TRIAL_ID].tolist() == ["t0", "t1"] and table[C.RUN_DIR].tolist() == ["runs/t0", "runs/t1"]


def test_every_committed_reference_has_the_named_columns_in_order():
    assert REFERENCES, "no committed reference runs.parquet found"
    for path in REFERENCES:
        names = pq.read_schema(path).names
        leading = [c for c in names if c in C.leading_columns()]
        assert names[:len(leading)] == leading == [c for c in C.leading_columns() if c in names], path
        # `task` is newer than some references; every other named column is in each of them
        for column in (*C.leading_columns(), C.DATA_FINGERPRINT, C.FLOPS_PER_TARGET, C.PARAMS_NON_EMBEDDING,
                       C.metric_column("test", "auc")):
            assert column in names or column == C.TASK, (path, column)
