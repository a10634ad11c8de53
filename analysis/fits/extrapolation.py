"""Compute needed for a further gain, read off each fitted form (a root on ln C up to SEARCH_REACH times the
largest compute), with a seed-bootstrap interval. docs/analysis.md, *Scaling fits* (Compute for a further gain)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import optimize

from ..stats.bootstrap import LEVEL, SeedInterval
from .forms import FORMS, Curve, Ladder, interval_text, open_seed_interval

TARGET_STEP = 0.001
REACH = 10.0
SEARCH_REACH = 1e6
GRID = 400


@dataclass(frozen=True)
class ComputeForGain:
    form: str
    step: float  # the further gain asked for, in metric units (signed: + for AUC, - for LogLoss)
    x: float  # compute on the fit's axis where the fitted curve reaches it (inf: never)
    interval: SeedInterval  # on x
    determined: bool
    words: str


def _further(curve: Curve | None, step: float, start_lx: float, higher_is_better: bool) -> float:
    """ln C >= start_lx where `curve` first gains `step` over its value at start_lx; +inf if it does not within
    SEARCH_REACH."""
    if curve is None:
        return float("nan")
    target = float(curve.predict(np.array(start_lx))) + step
    sign = 1.0 if higher_is_better else -1.0
    grid = np.linspace(start_lx, start_lx + np.log(SEARCH_REACH), GRID)
    short = sign * (np.asarray(curve.predict(grid), dtype=np.float64) - target)  # >= 0 once reached
    reached = np.flatnonzero(short >= 0)
    if not len(reached):
        return float("inf")
    k = int(reached[0])
    if k == 0:
        return float(grid[0])
    return float(optimize.brentq(lambda q: sign * (float(curve.predict(np.array(q))) - target), grid[k - 1], grid[k]))


def compute_for_gain(ladder: Ladder, form: str) -> ComputeForGain | None:
    means = ladder.size_means()
    finite = np.flatnonzero(np.isfinite(means))
    if not len(finite):
        return None
    top = int(finite[np.argmax(ladder.x[finite])])
    step = TARGET_STEP * abs(means[top]) * (1.0 if ladder.higher_is_better else -1.0)
    start = float(ladder.lx[top])
    central = _further(ladder.fit(form), step, start, ladder.higher_is_better)
    if np.isnan(central):
        return None
    ci = open_seed_interval(ladder.n_seeds, lambda idx: _further(ladder.fit(form, seeds=tuple(idx)), step, start,
                                                                 ladder.higher_is_better))
    interval = SeedInterval(float(np.exp(ci.lo)), float(np.exp(ci.hi)), ci.undefined_share, ci.n_seeds)
    x_top = float(ladder.x[top])
    determined = bool(np.isfinite(central) and np.isfinite(ci.hi) and ci.hi <= start + np.log(REACH)
                      and ci.undefined_share <= (1 - LEVEL) / 2)
    x = float(np.exp(central))
    shown = interval_text(interval.lo, interval.hi)
    if determined:
        words = f"{x:.3g} ({x / x_top:.3g}x the largest size) {shown}"
    elif not np.isfinite(central):
        words = "not determined: the fitted curve does not reach it (unbounded above)"
    else:
        words = (f"not determined: {x:.3g} ({x / x_top:.3g}x the largest size) but the interval {shown} leaves the "
                 f"measured range by more than a factor {REACH:g}")
    return ComputeForGain(form, step, x, interval, determined, words)


def extrapolations(ladder: Ladder) -> list[ComputeForGain]:
    return [e for e in (compute_for_gain(ladder, form) for form in FORMS) if e is not None]
