"""How fast a run's held-out loss was still falling at its end, from its learning curve (harness/curves.py).

The measure: a Theil-Sen slope (scipy.stats.theilslopes: the median of the pairwise slopes, robust to the
odd noisy window) of the loss against the optimiser step over the last `TAIL` of the run's steps, expressed
as the relative fall per tenth of the run: `-slope * 0.1 * total_steps / level`, where `level` is the fitted
loss at the last point. It reads "continuing for another 10 % of the run would lower the loss by this
fraction, at the end's pace" (a linear extrapolation, which overstates what a flattening curve still gains).
A relative fall is the same for LogLoss and NE (NE is LogLoss over a constant), so the training loss and the
validation NE are measured in one unit. The slope's confidence interval (`CONFIDENCE`, two-sided) comes
with it, so a verdict can ask that the fall be told apart from noise.

Which curve (`trend_of`), in order:

1. `valid/ne`, the validation evaluations, when the run has at least `MIN_POINTS` of them: a run that
   validates during the epoch (`train.eval_every_steps`) or after each of several epochs.
2. `train/loss` of a one-epoch run. In one epoch each batch's loss is computed in the forward pass before
   the optimiser step that uses it, so no batch has been trained on when its loss is recorded: the curve is
   a progressive-validation (prequential) estimate of held-out loss, on a fresh sample at every window (the
   training targets are visited by day, shuffled within a day, so it also follows the stream's drift from day
   to day). It is measured in training mode (ID masking, dropout where a model has it), a level offset that
   does not move the slope.
3. Nothing else: after the first epoch the training loss is on targets already trained on, so its fall says
   the model still fits the training set, not that it still generalises better. A multi-epoch run without
   enough validation evaluations is not checked.

The window is the points at steps >= (1 - TAIL) * total_steps, widened back to the last `MIN_POINTS` points
when it holds fewer (a curve of per-epoch evaluations); a widened window spans more of a convex curve, so it
understates the final pace, a lenient error. A curve with fewer than `MIN_POINTS` points is not measured.
`total_steps` is the run's optimiser steps (`train_steps` in metrics.json; for a run folder written before
that key, the last step any curve logged, which is the final evaluation's step).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

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
    """The trend of a run's curves (`harness.curves.read_curves`), or why it cannot be measured."""
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
