"""Training a sweep trial again at a lower learning rate when it ends unhealthy (the `retry:` section,
`schema.RetrySection`): each attempt a run folder `RUN/attempts/<k>/`, whether to retry read from its metrics.json (so
a resumed trial takes the same path), the last one promoted into RUN (docs/sweeps.md, "Retry").
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core import results_layout as layout
from harness import run_folder as RF
from harness import run_health as H
from harness import runs_columns as C
from harness.config import RunConfig
from harness.train import train_run

from .schema import RetrySection, Sweep

#: metrics.json key of the retry record (a mapping: not a runs.parquet column).
RETRY_KEY = "retry"
#: Validation metrics each attempt's record keeps beside its rate and health.
ATTEMPT_METRICS: tuple[str, ...] = ("valid_auc", "valid_ne", "train_loss")
#: Files of a finished attempt moved into the run folder (metrics.json is written there last, with the record).
PROMOTED: tuple[str, ...] = tuple(n for n in RF.RUN_FILES if n not in (layout.METRICS_FILE, layout.TRIAL_RECORD_FILE)) \
    + (layout.CURVES_DIR,)


def policy_for(sweep: Sweep, stage: str) -> RetrySection | None:
    """The retry policy of a trial of `stage`: the grid's trials, and the tuning stage's only with
    `retry.tuning_trials`; search trials never (a searched rate must be credited with its own result)."""
    r = sweep.config.retry
    if r is None or stage == "search" or (stage == "tuning" and not r.tuning_trials):
        return None
    return r


def attempt_dir(run_dir: Path, attempt: int) -> Path:
    return Path(run_dir) / layout.ATTEMPTS_DIR / str(attempt)


def started(run_dir: Path) -> bool:
    """Whether a trial with retries had begun an attempt (a resumed trial continues it)."""
    return (Path(run_dir) / layout.ATTEMPTS_DIR).is_dir()


def record(policy: RetrySection, attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """The metrics.json keys of the retry: the nested record and its flat columns."""
    return {RETRY_KEY: {"policy": dataclasses.asdict(policy), "attempts": attempts},
            C.RETRY_ATTEMPTS: len(attempts) - 1, C.RETRY_LR_INITIAL: attempts[0]["lr"],
            C.RETRY_LR_USED: attempts[-1]["lr"],
            C.RETRY_HISTORY: " → ".join(f"{a['lr']:g} {a[H.STATUS_KEY]}" for a in attempts)}  # 0.16 diverged → 0.08 ok


def _with_lr(cfg: RunConfig, lr: float) -> RunConfig:
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, lr=lr))


def train_with_retries(cfg: RunConfig, run_dir: Path, policy: RetrySection, *, final_checkpoint: bool,
                       on_attempt: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Train `cfg` into `run_dir` under `policy` (see the module docstring); returns the final metrics.json.
    `on_attempt` is called with each attempt's record (and whether it was read back) as it finishes."""
    run_dir = Path(run_dir)
    if RF.is_finished(run_dir):  # promoted already: check it is this run (at the rate it ended with), read it back
        shutil.rmtree(run_dir / layout.ATTEMPTS_DIR, ignore_errors=True)  # killed between promotion and clean-up
        used = RF.read_metrics(run_dir).get(C.RETRY_LR_USED, cfg.train.lr)
        return train_run(_with_lr(cfg, used), run_dir, resume=True, progress=False,
                         final_checkpoint=final_checkpoint, verify=False)
    attempts: list[dict[str, Any]] = []
    for k in range(policy.max_retries + 1):
        lr = policy.lr_of(cfg.train.lr, k)
        folder = attempt_dir(run_dir, k)
        reused = RF.is_finished(folder)
        folder.mkdir(parents=True, exist_ok=True)
        metrics = train_run(_with_lr(cfg, lr), folder, resume=True, progress=False,
                            final_checkpoint=final_checkpoint, verify=False)
        attempts.append({"attempt": k, "lr": lr, H.STATUS_KEY: metrics[H.STATUS_KEY],
                         H.REASONS_KEY: metrics[H.REASONS_KEY], **{m: metrics.get(m) for m in ATTEMPT_METRICS}})
        if on_attempt is not None:
            on_attempt({**attempts[-1], "reused": reused})
        if metrics[H.STATUS_KEY] not in policy.when:
            break
    return promote(folder, run_dir, record(policy, attempts))


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
    metrics = {**RF.read_metrics(folder), **retry_record}
    RF.write_metrics(run_dir, metrics)  # integrity record of the moved prediction files; the run is finished
    shutil.rmtree(run_dir / layout.ATTEMPTS_DIR)
    return RF.read_metrics(run_dir)
