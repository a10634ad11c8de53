"""`tracking: mlflow` (harness/sweep/tracking.py): a sweep's trials land in an MLflow store in its folder.

- (slow) a 2-trial sweep (Wukong, seeds 0 and 1, tiny synthetic log) on a real Ray, read back through MLflow's own
  client: one finished run per trial, tagged with its trial id; its params hold the trial's config columns of
  runs.parquet; its `valid_auc` history holds runs.parquet's value (exactly: MLflow stores float64, compared
  to 1e-12); its curves equal the run folder's TensorBoard event files point for point (MLflow keeps the
  float32 value TensorBoard wrote), and the last `valid/auc` point is the run's final validation AUC (to
  1e-6, float32 rounding);
- without mlflow (a subprocess where `import mlflow` fails: `sys.modules["mlflow"] = None`) `recscale sweep`
  refuses the file before preparing anything, naming the `tracking` extra; an unknown tracker is refused
  naming the field and the valid values.
"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from core.typed_config import ConfigError
from harness.run_folder import read_curves
from harness.sweep.schema import parse_sweep

REPO = Path(__file__).resolve().parents[1]
SEEDS = (0, 1)
#: runs.parquet columns that are the trial's config (the rest are metrics)
CONFIG_PREFIXES = ("model.", "train.")
CONFIG_COLUMNS = ("trial_id", "stage", "arch", "seed", "protocol", "task", "dataset_id")


def _sweep(name: str, cache: Path, **extra) -> dict:
    return {
        "name": name,
        "data": {"source": "synthetic", "scale": "tiny", "history_len": 8, "n_train": 384, "n_valid": 128,
                 "n_test": 128, "cache": str(cache)},
        "train": {"batch_size": 64, "eval_batch_size": 256, "device": "cpu", "log_every_steps": 2},
        "model": {"dim": 8, "num_layers": 1},
        "grid": {"arch": ["wukong"], "seed": list(SEEDS)},
        "resources": {"cpu": 1},
        "max_concurrent": 2,
        **extra,
    }


@pytest.mark.slow  # Ray start-up and two trials: ~40 s here
def test_sweep_trials_land_in_the_mlflow_store(tmp_path):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from harness.sweep.launcher import run_sweep
    from harness.sweep.tracking import store_uri

    sweep = parse_sweep(yaml.safe_dump(_sweep("tracked", tmp_path / "cache", tracking="mlflow")))
    outcome = run_sweep(sweep, results_root=tmp_path / "results", num_cpus=2)
    assert outcome.complete and outcome.finished == len(SEEDS)
    sweep_dir = outcome.sweep_dir
    table = pd.read_parquet(sweep_dir / "runs.parquet").set_index("trial_id", drop=False)
    assert (sweep_dir / "mlflow" / "mlflow.db").is_file()

    client = MlflowClient(tracking_uri=store_uri(sweep_dir))
    experiment = client.get_experiment_by_name("tracked")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    by_trial = {r.data.tags["trial_id"]: r for r in runs}
    assert len(runs) == len(SEEDS) and set(by_trial) == set(table["trial_id"]) == {f"wukong-seed{s}" for s in SEEDS}

    for trial_id, run in by_trial.items():
        row = table.loc[trial_id]
        assert run.info.status == "FINISHED" and run.data.tags["stage"] == "grid"
        # params: every config column of the trial's runs.parquet row, and every setting of its config.yaml
        params = run.data.params
        config = [c for c in table.columns if c in CONFIG_COLUMNS or c.startswith(CONFIG_PREFIXES)]
        assert {"arch", "seed", "dataset_id", "model.dim", "train.batch_size"} <= set(config)
        for column in config:
            value = row[column]
            expected = "None" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
            assert params.get(column) == expected, (trial_id, column)
        resolved = yaml.safe_load((sweep_dir / row["run_dir"] / "config.yaml").read_text())
        for section in ("model", "train"):
            for key, value in resolved[section].items():
                assert params.get(f"{section}.{key}") == str(value), (trial_id, section, key)
        assert (params["train.lr"], params["data"], params["model.history_len"]) == (
            str(resolved["train"]["lr"]), resolved["data"], "8")

        # the final validation AUC, as runs.parquet has it (float64 both sides)
        history = client.get_metric_history(run.info.run_id, "valid_auc")
        assert len(history) == 1 and abs(history[0].value - row["valid_auc"]) <= 1e-12

        # the learning curves: the run folder's event files, point for point
        curves = read_curves(sweep_dir / row["run_dir"])
        assert {"train/loss", "train/lr", "train/grad_norm", "train/targets_per_s", "valid/auc"} <= set(curves)
        for tag, points in curves.items():
            logged = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, tag))
            assert logged == points, tag
        assert len(curves["train/loss"]) == 384 // 64 // 2  # 6 steps, a point every 2
        last_step, last_auc = curves["valid/auc"][-1]
        assert last_step == 384 // 64 and abs(last_auc - row["valid_auc"]) <= 1e-6
        assert history[0].step == last_step  # the trial's scalars sit at the run's last step


_WITHOUT_MLFLOW = """
import sys
sys.modules["mlflow"] = None  # `import mlflow` now raises ImportError, as when it is not installed
from cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_tracking_without_mlflow_is_refused_naming_the_extra(tmp_path):
    path = tmp_path / "tracked.yaml"
    path.write_text(yaml.safe_dump(_sweep("tracked", tmp_path / "cache", tracking="mlflow")))
    done = subprocess.run([sys.executable, "-c", _WITHOUT_MLFLOW, "sweep", str(path), "--results",
                           str(tmp_path / "results")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "tracking: mlflow needs the `mlflow` package" in done.stderr, done.stderr
    assert "recscale[tracking]" in done.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()  # nothing prepared or run


def test_unknown_tracker_is_refused_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"^tracking: 'wandb' is not one of \['mlflow'\]"):
        parse_sweep(yaml.safe_dump(_sweep("tracked", tmp_path / "cache", tracking="wandb")))
    assert parse_sweep(yaml.safe_dump(_sweep("plain", tmp_path / "cache"))).config.tracking is None
