"""The compute axis and the gain of a scaling fit: which FLOPs (`x_axis`: forward, or training = 3 x forward), in
which unit (`x_unit`), and which gain (`gain`: absolute or relative dAUC; a loss's gain is always its relative
reduction, as harness/metric_registry.py declares) (docs/analysis.md, "Axes" and "Gain")."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from harness import metric_registry
from harness.metric_registry import MetricSpec

from ..config import ScalingConfig

#: Training FLOPs per sample as a multiple of forward FLOPs per target (forward + backward at 2x forward).
TRAINING_MULTIPLIER = 3.0
UNIT_SCALE = {"flops": 1.0, "gflops": 1e9}
UNIT_NAMES = {"flops": "FLOPs", "gflops": "GFLOPs"}
AXIS_NAMES = {"forward": "forward FLOPs per target", "training": "training FLOPs per sample (3 x forward)"}


@dataclass(frozen=True)
class Convention:
    """Axis, unit and gain of one fit (stored with every FamilyScaling and in analysis.json)."""

    x_axis: str = "forward"
    x_unit: str = "flops"
    gain: str = "absolute"

    @classmethod
    def from_config(cls, cfg: ScalingConfig) -> Convention:
        return cls(cfg.x_axis, cfg.x_unit, cfg.gain)

    def x(self, forward_flops: np.ndarray | float) -> np.ndarray:
        """Forward FLOPs per target -> this axis, in this unit."""
        mult = TRAINING_MULTIPLIER if self.x_axis == "training" else 1.0
        return np.asarray(forward_flops, dtype=np.float64) * mult / UNIT_SCALE[self.x_unit]

    @property
    def x_label(self) -> str:
        """E.g. "training FLOPs per sample (3 x forward), GFLOPs"."""
        return f"{AXIS_NAMES[self.x_axis]}, {UNIT_NAMES[self.x_unit]}"

    def gain_of(self, metric: str, value: np.ndarray, ref: np.ndarray | float) -> np.ndarray:
        """Gain of `value` over `ref` (positive = better than the reference)."""
        if _gain_metric(metric).gain == "difference":
            diff = value - ref
            return diff / ref if self.gain == "relative" else diff
        return (ref - value) / ref

    def value_of(self, metric: str, gain: np.ndarray | float, ref: float) -> np.ndarray:
        """The metric value a gain corresponds to (inverse of `gain_of` at a fixed reference value)."""
        gain = np.asarray(gain, dtype=np.float64)
        if _gain_metric(metric).gain == "difference":
            return ref * (1.0 + gain) if self.gain == "relative" else ref + gain
        return ref * (1.0 - gain)

    def gain_label(self, metric: str) -> str:
        """E.g. "dAUC", "dAUC / AUC_ref", "relative LogLoss gain"."""
        spec = _gain_metric(metric)
        name = spec.label
        if spec.gain == "relative_reduction":
            return f"relative {name} gain"
        return f"d{name} / {name}_ref" if self.gain == "relative" else f"d{name}"

    def record(self) -> dict[str, str]:
        return {**asdict(self), "x_label": self.x_label}


def _gain_metric(metric: str) -> MetricSpec:
    """The registered metric `metric`; ValueError when it declares no scaling gain."""
    spec = metric_registry.get(metric)
    if spec.gain is None:
        raise ValueError(f"metric {metric!r} declares no scaling gain (harness/metric_registry.py)")
    return spec
