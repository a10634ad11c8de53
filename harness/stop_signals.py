"""How a training run stops on SIGINT / SIGTERM: `StopSignals` and the two exceptions it leads to.

In the main thread, SIGINT and SIGTERM only set a flag; the training loop (harness/train.py) checks it after
the current batch, writes the checkpoint (atomically) and raises `TrainingInterrupted`, which `recscale train`
turns into exit 130 / 143. A second signal, for instance while that checkpoint is being written, raises
`TrainingAborted` at once: the checkpoint being written is abandoned (its temporary file removed),
checkpoint.pt keeps the last complete checkpoint, and `recscale train` exits 130 / 143 saying which one.
A third signal gets the default behaviour.
"""
from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any

from core.results_layout import CHECKPOINT_FILE
from protocols.errors import RecscaleError

from .checkpoint import Position


def where(position: Position) -> str:
    """Where a checkpoint at `position` stands, in words."""
    return "training finished, evaluation not" if position.finished else \
        f"epoch {position.epoch}, batch {position.batch}"


class TrainingInterrupted(RecscaleError):
    """SIGINT / SIGTERM arrived during training; the checkpoint of the current position was written."""

    def __init__(self, signum: int, out_dir: Path, position: Position) -> None:
        self.signum = int(signum)
        self.out_dir = out_dir
        super().__init__(
            f"interrupted by {signal.Signals(self.signum).name}: checkpoint written at {where(position)} in "
            f"{out_dir}; continue with the same command and --out {out_dir} --resume"
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
