"""File and folder names of results, runs and prepared artifacts, defined once, in the bottom layer so that every
writer and reader imports them one way (docs/contracts.md; `tests/test_file_names_owned.py`). What each file holds:
docs/training.md (the run folder), docs/sweeps.md ("What a sweep writes") and docs/protocols.md ("Prepared dataset
(artifact)").
"""
from __future__ import annotations

# run folder
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"
CHECKPOINT_FILE = "checkpoint.pt"
DATA_FINGERPRINT_FILE = ".data_fingerprint"
TRIAL_RECORD_FILE = "sweep_trial.json"
CURVES_DIR = "curves"
ATTEMPTS_DIR = "attempts"
#: Splits whose predictions a run stores.
PREDICTION_SPLITS: tuple[str, ...] = ("valid", "test")

# sweep folder
SWEEP_FILE = "sweep.yaml"
RUNS_FILE = "runs.parquet"
RUNS_DIR = "runs"
EVENTS_FILE = "trials.jsonl"
SUMMARY_FILE = "sweep_summary.json"
DATASETS_FILE = "datasets.json"
SEARCH_BEST_FILE = "search_best.json"
TUNING_FILE = "tuning.json"
SEEDS_ADDED_FILE = "seeds_added.json"
TUNING_DIR = "tuning"
RAY_DIR = "ray"
MLFLOW_DIR = "mlflow"
MLFLOW_DB_FILE = "mlflow.db"
MLFLOW_ARTIFACTS_DIR = "artifacts"

# prepared data: `prepare` and a sweep (under its `data.cache`, ARTIFACTS_DIR by default) write prepared datasets to
# <cache>/prepared/, a sweep its synthetic logs to <cache>/synthetic/ (docs/protocols.md)
ARTIFACTS_DIR = "artifacts"
PREPARED_DIR = f"{ARTIFACTS_DIR}/prepared"

# analysis outputs in a sweep folder
REPORT_FILE = "report.md"
ANALYSIS_FILE = "analysis.json"
PLOTS_DIR = "plots"

# prepared artifact folder
MANIFEST_FILE = "manifest.json"
HISTORY_FILE = "history.npy"
EXPOSURE_ITEM_FILE = "exposure_item.npy"
EXPOSURE_FEEDBACK_FILE = "exposure_feedback.npy"
EXPOSURE_TS_FILE = "exposure_ts.npy"
EXPOSURE_EVENT_ID_FILE = "exposure_event_id.npy"
VOCAB_DIR = "vocab"


def predictions_file(split: str) -> str:
    """`predictions_<split>.parquet`: event_id (int64), label (float32), score (float64 probability)."""
    return f"predictions_{split}.parquet"


def plot_file(name: str) -> str:
    """`<name>.png`, a figure under PLOTS_DIR."""
    return f"{name}.png"


def score_ranks_file(split: str) -> str:
    """`score_ranks_<split>.parquet`: event_id, label, one uint32 dense-rank column per compared run."""
    return f"score_ranks_{split}.parquet"


def cat_file(split: str) -> str:
    """`<split>_cat.npy`: int32 [n, 10] encoded categorical inputs of each target."""
    return f"{split}_cat.npy"


def num_file(split: str) -> str:
    """`<split>_num.npy`: float32 [n, 8] numeric inputs of each target."""
    return f"{split}_num.npy"


def targets_file(split: str) -> str:
    """`<split>_targets.parquet`: one row per target, in evaluation order."""
    return f"{split}_targets.parquet"


def vocab_file(field: str) -> str:
    """`<field>.npy` under VOCAB_DIR: int64 raw ids of the field's vocabulary."""
    return f"{field}.npy"
