"""Fault injection for tests, from outside the production code.

- `interrupt_training_after(n, action)`: while active, the prepared dataset's training-batch iterator
  calls `action()` when batch n + 1 is requested, i.e. after n batches were trained (and after the
  checkpoint those batches may have triggered). The default action raises `Interrupted`, which
  leaves a run folder exactly as a crash at that point would.
- `run_trial_dying_once`: a drop-in for `harness.sweep.trainable.run_trial` (patch
  `harness.sweep.launcher.run_trial` with it) whose first attempt of every trial id containing
  `DIE_ONCE` kills its own Ray worker process after 3 training batches, so that Tune's retry and
  the resume from the trial's checkpoint run for real.
- `run_trial_failing_alike`: the same, except that every attempt of a trial whose id contains `FAILS_ALIKE`
  raises the same RuntimeError before training (a failure no retry can mend).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Trials whose id contains this die once (see run_trial_dying_once).
DIE_ONCE = "whale-seed1"
#: Trials whose id contains this fail the same way on every attempt (see run_trial_failing_alike).
FAILS_ALIKE = "wukong-seed2"
#: File left in a run folder whose worker was killed.
FAULT_MARKER = ".fault_injected"


class Interrupted(RuntimeError):
    """Raised inside training to simulate a crash."""


def _raise_interrupted() -> None:
    raise Interrupted("training interrupted by the test")


@contextmanager
def interrupt_training_after(n_batches: int, action: Callable[[], Any] = _raise_interrupted) -> Iterator[None]:
    """Call `action` when training asks for batch `n_batches + 1` (counted over every training split
    iterator opened while the block is active)."""
    from protocols.artifact import PreparedDataset

    original = PreparedDataset.batches
    served = 0

    def batches(self, split: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        nonlocal served
        for batch in original(self, split, *args, **kwargs):
            if split == "train":
                if served >= n_batches:
                    action()
                served += 1
            yield batch

    PreparedDataset.batches = batches  # type: ignore[method-assign]
    try:
        yield
    finally:
        PreparedDataset.batches = original  # type: ignore[method-assign]


def run_trial_dying_once(config: dict[str, Any], context: Any) -> dict[str, Any]:
    """`run_trial`, except that a trial whose run folder name (its trial id) contains DIE_ONCE kills
    its worker (os._exit(3)) after 3 training batches on its first attempt; a marker file in the run
    folder remembers that it happened."""
    from harness.sweep import trainable

    real_train_run = trainable.train_run

    def train_run(cfg: Any, out_dir: Any, **kwargs: Any) -> dict[str, Any]:
        marker = Path(out_dir) / FAULT_MARKER
        if DIE_ONCE not in Path(out_dir).name or marker.exists():
            return real_train_run(cfg, out_dir, **kwargs)

        def die() -> None:
            marker.write_text("the test killed this trial's worker once\n")
            os._exit(3)

        with interrupt_training_after(3, die):
            return real_train_run(cfg, out_dir, **kwargs)

    # where run_trial (and train_with_retries, for a sweep with retry:) looks train_run up when called
    trainable.train_run = train_run
    try:
        return trainable.run_trial(config, context)
    finally:
        trainable.train_run = real_train_run


def run_trial_failing_alike(config: dict[str, Any], context: Any) -> dict[str, Any]:
    """`run_trial`, except that a trial whose run folder name contains FAILS_ALIKE raises
    RuntimeError("the same failure every time") on every attempt, before it trains."""
    from harness.sweep import trainable

    real_train_run = trainable.train_run

    def train_run(cfg: Any, out_dir: Any, **kwargs: Any) -> dict[str, Any]:
        if FAILS_ALIKE in Path(out_dir).name:
            raise RuntimeError("the same failure every time")
        return real_train_run(cfg, out_dir, **kwargs)

    trainable.train_run = train_run
    try:
        return trainable.run_trial(config, context)
    finally:
        trainable.train_run = real_train_run
