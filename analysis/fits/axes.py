"""The compute axis, its unit and the gain of a scaling fit (`Convention`), and HELIX's published laws with the
convention each is stated in (docs/analysis.md, "Axes", "Gain" and "Comparing with the papers")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from harness import metric_registry
from harness.metric_registry import MetricSpec

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


def _gain_metric(metric: str) -> MetricSpec:
    """The registered metric `metric`; ValueError when it declares no scaling gain."""
    spec = metric_registry.get(metric)
    if spec.gain is None:
        raise ValueError(f"metric {metric!r} declares no scaling gain (harness/metric_registry.py)")
    return spec


class PublishedLaw(TypedDict):
    slope: float
    intercept: float
    r2: float
    metric: str
    convention: Convention


#: HELIX CTR fit, with the convention it is stated in.
HELIX_CTR: PublishedLaw = {"slope": 0.085, "intercept": -4.733, "r2": 0.925, "metric": "auc",
             "convention": Convention(x_axis="training", x_unit="gflops", gain="absolute")}
HELIX_CVR_SLOPE = 0.132


@dataclass(frozen=True)
class PaperComparison:
    """Whether a fit can be compared with HELIX's CTR line and, if so, how its slope relates."""

    comparable: bool
    reason: str  # why not, or what was compared
    inside_ci: bool | None = None  # 0.085 inside the fit's slope interval


def helix_convention_mismatch(metric: str, conv: Convention) -> list[str]:
    """What differs between a fit's convention and HELIX's CTR line (empty: comparable)."""
    ref: Convention = HELIX_CTR["convention"]
    out = []
    if metric != HELIX_CTR["metric"]:
        return [f"it is a law of AUC, this fit is of {metric}"]
    if conv.gain != ref.gain:
        out.append(f"its gain is {ref.gain} dAUC, this fit's is {conv.gain}")
    if conv.x_axis != ref.x_axis:
        out.append(f"its C is {ref.x_axis} FLOPs per sample, this fit's x is {conv.x_axis} FLOPs")
    if conv.x_unit != ref.x_unit:
        out.append(f"its C is in {UNIT_NAMES[ref.x_unit]}, this fit's x in {UNIT_NAMES[conv.x_unit]}")
    return out


def compare_with_helix(metric: str, conv: Convention, slope_ci: tuple[float, float] | None) -> PaperComparison:
    """HELIX CTR comparison for one fit: slope inside / outside the fit's interval, or why not compared."""
    mismatch = helix_convention_mismatch(metric, conv)
    if mismatch:
        return PaperComparison(False, "not compared with HELIX's CTR line: " + "; ".join(mismatch))
    if slope_ci is None:
        return PaperComparison(False, "not compared with HELIX's CTR line: no fit")
    lo, hi = slope_ci
    tol = 1e-9  # a fit through exact points has a zero-width interval at the slope, up to rounding
    inside = bool(lo - tol <= HELIX_CTR["slope"] <= hi + tol)
    where = "inside" if inside else "outside"
    return PaperComparison(True, f"HELIX CTR slope {HELIX_CTR['slope']} is {where} this fit's 95% interval "
                                 f"[{lo:.3f}, {hi:.3f}] (CVR slope {HELIX_CVR_SLOPE}); heights differ by "
                                 "reference model and data", inside)
