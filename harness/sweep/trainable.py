"""The Ray Tune function trainable: one trial = one `train_run(resume=True)` into `results/<sweep>/runs/<trial>/`
(`tuning/runs/<trial>/` in the tuning stage), its start, attempts, failures and end logged to trials.jsonl
(docs/sweeps.md, "Interruptions, failures, resume"). A run that ends unhealthy is trained again at a lower learning
rate under `retry:`, each attempt a run folder of its own, the last one promoted into the trial's (docs/sweeps.md,
"Retry").
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from core import results_layout as layout
from core.errors import RecscaleError, one_line
from core.results_layout import CHECKPOINT_FILE, EVENTS_FILE, MANIFEST_FILE, METRICS_FILE, RUNS_DIR, TUNING_DIR
from core.typed_config import from_dict
from harness import run_folder
from harness import run_health as H
from harness import runs_columns as C
from harness.config import RunConfig, TrainConfig
from harness.train import train_run

from .collect import scalar_metrics, write_trial_record
from .plan import TrialPlan, resolve_trial, tuning_twin
from .schema import RetrySection, Sweep

#: Name of the tuning stage (its run folders go under TUNING_DIR; `harness.sweep.tuning`).
TUNING_STAGE = "tuning"
#: Key of the grid stage's one Tune axis: its values are the distinct grid points (plan.grid_points).
GRID_POINT = "point"
#: Key of the result a trial reports just before raising a failure that a retry would repeat.
FAILS_ALIKE = "fails_alike"


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one stage shares: the sweep, its folder, the datasets, fixed values and (grid stage
    of a sweep with a tuning stage) the tuning choice, a `harness.sweep.tuning.TuningChoice`."""

    sweep: Sweep
    sweep_dir: str
    dataset_paths: Mapping[str, str]
    stage: str = "grid"
    fixed: Mapping[str, Any] = field(default_factory=dict)
    choice: Any = None

    def runs_dir(self) -> Path:
        """Where this stage's run folders go: `runs/`, or `tuning/runs/` for the tuning stage."""
        root = Path(self.sweep_dir)
        return (root / TUNING_DIR if self.stage == TUNING_STAGE else root) / RUNS_DIR


def trial_threads(trial: Any, resources: Any) -> int:
    """Torch threads a trial trains with: its `train.num_threads`, else the sweep's CPUs per trial (the dry run's
    step timing uses the same)."""
    return int(trial.train.get("num_threads") or max(1, int(resources.cpu)))


def search_trial_id(tune_trial_id: str) -> str:
    """The trial id (run folder name) of a search trial: from Tune's id, as no grid point names it."""
    return f"search-{tune_trial_id}"


def log_event(sweep_dir: Path, **event: Any) -> None:
    """Append one JSON line to trials.jsonl (a single O_APPEND write, safe across processes)."""
    line = (json.dumps({"time": time.time(), "pid": os.getpid(), **event}, default=str) + "\n").encode()
    fd = os.open(sweep_dir / EVENTS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_events(sweep_dir: Path) -> list[dict[str, Any]]:
    path = Path(sweep_dir) / EVENTS_FILE
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        with suppress(ValueError):  # a record cut short by a full disk or a kill is skipped
            events.append(json.loads(line))
    return events


def ray_node() -> str:
    """The Ray node this process runs on (the start of its node id), "" outside Ray."""
    import ray

    return ray.get_runtime_context().get_node_id()[:12] if ray.is_initialized() else ""


def check_dataset_readable(path: Path | str) -> None:
    """Refuse to train where the prepared dataset cannot be read: every node of a cluster must see the
    artifacts the driver prepared, at the same path (shared storage; docs/sweeps.md)."""
    manifest = Path(path) / MANIFEST_FILE
    try:
        manifest.open("rb").close()
    except OSError as e:
        raise RecscaleError(
            f"{path}: the prepared dataset cannot be read on Ray node {ray_node() or 'here'} "
            f"({socket.gethostname()}): {e.strerror or e}. Every node must see the driver's artifact and results "
            "folders at the same path (shared storage)") from None


def run_trial(config: dict[str, Any], context: TrialContext) -> dict[str, Any]:
    """Tune entry point: train (or finish, or reuse) the trial's run and return its scalar metrics."""
    from ray import tune

    t_start = time.perf_counter()
    trial_id = None
    if context.stage == "search":
        trial_id = search_trial_id(tune.get_context().get_trial_id())
    else:
        config = config[GRID_POINT]
    fixed, tuned = context.fixed, None
    if context.stage == "grid" and context.choice is not None:
        fixed, tuned = {**fixed, **context.choice.fixed_for(context.sweep, config)}, context.choice.param
    trial = resolve_trial(context.sweep, config, stage=context.stage, trial_id=trial_id, fixed=fixed, tuned=tuned)
    sweep_dir = Path(context.sweep_dir)
    run_dir = context.runs_dir() / trial.trial_id
    log_event(sweep_dir, trial=trial.trial_id, event="start")
    try:
        return _train_trial(trial, context, run_dir, t_start)
    except Exception as e:
        if fails_alike(e, sweep_dir, trial.trial_id) and context.stage != "search":  # search: Optuna wants its metric
            tune.report({FAILS_ALIKE: f"{type(e).__name__}: {one_line(e)}"})
        raise


def fails_alike(error: Exception, sweep_dir: Path, trial_id: str) -> bool:
    """Record the failure in trials.jsonl; whether a retry would repeat it: a RecscaleError (the input's: a config,
    the data, a refused checkpoint, a damaged run folder), or the same type and message as the trial's previous
    attempt (a worker that died raised nothing, and is retried)."""
    cause = f"{type(error).__name__}: {one_line(error)}"
    before = [e for e in read_events(sweep_dir) if e.get("trial") == trial_id and e["event"] in ("error", "end")]
    log_event(sweep_dir, trial=trial_id, event="error", error=cause)
    return isinstance(error, RecscaleError) or (bool(before) and before[-1].get("error") == cause)


def _train_trial(trial: TrialPlan, context: TrialContext, run_dir: Path, t_start: float) -> dict[str, Any]:
    sweep_dir = Path(context.sweep_dir)
    train = from_dict(TrainConfig, trial.train, prefix="train.")
    train.num_threads = trial_threads(trial, context.sweep.config.resources)
    torch.set_num_threads(train.num_threads)
    cfg = RunConfig(arch=trial.arch, data=context.dataset_paths[trial.dataset.dataset_id],
                    model=trial.model_config, train=train, seed=trial.seed)
    check_dataset_readable(cfg.data)
    write_trial_record(run_dir, {**trial.record(), C.RAY_NODE: ray_node()})
    policy = retry_policy(context.sweep, context.stage)
    copied = _copy_tuning_twin(trial, context, run_dir if policy is None else attempt_dir(run_dir, 0))
    # finished before this call, or copied from its tuning twin: train_run only reads it back
    reused = run_folder.is_finished(run_dir) or copied is not None
    # or a retry had begun an attempt, which the resumed trial continues
    resume = reused or (run_dir / CHECKPOINT_FILE).exists() or (run_dir / layout.ATTEMPTS_DIR).is_dir()
    keep = context.sweep.config.keep_checkpoints
    if policy is not None:
        metrics = train_with_retries(
            cfg, run_dir, policy, final_checkpoint=keep,
            on_attempt=lambda a: log_event(sweep_dir, trial=trial.trial_id, event="attempt", **a))
    else:
        # always resume=True: the folder already holds sweep_trial.json (and, after a retry, maybe config.yaml
        # without a checkpoint); train_run checks config and data and starts fresh when there is no checkpoint
        metrics = train_run(cfg, run_dir, resume=True, progress=False,  # the driver's prepare verified the data
                            final_checkpoint=keep, verify=False)

    trainable_s = time.perf_counter() - t_start
    timed = {} if reused else metrics  # a reused run trained earlier: no times of this one
    log_event(sweep_dir, trial=trial.trial_id, event="end", resumed=resume, reused=reused, copied_from=copied,
              train_targets_per_s=None if reused or resume else metrics.get("train_targets_per_s"),
              trainable_s=trainable_s, train_run_s=timed.get("wall_s"), train_loop_s=timed.get("train_seconds"),
              eval_s=timed.get("eval_seconds"), setup_s=timed.get("setup_seconds"))
    return {**scalar_metrics(metrics), "trial_id": trial.trial_id, "trainable_s": trainable_s}


def _copy_tuning_twin(trial: TrialPlan, context: TrialContext, dst: Path) -> str | None:
    """Copy the tuning stage's finished run of exactly this grid trial (`plan.tuning_twin`: the same configuration,
    so the same numbers) into `dst` where no run has started there, instead of training it again; the copied
    folder relative to the sweep's, or None. A tuning run that a retry trained at another rate is not copied."""
    twin = tuning_twin(context.sweep, trial) if context.stage == "grid" else None
    if twin is None or any((dst / name).exists() for name in (METRICS_FILE, CHECKPOINT_FILE)):
        return None
    src = Path(context.sweep_dir) / TUNING_DIR / RUNS_DIR / twin.trial_id
    if not run_folder.is_finished(src) or run_folder.read_metrics(src).get(C.RETRY_ATTEMPTS):
        return None
    dst.mkdir(parents=True, exist_ok=True)
    run_folder.copy_run(src, dst)
    return str(src.relative_to(context.sweep_dir))


# ----------------------------------------------------------------------------------------------
# retry at a lower learning rate

#: metrics.json key of the retry record (a mapping: not a runs.parquet column).
RETRY_KEY = "retry"
#: Validation metrics each attempt's record keeps beside its rate and health.
ATTEMPT_METRICS: tuple[str, ...] = ("valid_auc", "valid_ne", "train_loss")
#: Files of a finished attempt moved into the run folder (metrics.json is written there last, with the record).
PROMOTED: tuple[str, ...] = tuple(n for n in run_folder.RUN_FILES
                                  if n not in (METRICS_FILE, layout.TRIAL_RECORD_FILE)) + (layout.CURVES_DIR,)


def retry_policy(sweep: Sweep, stage: str) -> RetrySection | None:
    """The retry policy of a trial of `stage`: the grid's trials, and the tuning stage's only with
    `retry.tuning_trials`; search trials never (a searched rate must be credited with its own result)."""
    r = sweep.config.retry
    if r is None or stage == "search" or (stage == "tuning" and not r.tuning_trials):
        return None
    return r


def attempt_dir(run_dir: Path, attempt: int) -> Path:
    return Path(run_dir) / layout.ATTEMPTS_DIR / str(attempt)


def retry_metrics(policy: RetrySection, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The metrics.json keys of the retry: the nested record and its flat columns."""
    return {RETRY_KEY: {"policy": dataclasses.asdict(policy), "attempts": attempts},
            C.RETRY_ATTEMPTS: len(attempts) - 1, C.RETRY_LR_INITIAL: attempts[0]["lr"],
            C.RETRY_LR_USED: attempts[-1]["lr"],
            C.RETRY_HISTORY: " → ".join(f"{a['lr']:g} {a[H.STATUS_KEY]}" for a in attempts)}  # 0.16 diverged → 0.08 ok


def _with_lr(cfg: RunConfig, lr: float) -> RunConfig:
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=lr))


def train_with_retries(cfg: RunConfig, run_dir: Path, policy: RetrySection, *, final_checkpoint: bool,
                       on_attempt: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Train `cfg` into `run_dir` under `policy` (module docstring); returns the final metrics.json.
    `on_attempt` is called with each attempt's record (and whether it was read back) as it finishes."""
    run_dir = Path(run_dir)
    if run_folder.is_finished(run_dir):  # promoted already: read it back (checked) at the rate it ended with
        shutil.rmtree(run_dir / layout.ATTEMPTS_DIR, ignore_errors=True)  # killed between promotion and clean-up
        used = run_folder.read_metrics(run_dir).get(C.RETRY_LR_USED, cfg.train.lr)
        return train_run(_with_lr(cfg, used), run_dir, resume=True, progress=False,
                         final_checkpoint=final_checkpoint, verify=False)
    attempts: list[dict[str, Any]] = []
    for k in range(policy.max_retries + 1):
        lr = policy.lr_of(cfg.train.lr, k)
        folder = attempt_dir(run_dir, k)
        reused = run_folder.is_finished(folder)
        folder.mkdir(parents=True, exist_ok=True)
        metrics = train_run(_with_lr(cfg, lr), folder, resume=True, progress=False,
                            final_checkpoint=final_checkpoint, verify=False)
        attempts.append({"attempt": k, "lr": lr, H.STATUS_KEY: metrics[H.STATUS_KEY],
                         H.REASONS_KEY: metrics[H.REASONS_KEY], **{m: metrics.get(m) for m in ATTEMPT_METRICS}})
        if on_attempt is not None:
            on_attempt({**attempts[-1], "reused": reused})
        if metrics[H.STATUS_KEY] not in policy.when:
            break
    return promote(folder, run_dir, retry_metrics(policy, attempts))


def promote(folder: Path, run_dir: Path, retry_record: dict[str, Any]) -> dict[str, Any]:
    """Make the finished attempt in `folder` the run in `run_dir`: move its files up (those moved by an
    interrupted promotion are skipped), write metrics.json with `retry_record` last, remove the attempts."""
    for name in PROMOTED:
        src, dst = folder / name, run_dir / name
        if not src.exists():
            continue
        if dst.is_dir():  # a stale folder (a promotion moves the whole folder in one rename)
            shutil.rmtree(dst)
        os.replace(src, dst)
    metrics = {**run_folder.read_metrics(folder), **retry_record}
    run_folder.write_metrics(run_dir, metrics)  # integrity record of the moved prediction files; the run is finished
    shutil.rmtree(run_dir / layout.ATTEMPTS_DIR)
    return run_folder.read_metrics(run_dir)
