"""The `recscale sweep FILE --dry-run` table: a sweep plan (`plan.py`) with each trial's counted FLOPs and, when
given, the wall-time estimate (both `harness.speed.sweep_estimate`).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import protocols
from harness.speed.sweep_estimate import SweepEstimate, TrialCost, format_seconds

from .plan import SweepPlan, format_value, search_base_point, settings
from .schema import TuningSection


def _sizes(prep: Mapping[str, Any]) -> str:
    """Target counts of a dataset for the dry-run table (unset ones are the source's defaults)."""
    values = [prep.get(k) for k in ("n_train", "n_valid", "n_test")]
    if all(v is None for v in values):
        return "the source's defaults"
    return "/".join("default" if v is None else str(v) for v in values)


def _known_flops(costs: Mapping[str, TrialCost], trials: list[Any]) -> list[float]:
    """The total FLOPs of each of `trials` whose compute is known."""
    return [c.total for t in trials if (c := costs.get(t.trial_id)) is not None and c.total is not None]


def format_plan(plan: SweepPlan, costs: Mapping[str, TrialCost], results_dir: Path,
                estimate: SweepEstimate | None = None) -> str:
    """The `--dry-run` text: datasets, trials with swept values, FLOPs and (with `estimate`) estimated wall
    time, and totals."""
    sweep = plan.sweep
    swept = [k for k in sweep.axes if k != "arch"]
    lines = [f"sweep {sweep.name!r}: {len(plan.trials)} grid trials, {len(plan.datasets)} dataset(s), "
             f"results in {results_dir}"]
    if sweep.config.search is not None:
        s = sweep.config.search
        lines.append(f"search first: {s.num_samples} Optuna trials over {', '.join(sweep.space)} "
                     f"({s.metric}, {s.mode}) at {search_base_point(sweep)}; the grid then runs at the best point")
    if plan.tuning_trials:
        tuning = cast(TuningSection, sweep.config.tuning)  # tuning trials: the sweep has a tuning section
        budget = ", ".join(f"{k} {v}" for k, v in vars(tuning.budget).items() if v is not None)
        known = _known_flops(costs, plan.tuning_trials)
        est = ""
        if estimate is not None:
            secs = [estimate.trials[x.trial_id].total_s for x in plan.tuning_trials]
            est = "" if None in secs else f", est. {format_seconds(sum(cast(list[float], secs)))} of trial time"
        lines.append(f"tuning first: {len(plan.tuning_trials)} trials = {len(settings(sweep))} setting(s) x "
                     f"{len(sweep.tuning_values)} values of {tuning.param} {sweep.tuning_values} x seeds "
                     f"{tuning.run_seeds}"
                     + (f" (budget: {budget})" if budget else "") + f", chosen on {tuning.metric}; "
                     + (f"{sum(known) / 1e9:.1f} GFLOPs" if len(known) == len(plan.tuning_trials) else "GFLOPs ?")
                     + f"{est}; the grid then runs each setting at its chosen value"
                     + (f" ({copied} grid runs of tuning seeds copy the tuning run at that value, not trained again)"
                        if (copied := sum(map(plan.reuses_tuning_run, plan.trials))) else ""))
    lines.append("")
    lines.append("datasets (each prepared once, before any trial):")
    for d in plan.datasets:
        p = d.prepare
        params = " ".join(f"{k}={format_value(p[k])}" for k in sorted(protocols.protocol_parameters(p["protocol"])))
        lines.append(f"  {d.dataset_id}  source={p['source']} protocol={p['protocol']} {params} "
                     f"n_train/valid/test={_sizes(p)}"
                     + (f" split={p['split']}" if p.get("split") else "") + f" sample_seed={p['sample_seed']}")
    lines.append("")
    header = ["trial", "arch", *swept, "dataset", "MFLOPs/target", "non-emb. params", "GFLOPs"]
    if estimate is not None:
        header += ["est. train", "est. eval", "est. total"]
    rows = []
    for t in plan.trials:
        c = costs.get(t.trial_id, TrialCost(None, None))
        row = [t.trial_id, t.arch, *(format_value(t.point[k]) if k in t.point else "-" for k in swept),
               t.dataset.dataset_id,
               "?" if c.flops_per_target is None else f"{c.flops_per_target / 1e6:.3f}",
               "?" if c.params_non_embedding is None else f"{c.params_non_embedding:,}",
               "?" if c.total is None else f"{c.total / 1e9:.1f}"]
        if estimate is not None:
            e = estimate.trials[t.trial_id]
            row += [format_seconds(e.train_s), format_seconds(e.eval_s), format_seconds(e.total_s)]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for r in [header, *rows]:
        lines.append("  " + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    everything = [*plan.tuning_trials, *plan.trials]
    known = _known_flops(costs, everything)
    lines.append("")
    lines.append(f"estimated compute: {sum(known) / 1e12:.3f} TFLOPs of counted matrix work over {len(known)} trial(s)"
                 + ("" if len(known) == len(everything) else f" ({len(everything) - len(known)} unknown: "
                    "sample sizes left to the source's defaults or model not countable)"))
    if estimate is not None:
        totals = [e.total_s for e in estimate.trials.values() if e.total_s is not None]
        per_trial = format_seconds(sum(totals) / len(totals)) if totals else "?"
        lo, hi = estimate.wall_range_s or (None, None)
        lines.append(f"estimated wall time: {format_seconds(estimate.wall_s)} (between {format_seconds(lo)} and "
                     f"{format_seconds(hi)}) for the sweep with {estimate.slots} trial(s) at a time on "
                     f"{estimate.device}, {per_trial} per trial on average (training + evaluation + overhead), "
                     "from training steps timed now on this machine")
        lines.extend(f"  {n}" for n in estimate.notes)
    res = sweep.config.resources
    lines.append(f"resources per trial: cpu={format_value(res.cpu)} gpu={format_value(res.gpu)}; max_concurrent="
                 f"{sweep.config.max_concurrent or 'as resources allow'}; max_failures={sweep.config.max_failures}")
    return "\n".join(lines)
