"""The `tuning:` section of a sweep file (keys and rules: docs/sweeps.md, "Tuning"). `section_values` checks it on
its own and returns the grid; how it fits the rest of the sweep is `schema._check_tuning`; what the stage does
with it, `harness.sweep.tuning`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, cast

import numpy as np

from core.typed_config import ConfigError
from harness.metric_registry import MetricSpec, check_split_metric

#: Training keys the tuning stage can choose: a positive float of TrainConfig each.
TUNABLE_PARAMS: tuple[str, ...] = ("train.lr", "train.weight_decay")
#: Significant digits log-spaced grid values are rounded to (they appear in trial ids and tables).
GRID_DIGITS = 3
#: Fewest grid values: with fewer, every value is an edge and no choice can be told apart from one.
MIN_POINTS = 3


@dataclass
class TuningGrid:
    """The values tried: `points` values log-spaced from `log_min` to `log_max` (both included, rounded to
    GRID_DIGITS significant digits), or the `values` listed."""

    log_min: float | None = None
    log_max: float | None = None
    points: int | None = None
    values: list[float] | None = None


@dataclass
class TuningBudget:
    """A shorter run for tuning trials: `epochs` replaces train.epochs; `n_train_fraction` trains on that
    share of each setting's training targets (a nested sample: the validation targets stay the same)."""

    epochs: int | None = None
    n_train_fraction: float | None = None


@dataclass
class TuningSection:
    """The tuning stage's settings (see the module docstring)."""

    grid: TuningGrid
    param: str = "train.lr"
    run_seeds: list[int] = field(default_factory=lambda: [0])
    metric: str = "valid_auc"
    budget: TuningBudget = field(default_factory=TuningBudget)
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"seeds": "run_seeds"}


def log_grid(low: float, high: float, points: int) -> list[float]:
    """`points` values log-spaced over [low, high], rounded to GRID_DIGITS significant digits."""
    return [float(f"{v:.{GRID_DIGITS}g}") for v in np.logspace(math.log10(low), math.log10(high), points)]


def section_values(t: TuningSection) -> list[float]:
    """Validate the section on its own; return its grid values, ascending. Errors name the `tuning.` key."""
    if t.param not in TUNABLE_PARAMS:
        raise ConfigError(f"tuning.param: unknown value {t.param!r}; valid: {', '.join(TUNABLE_PARAMS)}")
    metric_spec(t)
    g = t.grid
    logs = {"log_min": g.log_min, "log_max": g.log_max, "points": g.points}
    if g.values is not None:
        given = [k for k, v in logs.items() if v is not None]
        if given:
            raise ConfigError(f"tuning.grid: give either `values` or log_min, log_max and points, not both "
                              f"(also given: {', '.join(given)})")
        values = sorted(float(v) for v in g.values)
        if len(set(values)) != len(values):
            raise ConfigError(f"tuning.grid.values: repeated values in {g.values!r}")
        if any(not (math.isfinite(v) and v > 0) for v in values):
            raise ConfigError(f"tuning.grid.values: every value must be a finite number > 0, got {g.values!r}")
    else:
        missing = [k for k, v in logs.items() if v is None]
        if missing:
            raise ConfigError(f"tuning.grid.{missing[0]}: missing; give log_min, log_max and points "
                              "(or `values`)")
        # none is missing (checked above)
        log_min, log_max, points = cast(float, g.log_min), cast(float, g.log_max), cast(int, g.points)
        if not (math.isfinite(log_min) and log_min > 0):
            raise ConfigError(f"tuning.grid.log_min: must be a finite number > 0, got {g.log_min!r}")
        if not (math.isfinite(log_max) and log_max > log_min):
            raise ConfigError(f"tuning.grid.log_max: must be > log_min ({g.log_min!r}), got {g.log_max!r}")
        values = log_grid(log_min, log_max, max(points, 1))
        if points >= MIN_POINTS and len(set(values)) != len(values):
            raise ConfigError(f"tuning.grid.points: {g.points} values between {g.log_min!r} and {g.log_max!r} repeat "
                              f"once rounded to {GRID_DIGITS} digits; give fewer points or a wider range")
    if len(values) < MIN_POINTS:
        key = "values" if g.values is not None else "points"
        raise ConfigError(f"tuning.grid.{key}: at least {MIN_POINTS} values, got {len(values)} (with fewer, "
                          "every value is at the grid's edge)")
    if not t.run_seeds:
        raise ConfigError("tuning.run_seeds: empty; give at least one seed, e.g. [0]")
    if len(set(t.run_seeds)) != len(t.run_seeds):
        raise ConfigError(f"tuning.run_seeds: repeated seeds in {t.run_seeds!r}")
    b = t.budget
    if b.epochs is not None and b.epochs < 1:
        raise ConfigError(f"tuning.budget.epochs: must be >= 1, got {b.epochs}")
    if b.n_train_fraction is not None and not 0 < b.n_train_fraction <= 1:
        raise ConfigError(f"tuning.budget.n_train_fraction: must be in (0, 1], got {b.n_train_fraction}")
    return values


def metric_spec(t: TuningSection) -> MetricSpec:
    """The registered metric `t.metric` names (a validation metric only: choosing on test would leak it)."""
    return check_split_metric("tuning.metric", t.metric)
