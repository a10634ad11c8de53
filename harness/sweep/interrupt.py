"""Ctrl-C during a sweep: stop within a second or two, keep what finished, let the launcher say how to continue
(docs/sweeps.md, "Interruptions, failures, resume").

Ray Tune's own SIGINT handler waits up to 5 s for every busy trial actor before killing it (a Ctrl-C took
about 12.5 s with Ray's shutdown); the launcher turns it off (TUNE_ENV while its Ray session is open) and
uses this instead:

- `catch_interrupts()`: the first SIGINT only records the request while a Tune stage runs (`watched_stage()`;
  otherwise it raises `SweepInterrupted` at once) and puts the previous handler back, so a second Ctrl-C
  interrupts whatever runs;
- `StopOnInterrupt`, a Tune callback, raises `SweepInterrupted` at the end of the controller step in which
  the request arrived (about 0.1 s). It derives from KeyboardInterrupt, so Tune's `except Exception` clean-up
  (the 5 s wait) is skipped; the launcher then shuts Ray down and collects the finished run folders.

The request is module state, not the callback's (Tune pickles callbacks with its experiment state).
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ray import tune

#: Set in the driver while a sweep's Ray session is open: Tune installs no SIGINT handler of its own.
TUNE_ENV = {"TUNE_DISABLE_SIGINT_HANDLER": "1"}


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the sweep (raised at a Tune step boundary, or at once outside a watched stage)."""


class _State:
    requested = False  # a Ctrl-C arrived in this session
    watching = False  # a Tune stage with StopOnInterrupt is running


def requested() -> bool:
    """Whether a Ctrl-C asked the running sweep to stop."""
    return _State.requested


class StopOnInterrupt(tune.Callback):
    """Tune callback: ends the experiment at the end of the step during which Ctrl-C was pressed."""

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if _State.requested:
            raise SweepInterrupted()


@contextmanager
def catch_interrupts() -> Iterator[None]:
    """Handle SIGINT as the module doc says while the block runs (main thread only; elsewhere a no-op)."""
    _State.requested = _State.watching = False
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        _State.requested = True
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C interrupts whatever runs
        if not _State.watching:
            raise SweepInterrupted()

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _State.watching = False


@contextmanager
def watched_stage() -> Iterator[None]:
    """Mark a Tune stage as running (its StopOnInterrupt callback acts on a request at its next step end,
    so a Ctrl-C during Tune's set-up waits for that too); between stages a Ctrl-C raises at once."""
    if _State.requested:  # between stages, before Tune starts
        raise SweepInterrupted()
    _State.watching = True
    try:
        yield
    finally:
        _State.watching = False
