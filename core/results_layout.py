"""File and folder names of results, runs and prepared artifacts, defined once.

`prepare` (`protocols`) writes artifacts, training (`harness`) writes run and sweep folders and analysis
(`analysis`) reads them and writes its report; all import the names from here (`core`, the bottom layer,
so the imports keep flowing one way: core <- protocols <- architectures <- harness <- analysis <- cli).
`tests/test_file_names_owned.py` fails when one of these names is spelled anywhere else in the package.

A run folder (`recscale train --out RUN`, or one trial of a sweep):

    RUN/
      config.yaml                   CONFIG_FILE: the resolved run config (model defaults filled in)
      metrics.json                  METRICS_FILE: written last; its presence means the run finished
      predictions_valid.parquet     predictions_file("valid"): event_id, label, score
      predictions_test.parquet      predictions_file("test")
      checkpoint.pt                 CHECKPOINT_FILE: model, optimisers, position, RNG states
      .data_fingerprint             DATA_FINGERPRINT_FILE: fingerprint of the prepared dataset the run started on
      sweep_trial.json              TRIAL_RECORD_FILE: the trial's sweep settings (sweep trials only)
      curves/                       CURVES_DIR: TensorBoard event files of the learning curves
      attempts/<k>/                 ATTEMPTS_DIR: while a sweep trial with `retry:` trains, one run folder per
                                    attempt (harness/sweep/retry.py); the last one's files are then moved up and
                                    the folder removed

A sweep folder (`recscale sweep FILE` writes `results/<name>/`):

    results/<name>/
      sweep.yaml                    SWEEP_FILE: the sweep file as launched
      runs.parquet                  RUNS_FILE: one row per finished trial
      runs/<trial>/                 RUNS_DIR: one run folder per trial
      trials.jsonl                  EVENTS_FILE: trial start / end events
      sweep_summary.json            SUMMARY_FILE: timings of the last launch
      datasets.json                 DATASETS_FILE: each prepared dataset's targets and history statistics,
                                    and how every two differ (shared targets, history membership)
      search_best.json              SEARCH_BEST_FILE: the point an Optuna search chose (search only)
      tuning.json                   TUNING_FILE: the tuning stage's table and chosen value per setting (tuning only)
      tuning/                       TUNING_DIR: the tuning stage's trials, apart from runs.parquet's:
        runs/<trial>/                 RUNS_DIR: one run folder per tuning trial
        runs.parquet                  RUNS_FILE: one row per finished tuning trial
      ray/<stage>/                  RAY_DIR: Ray Tune's experiment state (stage = tuning, search or grid)
      mlflow/                       MLFLOW_DIR: the MLflow store of `tracking: mlflow` (harness/sweep/tracking.py)
        mlflow.db                     MLFLOW_DB_FILE: its SQLite tracking database (runs, params, metrics)
        artifacts/                    MLFLOW_ARTIFACTS_DIR: its artifact root

What `recscale analyze` writes into a sweep folder, and what `recscale reference publish` adds:

      report.md                     REPORT_FILE: the report
      analysis.json                 ANALYSIS_FILE: its machine-readable summary
      plots/<name>.png              PLOTS_DIR, plot_file(name)
      score_ranks_<split>.parquet   score_ranks_file(split): dense score ranks for DeLong without run folders

A prepared artifact (`recscale prepare` writes `<out>/<source>-<protocol>-<hash16>/`; docs/protocols.md):

      manifest.json                 MANIFEST_FILE: settings, statistics, integrity record
      history.npy                   HISTORY_FILE
      exposure_item.npy             EXPOSURE_ITEM_FILE
      exposure_feedback.npy         EXPOSURE_FEEDBACK_FILE
      exposure_ts.npy               EXPOSURE_TS_FILE
      exposure_event_id.npy         EXPOSURE_EVENT_ID_FILE
      <split>_cat.npy               cat_file(split)
      <split>_num.npy               num_file(split)
      <split>_targets.parquet       targets_file(split)
      vocab/<field>.npy             VOCAB_DIR, vocab_file(field)
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
TUNING_DIR = "tuning"
RAY_DIR = "ray"
MLFLOW_DIR = "mlflow"
MLFLOW_DB_FILE = "mlflow.db"
MLFLOW_ARTIFACTS_DIR = "artifacts"

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
