"""The power plan of `recscale sweep FILE --dry-run --pilot RUNS`: per comparison stratum the pilot's seed sd, the
MDE at the planned seeds, the seeds its target needs and their wall time (docs/analysis.md, *Power plan*)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from core.results_layout import RUNS_FILE
from harness import runs_columns as C

from .collect import SweepResults, config_columns, default_baseline, hashable_lists, read_runs
from .compare.pairing import select
from .compare.questions import question_deltas, questions_of, target_effect
from .config import AnalysisConfig, QuestionConfig
from .report.section import markdown_table
from .stats.paired import MAX_SEEDS, first_step_level, minimum_detectable_effect, seeds_for_power


@dataclass(frozen=True)
class PlanRow:
    """One comparison stratum of the plan; `seed_s`: estimated seconds of the trials one more seed of its cells
    costs (None when unknown); `target`: the effect to detect."""

    label: str
    metric: str
    pilot_seeds: int
    sd: float
    mean: float
    level: float
    mde: float
    target: float
    seeds_needed: float
    seed_s: float | None


def load_pilot(path: Path, cfg: AnalysisConfig) -> SweepResults:
    """A pilot's runs (docs/analysis.md, *Power plan*) under the planned sweep's `analysis:` section."""
    file = path if path.suffix == ".parquet" else path / RUNS_FILE
    runs = read_runs(file)
    cfg = dataclasses.replace(cfg, baseline=cfg.baseline or default_baseline(runs))
    return SweepResults(root=file.parent, name=file.parent.name, runs=runs, config=cfg,
                        config_columns=config_columns(runs), baseline=str(cfg.baseline))


def seed_seconds(trials: pd.DataFrame, seconds: Mapping[str, float | None], comparison: QuestionConfig,
                 stratum: Mapping[str, object]) -> float | None:
    """Estimated seconds one seed of `comparison`'s cells costs in the planned `trials` (docs/analysis.md, *Power
    plan*); None when a side or an estimate is missing."""
    fixed = {k: v for k, v in stratum.items() if k in trials.columns and v is not None and not pd.isna(v)}
    scope = select(trials, {**comparison.where, **fixed})
    side_a, side_b = scope & select(trials, comparison.a), scope & select(trials, comparison.b)
    if not side_a.any() or not side_b.any():
        return None  # the planned sweep does not run one side
    cells = (side_a | side_b) & (trials[C.SEED] == trials.loc[side_a | side_b, C.SEED].min()).to_numpy()
    costs = [seconds.get(t) for t in trials.loc[cells, C.TRIAL_ID]]
    return None if not costs or any(c is None for c in costs) else float(sum(c for c in costs if c is not None))


def power_plan(pilot: SweepResults, planned_seeds: int, trials: list[dict],
               seconds: Mapping[str, float | None]) -> list[PlanRow]:
    """One row per comparison stratum of the pilot's questions, paired as the report pairs them (docs/analysis.md)."""
    cfg = pilot.config
    strata = [(q, paired, d) for q, _ in questions_of(pilot) if q.kind == "comparison"
              for paired, d in question_deltas(pilot, q) if paired.error is None]
    level = first_step_level(cfg.alpha, sum(len(d) > 1 and np.ptp(d) > 0 for _, _, d in strata))  # m: testable
    planned = hashable_lists(pd.DataFrame(trials))
    rows: list[PlanRow] = []
    for question, paired, d in strata:
        sd = float(d.std(ddof=1)) if len(d) > 1 else float("nan")
        mean = float(d.mean()) if len(d) else float("nan")
        target = target_effect(question, mean)[0]
        rows.append(PlanRow(paired.label, question.metric, len(d), sd, mean, level,
                            minimum_detectable_effect(sd, planned_seeds, alpha=level, power=cfg.power), target,
                            seeds_for_power(sd, target, alpha=level, power=cfg.power),
                            seed_seconds(planned, seconds, question, paired.stratum)))
    return rows


def format_power_plan(rows: list[PlanRow], pilot: Path, planned_seeds: int, slots: int, power: float) -> str:
    """The plan as a text table: wall time is the seeds needed x one seed's trials / `slots` trials at a time."""
    def hours(r: PlanRow) -> str:
        if r.seed_s is None or not np.isfinite(r.seeds_needed):
            return "?" if r.seed_s is None else "-"
        return f"{r.seeds_needed * r.seed_s / slots / 3600:.2g} h"

    def seeds(n: float) -> str:
        return "-" if np.isnan(n) else (f"> {MAX_SEEDS}" if np.isinf(n) else f"{n:.0f}")

    head = (f"power plan from the pilot {pilot}: MDE at this sweep's {planned_seeds} seeds and the seeds each target "
            f"needs, at power {power:g} and level alpha / m (Holm's first step over the m comparisons, as the report); "
            "target: the question's smallest_effect, else the pilot's |mean delta|; time: that many seeds of the "
            f"comparison's cells here, {slots} trial(s) at a time")
    table = markdown_table(
        ["comparison", "metric", "pilot seeds", "seed sd", "pilot mean delta", "level", "MDE", "target", "seeds needed",
         "time here"], [[r.label, r.metric, str(r.pilot_seeds), f"{r.sd:.2g}", f"{r.mean:+.2g}", f"{r.level:.2g}",
                         f"{r.mde:.2g}", f"{r.target:.2g}", seeds(r.seeds_needed), hours(r)] for r in rows])
    return "\n".join([head, *table])
