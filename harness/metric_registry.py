"""The metric registry: the one declaration (`MetricSpec`) of every ranking metric the harness computes and the
analysis reads. Everything else derives from it (docs/training.md, "Metrics"); adding a metric is one
`register(MetricSpec(...))` call; the built-ins are registered at import, in the order their keys are written.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from core.typed_config import ConfigError

from . import metrics as M

#: How a metric can be a scaling gain over a reference value.
GainKind = Literal["difference", "relative_reduction"]
GAIN_KINDS: tuple[str, ...] = ("difference", "relative_reduction")
#: The split a hyper-parameter search or early stopping may watch (choosing on test would leak it).
VALIDATION_SPLIT = "valid"

MetricFn = Callable[..., float]


@dataclass(frozen=True)
class MetricSpec:
    """One registered metric (what its name and function make of it: docs/training.md, "Metrics")."""

    name: str  # `<name>` of the keys `<split>_<name>`, `oracle_<split>_<name>` and of `analysis.metrics`
    #: the function of one full prediction set, `(labels, scores) -> float`, or `(labels, scores, user_ids) -> float`
    #: when `needs_users` is set (functions live in `harness/metrics.py`)
    compute: MetricFn
    #: its direction (ablation verdicts, marginal returns, early stopping, the search mode)
    higher_is_better: bool
    label: str  # how reports and plots print it ("AUC", "LogLoss")
    #: how it can be the gain of a scaling fit over a reference: `difference` of a score (dAUC = AUC - AUC_ref, or
    #: dAUC / AUC_ref under `gain: relative`), `relative_reduction` of a loss ((L_ref - L) / L_ref), None: cannot
    gain: GainKind | None = None
    needs_users: bool = False
    #: one of the report's lead metrics (AUC and LogLoss): fitted by default in the scaling analysis, scored for
    #: the oracle within each group of metrics.json, drawn in the grouped-metric plot
    headline: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"metric name {self.name!r}: use a lower-case identifier (it becomes <split>_<name>)")
        if self.name.startswith("oracle"):
            raise ValueError(f"metric name {self.name!r}: the oracle_ prefix is reserved for the true probability")
        if self.gain is not None and self.gain not in GAIN_KINDS:
            raise ValueError(f"metric {self.name!r}: gain {self.gain!r} is not one of {list(GAIN_KINDS)} or None")
        if not callable(self.compute):
            raise ValueError(f"metric {self.name!r}: compute must be callable")

    @property
    def mode(self) -> Literal["max", "min"]:
        """The optimisation mode of a search on this metric."""
        return "max" if self.higher_is_better else "min"

    @property
    def better(self) -> str:
        """"higher" or "lower", as reports print the direction."""
        return "higher" if self.higher_is_better else "lower"

    def value(self, labels: np.ndarray, scores: np.ndarray, users: np.ndarray | None = None) -> float:
        """The metric of one full prediction set; `users` (row-aligned user ids) only where `needs_users`."""
        if not self.needs_users:
            return self.compute(labels, scores)
        if users is None:
            raise ValueError(f"metric {self.name!r} needs user ids")
        return self.compute(labels, scores, users)

    def is_better(self, value: float, best: float) -> bool:
        """Whether `value` strictly improves on `best` in this metric's direction."""
        return value > best if self.higher_is_better else value < best


_REGISTRY: dict[str, MetricSpec] = {}


def register(spec: MetricSpec) -> MetricSpec:
    """Add `spec`; its name must be new. Returns it (usable as `X = register(MetricSpec(...))`)."""
    if spec.name in _REGISTRY:
        raise ValueError(f"metric {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> MetricSpec:
    """Remove and return the metric `name` (e.g. a test's temporary metric)."""
    return _REGISTRY.pop(get(name).name)


def names() -> tuple[str, ...]:
    """Registered metric names in registration order (the order of metrics.json's keys)."""
    return tuple(_REGISTRY)


def all_metrics() -> tuple[MetricSpec, ...]:
    """Registered metrics in registration order."""
    return tuple(_REGISTRY.values())


def get(name: str) -> MetricSpec:
    """The metric `name`; KeyError naming the registered ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; registered: {', '.join(_REGISTRY)}") from None


def check_metric(key: str, name: object) -> MetricSpec:
    """Config validation: the metric `name` given at config key `key`, or ConfigError listing the registered."""
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ConfigError(f"{key}: unknown metric {name!r}; registered: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def search_modes(split: str = VALIDATION_SPLIT) -> dict[str, Literal["max", "min"]]:
    """{`<split>_<name>`: "max" | "min"} of every registered metric (the metrics a sweep search may optimise)."""
    return {f"{split}_{m.name}": m.mode for m in _REGISTRY.values()}


def check_split_metric(key: str, column: object, split: str = VALIDATION_SPLIT) -> MetricSpec:
    """Config validation of a `<split>_<name>` key (search metric, early stopping), optionally of a task after
    the first (`<split>_<name>@<task>`, docs/tasks.md; which tasks exist is the run config's check);
    ConfigError lists the valid."""
    valid = search_modes(split)
    base, at, task = column.partition("@") if isinstance(column, str) else ("", "", "")
    if base not in valid or (at and not task):
        raise ConfigError(f"{key}: unknown value {column!r}; valid: {', '.join(valid)} (each may name a task "
                          "after the first: valid_auc@<task>)")
    return _REGISTRY[base[len(split) + 1:]]


def headline_metrics() -> tuple[MetricSpec, ...]:
    """The report's lead metrics, in registration order."""
    return tuple(m for m in _REGISTRY.values() if m.headline)


def scaling_metrics() -> tuple[str, ...]:
    """Metrics fitted by default in the scaling analysis: the headline metrics that can be a gain."""
    return tuple(m.name for m in _REGISTRY.values() if m.headline and m.gain is not None)


# The built-ins, in the order their keys appear in metrics.json.
AUC = register(MetricSpec("auc", M.auc, higher_is_better=True, label="AUC", gain="difference", headline=True))
LOGLOSS = register(MetricSpec("logloss", M.logloss, higher_is_better=False, label="LogLoss",
                              gain="relative_reduction", headline=True))
NE = register(MetricSpec("ne", M.normalized_entropy, higher_is_better=False, label="NE", gain="relative_reduction"))
GAUC = register(MetricSpec("gauc", M.gauc, higher_is_better=True, label="GAUC", gain="difference",
                           needs_users=True))
UAUC = register(MetricSpec("uauc", M.uauc, higher_is_better=True, label="UAUC", gain="difference",
                           needs_users=True))


def binary_metrics(labels: np.ndarray, probs: np.ndarray, users: np.ndarray | None = None) -> dict[str, float]:
    """n, positives and every registered metric of one prediction set, in registration order; the
    metrics that need user ids only when `users` is given."""
    y = M.as_labels(labels)
    out: dict[str, float] = {"n": int(y.size), "positives": int(y.sum())}
    for m in all_metrics():
        if users is not None or not m.needs_users:
            out[m.name] = m.value(y, probs, users)
    return out
