"""`train_run`: train one model on a prepared dataset, evaluate it and write its run folder.

Training rules (the seed's, `harness.config.TrainConfig`): AdamW (fused where supported), global
gradient-norm clip, BCE-with-logits where every target weighs 1 / batch_size (so the last, partial
batch gets no extra weight), data order and ID masking from the dataset's batch loader, everything
seeded from the run seed. Evaluation predicts every valid and test target with the final weights of a
one-epoch run; a longer run validates after every epoch and is evaluated with its best validation
epoch's weights (`TrainConfig.select_epoch`, "last" for the final ones; early stopping keeps the best
too). metrics.json records that epoch as `selected_epoch`. Metrics are computed on the full sets.

Resumable: a checkpoint (model, optimisers, position inside the epoch, RNG states) is written every
`checkpoint_every_batches` batches / `checkpoint_every_s` seconds and at each epoch end; a run killed
mid-epoch and resumed gives bitwise-identical metrics on CPU (tests/test_train_run.py interrupts a
run from outside, through the dataset's batch iterator, and resumes it).

Run folders are never mixed: without `resume` a folder holding any run file is refused; with `resume`
the config and data are compared with the folder's (config.yaml and the recorded data fingerprint,
then the checkpoint's) even when no checkpoint was written yet, and the run says "resuming from epoch
e, batch k" or "no checkpoint: starting fresh" on stderr. Stale temporary files of killed writers are
removed when a run starts or resumes.

Signals: in the main thread, SIGINT and SIGTERM only set a flag; the loop checks it after the current
batch, writes the checkpoint (atomically) and raises `TrainingInterrupted`, which `recscale train`
turns into exit 130 / 143. A second signal, for instance while that checkpoint is being written, raises
`TrainingAborted` at once: the checkpoint being written is abandoned (its temporary file removed),
checkpoint.pt keeps the last complete checkpoint, and `recscale train` exits 130 / 143 saying which one.
A third signal gets the default behaviour.
"""
from __future__ import annotations

import copy
import json
import math
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

import architectures
from architectures.blocks.attention_kernel import attention_kernel
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
from .config import RunConfig, run_config_dict
from .curves import CurveLogger
from .evaluate import loader_options, move_batch, predict, split_metrics, target_columns
from .fingerprint import machine_fingerprint
from .lr_schedule import LRSchedule
from .metric_registry import check_split_metric
from .step import TrainStep


class TrainingInterrupted(RecscaleError):
    """SIGINT / SIGTERM arrived during training; the checkpoint of the current position was written."""

    def __init__(self, signum: int, out_dir: Path, position: Position) -> None:
        self.signum = int(signum)
        self.out_dir = out_dir
        where = "training finished, evaluation not" if position.finished else \
            f"epoch {position.epoch}, batch {position.batch}"
        super().__init__(
            f"interrupted by {signal.Signals(self.signum).name}: checkpoint written at {where} in {out_dir}; "
            f"continue with the same command and --out {out_dir} --resume"
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal number: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class TrainingAborted(BaseException):
    """A second SIGINT / SIGTERM: training stops at once, without finishing the checkpoint being written.

    A BaseException (like KeyboardInterrupt), so that no `except Exception` on the way swallows it.
    `last_checkpoint` says what checkpoint.pt holds (set by `train_run`)."""

    def __init__(self, signum: int, out_dir: Path | None = None, last_checkpoint: str | None = None,
                 during_write: bool = False) -> None:
        self.signum, self.out_dir = int(signum), out_dir
        self.last_checkpoint, self.during_write = last_checkpoint, during_write
        super().__init__(self.message())

    def message(self) -> str:
        name = signal.Signals(self.signum).name
        abandoned = "the checkpoint being written was abandoned; " if self.during_write else ""
        held = (f"{CHECKPOINT_FILE} holds the last complete checkpoint ({self.last_checkpoint})"
                if self.last_checkpoint else "no complete checkpoint was written, so --resume starts fresh")
        return (f"aborted by a second {name}: {abandoned}{held} in {self.out_dir}; continue with the same command "
                f"and --out {self.out_dir} --resume")

    @property
    def exit_code(self) -> int:
        """128 + the signal number: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


class StopSignals:
    """While installed (main thread only), SIGINT / SIGTERM set `signum` instead of stopping the process.

    A second signal puts the previous handlers back and raises `TrainingAborted` where the main thread is
    (so a third one gets the default behaviour). Outside the main thread (a Ray Tune function trainable)
    nothing is installed and `signum` stays None.
    """

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
        print(f"recscale: {signal.Signals(signum).name} received: finishing the current batch and writing a "
              "checkpoint (signal again to abort without it; the last complete checkpoint is kept)",
              file=sys.stderr, flush=True)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def _where(position: Position) -> str:
    return "training finished, evaluation not" if position.finished else \
        f"epoch {position.epoch}, batch {position.batch}"


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


def count_cost(model: torch.nn.Module, dataset: Any, device: torch.device, key: str | None = None,
               attention: str = "auto") -> dict[str, float]:
    """Forward matrix FLOPs per target and parameter split, measured on one validation batch (cached
    under `key` when given: the arch, model config and data fingerprint the count depends on)."""
    from architectures.flops import count_flops, count_params

    if key is not None and key in _COST_CACHE:
        return dict(_COST_CACHE[key])
    batch = move_batch(next(iter(dataset.batches("valid", 64, seed=0))), device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), attention_kernel(attention):
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
    session_start = time.perf_counter()
    out_dir = Path(out_dir)
    tc = cfg.train
    config = run_config_dict(cfg)
    dataset = open_dataset(cfg.data, verify=verify, progress=progress)
    ckpt_path = out_dir / CHECKPOINT_FILE

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
        check_same_run(out_dir, config, dataset.fingerprint)
    if resume and RF.is_finished(out_dir):
        if ckpt_path.exists():
            load_checkpoint(ckpt_path, config=config, data_fingerprint=dataset.fingerprint)  # same checks
        return RF.read_metrics(out_dir)
    if resume and not ckpt_path.exists():
        resume = False  # killed before its first checkpoint: nothing to continue, start afresh
        say("no checkpoint: starting fresh")
    check_writable(out_dir, "the run folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    RF.clean_stale_temporaries(out_dir)

    device = resolve_device(tc.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tc.tf32
        torch.backends.cudnn.allow_tf32 = tc.tf32
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    seed_everything(cfg.seed)
    model = architectures.build(cfg.arch, dataset.spec, cfg.model_config()).to(device)
    cost = count_cost(model, dataset, device,
                      key=json.dumps([cfg.arch, config["model"], dataset.fingerprint, device.type], sort_keys=True),
                      attention=tc.attention)
    step = TrainStep(model, tc, device)
    optimizers, forward = step.optimizers, step.forward
    schedule = LRSchedule(tc.schedule, optimizers, epochs=tc.epochs,  # harness/lr_schedule.py, before a resume
                          steps_per_epoch=math.ceil(dataset.num_targets("train") / tc.batch_size))
    position = Position()
    best_state: dict[str, torch.Tensor] | None = None
    if resume:
        payload = load_checkpoint(ckpt_path, config=config, data_fingerprint=dataset.fingerprint)
        model.load_state_dict(payload["model"])
        for opt, state in zip(optimizers, payload["optimizers"]):
            opt.load_state_dict(state)
        position, best_state = payload["position"], payload["best_model"]
        set_rng_states(payload["rng"])
        say(f"resuming from epoch {position.epoch}, batch {position.batch}"
            + (" (training finished; evaluating)" if position.finished else ""))
    else:
        RF.write_config(out_dir, config)
        RF.write_data_fingerprint(out_dir, dataset.fingerprint)
    rate = perf.matmul_rate_cached(device, perf.compute_dtype(step.bf16))
    setup_seconds = time.perf_counter() - session_start

    wall_before = position.wall_seconds  # earlier sessions of a resumed run

    # what checkpoint.pt holds, and whether one is being written (for the message of a second signal)
    saved: dict[str, Any] = {"at": _where(position) if resume else None, "writing": False}

    def checkpoint() -> None:
        position.wall_seconds = wall_before + time.perf_counter() - session_start
        saved["writing"] = True
        save_checkpoint(ckpt_path, config=config, data_fingerprint=dataset.fingerprint, model=model,
                        optimizers=optimizers, position=position, best_model_state=best_state)
        saved["at"], saved["writing"] = _where(position), False

    stop = StopSignals()
    n_targets = dataset.num_targets("train")
    select_best = tc.epochs > 1 and tc.select_epoch == "best_valid"  # validate every epoch, test the best
    curves = CurveLogger(out_dir, tc.log_every_steps, device)  # harness/curves.py: reads values, no RNG
    last_save = time.perf_counter()
    model.train()
    stop.install()
    try:
        while not position.finished and position.epoch < tc.epochs:
            bar = tqdm(total=n_targets, initial=min(position.batch * tc.batch_size, n_targets), unit="tgt",
                       unit_scale=True, desc=f"{cfg.arch} epoch {position.epoch}", disable=not progress,
                       file=sys.stderr, dynamic_ncols=True)
            t0 = time.perf_counter()
            loss_total = torch.zeros((), dtype=torch.float64, device=device)
            for batch in dataset.batches("train", tc.batch_size, seed=cfg.seed, epoch=position.epoch,
                                         start_batch=position.batch, id_mask_prob=tc.id_mask_prob,
                                         **loader_options(device, tc.prefetch_batches, tc.loader_workers)):
                schedule.apply(position.epoch, position.batch)
                loss = step(move_batch(batch, device))
                loss_total += loss.double()
                n = int(batch["label"].shape[0])
                position.batch += 1
                curves.step(schedule.step_of(position.epoch, position.batch), loss, n, step.grad_norm, schedule.lr())
                position.targets_seen += n
                bar.update(n)
                now = time.perf_counter()
                if (tc.checkpoint_every_batches and position.batch % tc.checkpoint_every_batches == 0) or (
                    now - last_save >= tc.checkpoint_every_s
                ) or stop.signum is not None:
                    position.train_seconds += now - t0
                    position.add_loss(float(loss_total))
                    loss_total.zero_()
                    checkpoint()
                    t0 = last_save = time.perf_counter()
                if stop.signum is not None:  # checkpoint written just above
                    bar.close()
                    raise TrainingInterrupted(stop.signum, out_dir, position)
            bar.close()
            position.train_seconds += time.perf_counter() - t0
            position.add_loss(float(loss_total))
            epoch_record = {"epoch": position.epoch, "train_loss": position.epoch_loss_sum / n_targets}
            position.epoch_loss_sum = 0.0
            position.epoch, position.batch = position.epoch + 1, 0
            if tc.early_stopping_patience or select_best:
                t_valid = time.perf_counter()
                ev, lab, sc = predict(forward, dataset, "valid", batch_size=tc.eval_batch_size, device=device,
                                      bf16=tc.use_bf16(device), prefetch=tc.prefetch_batches, attention=tc.attention)
                flat, _ = split_metrics("valid", ev, lab, sc, target_columns(dataset, "valid"))
                value = flat[tc.early_stopping_metric]
                epoch_record[tc.early_stopping_metric] = value
                epoch_record["valid_ne"] = flat["valid_ne"]  # run_health's still-falling check reads it
                curves.evaluation(schedule.step_of(position.epoch, 0), flat)  # epoch already advanced
                position.valid_seconds += time.perf_counter() - t_valid
                if _is_better(tc.early_stopping_metric, value, position.best_metric):
                    position.best_metric, position.epochs_without_improvement = value, 0
                    position.best_epoch = position.epoch - 1
                    best_state = copy.deepcopy(model.state_dict())
                else:
                    position.epochs_without_improvement += 1
                    if tc.early_stopping_patience and \
                            position.epochs_without_improvement >= tc.early_stopping_patience:
                        position.finished = True
            position.history.append(epoch_record)
            if (position.epoch < tc.epochs and not position.finished) or stop.signum is not None:
                # after the last epoch the finished checkpoint below follows at once
                checkpoint()
                last_save = time.perf_counter()
            if stop.signum is not None:
                raise TrainingInterrupted(stop.signum, out_dir, position)

        if best_state is not None:
            model.load_state_dict(best_state)
        position.finished = True
        if final_checkpoint or stop.signum is not None:
            checkpoint()
        t_eval = time.perf_counter()

        result: dict[str, Any] = {"arch": cfg.arch, "seed": cfg.seed, DATA_FINGERPRINT: dataset.fingerprint}
        groups: dict[str, Any] = {}
        scores: dict[str, np.ndarray] = {}
        for split in PREDICTION_SPLITS:
            if stop.signum is not None:  # the checkpoint says finished: --resume only evaluates
                raise TrainingInterrupted(stop.signum, out_dir, position)
            ev, lab, sc = predict(forward, dataset, split, batch_size=tc.eval_batch_size, device=device,
                                  bf16=tc.use_bf16(device), prefetch=tc.prefetch_batches, attention=tc.attention)
            if np.isfinite(sc).all():
                flat, groups[split] = split_metrics(split, ev, lab, sc, target_columns(dataset, split))
            else:  # diverged: metrics undefined, recorded as such (harness/run_health.py)
                flat, groups[split] = run_health.undefined_metrics(split, lab), {}
            result.update(flat)
            scores[split] = sc
            RF.write_predictions(out_dir, split, ev, lab, sc)
        eval_seconds = time.perf_counter() - t_eval
        if not (tc.early_stopping_patience or select_best):  # else every epoch's validation is logged already
            curves.evaluation(schedule.step_of(position.epoch, position.batch), result)
    except TrainingAborted as e:
        raise TrainingAborted(e.signum, out_dir, saved["at"], during_write=bool(saved["writing"])) from None
    finally:
        stop.restore()
        curves.close()
    throughput = position.targets_seen / position.train_seconds if position.train_seconds > 0 else math.nan
    result.update(cost)
    result.update({
        "train_targets": position.targets_seen,
        "train_loss": position.loss_sum / max(position.targets_seen, 1),
        "epochs_run": position.epoch,
        # the epoch whose weights were evaluated: the best validation epoch when one was kept, else the last
        "selected_epoch": position.best_epoch if best_state is not None else position.epoch - 1,
        "epoch_history": position.history,
        "wall_s": wall_before + time.perf_counter() - session_start,
        "train_seconds": position.train_seconds,
        "setup_seconds": setup_seconds,
        "eval_seconds": eval_seconds + position.valid_seconds,
        "train_targets_per_s": throughput,
        "matmul_flops_per_s": rate,
        "utilisation": perf.utilisation(cost["flops_per_target"], throughput, rate),
        "peak_rss_bytes": perf.peak_rss_bytes(),
        "peak_gpu_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0,
        "device": str(device),
        "bf16": tc.use_bf16(device),
        "malloc_env": perf.malloc_env_active(),
        "groups": groups,
        **machine_fingerprint(device),
    })
    result.update(run_health.record(result, model, scores["valid"], position.history))  # harness/run_health.py
    RF.write_metrics(out_dir, result)
    if not final_checkpoint:
        ckpt_path.unlink(missing_ok=True)
    if progress:
        print(summary_line(result, out_dir), file=sys.stderr)
    return RF.read_metrics(out_dir)


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
