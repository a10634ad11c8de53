"""The `retry:` section of a sweep file (keys and rules: docs/sweeps.md, "Retry"). `check_raw` refuses a bare
`on:` key (YAML 1.1 reads it as true), `check_section` the section on its own; what the retry does with it:
`harness.sweep.retry`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from core.typed_config import ConfigError
from harness import run_health as H

#: Statuses a retry may be triggered by: every unhealthy one.
RETRY_STATUSES: tuple[str, ...] = tuple(s for s in H.STATUSES if s != H.OK)


@dataclass
class RetrySection:
    """The retry policy (see the module docstring)."""

    when: list[str] = field(default_factory=lambda: [H.DIVERGED, H.COLLAPSED])
    lr_factor: float = 0.5
    max_retries: int = 2
    tuning_trials: bool = False

    def lr_of(self, lr: float, attempt: int) -> float:
        """The learning rate of attempt `attempt` (0: the planned one) of a run planned at `lr`."""
        return lr * self.lr_factor ** attempt


def check_raw(raw: Any) -> None:
    """Refuse what YAML turned into something else before the section is typed: a bare `on:` (or yes/no/off)
    key, which YAML 1.1 reads as a boolean."""
    if isinstance(raw, Mapping):
        for key in raw:
            if isinstance(key, bool):
                raise ConfigError(f"retry: a key YAML reads as {key} (`on`, `off`, `yes` or `no` unquoted); the "
                                  f"statuses that trigger a retry are given as `when: [{', '.join(RETRY_STATUSES)}]`")


def check_section(r: RetrySection) -> None:
    """Validate the section on its own; errors name the `retry.` key."""
    if not r.when:
        raise ConfigError(f"retry.when: empty; give the statuses that trigger a retry ({', '.join(RETRY_STATUSES)}),"
                          " or leave out `retry:` for none")
    for s in r.when:
        if s not in RETRY_STATUSES:
            raise ConfigError(f"retry.when: unknown status {s!r}; valid: {', '.join(RETRY_STATUSES)}")
    if len(set(r.when)) != len(r.when):
        raise ConfigError(f"retry.when: repeated statuses in {r.when!r}")
    if not (math.isfinite(r.lr_factor) and r.lr_factor > 0) or r.lr_factor == 1:
        raise ConfigError(f"retry.lr_factor: must be a finite number > 0 other than 1, got {r.lr_factor!r}")
    if r.max_retries < 1:
        raise ConfigError(f"retry.max_retries: must be >= 1, got {r.max_retries!r} (leave out `retry:` for no "
                          "retry)")
