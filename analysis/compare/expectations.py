"""Expectations carried over from another study (`analysis.expectations`: claims "A beats B" with their source),
checked against this sweep's seeds: paired like a comparison (`pair_runs`), a paired t-test per claim stratum,
Holm over every claim of the report, and the outcome (docs/analysis.md, "Expectations")."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness import metric_registry

from ..collect import SweepResults
from ..config import ComparisonConfig, ExpectationConfig
from ..stats.paired import PairedStats, holm, paired_stats
from .pairing import PairedRuns, pair_runs

HOLDS = "holds"
REVERSED = "does not hold"
NOT_SIGNIFICANT = "not significant"
NOT_TESTABLE = "not testable"


@dataclass
class ExpectationResult:
    """One claim on one stratum of paired runs."""

    expectation: ExpectationConfig
    paired: PairedRuns
    stats: PairedStats
    p_holm: float = float("nan")
    outcome: str = ""

    @property
    def label(self) -> str:
        return self.paired.label

    @property
    def a_better(self) -> np.ndarray:
        """Per seed: does A beat B on the claim's metric?"""
        d = np.asarray(self.stats.deltas, dtype=np.float64)
        return d > 0 if metric_registry.get(self.expectation.metric).higher_is_better else d < 0


def evaluate_expectations(results: SweepResults) -> list[ExpectationResult]:
    """Every claim of `analysis.expectations`, per stratum, with its Holm-adjusted outcome."""
    cfg, runs = results.config, results.runs
    out: list[ExpectationResult] = []
    for e in cfg.expectations:
        comparison = ComparisonConfig(name=e.claim, a=dict(e.a), b=dict(e.b), where=dict(e.where))
        column = results.metric_column(e.metric)
        for paired in pair_runs(results, comparison):
            a = runs.loc[paired.rows_a, column].to_numpy(dtype=np.float64) if len(paired.rows_a) else np.array([])
            b = runs.loc[paired.rows_b, column].to_numpy(dtype=np.float64) if len(paired.rows_b) else np.array([])
            keep = np.isfinite(a) & np.isfinite(b)
            stats = paired_stats(a[keep], b[keep], alpha=cfg.alpha, power=cfg.power,
                                 n_resamples=cfg.n_resamples, seed=cfg.bootstrap_seed)
            out.append(ExpectationResult(e, paired, stats))
    adjusted = holm([r.stats.p_t for r in out])
    for r, p in zip(out, adjusted):
        r.p_holm = float(p)
        if not np.isfinite(p):
            r.outcome = NOT_TESTABLE
        elif p >= cfg.alpha:
            r.outcome = NOT_SIGNIFICANT
        else:
            favours_a = (r.stats.mean > 0) == metric_registry.get(r.expectation.metric).higher_is_better
            r.outcome = HOLDS if favours_a else REVERSED
    return out
