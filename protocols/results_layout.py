"""File and folder names of results, defined once.

Training (`harness`) writes these folders and analysis (`analysis`) reads them; both import the
names from here (a `protocols`-level module, so the imports keep flowing one way:
protocols -> architectures -> harness -> analysis).

A run folder (`recscale train --out RUN`, or one trial of a sweep):

    RUN/
      config.yaml                   CONFIG_FILE: the resolved run config (model defaults filled in)
      metrics.json                  METRICS_FILE: written last; its presence means the run finished
      predictions_valid.parquet     predictions_file("valid"): event_id, label, score
      predictions_test.parquet      predictions_file("test")
      checkpoint.pt                 CHECKPOINT_FILE: model, optimisers, position, RNG states
      sweep_trial.json              TRIAL_RECORD_FILE: the trial's sweep settings (sweep trials only)

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
      ray/<stage>/                  RAY_DIR: Ray Tune's experiment state (stage = search or grid)
"""
from __future__ import annotations

# run folder
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"
CHECKPOINT_FILE = "checkpoint.pt"
TRIAL_RECORD_FILE = "sweep_trial.json"
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
RAY_DIR = "ray"


def predictions_file(split: str) -> str:
    """`predictions_<split>.parquet`: event_id (int64), label (float32), score (float64 probability)."""
    return f"predictions_{split}.parquet"
