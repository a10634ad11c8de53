"""Typed `analysis:` section of a sweep YAML (optional; every field has a default).

Keys, defaults and an example: docs/analysis.md, *Configuration*.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from core.typed_config import ConfigError, from_dict
from harness import metric_registry
from harness import runs_columns as C


@dataclass
class ComparisonConfig:
    """One ablation: runs matching `a` against runs matching `b` (delta = A - B).

    `vary: {column: [value_a, value_b]}` is shorthand for a = {column: value_a}, b = {column: value_b};
    `where` restricts both sides (e.g. to one architecture).
    """

    name: str = ""
    a: dict[str, Any] = field(default_factory=dict)
    b: dict[str, Any] = field(default_factory=dict)
    vary: dict[str, list] = field(default_factory=dict)
    where: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.vary:
            if self.a or self.b:
                raise ConfigError(f"comparison {self.name!r}: give either a/b or vary, not both")
            if len(self.vary) != 1:
                raise ConfigError(f"comparison {self.name!r}: vary names exactly one column, got {list(self.vary)}")
            ((column, values),) = self.vary.items()
            if not isinstance(values, list) or len(values) != 2:
                raise ConfigError(f"comparison {self.name!r}: vary.{column} needs two values [a, b], got {values!r}")
            self.a, self.b = {column: values[0]}, {column: values[1]}
        if not self.a or not self.b:
            raise ConfigError(f"comparison {self.name!r}: needs both a and b selectors (or vary)")
        if not self.name:
            self.name = f"{_describe(self.a)} vs {_describe(self.b)}"


@dataclass
class ExpectationConfig:
    """A claim from another study, "A beats B" on `metric`, to be checked on this sweep's seeds
    (`analysis.expectations`). `source` says where the claim comes from; `where` restricts both sides."""

    claim: str = ""
    a: dict[str, Any] = field(default_factory=dict)
    b: dict[str, Any] = field(default_factory=dict)
    where: dict[str, Any] = field(default_factory=dict)
    metric: str = "auc"
    source: str = ""

    def __post_init__(self) -> None:
        if not self.a or not self.b:
            raise ConfigError(f"{'a' if not self.a else 'b'}: claim {self.claim!r} needs both a and b selectors")
        metric_registry.check_metric("metric", self.metric)
        if not self.claim:
            self.claim = f"{_describe(self.a)} beats {_describe(self.b)}"


XAxis = Literal["forward", "training"]
XUnit = Literal["flops", "gflops"]
GainKind = Literal["absolute", "relative"]


@dataclass
class ScalingConfig:
    """How scaling points, families, the reference, the axes and family comparisons are formed.

    `x_axis`: `forward` = forward matrix FLOPs per target; `training` = 3 x forward per sample (forward plus
    a backward pass of twice its cost). `x_unit`: `flops` or `gflops` (1e9). `gain`: `absolute` dAUC =
    AUC - AUC_ref, or `relative` dAUC / AUC_ref; the LogLoss gain (L_ref - L) / L_ref is relative either way.
    `compare`: pairs of families (architecture names or family labels) to compare; empty = every pair of
    fitted families in the same context.
    """

    reference: dict[str, Any] = field(default_factory=dict)
    size_by: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    x_axis: XAxis = "forward"
    x_unit: XUnit = "flops"
    gain: GainKind = "absolute"
    compare: list[list[str]] = field(default_factory=list)
    helix_reference: bool = True

    def __post_init__(self) -> None:
        for i, pair in enumerate(self.compare):
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ConfigError(f"analysis.scaling.compare[{i}]: expected two different family names "
                                  f"[a, b], got {pair!r}")
        if C.ARCH in self.reference and isinstance(self.reference[C.ARCH], list):
            raise ConfigError(f"analysis.scaling.reference.arch: one architecture, got {self.reference[C.ARCH]!r}")


@dataclass
class DataScalingConfig:
    """The L(N, D) fit of a sweep that varies `data.n_train` (analysis/fits/data_scaling.py): the loss-like
    `metric` (logloss or ne) on `split` (validation by default, as in Chinchilla)."""

    metric: Literal["logloss", "ne"] = "logloss"
    split: Literal["valid", "test"] = "valid"


@dataclass
class AnalysisConfig:
    baseline: str | None = None
    comparisons: list[ComparisonConfig] = field(default_factory=list)
    expectations: list[ExpectationConfig] = field(default_factory=list)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    data_scaling: DataScalingConfig = field(default_factory=DataScalingConfig)
    metrics: list[str] = field(default_factory=lambda: list(metric_registry.names()))
    split: Literal["test", "valid"] = "test"
    alpha: float = 0.05
    power: float = 0.8
    n_resamples: int = 9999
    bootstrap_seed: int = 0
    delong: bool = True
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"seed": "bootstrap_seed"}

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"analysis.alpha: must be in (0, 1), got {self.alpha}")
        if not 0.0 < self.power < 1.0:
            raise ConfigError(f"analysis.power: must be in (0, 1), got {self.power}")
        if self.n_resamples < 99:
            raise ConfigError(f"analysis.n_resamples: at least 99, got {self.n_resamples}")
        if not self.metrics:
            raise ConfigError("analysis.metrics: name at least one metric")
        for i, name in enumerate(self.metrics):
            metric_registry.check_metric(f"analysis.metrics[{i}]", name)


def _describe(selector: dict[str, Any]) -> str:
    return ", ".join(str(v) if k == C.ARCH else f"{k}={v}" for k, v in selector.items())


def analysis_config(section: dict[str, Any] | None) -> AnalysisConfig:
    """Validate the `analysis:` mapping of a sweep YAML (None or missing gives the defaults)."""
    if section is not None and not isinstance(section, dict):
        raise ConfigError(f"analysis: expected a mapping, got {type(section).__name__}")
    return from_dict(AnalysisConfig, section or {}, prefix="analysis.")
