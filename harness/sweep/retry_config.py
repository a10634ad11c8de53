"""The `retry:` section of a sweep file (keys and rules: docs/sweeps.md, "Retry"), checked on its own when it is
built; what the retry does with it: `harness.sweep.retry`.
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

    def __post_init__(self) -> None:
        if not self.when:
            raise ConfigError(f"retry.when: empty; give the statuses that trigger a retry "
                              f"({', '.join(RETRY_STATUSES)}), or leave out `retry:` for none")
        for s in self.when:
            if s not in RETRY_STATUSES:
                raise ConfigError(f"retry.when: unknown status {s!r}; valid: {', '.join(RETRY_STATUSES)}")
        if len(set(self.when)) != len(self.when):
            raise ConfigError(f"retry.when: repeated statuses in {self.when!r}")
        if not (math.isfinite(self.lr_factor) and self.lr_factor > 0) or self.lr_factor == 1:
            raise ConfigError(f"retry.lr_factor: must be a finite number > 0 other than 1, got {self.lr_factor!r}")
        if self.max_retries < 1:
            raise ConfigError(f"retry.max_retries: must be >= 1, got {self.max_retries!r} (leave out `retry:` for no "
                              "retry)")

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
