"""Expectations carried over from another study, checked against this sweep's seeds.

A sweep's `analysis.expectations` lists pairwise claims, each with where it came from, e.g.

    expectations:
      - {claim: WHALE beats MeanPool, a: {arch: whale}, b: {arch: whale_meanpool},
         source: "synthetic demo reference (planted candidate-dependent history term)"}

Each claim reads "runs matching `a` beat runs matching `b` on `metric` (default auc)". Its runs are paired
like a comparison (`analysis.compare.pairing.pair_runs`: by seed and every setting both sides carry, one
stratum per distinct setting), and the per-seed deltas A - B go through the paired t-test of
`analysis.stats.paired`. Holm's correction runs over every claim stratum of the report. The outcome:

- **holds**: the Holm-adjusted p-value is below alpha and the mean delta favours A;
- **does not hold**: the Holm-adjusted p-value is below alpha and the mean delta favours B (reversed);
- **not significant**: otherwise (the seed-level evidence, per-seed deltas and seeds won, is shown);
- **not testable**: fewer than two paired seeds, or no spread.
"""
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


def _num(x: float, fmt: str) -> str:
    return "–" if x is None or not np.isfinite(x) else format(x, fmt)


def expectation_section(items: list[ExpectationResult], split: str, alpha: float) -> list[str]:
    """The report section (markdown lines); empty when the sweep states no expectations."""
    if not items:
        return []
    lines = ["## Expectations checked on these seeds", "",
             "Each claim reads \"A beats B\" on the named metric; its source says where it comes from "
             "(another study, or what the data were built to contain). Runs are paired by seed and every "
             "shared setting; Δ = A − B per seed (for LogLoss a negative Δ favours A). The paired t p-value is "
             "Holm-corrected across the claims of this report: **holds** = "
             f"adjusted p < {alpha:g} in the claimed direction, **does not hold** = adjusted p < {alpha:g} in "
             "the opposite direction, **not significant** = neither (the per-seed deltas are the evidence).", "",
             "| claim | source | metric | seeds | A better in | per-seed Δ | mean Δ | p (t) | p Holm | outcome |",
             "|" + "---|" * 10]
    for r in items:
        spec = metric_registry.get(r.expectation.metric)
        won = r.a_better
        per_seed = ", ".join(f"{int(s)}: {d:+.4f}" for s, d in zip(r.paired.seeds, r.stats.deltas)) or "–"
        lines.append(f"| {r.label} | {r.expectation.source or '–'} | {split} {spec.label} | {r.stats.n} | "
                     f"{int(won.sum())}/{len(won)} | {per_seed} | {_num(r.stats.mean, '+.5f')} | "
                     f"{_num(r.stats.p_t, '.3g')} | {_num(r.p_holm, '.3g')} | **{r.outcome}** |")
    notes = sorted({f"- {r.label}: {n}" for r in items for n in r.paired.notes})
    return lines + [""] + (["Notes:", "", *notes, ""] if notes else [])
