"""Marginal returns along a family's compute ladder: seed-paired step deltas, per-doubling values, Holm over the
ladder's steps and where returns stop (docs/analysis.md, *Scaling fits*)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from harness import metric_registry

from ..stats.paired import ALPHA, LEVEL, holm, seed_mean, seeds_for_power

STEP_EFFECT = 0.001
METHOD = ("per-seed deltas between consecutive points (ordered by FLOPs), paired by seed; t interval of "
          "their mean and paired t-test (scipy.stats.ttest_rel, df = n - 1), Holm-corrected over the ladder's steps")
STILL_GROWING = "still growing at the largest point"
NO_STEP = "no step improves significantly"


@dataclass
class Step:
    """One step of the ladder: from point `start` to the next point `end` by FLOPs."""

    start: str
    end: str
    flops_ratio: float  # FLOPs(end) / FLOPs(start)
    seeds: np.ndarray  # [n] seeds with both points
    deltas: np.ndarray  # [n] metric(end) - metric(start) per seed
    mean: float
    sd: float  # sample sd (ddof 1); NaN with one seed
    ci: tuple[float, float]  # t interval of the mean delta; NaN with < 2 seeds
    p_value: float  # paired t-test, two-sided; NaN with < 2 seeds
    improves: bool  # Holm-adjusted p < alpha, mean on the better side of 0
    worsens: bool = False  # Holm-adjusted p < alpha, mean on the worse side of 0
    p_holm: float = float("nan")  # over the testable steps of the ladder
    seeds_for_80: float = float("nan")  # seeds for 80% power at STEP_EFFECT given the observed sd

    @property
    def n(self) -> int:
        return len(self.deltas)

    @property
    def doublings(self) -> float:
        """log2 of the FLOPs ratio (NaN when the two points have the same FLOPs)."""
        return float(np.log2(self.flops_ratio)) if self.flops_ratio > 0 and self.flops_ratio != 1 else float("nan")

    @property
    def testable(self) -> bool:
        return self.n >= 2 and np.isfinite(self.p_value)

    @property
    def per_doubling(self) -> float:
        return self.mean / self.doublings

    @property
    def per_doubling_ci(self) -> tuple[float, float]:
        lo, hi = self.ci[0] / self.doublings, self.ci[1] / self.doublings
        return (min(lo, hi), max(lo, hi))


@dataclass
class MarginalReturns:
    """The steps of one family's ladder for one metric, and where returns stop being significant."""

    metric: str
    steps: list[Step]
    verdict: str
    diminish_from: str | None = None  # label of the point from which returns diminish; None if still growing
    notes: list[str] = field(default_factory=list)
    level: float = LEVEL
    method: str = METHOD


def paired_step(start: str, end: str, flops: tuple[float, float], seeds: np.ndarray, prev: np.ndarray,
                nxt: np.ndarray, level: float = LEVEL) -> Step:
    """Statistics of one step; `prev`, `nxt` [S] are the metric per seed (NaN where a seed is missing)."""
    both = np.isfinite(prev) & np.isfinite(nxt)  # [S]
    deltas = nxt[both] - prev[both]  # [n]
    mean, sd, p = seed_mean(deltas)
    ci = (float("nan"), float("nan"))
    if sd > 0:
        lo, hi = stats.ttest_1samp(deltas, 0.0).confidence_interval(confidence_level=level)
        ci = (float(lo), float(hi))
    elif sd == 0:  # identical deltas (e.g. the same metric at both points): the interval is the point itself
        ci, p = (mean, mean), (0.0 if mean != 0 else 1.0)
    return Step(start, end, flops[1] / flops[0], seeds[both], deltas, mean, sd, ci, p, False, False,
                seeds_for_80=seeds_for_power(sd, STEP_EFFECT))


def marginal_returns(labels: list[str], flops: np.ndarray, values: np.ndarray, seeds: np.ndarray, metric: str,
                     *, level: float = LEVEL, alpha: float = ALPHA) -> MarginalReturns | None:
    """Steps between consecutive points by FLOPs [P] (only ratios used) of `values` [P, S] (NaN where missing);
    None with fewer than two points (docs/analysis.md, "Marginal returns")."""
    flops = np.asarray(flops, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(flops, kind="stable")  # [P]
    if len(order) < 2:
        return None
    higher = metric_registry.get(metric).higher_is_better
    steps = [paired_step(labels[i], labels[j], (flops[i], flops[j]), np.asarray(seeds), values[i], values[j], level)
             for i, j in zip(order[:-1], order[1:])]
    for s, p in zip(steps, holm([s.p_value for s in steps])):
        s.p_holm = float(p)
        significant = bool(np.isfinite(p) and p < alpha)
        s.improves = significant and (s.mean > 0 if higher else s.mean < 0)
        s.worsens = significant and (s.mean < 0 if higher else s.mean > 0)
    return _verdict(metric, steps, level)


def _verdict(metric: str, steps: list[Step], level: float) -> MarginalReturns:
    notes = [f"{s.start} → {s.end}: {s.n} paired seed(s), not testable" for s in steps if not s.testable]
    notes += [f"{s.start} → {s.end}: same FLOPs, no per-doubling value" for s in steps if not np.isfinite(s.doublings)]
    worse = [s for s in steps if s.worsens]
    if worse:
        notes.append("significantly worse: " + ", ".join(f"{s.start} → {s.end}" for s in worse))
    improving = [k for k, s in enumerate(steps) if s.improves]
    if improving and improving[-1] == len(steps) - 1:  # the top step still buys a significant gain
        flat = [s for s in steps if not s.improves]
        if flat:
            notes.append("not significant on the way: " + ", ".join(f"{s.start} → {s.end}" for s in flat))
        return MarginalReturns(metric, steps, STILL_GROWING, None, notes, level)
    if not improving:
        n = min((s.n for s in steps), default=0)
        return MarginalReturns(metric, steps, f"{NO_STEP} ({n} paired seeds)", steps[0].start, notes, level)
    last = steps[improving[-1]]
    return MarginalReturns(metric, steps, f"returns diminish from {last.end}", last.end, notes, level)
