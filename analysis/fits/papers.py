"""Published scaling laws (HELIX's CTR line and CVR slope; WHALE states none) and when one of our fits may be
compared with them: only AUC fits in HELIX's convention (absolute dAUC, training FLOPs per sample, GFLOPs), and
slopes, not heights (docs/analysis.md, "Comparing with the papers")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from .axes import UNIT_NAMES, Convention


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
