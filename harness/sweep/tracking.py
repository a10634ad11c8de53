"""`tracking: mlflow`: every trial of a sweep as an MLflow run, through Ray Tune's MLflow callback, its curves read back
from the run folder when the trial reports, a resumed trial continuing its run (docs/sweeps.md, "Experiment tracking").
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.tune.result import TIMESTEPS_TOTAL

from core.results_layout import CONFIG_FILE, MLFLOW_ARTIFACTS_DIR, MLFLOW_DB_FILE, MLFLOW_DIR, TRIAL_RECORD_FILE
from core.typed_config import flat_keys
from harness import runs_columns as C
from harness.run_folder import read_curves

from .trainable import TrialContext, search_trial_id

#: MLflow's limits on one `log_batch` call.
_BATCH_METRICS = 1000
_BATCH_PARAMS = 100


def store_dir(sweep_dir: Path | str) -> Path:
    """The sweep's MLflow store folder."""
    return Path(sweep_dir).resolve() / MLFLOW_DIR


def store_uri(sweep_dir: Path | str) -> str:
    """The tracking URI of the sweep's MLflow store (an SQLite database in `store_dir`)."""
    return f"sqlite:///{store_dir(sweep_dir) / MLFLOW_DB_FILE}"


class SweepMLflowCallback(MLflowLoggerCallback):
    """One stage's trials into the sweep's MLflow store (see the module docstring)."""

    def __init__(self, ctx: TrialContext) -> None:
        super().__init__(store_uri(ctx.sweep_dir), experiment_name=ctx.sweep.name,
                         tags={"sweep": ctx.sweep.name, "stage": ctx.stage}, log_params_on_trial_end=True)
        self.stage, self.runs_dir = ctx.stage, str(ctx.runs_dir())
        self.store = str(store_dir(ctx.sweep_dir))

    def setup(self, *args: Any, **kwargs: Any) -> None:
        # the experiment is made here with its artifact root in the store (MLflow's default is ./mlruns)
        Path(self.store).mkdir(parents=True, exist_ok=True)
        client = self._client()
        if client.get_experiment_by_name(self.experiment_name) is None:
            client.create_experiment(self.experiment_name,
                                     artifact_location=(Path(self.store) / MLFLOW_ARTIFACTS_DIR).as_uri())
        super().setup(*args, **kwargs)

    def _client(self) -> Any:
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri)

    def _trial_id(self, trial: Any) -> str:
        """The trial's id (its run folder's name): the Tune trial's name in the grid and tuning stages
        (`launcher.grid_trial_name`), from Tune's id in a search. (Tune overwrites a reported `trial_id` with
        its own.)"""
        return search_trial_id(trial.trial_id) if self.stage == "search" else str(trial)

    def log_trial_start(self, trial: Any) -> None:
        if trial not in self._trial_runs:  # a resumed sweep: continue the run this trial had
            found = self._client().search_runs(
                [self.mlflow_util.experiment_id], max_results=1,
                filter_string=f"tags.stage = '{self.stage}' and tags.trial_name = '{trial}'")
            if found:
                self._trial_runs[trial] = found[0].info.run_id
        super().log_trial_start(trial)

    def log_trial_result(self, iteration: int, trial: Any, result: dict) -> None:
        from mlflow.entities import Metric

        run_id, trial_id = self._trial_runs[trial], self._trial_id(trial)
        client = self._client()
        client.set_tag(run_id, C.TRIAL_ID, trial_id)
        curves = read_curves(Path(self.runs_dir) / trial_id)
        now = int(time.time() * 1000)
        points = [Metric(tag, value, now, step) for tag, series in curves.items() for step, value in series]
        if not client.get_run(run_id).data.metrics:  # not already logged by an earlier launch
            for i in range(0, len(points), _BATCH_METRICS):
                client.log_batch(run_id, metrics=points[i:i + _BATCH_METRICS])
        reported = {k: v for k, v in result.items() if k != "config"}  # the config goes to params
        if points:
            reported[TIMESTEPS_TOTAL] = max(p.step for p in points)
        super().log_trial_result(iteration, trial, reported)
        # a trial reports once, when its run is done: complete the MLflow run now, so that a sweep interrupted
        # before Tune ends the trial (and then resumed with nothing left to run) leaves no run half-written
        self._log_config(trial)
        self.mlflow_util.end_run(run_id=run_id, status="FINISHED")

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        self._log_config(trial)  # a failed trial reported nothing: its config as far as it was written
        self.mlflow_util.end_run(run_id=self._trial_runs[trial], status="FAILED" if failed else "FINISHED")

    def _log_config(self, trial: Any) -> None:
        """The trial's params (see the module docstring) that its MLflow run does not hold yet."""
        from mlflow.entities import Param

        run_id, run_dir = self._trial_runs[trial], Path(self.runs_dir) / self._trial_id(trial)
        config: dict[str, Any] = {}
        if (run_dir / CONFIG_FILE).exists():
            config.update(flat_keys(yaml.safe_load((run_dir / CONFIG_FILE).read_text()) or {}))
        if (run_dir / TRIAL_RECORD_FILE).exists():
            config.update(flat_keys(json.loads((run_dir / TRIAL_RECORD_FILE).read_text())))
        client = self._client()
        logged = client.get_run(run_id).data.params  # a resumed trial's run may hold them already
        params = [Param(k, str(v)) for k, v in config.items() if k not in logged]
        for i in range(0, len(params), _BATCH_PARAMS):
            client.log_batch(run_id, params=params[i:i + _BATCH_PARAMS])
