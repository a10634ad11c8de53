"""Learning-rate schedule of a run (`train.schedule`): linear warm-up, then constant, cosine or linear decay to
a floor, as a pure function of the global step (`factor`), so that a resume is exact; the training loop applies
it (`harness.train.LRSchedule`). The formulas: docs/training.md ("Schedule").
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from core.typed_config import ConfigError


@dataclass
class ScheduleConfig:
    """`train.schedule`: linear warm-up over `warmup_steps`, or `warmup_fraction` of the run's steps (0 = none; not
    both), then `kind`: "constant", or "cosine" / "linear" decay to `floor` x `train.lr` at the last step."""

    kind: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = 0
    warmup_fraction: float = 0.0
    floor: float = 0.0

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ConfigError(f"train.schedule.warmup_steps must be >= 0, got {self.warmup_steps!r}")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ConfigError(f"train.schedule.warmup_fraction must be in [0, 1), got {self.warmup_fraction!r}")
        if self.warmup_steps and self.warmup_fraction:
            raise ConfigError("train.schedule.warmup_fraction: give warmup_steps or warmup_fraction, not both")
        if not 0.0 <= self.floor <= 1.0:
            raise ConfigError(f"train.schedule.floor must be in [0, 1], got {self.floor!r}")

    @property
    def is_constant(self) -> bool:
        """No warm-up and no decay: the seed's constant learning rate."""
        return self.kind == "constant" and not self.warmup_steps and not self.warmup_fraction


def factor(cfg: ScheduleConfig, step: int, total: int) -> float:
    """Multiplier of `train.lr` at 0-based global step `step` of a run of `total` steps."""
    w = cfg.warmup_steps if cfg.warmup_steps else int(round(cfg.warmup_fraction * total))
    if step < w:
        return (step + 1) / w
    if cfg.kind == "constant":
        return 1.0
    p = min(1.0, max(0.0, (step - w) / (total - 1 - w))) if total - 1 > w else 1.0
    shape = 0.5 * (1.0 + math.cos(math.pi * p)) if cfg.kind == "cosine" else 1.0 - p
    return cfg.floor + (1.0 - cfg.floor) * shape

