"""Run health: whether one trial learned, from what it recorded; the one place the thresholds live, and how fast
its held-out loss was still falling at its end (`trend_of`). The statuses, their order, the still-falling measure
and how `FALLING_FAST` was calibrated: docs/training.md ("Health statuses and the still-falling check").
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

OK, DIVERGED, COLLAPSED, UNDERTRAINED = "ok", "diverged", "collapsed", "undertrained"
#: Every status, in the order they are checked.
STATUSES: tuple[str, ...] = (OK, DIVERGED, COLLAPSED, UNDERTRAINED)

#: Standard deviation of the validation probabilities below which predictions count as constant.
PRED_STD_MIN = 1e-4
#: |AUC - 0.5| below this many null standard errors counts as "within noise of 0.5".
AUC_NOISE_Z = 2.0
#: Validation NE must be below this for a run to have learned more than the base rate.
NE_MAX = 0.99
#: Validation NE above this counts as a loss that blew up.
NE_BLOWUP = 1.5
#: Relative fall of the held-out loss per tenth of the run, at its end, above which a run is still falling fast.
FALLING_FAST = 0.02

#: Criterion names, as `Health.reasons` / `Health.unchecked` name them.
CRITERIA: dict[str, str] = {
    "nonfinite_loss": "non-finite training loss",
    "nonfinite_weights": "non-finite final weights (a non-finite gradient)",
    "loss_blowup": f"validation NE > {NE_BLOWUP:g}",
    "constant_predictions": f"validation prediction sd < {PRED_STD_MIN:g}",
    "auc_noise": f"validation AUC within {AUC_NOISE_Z:g} null SE of 0.5",
    "ne_threshold": f"validation NE >= {NE_MAX:g}",
    "still_falling": f"held-out loss still falling > {FALLING_FAST:.0%} per tenth of the run over its last 30 %",
}

#: metrics.json keys `health_fields` writes (flat scalars, so runs.parquet columns).
STATUS_KEY, REASONS_KEY, UNCHECKED_KEY = "health_status", "health_reasons", "health_unchecked"
#: ... and the still-falling measurement: the fall per tenth of the run, its lower end, and the curve it was
#: measured on (`<tag> steps a-b, n points`) or `not checked: <why>`.
FALL_KEY, FALL_LOW_KEY, FALL_CURVE_KEY = "loss_fall", "loss_fall_low", "loss_fall_curve"
NOT_CHECKED = "not checked: "

#: Fraction of the run, counted back from its last step, over which the slope is measured.
TAIL = 0.3
#: Fewest points a curve (and the window) needs for a slope.
MIN_POINTS = 3
#: Two-sided confidence level of the slope's interval.
CONFIDENCE = 0.90
VALID_CURVE, TRAIN_CURVE = "valid/ne", "train/loss"


@dataclass(frozen=True)
class Trend:
    """The relative fall per tenth of the run (positive: falling) and its confidence interval."""

    fall: float
    fall_low: float  # lower end of the interval of `fall`
    fall_high: float
    source: str  # the curve's tag
    points: int  # points in the window
    first_step: int  # the window's first and last step
    last_step: int


def tail_fall(points: Sequence[tuple[int, float]], total_steps: int, *, source: str = TRAIN_CURVE,
              tail: float = TAIL, min_points: int = MIN_POINTS) -> Trend | None:
    """The trend of `points` ((step, loss), sorted by step) over the last `tail` of `total_steps`; None when
    fewer than `min_points` finite points."""
    from scipy.stats import theilslopes

    arr = np.asarray([(s, v) for s, v in points if math.isfinite(v)], dtype=np.float64).reshape(-1, 2)
    if len(arr) < min_points or total_steps <= 0:
        return None
    inside = int(np.count_nonzero(arr[:, 0] >= (1.0 - tail) * total_steps))
    window = arr[-max(inside, min_points):]
    steps, loss = window[:, 0], window[:, 1]
    slope, intercept, low, high = theilslopes(loss, steps, alpha=CONFIDENCE)
    level = intercept + slope * steps[-1]
    if not level > 0:
        return None
    per = -0.1 * total_steps / level  # slope -> relative fall per tenth of the run
    return Trend(float(slope * per), float(high * per), float(low * per), source, len(window), int(steps[0]),
                 int(steps[-1]))


def trend_of(curves: Mapping[str, Sequence[tuple[int, float]]], *, total_steps: int | None,
             epochs: int | None) -> Trend | str:
    """The trend of a run's curves (`harness.run_folder.read_curves`), or why it cannot be measured."""
    if not curves:
        return "no curve"
    total = total_steps or max((s for pts in curves.values() for s, _ in pts), default=0)
    valid = curves.get(VALID_CURVE, [])
    if len(valid) >= MIN_POINTS:
        t = tail_fall(valid, total, source=VALID_CURVE)
        if t is not None:
            return t
    if epochs is None or epochs > 1:
        return (f"{'unknown epochs' if epochs is None else f'{epochs} epochs'} and {len(valid)} validation "
                f"evaluation(s) (< {MIN_POINTS}); the training loss after epoch 1 is not held out")
    t = tail_fall(curves.get(TRAIN_CURVE, []), total)
    return t if t is not None else f"curve too short ({len(curves.get(TRAIN_CURVE, []))} training-loss points)"


@dataclass(frozen=True)
class Health:
    status: str
    reasons: tuple[str, ...] = ()  # why it is not ok: criterion name and the value that failed it
    unchecked: tuple[str, ...] = field(default_factory=tuple)  # criteria whose inputs were missing

    def fields(self) -> dict[str, Any]:
        """The metrics.json / runs.parquet keys."""
        return {STATUS_KEY: self.status, REASONS_KEY: "; ".join(self.reasons),
                UNCHECKED_KEY: ", ".join(self.unchecked)}


def learned(status: str, reasons: str) -> bool:
    """Whether a run learned: `ok`, or `undertrained` only because its loss was still falling at the end (it
    learned and would learn more; a short tuning run at a modest learning rate often ends so, which says
    nothing about that rate's stability). `reasons` is `health_reasons` as recorded."""
    if status == OK:
        return True
    parts = [r for r in reasons.split("; ") if r]
    return status == UNDERTRAINED and bool(parts) and all(r.startswith("still_falling:") for r in parts)


def null_auc_se(n_pos: float, n_neg: float) -> float:
    """Standard error of the AUC of a score unrelated to the label (Hanley-McNeil at AUC = 0.5)."""
    if not (n_pos > 0 and n_neg > 0):
        return math.nan
    return math.sqrt((n_pos + n_neg + 1.0) / (12.0 * n_pos * n_neg))


def _num(m: Mapping[str, Any], key: str) -> float | None:
    """`m[key]` as a float, None when absent or null (a missing runs.parquet cell); NaN stays NaN."""
    try:
        return float(m[key])
    except (KeyError, TypeError, ValueError):  # absent, None or not a number
        return None


def _missing(v: float | None) -> bool:
    return v is None or math.isnan(v)


def classify(m: Mapping[str, Any], trend: Trend | str | None = None) -> Health:
    """Health of one run from its flat metrics (`train_loss`, `weights_finite`, `valid_ne`, `valid_auc`,
    `valid_n`, `valid_positives`, `valid_pred_std`) and the trend of its held-out loss at the end
    (`trend_of`; a string says why there is none, None: not looked at)."""
    # per criterion: None = not checked (inputs missing), "" = passed, else why it failed
    found: dict[str, str | None] = {}
    loss, ne, auc, sd = _num(m, "train_loss"), _num(m, "valid_ne"), _num(m, "valid_auc"), _num(m, "valid_pred_std")
    found["nonfinite_loss"] = None if loss is None else ("" if math.isfinite(loss) else f"train_loss {loss}")
    finite = _num(m, "weights_finite")
    found["nonfinite_weights"] = None if _missing(finite) else ("" if finite else "final weights not finite")
    found["loss_blowup"] = None if ne is None else (f"valid NE {ne:.4g}" if math.isnan(ne) or ne > NE_BLOWUP else "")
    found["constant_predictions"] = None if sd is None else (
        f"valid prediction sd {sd:.3g}" if math.isnan(sd) or sd < PRED_STD_MIN else "")
    n, pos = _num(m, "valid_n"), _num(m, "valid_positives")
    se = math.nan if n is None or pos is None or _missing(n) or _missing(pos) else null_auc_se(pos, n - pos)
    found["auc_noise"] = None if auc is None or math.isnan(se) else (
        f"valid AUC {auc:.4f} (0.5 ± {AUC_NOISE_Z:g}×{se:.4f})" if math.isnan(auc) or abs(auc - 0.5) < AUC_NOISE_Z * se
        else "")
    found["ne_threshold"] = None if ne is None else (
        f"valid NE {ne:.4f} >= {NE_MAX:g}" if math.isnan(ne) or ne >= NE_MAX else "")
    found["still_falling"] = None if not isinstance(trend, Trend) else (
        f"{trend.source} falling {trend.fall:.1%} per tenth of the run over steps {trend.first_step}-"
        f"{trend.last_step} (90 % interval {trend.fall_low:.1%} to {trend.fall_high:.1%}; threshold "
        f"{FALLING_FAST:.0%})" if trend.fall > FALLING_FAST and trend.fall_low > 0 else "")
    unchecked = tuple(name for name in CRITERIA if found[name] is None)
    for status in (DIVERGED, COLLAPSED, UNDERTRAINED):
        reasons = tuple(f"{name}: {found[name]}" for name in _OF[status] if found[name])
        if reasons:
            return Health(status, reasons, unchecked)
    return Health(OK, (), unchecked)


#: The criteria behind each unhealthy status.
_OF: dict[str, tuple[str, ...]] = {
    DIVERGED: ("nonfinite_loss", "nonfinite_weights", "loss_blowup"),
    COLLAPSED: ("constant_predictions", "auc_noise"),
    UNDERTRAINED: ("ne_threshold", "still_falling"),
}


def trend_fields(trend: Trend | str | None) -> dict[str, Any]:
    """The still-falling measurement as metrics.json / runs.parquet keys (nulls and the reason when none)."""
    if not isinstance(trend, Trend):
        return {FALL_KEY: None, FALL_LOW_KEY: None, FALL_CURVE_KEY: NOT_CHECKED + (trend or "no curve")}
    return {FALL_KEY: trend.fall, FALL_LOW_KEY: trend.fall_low,
            FALL_CURVE_KEY: f"{trend.source} steps {trend.first_step}-{trend.last_step}, {trend.points} points"}
