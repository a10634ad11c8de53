"""`train_run`: the recipe of one run, top to bottom, and the pieces only it uses (session, schedule, curve logger,
stop signals), called from that sequence rather than written into the batch loop. The training rules, evaluation
and epoch selection, checkpoints, resume, the run-folder checks and signals: docs/training.md.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import random
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

import architectures
from core.errors import RecscaleError
from core.results_layout import CHECKPOINT_FILE, CONFIG_FILE, CURVES_DIR, PREDICTION_SPLITS
from harness.runs_columns import DATA_FINGERPRINT
from protocols.output_location import check_writable

from . import perf, tasks
from . import run_folder as RF
from .checkpoint import (
    Position,
    ResumeRefused,
    load_checkpoint,
    refuse_config_differences,
    save_checkpoint,
    set_rng_states,
)
from .config import RunConfig, ScheduleConfig, TrainConfig, run_config_dict
from .evaluate import loader_options, move_batch, open_dataset, predict, split_metrics, target_columns
from .fingerprint import machine_fingerprint
from .metric_registry import check_split_metric
from .speed import matmul
from .step import TrainStep, place


def train_run(
    cfg: RunConfig,
    out_dir: Path | str,
    *,
    resume: bool = False,
    progress: bool = True,
    final_checkpoint: bool = True,
    verify: bool = True,
) -> dict[str, Any]:
    """Train, evaluate and write the run folder `out_dir`; returns the metrics dict (the contract: docs/contracts.md,
    "Training"; `resume`, a finished run and signals: docs/training.md, "Checkpoints and resume")."""
    started = time.perf_counter()
    out_dir = Path(out_dir)
    config = run_config_dict(cfg)
    dataset = open_dataset(cfg.data, verify=verify, progress=progress)
    check_folder(out_dir, config, dataset.fingerprint, resume=resume)
    if resume and RF.is_finished(out_dir):  # its saved metrics; a kept checkpoint passes the same checks
        if (out_dir / CHECKPOINT_FILE).exists():
            load_checkpoint(out_dir / CHECKPOINT_FILE, config=config, data_fingerprint=dataset.fingerprint)
        return RF.read_metrics(out_dir)
    resume = prepare_folder(out_dir, resume=resume)

    session = build(cfg, out_dir, config, dataset, started)
    if resume:
        resume_from_checkpoint(session)
    else:
        RF.write_run_start(out_dir, config, dataset.fingerprint)
    session.matmul_rate = matmul.matmul_rate_cached(session.device, matmul.compute_dtype(session.step.bf16))
    session.setup_seconds = time.perf_counter() - started

    curves = CurveLogger(out_dir, cfg.train.log_every_steps, session.device,  # no RNG
                         [t.name for t in cfg.train.tasks])
    session.model.train()
    session.stop.install()
    try:
        train_epochs(session, curves, progress=progress)
        select_epoch(session, final_checkpoint=final_checkpoint)
        evaluation = evaluate(session)
        if not session.validates:  # else every epoch's validation is logged already
            curves.evaluation(session.global_step, evaluation.metrics)
    except TrainingAborted as e:
        raise TrainingAborted(e.signum, out_dir, session.saved_at, during_write=session.writing) from None
    finally:
        session.stop.restore()
        curves.close()
    result = write_outputs(session, evaluation, final_checkpoint=final_checkpoint)
    if progress:
        print(summary_line(result, out_dir), file=sys.stderr)
    return RF.read_metrics(out_dir)


# -- the run folder: refuse to mix runs, prepare a new one ------------------------------------------------------

def check_folder(out_dir: Path, config: dict[str, Any], data_fingerprint: str, *, resume: bool) -> None:
    """Refuse to mix runs: a new run in a folder holding one, or a resume of a missing folder or another run."""
    if not resume:
        present = [name for name in RF.RUN_FILES if (out_dir / name).exists()]
        if present:
            raise RecscaleError(f"{out_dir}: already holds a run ({', '.join(present)}); use --resume to continue it "
                                "or choose another --out")
        return
    if not out_dir.is_dir():
        raise RecscaleError(f"{out_dir}: --resume: no such run folder, so nothing to resume; check --out, or leave "
                            "out --resume to start a new run there")
    # the same run: the folder's config.yaml and recorded data fingerprint, even before a first checkpoint
    saved = RF.read_config(out_dir)
    if saved is not None:
        refuse_config_differences(out_dir / CONFIG_FILE, saved, RF.normalised_config(config), "the run folder's")
    saved_fp = RF.read_data_fingerprint(out_dir)
    if saved_fp is not None and saved_fp != data_fingerprint:
        raise ResumeRefused(
            f"{out_dir}: refusing to resume: the run started on data {saved_fp}, this run uses {data_fingerprint}"
        )


def prepare_folder(out_dir: Path, *, resume: bool) -> bool:
    """Create the run folder and remove stale temporaries; returns whether there is a checkpoint to resume."""
    if resume and not (out_dir / CHECKPOINT_FILE).exists():
        resume = False  # killed before its first checkpoint: nothing to continue, start afresh
        say("no checkpoint: starting fresh")
    check_writable(out_dir, "the run folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    RF.clean_stale_temporaries(out_dir)
    return resume


# -- set-up and resume ------------------------------------------------------------------------------------------

#: `matmul.count_cost` (on one validation batch) of every model, data and device already counted in this process:
#: a sweep worker that trains the same model on the same data again (another seed) reuses it.
_COST_CACHE: dict[str, dict[str, float]] = {}


def build(cfg: RunConfig, out_dir: Path, config: dict[str, Any], dataset: Any, started: float) -> Session:
    """Device, seeded model, its counted cost, optimisers and learning-rate schedule: a fresh session."""
    tc = cfg.train
    device = place(tc)
    random.seed(cfg.seed)
    np.random.seed(cfg.seed % 2**32)
    torch.manual_seed(cfg.seed)
    # the kernel of the softmax attentions is the model's: every forward below (cost, steps, evaluation) uses it
    spec = dataclasses.replace(dataset.spec, num_tasks=len(tc.tasks)) if tc.tasks else dataset.spec
    model = architectures.build(cfg.arch, spec, cfg.model, attention=tc.attention).to(device)
    key = json.dumps([cfg.arch, config["model"], dataset.fingerprint, device.type, spec.num_tasks], sort_keys=True)
    if key not in _COST_CACHE:
        batch = move_batch(next(iter(dataset.batches("valid", 64, seed=0))), device)
        _COST_CACHE[key] = matmul.count_cost(model, batch)
    step = TrainStep(model, tc, device)
    schedule = LRSchedule(tc.schedule, step.optimizers, epochs=tc.epochs,  # set before a resume
                          steps_per_epoch=math.ceil(dataset.num_targets("train") / tc.batch_size))
    return Session(cfg=cfg, out_dir=out_dir, config=config, dataset=dataset, device=device, model=model, step=step,
                   schedule=schedule, cost=dict(_COST_CACHE[key]), started=started)


def resume_from_checkpoint(session: Session) -> None:
    """Weights, optimisers, position, best weights and RNG states from the run folder's checkpoint."""
    payload = load_checkpoint(session.checkpoint_path, config=session.config,
                              data_fingerprint=session.dataset.fingerprint)
    session.model.load_state_dict(payload["model"])
    for opt, state in zip(session.step.optimizers, payload["optimizers"]):
        opt.load_state_dict(state)
    session.position, session.best_state = payload["position"], payload["best_model"]
    set_rng_states(payload["rng"])
    position = session.position
    session.wall_before, session.saved_at = position.wall_seconds, where(position)
    say(f"resuming from epoch {position.epoch}, batch {position.batch}"
        + (" (training finished; evaluating)" if position.finished else ""))


# -- training ---------------------------------------------------------------------------------------------------

def train_epochs(session: Session, curves: CurveLogger, *, progress: bool) -> None:
    """Train from the session's position until the last epoch or early stopping, checkpointing on the way."""
    tc, position = session.tc, session.position
    session.last_save = time.perf_counter()
    while not position.finished and position.epoch < tc.epochs:
        train_epoch(session, curves, progress=progress)
        epoch_record = {"epoch": position.epoch,
                        "train_loss": position.epoch_loss_sum / session.dataset.num_targets("train")}
        position.epoch_loss_sum = 0.0
        position.epoch, position.batch = position.epoch + 1, 0
        if session.validates:
            validate_epoch(session, curves, epoch_record)
        position.history.append(epoch_record)
        if (position.epoch < tc.epochs and not position.finished) or session.stop.signum is not None:
            session.checkpoint()  # after the last epoch the finished checkpoint of select_epoch follows at once
        session.stop_if_signalled()


def train_epoch(session: Session, curves: CurveLogger, *, progress: bool) -> None:
    """The rest of the current epoch from `position.batch`, one optimiser step per batch, then what is due."""
    cfg, tc, position, step, schedule = session.cfg, session.tc, session.position, session.step, session.schedule
    n_targets = session.dataset.num_targets("train")
    batches = session.dataset.batches("train", tc.batch_size, seed=cfg.seed, epoch=position.epoch,
                                      start_batch=position.batch, id_mask_prob=tc.id_mask_prob,
                                      labels=tasks.labels(tc.tasks),
                                      **loader_options(session.device, tc.prefetch_batches, tc.loader_workers))
    meter = Meter(session.device)  # this epoch's training seconds and summed loss, until they go to the position
    with tqdm(total=n_targets, initial=min(position.batch * tc.batch_size, n_targets), unit="tgt", unit_scale=True,
              desc=f"{cfg.arch} epoch {position.epoch}", disable=not progress, file=sys.stderr,
              dynamic_ncols=True) as bar:
        for batch in batches:
            schedule.apply(position.epoch, position.batch)
            loss = step(move_batch(batch, session.device))
            meter.add(loss)
            n = int(batch["label"].shape[0])
            position.batch += 1
            position.targets_seen += n
            curves.step(session.global_step, loss, n, step.grad_norm, schedule.lr(), step.task_losses)
            bar.update(n)
            if session.validates_mid_epoch():
                meter.exclude(validate_mid_epoch(session, curves, session.global_step))  # not training time
            if session.checkpoint_due():
                meter.settle(position)
                session.checkpoint()
                meter.restart()
            session.stop_if_signalled()  # the checkpoint is written by then
    meter.settle(position)


def validate_mid_epoch(session: Session, curves: CurveLogger, global_step: int) -> float:
    """Evaluate the validation split with the current weights and log it at `global_step` (`train.eval_every_steps`);
    returns the seconds it took. Reads the weights only: no trained number changes (docs/training.md, "Curves")."""
    t = time.perf_counter()
    ev, lab, sc = session.predict("valid")
    if np.isfinite(sc).all():
        curves.evaluation(global_step, session.metrics("valid", ev, lab, sc)[0])
    seconds = time.perf_counter() - t
    session.position.valid_seconds += seconds
    curves.exclude(seconds)
    return seconds


def validate_epoch(session: Session, curves: CurveLogger, epoch_record: dict[str, Any]) -> None:
    """Validate the epoch just trained (the position has moved past it): keep the best weights, stop early."""
    tc, position = session.tc, session.position
    t_valid = time.perf_counter()
    flat, _ = session.metrics("valid", *session.predict("valid"))
    value = flat[tc.early_stopping_metric]
    epoch_record[tc.early_stopping_metric] = value
    epoch_record["valid_ne"] = flat["valid_ne"]
    curves.evaluation(session.global_step, flat)  # epoch already advanced
    position.valid_seconds += time.perf_counter() - t_valid
    if _is_better(tc.early_stopping_metric, value, position.best_metric):
        position.best_metric, position.epochs_without_improvement = value, 0
        position.best_epoch = position.epoch - 1
        session.best_state = copy.deepcopy(session.model.state_dict())
    else:
        position.epochs_without_improvement += 1
        if tc.early_stopping_patience and position.epochs_without_improvement >= tc.early_stopping_patience:
            position.finished = True


def _is_better(metric: str, value: float, best: float | None) -> bool:
    """Whether the validation metric `metric` (`valid_<name>`) improved, in the registered direction."""
    if best is None:
        return True
    return check_split_metric("train.early_stopping_metric", metric).is_better(value, best)


# -- selection, evaluation, outputs -----------------------------------------------------------------------------

def select_epoch(session: Session, *, final_checkpoint: bool) -> None:
    """Load the best validation epoch's weights if kept; training is finished (checkpointed unless a sweep asks not)."""
    if session.best_state is not None:
        session.model.load_state_dict(session.best_state)
    session.position.finished = True
    if final_checkpoint or session.stop.signum is not None:
        session.checkpoint()


@dataclass
class Evaluation:
    """The evaluation of the selected weights on every prediction split."""

    metrics: dict[str, Any]  # arch, seed, data fingerprint and every split's flat metrics
    groups: dict[str, Any]  # per split (and `<split>@<task>`, harness/tasks.py): metrics of the target groups
    scores: dict[str, np.ndarray]  # per split: the predicted probabilities, [n] or [n, T]
    seconds: float


def evaluate(session: Session) -> Evaluation:
    """Predict every target of each prediction split, compute its metrics and write its predictions file."""
    t_eval = time.perf_counter()
    cfg, dataset = session.cfg, session.dataset
    metrics: dict[str, Any] = {"arch": cfg.arch, "seed": cfg.seed, DATA_FINGERPRINT: dataset.fingerprint}
    groups: dict[str, Any] = {}
    scores: dict[str, np.ndarray] = {}
    for split in PREDICTION_SPLITS:
        session.stop_if_signalled()  # the checkpoint says finished: --resume only evaluates
        ev, lab, sc = session.predict(split)
        if np.isfinite(sc).all():
            flat, split_groups = session.metrics(split, ev, lab, sc)
            groups.update(split_groups)
        else:  # diverged: metrics undefined, recorded as such (harness/run_health.py)
            flat, groups[split] = tasks.undefined_metrics(split, lab, session.tc.tasks), {}
        metrics.update(flat)
        scores[split] = sc
        RF.write_predictions(session.out_dir, split, ev, tasks.prediction_columns(lab, sc, session.tc.tasks))
    return Evaluation(metrics, groups, scores, time.perf_counter() - t_eval)


def write_outputs(session: Session, evaluation: Evaluation, *, final_checkpoint: bool) -> dict[str, Any]:
    """Write metrics.json (docs/training.md, "Metrics"), then drop a sweep run's checkpoint; returns what it wrote."""
    position, device, tc = session.position, session.device, session.tc
    throughput = position.targets_seen / position.train_seconds if position.train_seconds > 0 else math.nan
    result = dict(evaluation.metrics)
    result.update(session.cost)
    result.update({
        "train_targets": position.targets_seen,
        "train_loss": position.loss_sum / max(position.targets_seen, 1),
        "epochs_run": position.epoch,
        # the epoch whose weights were evaluated: the best validation epoch when one was kept, else the last
        "selected_epoch": position.best_epoch if session.best_state is not None else position.epoch - 1,
        "epoch_history": position.history,
        "wall_s": session.wall_before + time.perf_counter() - session.started,
        "train_seconds": position.train_seconds,
        "setup_seconds": session.setup_seconds,
        "eval_seconds": evaluation.seconds + position.valid_seconds,
        "train_targets_per_s": throughput,
        "matmul_flops_per_s": session.matmul_rate,
        "utilisation": matmul.utilisation(session.cost["flops_per_target"], throughput, session.matmul_rate),
        "peak_rss_bytes": perf.peak_rss_bytes(),
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0,
        "device": str(device),
        "bf16": tc.use_bf16(device),
        "malloc_env": perf.malloc_env_active(),
        "groups": evaluation.groups,
        **machine_fingerprint(device),
    })
    result["train_steps"] = session.global_step
    # harness/run_health.py; the curves are closed (flushed) by now
    result.update(tasks.health(result, session.model, evaluation.scores["valid"], RF.read_curves(session.out_dir),
                               tasks=tc.tasks, total_steps=result["train_steps"], epochs=position.epoch))
    RF.write_metrics(session.out_dir, result)
    if not final_checkpoint:
        session.checkpoint_path.unlink(missing_ok=True)
    return result


def summary_line(m: dict[str, Any], out_dir: Path) -> str:
    oracle = f" (oracle {m['oracle_test_auc']:.4f})" if m.get("oracle_test_auc") is not None else ""
    f4 = lambda x: "–" if x is None else f"{x:.4f}"  # noqa: E731 (a diverged run's metrics are null)
    health = "" if m.get("health_status") in (None, "ok") else f" [{m['health_status']}: {m['health_reasons']}]"
    return (
        f"{m['arch']} seed {m['seed']}: test AUC {f4(m['test_auc'])}{oracle} LogLoss {f4(m['test_logloss'])} "
        f"NE {f4(m['test_ne'])}{health} | {m['train_targets_per_s']:.0f} targets/s, "
        f"utilisation {m['utilisation']:.2f}, "
        f"{m['wall_s']:.1f} s, peak RSS {m['peak_rss_bytes'] / 2**30:.2f} GiB -> {out_dir}"
    )


# -- what the recipe calls: the session's state, its checkpoints, timing and signals ----------------------------

@dataclass
class Session:
    """What the steps of one session of a run share (a resumed run has several sessions).

    `position` and `best_state` are what a checkpoint saves; the rest is rebuilt by every session."""

    cfg: RunConfig
    out_dir: Path
    config: dict[str, Any]  # run_config_dict(cfg): what config.yaml and every checkpoint hold
    dataset: Any  # protocols.artifact.PreparedDataset
    device: torch.device
    model: torch.nn.Module
    step: TrainStep  # the optimisers and the training step
    schedule: LRSchedule
    cost: dict[str, float]  # matmul.count_cost's FLOPs per target and parameter split
    started: float  # time.perf_counter() when this session started
    position: Position = field(default_factory=Position)
    best_state: dict[str, torch.Tensor] | None = None  # weights of the best validation epoch so far
    wall_before: float = 0.0  # wall seconds of earlier sessions of a resumed run
    setup_seconds: float = 0.0
    matmul_rate: float = math.nan
    last_save: float = 0.0  # time.perf_counter() of the last checkpoint (or of the start of training)
    saved_at: str | None = None  # what checkpoint.pt holds (for the message of a second signal) ...
    writing: bool = False  # ... and whether one is being written
    stop: StopSignals = field(default_factory=lambda: StopSignals())

    @property
    def tc(self) -> TrainConfig:
        return self.cfg.train

    @property
    def checkpoint_path(self) -> Path:
        return self.out_dir / CHECKPOINT_FILE

    @property
    def global_step(self) -> int:
        """Optimiser steps taken so far over the whole run."""
        return self.schedule.step_of(self.position.epoch, self.position.batch)

    @property
    def validates(self) -> bool:
        """Whether every epoch is validated: for early stopping, or to test the best epoch of several."""
        return bool(self.tc.early_stopping_patience) or (self.tc.epochs > 1 and self.tc.select_epoch == "best_valid")

    def validates_mid_epoch(self) -> bool:
        """Whether `train.eval_every_steps` asks for a validation after the step just taken, unless it ends an
        epoch whose validation (or the run's final evaluation) follows and logs that step anyway."""
        every, position = self.tc.eval_every_steps, self.position
        ends_validated = (position.batch == self.schedule.steps_per_epoch
                          and (self.validates or position.epoch == self.tc.epochs - 1))
        return bool(every) and self.global_step % every == 0 and not ends_validated

    def checkpoint_due(self) -> bool:
        """Whether a checkpoint is due after the batch just trained (also when a signal asks to stop)."""
        tc = self.tc
        return bool(tc.checkpoint_every_batches and self.position.batch % tc.checkpoint_every_batches == 0) or (
            time.perf_counter() - self.last_save >= tc.checkpoint_every_s) or self.stop.signum is not None

    def checkpoint(self) -> None:
        self.position.wall_seconds = self.wall_before + time.perf_counter() - self.started
        self.writing = True
        save_checkpoint(self.checkpoint_path, config=self.config, data_fingerprint=self.dataset.fingerprint,
                        model=self.model, optimizers=self.step.optimizers, position=self.position,
                        best_model_state=self.best_state)
        self.saved_at, self.writing = where(self.position), False
        self.last_save = time.perf_counter()

    def stop_if_signalled(self) -> None:
        """Raise `TrainingInterrupted` when a signal arrived (its checkpoint is written by then)."""
        if self.stop.signum is not None:
            raise TrainingInterrupted(self.stop.signum, self.out_dir, self.position)

    def predict(self, split: str) -> tuple[Any, np.ndarray, np.ndarray]:
        """(event ids, labels, scores) of every target of `split` with the current weights ([n, T] for T tasks)."""
        tc = self.tc
        return predict(self.step.forward, self.dataset, split, batch_size=tc.eval_batch_size, device=self.device,
                       bf16=tc.use_bf16(self.device), prefetch=tc.prefetch_batches,
                       label_columns=tasks.labels(tc.tasks))

    def metrics(self, split: str, ev: np.ndarray, lab: np.ndarray, sc: np.ndarray) -> tuple[dict[str, Any], dict]:
        """The flat metrics of `split` (every task's, harness/tasks.py) and its groups' ({split name: groups})."""
        columns = target_columns(self.dataset, split)
        truth = self.dataset.task_labels(split, tasks.labels(self.tc.tasks)) if self.tc.tasks else columns["label"]
        return split_metrics(split, ev, lab, sc, {**columns, "label": truth}, self.tc.tasks)


class Meter:
    """Training seconds and summed loss since the last `settle`, which adds them to the position (at a
    checkpoint and at the end of an epoch). The loss is summed on the device: no synchronisation per step."""

    def __init__(self, device: torch.device) -> None:
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.restart()

    def restart(self) -> None:
        self.t0 = time.perf_counter()

    def add(self, loss_sum: torch.Tensor) -> None:
        self.loss += loss_sum.double()

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` spent on something else (a mid-epoch validation) out of the training time."""
        self.t0 += seconds

    def settle(self, position: Position) -> None:
        position.train_seconds += time.perf_counter() - self.t0
        loss = float(self.loss)
        position.loss_sum += loss
        position.epoch_loss_sum += loss
        self.loss.zero_()


class LRSchedule:
    """Sets each optimiser group's learning rate for a global step (no-op for a constant schedule): `train.lr` x
    `factor`, a pure function of the global step, so that a resume is exact."""

    def __init__(self, cfg: ScheduleConfig, optimizers: Sequence, *, steps_per_epoch: int, epochs: int) -> None:
        self.cfg, self.steps_per_epoch = cfg, steps_per_epoch
        self.total = steps_per_epoch * epochs
        self.optimizers = list(optimizers)
        if not cfg.is_constant:  # each group's own base rate, kept in its state dict (so through a resume)
            for opt in self.optimizers:
                for group in opt.param_groups:
                    group.setdefault("initial_lr", group["lr"])

    def step_of(self, epoch: int, batch: int) -> int:
        return epoch * self.steps_per_epoch + batch

    def apply(self, epoch: int, batch: int) -> None:
        """Set the rate of the step about to run (batch `batch` of `epoch`)."""
        if not self.cfg.is_constant:
            f = factor(self.cfg, self.step_of(epoch, batch), self.total)
            for opt in self.optimizers:
                for group in opt.param_groups:
                    group["lr"] = group["initial_lr"] * f

    def lr(self) -> float:
        """The first group's current learning rate (for logging)."""
        return float(self.optimizers[0].param_groups[0]["lr"])


def factor(cfg: ScheduleConfig, step: int, total: int) -> float:
    """Multiplier of `train.lr` at 0-based global step `step` of a run of `total` steps (the formulas:
    docs/training.md, "Schedule")."""
    w = cfg.warmup_steps if cfg.warmup_steps else int(round(cfg.warmup_fraction * total))
    if step < w:
        return (step + 1) / w
    if cfg.kind == "constant":
        return 1.0
    p = min(1.0, max(0.0, (step - w) / (total - 1 - w))) if total - 1 > w else 1.0
    shape = 0.5 * (1.0 + math.cos(math.pi * p)) if cfg.kind == "cosine" else 1.0 - p
    return cfg.floor + (1.0 - cfg.floor) * shape


class CurveLogger:
    """Accumulates per-step values and writes a point every `every` global steps (`every=0`: off)."""

    def __init__(self, run_dir: Path, every: int, device: torch.device, task_names: Sequence[str] = ()) -> None:
        self.every, self.dir, self.task_names = every, Path(run_dir) / CURVES_DIR, tuple(task_names)
        self._writer: Any = None
        self._on_cpu = device.type == "cpu"  # reading a CPU scalar is cheaper than adding tensors
        self._start_point()

    def _start_point(self) -> None:
        """Empty sums since the last point: loss and grad norm (Python floats on a CPU; on an accelerator tensors
        added on the device and read once per point), per-task losses [T], targets, norms and the clock."""
        self._loss: Any = 0.0
        self._norm: Any = 0.0
        self._task_loss = torch.zeros((), dtype=torch.float64)
        self._targets = self._norms = 0
        self._t0 = time.perf_counter()

    def writer(self) -> Any:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(log_dir=str(self.dir))
        return self._writer

    def step(self, global_step: int, loss_sum: torch.Tensor, n_targets: int, grad_norm: torch.Tensor | None,
             lr: float, task_losses: torch.Tensor | None = None) -> None:
        """After optimiser step `global_step` (1-based: steps done so far) with summed loss `loss_sum` (and each
        task's, `task_losses` [T], logged as `train/loss@<task>` beside the weighted total)."""
        if not self.every:
            return
        if task_losses is not None:
            self._task_loss = self._task_loss + task_losses.double()
        self._loss = self._loss + (float(loss_sum) if self._on_cpu else loss_sum.double())
        if grad_norm is not None:
            self._norm = self._norm + (float(grad_norm) if self._on_cpu else grad_norm.double())
            self._norms += 1
        self._targets += n_targets
        if global_step % self.every:
            return
        now = time.perf_counter()
        w = self.writer()
        w.add_scalar("train/loss", float(self._loss) / max(self._targets, 1), global_step)
        w.add_scalar("train/lr", lr, global_step)
        for name, value in zip(self.task_names, self._task_loss.tolist() if self._task_loss.dim() else ()):
            w.add_scalar(f"train/loss{tasks.SEPARATOR}{name}", value / max(self._targets, 1), global_step)
        if self._norms:
            w.add_scalar("train/grad_norm", float(self._norm) / self._norms, global_step)
        w.add_scalar("train/targets_per_s", self._targets / max(now - self._t0, 1e-9), global_step)
        self._start_point()

    def exclude(self, seconds: float) -> None:
        """Leave `seconds` spent on something else (a mid-epoch evaluation) out of the throughput."""
        self._t0 += seconds

    def evaluation(self, global_step: int, metrics: Mapping[str, Any]) -> None:
        """Validation metrics (`valid_<name>` keys) of an evaluation after `global_step` steps."""
        if not self.every:
            return
        w = self.writer()
        for key, value in metrics.items():
            if key.startswith("valid_") and isinstance(value, (int, float)) and key not in ("valid_n",
                                                                                             "valid_positives"):
                w.add_scalar(f"valid/{key.removeprefix('valid_')}", float(value), global_step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def where(position: Position) -> str:
    """Where a checkpoint at `position` stands, in words."""
    return "training finished, evaluation not" if position.finished else \
        f"epoch {position.epoch}, batch {position.batch}"


class StopSignals:
    """While installed (main thread only: not in a Ray Tune function trainable), SIGINT / SIGTERM set `signum`; a
    second restores the previous handlers and raises `TrainingAborted` (docs/training.md, "Checkpoints and resume")."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            self.restore()
            raise TrainingAborted(signum)
        self.signum = signum
        say(f"{signal.Signals(signum).name} received: finishing the current batch and writing a checkpoint "
            "(signal again to abort without it; the last complete checkpoint is kept)")

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


class TrainingInterrupted(RecscaleError):
    """SIGINT / SIGTERM arrived and the checkpoint was written; `recscale train` exits `exit_code` (128 + signum)."""

    def __init__(self, signum: int, out_dir: Path, position: Position) -> None:
        self.signum, self.exit_code = int(signum), 128 + int(signum)
        self.out_dir = out_dir
        super().__init__(
            f"interrupted by {signal.Signals(self.signum).name}: checkpoint written at {where(position)} in "
            f"{out_dir}; continue with the same command and --out {out_dir} --resume"
        )


class TrainingAborted(BaseException):
    """A second SIGINT / SIGTERM: training stops at once, even mid-checkpoint. A BaseException (like
    KeyboardInterrupt), so that no `except Exception` on the way swallows it; `exit_code` as `TrainingInterrupted`."""

    def __init__(self, signum: int, out_dir: Path | None = None, last_checkpoint: str | None = None,
                 during_write: bool = False) -> None:
        self.signum, self.exit_code, self.out_dir = int(signum), 128 + int(signum), out_dir
        self.last_checkpoint, self.during_write = last_checkpoint, during_write
        abandoned = "the checkpoint being written was abandoned; " if during_write else ""
        held = (f"{CHECKPOINT_FILE} holds the last complete checkpoint ({last_checkpoint})"
                if last_checkpoint else "no complete checkpoint was written, so --resume starts fresh")
        super().__init__(f"aborted by a second {signal.Signals(self.signum).name}: {abandoned}{held} in {out_dir}; "
                         f"continue with the same command and --out {out_dir} --resume")


# -- small pieces -----------------------------------------------------------------------------------------------

def say(message: str) -> None:
    print(f"recscale: {message}", file=sys.stderr, flush=True)

