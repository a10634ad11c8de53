"""Typed `analysis:` section of a sweep YAML, every field defaulted: docs/analysis.md, *Configuration*."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from core.typed_config import ConfigError, from_dict
from harness import metric_registry
from harness import runs_columns as C


@dataclass
class QuestionConfig:
    """One question the study asks (`analysis.questions`): a comparison, an ablation set, a slope or a slope
    difference; the keys each kind reads and what settles it: docs/analysis.md, *Questions*."""

    name: str = ""
    kind: Literal["comparison", "ablation_set", "slope", "slope_difference"] = "comparison"
    metric: str = "auc"
    metrics: list[str] = field(default_factory=list)  # a comparison asked on each (one Holm family): `metric` unused
    a: dict[str, Any] = field(default_factory=dict)
    b: dict[str, Any] = field(default_factory=dict)
    vary: dict[str, list] = field(default_factory=dict)
    where: dict[str, Any] = field(default_factory=dict)
    expect: Literal["a", "b", "either"] = "either"
    source: str = ""
    smallest_effect: float = 0.0
    switch: str = ""
    full: Any = None
    names: dict[str, str] = field(default_factory=dict)
    family: str = ""
    families: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)  # slope_difference of `family` between two tasks
    target_half_width: float = 0.0

    def __post_init__(self) -> None:
        metric_registry.check_metric("metric", self.metric)
        for m in self.metrics:
            metric_registry.check_metric("metrics", m)
        if self.metrics and (self.kind != "comparison" or len(set(self.metrics)) != len(self.metrics)):
            raise ConfigError(f"metrics: question {self.name!r}: a comparison's list of distinct metrics, got "
                              f"{self.metrics} on a {self.kind}")
        if self.smallest_effect < 0 or self.target_half_width < 0:
            raise ConfigError(f"question {self.name!r}: smallest_effect and target_half_width are >= 0")
        if self.kind == "comparison":
            self._comparison()
        elif self.kind == "ablation_set":
            if not self.switch or self.full is None:
                raise ConfigError(f"{'full' if self.switch else 'switch'}: ablation set {self.name!r} needs the "
                                  "switch column and its full-model value")
            self.name = self.name or f"ablations of {self.switch} = {self.full}"
        elif self.kind == "slope" and not self.family:
            raise ConfigError(f"family: slope question {self.name!r} names the family whose slope it reads")
        elif self.kind == "slope_difference" and self.tasks:
            if not self.family or len(set(self.tasks)) != 2 or len(self.tasks) != 2:
                raise ConfigError(f"tasks: slope_difference {self.name!r} between tasks names one family and two "
                                  f"tasks, got family {self.family!r}, tasks {self.tasks}")
        elif self.kind == "slope_difference" and (len(self.families) != 2 or len(set(self.families)) != 2):
            raise ConfigError(f"families: slope_difference {self.name!r} names two families, got {self.families}")
        self.name = self.name or (f"slope of {self.family}" if self.kind == "slope"
                                  else f"slope of {self.family}: {self.tasks[0]} - {self.tasks[1]}" if self.tasks
                                  else f"slope {self.families[0]} - {self.families[-1]}")

    def _comparison(self) -> None:
        if self.vary:
            if self.a or self.b:
                raise ConfigError(f"question {self.name!r}: give either a/b or vary, not both")
            if len(self.vary) != 1:
                raise ConfigError(f"question {self.name!r}: vary names exactly one column, got {list(self.vary)}")
            ((column, values),) = self.vary.items()
            if not isinstance(values, list) or len(values) != 2:
                raise ConfigError(f"question {self.name!r}: vary.{column} needs two values [a, b], got {values!r}")
            self.a, self.b, self.vary = {column: values[0]}, {column: values[1]}, {}
        if not self.a or not self.b:
            raise ConfigError(f"{'a' if not self.a else 'b'}: question {self.name!r} needs both a and b selectors "
                              "(or vary)")
        self.name = self.name or f"{describe(self.a)} vs {describe(self.b)}"


@dataclass
class ScalingConfig:
    """How scaling points, families, the reference, the axes and family comparisons are formed (docs/analysis.md)."""

    reference: dict[str, Any] = field(default_factory=dict)
    size_by: list[str] = field(default_factory=list)
    families: list[str] = field(default_factory=list)
    x_axis: Literal["forward", "training"] = "forward"
    x_unit: Literal["flops", "gflops"] = "flops"
    gain: Literal["absolute", "relative"] = "absolute"
    compare: list[list[str]] = field(default_factory=list)
    helix_reference: bool = True
    #: named families cut from one architecture's runs by a selector (`{arch: helix, model.name: [...]}`), for
    #: arms whose sizes overlap (a run may belong to several); each replaces its architecture's own family
    arms: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, selector in self.arms.items():
            if not isinstance(selector, dict) or not isinstance(selector.get(C.ARCH), str):
                raise ConfigError(f"analysis.scaling.arms.{name}: a selector naming one architecture "
                                  f"({{arch: helix, model.name: [...]}}), got {selector!r}")
        for i, pair in enumerate(self.compare):
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ConfigError(f"analysis.scaling.compare[{i}]: expected two different family names "
                                  f"[a, b], got {pair!r}")
        if C.ARCH in self.reference and isinstance(self.reference[C.ARCH], list):
            raise ConfigError(f"analysis.scaling.reference.arch: one architecture, got {self.reference[C.ARCH]!r}")


@dataclass
class DataScalingConfig:
    """The L(N, D) fit of a sweep that varies `data.n_train`: docs/analysis.md, "Data as a compute axis"."""

    metric: Literal["logloss", "ne"] = "logloss"
    split: Literal["valid", "test"] = "valid"


@dataclass
class AnalysisConfig:
    baseline: str | None = None
    questions: list[QuestionConfig] = field(default_factory=list)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    data_scaling: DataScalingConfig = field(default_factory=DataScalingConfig)
    metrics: list[str] = field(default_factory=lambda: list(metric_registry.names()))
    split: Literal["test", "valid"] = "test"
    alpha: float = 0.05
    power: float = 0.8
    n_resamples: int = 9999
    bootstrap_seed: int = 0
    delong: bool = True
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"seed": "bootstrap_seed", "comparisons": "questions",
                                              "expectations": "questions"}

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


def describe(selector: dict[str, Any]) -> str:
    """A selector in words: its architecture by name, other columns as key=value."""
    return ", ".join(str(v) if k == C.ARCH else f"{k}={v}" for k, v in selector.items())


def analysis_config(section: dict[str, Any] | None) -> AnalysisConfig:
    """Validate the `analysis:` mapping of a sweep YAML (None or missing gives the defaults)."""
    if section is not None and not isinstance(section, dict):
        raise ConfigError(f"analysis: expected a mapping, got {type(section).__name__}")
    return from_dict(AnalysisConfig, section or {}, prefix="analysis.")
