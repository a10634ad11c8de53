"""`train_run`: train one model on a prepared dataset, evaluate it and write its run folder. The training rules,
evaluation and epoch selection, checkpoints, resume, the run-folder checks and signals: docs/training.md.

`train_run` is a sequence of named steps over one `Session` (the state a session of a run shares): check
the run folder, build the model and optimisers, resume from the checkpoint (or record a fresh start),
train the epochs (validating after each when an epoch is to be selected), select the epoch, evaluate,
write the outputs. A first SIGINT / SIGTERM ends it with `TrainingInterrupted` after the checkpoint, a second
with `TrainingAborted` at once (harness/stop_signals.py).
"""
from __future__ import annotations

import copy
import json
import math
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

import architectures
from core.errors import RecscaleError
from core.results_layout import CHECKPOINT_FILE, CONFIG_FILE, PREDICTION_SPLITS
from harness.runs_columns import DATA_FINGERPRINT
from protocols.output_location import check_writable

from . import perf, run_health
from . import run_folder as RF
from .checkpoint import (
    Position,
    ResumeRefused,
    config_differences,
    load_checkpoint,
    save_checkpoint,
    set_rng_states,
)
from .config import RunConfig, TrainConfig, run_config_dict
from .curves import CurveLogger, read_curves
from .evaluate import loader_options, move_batch, predict, split_metrics, target_columns
from .fingerprint import machine_fingerprint
from .loss_trend import trend_of
from .lr_schedule import LRSchedule
from .metric_registry import check_split_metric
from .speed import matmul
from .step import TrainStep
from .stop_signals import StopSignals, TrainingAborted, TrainingInterrupted, where


def say(message: str) -> None:
    print(f"recscale: {message}", file=sys.stderr, flush=True)


def check_same_run(out_dir: Path, config: dict[str, Any], data_fingerprint: str) -> None:
    """Refuse to resume `out_dir` when its config.yaml or recorded data fingerprint differ from this run's
    (checked even when no checkpoint exists yet; the checkpoint, when there is one, is checked too)."""
    saved = RF.read_config(out_dir)
    if saved is not None:
        diffs = config_differences(saved, RF.normalised_config(config))
        if diffs:
            raise ResumeRefused(
                f"{out_dir / CONFIG_FILE}: refusing to resume: the config differs from the run folder's:\n  "
                + "\n  ".join(diffs)
            )
    saved_fp = RF.read_data_fingerprint(out_dir)
    if saved_fp is not None and saved_fp != data_fingerprint:
        raise ResumeRefused(
            f"{out_dir}: refusing to resume: the run started on data {saved_fp}, this run uses {data_fingerprint}"
        )


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RecscaleError("train.device=cuda but no CUDA device is available")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def open_dataset(path: str, *, verify: bool = False, progress: bool = False) -> Any:
    """The prepared dataset at `path`; `verify` checks every file's checksum against the manifest first."""
    from protocols.artifact import PreparedDataset

    if not Path(path).exists():
        raise RecscaleError(f"data: prepared dataset {path!r} does not exist (run `recscale prepare`)")
    return PreparedDataset.open(Path(path), verify=verify, progress=progress)


#: Forward FLOPs and parameter counts of (architecture, model config, data fingerprint) already counted in
#: this process: a sweep worker that trains the same model on the same data again (another seed) reuses
#: them instead of tracing the model once more.
_COST_CACHE: dict[str, dict[str, float]] = {}


def count_cost(model: torch.nn.Module, dataset: Any, device: torch.device,
               key: str | None = None) -> dict[str, float]:
    """Forward matrix FLOPs per target and parameter split, measured on one validation batch (cached
    under `key` when given: the arch, model config and data fingerprint the count depends on)."""
    from architectures.flops import count_flops, count_params

    if key is not None and key in _COST_CACHE:
        return dict(_COST_CACHE[key])
    batch = move_batch(next(iter(dataset.batches("valid", 64, seed=0))), device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            report = count_flops(model, batch)
    finally:
        model.train(was_training)
    params = count_params(model)
    cost = {
        "flops_per_target": float(report.per_target),
        "params_embedding": int(params["embedding"]),
        "params_non_embedding": int(params["non_embedding"]),
    }
    if key is not None:
        _COST_CACHE[key] = dict(cost)
    return cost


def _is_better(metric: str, value: float, best: float | None) -> bool:
    """Whether the validation metric `metric` (`valid_<name>`) improved, in the registered direction."""
    if best is None:
        return True
    return check_split_metric("train.early_stopping_metric", metric).is_better(value, best)


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
    cost: dict[str, float]  # count_cost's FLOPs per target and parameter split
    started: float  # time.perf_counter() when this session started
    position: Position = field(default_factory=Position)
    best_state: dict[str, torch.Tensor] | None = None  # weights of the best validation epoch so far
    wall_before: float = 0.0  # wall seconds of earlier sessions of a resumed run
    setup_seconds: float = 0.0
    matmul_rate: float = math.nan
    saved_at: str | None = None  # what checkpoint.pt holds (for the message of a second signal) ...
    writing: bool = False  # ... and whether one is being written
    stop: StopSignals = field(default_factory=StopSignals)

    @property
    def tc(self) -> TrainConfig:
        return self.cfg.train

    @property
    def checkpoint_path(self) -> Path:
        return self.out_dir / CHECKPOINT_FILE

    @property
    def validates(self) -> bool:
        """Whether every epoch is validated: for early stopping, or to test the best epoch of several."""
        return bool(self.tc.early_stopping_patience) or self.selects_best

    @property
    def selects_best(self) -> bool:
        return self.tc.epochs > 1 and self.tc.select_epoch == "best_valid"

    def checkpoint(self) -> None:
        self.position.wall_seconds = self.wall_before + time.perf_counter() - self.started
        self.writing = True
        save_checkpoint(self.checkpoint_path, config=self.config, data_fingerprint=self.dataset.fingerprint,
                        model=self.model, optimizers=self.step.optimizers, position=self.position,
                        best_model_state=self.best_state)
        self.saved_at, self.writing = where(self.position), False

    def stop_if_signalled(self) -> None:
        """Raise `TrainingInterrupted` when a signal arrived (its checkpoint is written by then)."""
        if self.stop.signum is not None:
            raise TrainingInterrupted(self.stop.signum, self.out_dir, self.position)

    def predict(self, split: str) -> tuple[Any, np.ndarray, np.ndarray]:
        """(evaluation table, labels, scores) of every target of `split` with the current weights."""
        tc = self.tc
        return predict(self.step.forward, self.dataset, split, batch_size=tc.eval_batch_size, device=self.device,
                       bf16=tc.use_bf16(self.device), prefetch=tc.prefetch_batches)


@dataclass
class Evaluation:
    """The evaluation of the selected weights on every prediction split."""

    metrics: dict[str, Any]  # arch, seed, data fingerprint and every split's flat metrics
    groups: dict[str, Any]  # per split: metrics of the target groups
    scores: dict[str, np.ndarray]  # per split: the predicted probabilities
    seconds: float


def train_run(
    cfg: RunConfig,
    out_dir: Path | str,
    *,
    resume: bool = False,
    progress: bool = True,
    final_checkpoint: bool = True,
    verify: bool = True,
) -> dict[str, Any]:
    """Train, evaluate and write the run folder `out_dir`; returns the metrics dict.

    `resume=False` refuses a folder that holds any run file. `resume=True` refuses a folder that does not
    exist (a mistyped --out), continues from `out_dir/checkpoint.pt` (refused when config or data differ from the
    folder's, checkpoint or not),
    starts afresh when no checkpoint was written yet, and returns the saved metrics when the run had
    already finished. SIGINT / SIGTERM write a checkpoint and raise `TrainingInterrupted`.
    `final_checkpoint=False` (sweeps) skips the checkpoint written between training and evaluation and
    removes the run's checkpoint once metrics.json is written: a run killed during evaluation then
    resumes from its last checkpoint inside training (or starts afresh) instead of evaluating only.
    `verify` checks every file of the prepared dataset against its manifest's checksums before anything
    is written (a damaged artifact is never trained on); sweeps pass False, their driver verified it.
    """
    started = time.perf_counter()
    out_dir = Path(out_dir)
    config = run_config_dict(cfg)
    dataset = open_dataset(cfg.data, verify=verify, progress=progress)
    check_folder(out_dir, config, dataset.fingerprint, resume=resume)
    if resume and RF.is_finished(out_dir):
        return finished_metrics(out_dir, config, dataset.fingerprint)
    resume = prepare_folder(out_dir, resume=resume)

    session = build(cfg, out_dir, config, dataset, started)
    if resume:
        resume_from_checkpoint(session)
    else:
        record_start(session)
    session.matmul_rate = matmul.matmul_rate_cached(session.device, matmul.compute_dtype(session.step.bf16))
    session.setup_seconds = time.perf_counter() - started

    curves = CurveLogger(out_dir, cfg.train.log_every_steps, session.device)  # harness/curves.py: no RNG
    session.model.train()
    session.stop.install()
    try:
        train_epochs(session, curves, progress=progress)
        select_epoch(session, final_checkpoint=final_checkpoint)
        evaluation = evaluate(session)
        if not session.validates:  # else every epoch's validation is logged already
            curves.evaluation(session.schedule.step_of(session.position.epoch, session.position.batch),
                              evaluation.metrics)
    except TrainingAborted as e:
        raise TrainingAborted(e.signum, out_dir, session.saved_at, during_write=session.writing) from None
    finally:
        session.stop.restore()
        curves.close()
    result = write_outputs(session, evaluation, final_checkpoint=final_checkpoint)
    if progress:
        print(summary_line(result, out_dir), file=sys.stderr)
    return RF.read_metrics(out_dir)


def check_folder(out_dir: Path, config: dict[str, Any], data_fingerprint: str, *, resume: bool) -> None:
    """Refuse to mix runs: a new run in a folder holding one, or a resume of a missing folder or another run."""
    if resume and not out_dir.is_dir():
        raise RecscaleError(f"{out_dir}: --resume: no such run folder, so nothing to resume; check --out, or leave "
                            "out --resume to start a new run there")
    present = RF.run_files_present(out_dir)
    if not resume and present:
        raise RecscaleError(
            f"{out_dir}: already holds a run ({', '.join(present)}); use --resume to continue it or choose "
            "another --out"
        )
    if resume:
        check_same_run(out_dir, config, data_fingerprint)


def finished_metrics(out_dir: Path, config: dict[str, Any], data_fingerprint: str) -> dict[str, Any]:
    """The saved metrics of a finished run (whose checkpoint, when kept, passes the same checks)."""
    ckpt_path = out_dir / CHECKPOINT_FILE
    if ckpt_path.exists():
        load_checkpoint(ckpt_path, config=config, data_fingerprint=data_fingerprint)  # same checks
    return RF.read_metrics(out_dir)


def prepare_folder(out_dir: Path, *, resume: bool) -> bool:
    """Create the run folder and remove stale temporaries; returns whether there is a checkpoint to resume."""
    if resume and not (out_dir / CHECKPOINT_FILE).exists():
        resume = False  # killed before its first checkpoint: nothing to continue, start afresh
        say("no checkpoint: starting fresh")
    check_writable(out_dir, "the run folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    RF.clean_stale_temporaries(out_dir)
    return resume


def build(cfg: RunConfig, out_dir: Path, config: dict[str, Any], dataset: Any, started: float) -> Session:
    """Device, seeded model, its counted cost, optimisers and learning-rate schedule: a fresh session."""
    tc = cfg.train
    device = resolve_device(tc.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tc.tf32
        torch.backends.cudnn.allow_tf32 = tc.tf32
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    seed_everything(cfg.seed)
    # the kernel of the softmax attentions is the model's: every forward below (cost, steps, evaluation) uses it
    model = architectures.build(cfg.arch, dataset.spec, cfg.model_config(), attention=tc.attention).to(device)
    cost = count_cost(model, dataset, device,
                      key=json.dumps([cfg.arch, config["model"], dataset.fingerprint, device.type], sort_keys=True))
    step = TrainStep(model, tc, device)
    schedule = LRSchedule(tc.schedule, step.optimizers, epochs=tc.epochs,  # harness/lr_schedule.py, before a resume
                          steps_per_epoch=math.ceil(dataset.num_targets("train") / tc.batch_size))
    return Session(cfg=cfg, out_dir=out_dir, config=config, dataset=dataset, device=device, model=model, step=step,
                   schedule=schedule, cost=cost, started=started)


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


def record_start(session: Session) -> None:
    """A fresh run: its config and data fingerprint go into the folder before any checkpoint."""
    RF.write_config(session.out_dir, session.config)
    RF.write_data_fingerprint(session.out_dir, session.dataset.fingerprint)


def train_epochs(session: Session, curves: CurveLogger, *, progress: bool) -> None:
    """Train from the session's position until the last epoch or early stopping, checkpointing on the way."""
    tc, position = session.tc, session.position
    last_save = time.perf_counter()
    while not position.finished and position.epoch < tc.epochs:
        last_save = train_epoch(session, curves, last_save, progress=progress)
        epoch_record = {"epoch": position.epoch,
                        "train_loss": position.epoch_loss_sum / session.dataset.num_targets("train")}
        position.epoch_loss_sum = 0.0
        position.epoch, position.batch = position.epoch + 1, 0
        if session.validates:
            validate_epoch(session, curves, epoch_record)
        position.history.append(epoch_record)
        if (position.epoch < tc.epochs and not position.finished) or session.stop.signum is not None:
            # after the last epoch the finished checkpoint of select_epoch follows at once
            session.checkpoint()
            last_save = time.perf_counter()
        session.stop_if_signalled()


def train_epoch(session: Session, curves: CurveLogger, last_save: float, *, progress: bool) -> float:
    """The rest of the current epoch from `position.batch`; returns when the last checkpoint was written."""
    cfg, tc, position, step, schedule = session.cfg, session.tc, session.position, session.step, session.schedule
    n_targets = session.dataset.num_targets("train")
    bar = tqdm(total=n_targets, initial=min(position.batch * tc.batch_size, n_targets), unit="tgt",
               unit_scale=True, desc=f"{cfg.arch} epoch {position.epoch}", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    t0 = time.perf_counter()
    loss_total = torch.zeros((), dtype=torch.float64, device=session.device)
    for batch in session.dataset.batches("train", tc.batch_size, seed=cfg.seed, epoch=position.epoch,
                                         start_batch=position.batch, id_mask_prob=tc.id_mask_prob,
                                         **loader_options(session.device, tc.prefetch_batches, tc.loader_workers)):
        schedule.apply(position.epoch, position.batch)
        loss = step(move_batch(batch, session.device))
        loss_total += loss.double()
        n = int(batch["label"].shape[0])
        position.batch += 1
        global_step = schedule.step_of(position.epoch, position.batch)
        curves.step(global_step, loss, n, step.grad_norm, schedule.lr())
        position.targets_seen += n
        bar.update(n)
        if tc.eval_every_steps and global_step % tc.eval_every_steps == 0 and not ends_validated(session):
            t0 += validate_mid_epoch(session, curves, global_step)  # not training time
        now = time.perf_counter()
        if (tc.checkpoint_every_batches and position.batch % tc.checkpoint_every_batches == 0) or (
            now - last_save >= tc.checkpoint_every_s
        ) or session.stop.signum is not None:
            position.train_seconds += now - t0
            position.add_loss(float(loss_total))
            loss_total.zero_()
            session.checkpoint()
            t0 = last_save = time.perf_counter()
        if session.stop.signum is not None:  # checkpoint written just above
            bar.close()
            session.stop_if_signalled()
    bar.close()
    position.train_seconds += time.perf_counter() - t0
    position.add_loss(float(loss_total))
    return last_save


def ends_validated(session: Session) -> bool:
    """Whether the step just taken ends an epoch whose validation (or the run's final evaluation) follows and
    logs that step anyway."""
    position, tc = session.position, session.tc
    return (position.batch == session.schedule.steps_per_epoch
            and (session.validates or position.epoch == tc.epochs - 1))


def validate_mid_epoch(session: Session, curves: CurveLogger, global_step: int) -> float:
    """Evaluate the validation split with the current weights and log it at `global_step`
    (`train.eval_every_steps`); returns the seconds it took. Reads the weights only: `predict` switches the
    model to eval mode and back, uses no random state and its own loader, so no trained number changes."""
    t = time.perf_counter()
    ev, lab, sc = session.predict("valid")
    if np.isfinite(sc).all():
        flat, _ = split_metrics("valid", ev, lab, sc, target_columns(session.dataset, "valid"))
        curves.evaluation(global_step, flat)
    seconds = time.perf_counter() - t
    session.position.valid_seconds += seconds
    curves.exclude(seconds)
    return seconds


def validate_epoch(session: Session, curves: CurveLogger, epoch_record: dict[str, Any]) -> None:
    """Validate the epoch just trained (the position has moved past it): keep the best weights, stop early."""
    tc, position = session.tc, session.position
    t_valid = time.perf_counter()
    ev, lab, sc = session.predict("valid")
    flat, _ = split_metrics("valid", ev, lab, sc, target_columns(session.dataset, "valid"))
    value = flat[tc.early_stopping_metric]
    epoch_record[tc.early_stopping_metric] = value
    epoch_record["valid_ne"] = flat["valid_ne"]
    curves.evaluation(session.schedule.step_of(position.epoch, 0), flat)  # epoch already advanced
    position.valid_seconds += time.perf_counter() - t_valid
    if _is_better(tc.early_stopping_metric, value, position.best_metric):
        position.best_metric, position.epochs_without_improvement = value, 0
        position.best_epoch = position.epoch - 1
        session.best_state = copy.deepcopy(session.model.state_dict())
    else:
        position.epochs_without_improvement += 1
        if tc.early_stopping_patience and position.epochs_without_improvement >= tc.early_stopping_patience:
            position.finished = True


def select_epoch(session: Session, *, final_checkpoint: bool) -> None:
    """Load the best validation epoch's weights when one was kept; training is finished (checkpointed unless
    a sweep asked for no final checkpoint)."""
    if session.best_state is not None:
        session.model.load_state_dict(session.best_state)
    session.position.finished = True
    if final_checkpoint or session.stop.signum is not None:
        session.checkpoint()


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
            flat, groups[split] = split_metrics(split, ev, lab, sc, target_columns(dataset, split))
        else:  # diverged: metrics undefined, recorded as such (harness/run_health.py)
            flat, groups[split] = run_health.undefined_metrics(split, lab), {}
        metrics.update(flat)
        scores[split] = sc
        RF.write_predictions(session.out_dir, split, ev, lab, sc)
    return Evaluation(metrics, groups, scores, time.perf_counter() - t_eval)


def write_outputs(session: Session, evaluation: Evaluation, *, final_checkpoint: bool) -> dict[str, Any]:
    """metrics.json: the evaluation, cost, training record, timings, machine and run health; a sweep's run
    drops its checkpoint once it is written. Returns what was written."""
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
    result["train_steps"] = session.schedule.step_of(position.epoch, position.batch)
    # harness/run_health.py; the curves are closed (flushed) by now
    trend = trend_of(read_curves(session.out_dir), total_steps=result["train_steps"], epochs=position.epoch)
    result.update(run_health.record(result, session.model, evaluation.scores["valid"], trend))
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
