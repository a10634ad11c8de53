"""Ctrl-C during a sweep: stop within a second or two, keep what finished, let the launcher say how to continue
(docs/sweeps.md, "Interruptions, failures, resume"; the measured times: docs/reliability.md).

Tune's own SIGINT handler (off while a sweep's Ray session is open: TUNE_ENV) waits up to 5 s for every busy
trial actor. Instead, the first SIGINT only records the request while a Tune stage runs (`catch_interrupts`,
`watched_stage`), and `StopOnInterrupt`, a Tune callback, raises `SweepInterrupted` at the end of that
controller step; it derives from KeyboardInterrupt, so Tune's `except Exception` clean-up is skipped. The
request is module state, not the callback's (Tune pickles callbacks with its experiment state).
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
