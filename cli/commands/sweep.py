"""Launch a sweep YAML through Ray Tune (locally, or on an existing cluster with --address).

Every distinct dataset is prepared once before any trial; trials train into
RESULTS/<sweep name>/runs/<trial>/ and finished ones are collected into RESULTS/<sweep name>/runs.parquet.
Interrupt with Ctrl-C and continue later with --resume: finished trials are not rerun. Ray's own notices
(token authentication, Tuner.restore hints) are kept out of the terminal unless --verbose.

examples:
  recscale sweep sweeps/demo.yaml --dry-run        # trial table, compute and wall time (steps timed now)
  recscale sweep sweeps/helix_ablations.yaml --dry-run --pilot results/reference/helix_ablations   # power plan
  recscale sweep sweeps/demo.yaml                  # run it here
  recscale sweep sweeps/demo.yaml --resume         # continue an interrupted sweep
  recscale sweep sweeps/demo.yaml --address 10.0.0.1:6379   # join a cluster started with `ray start --head`
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from cli.main import reexec_under_malloc
from core.results_layout import RUNS_FILE, TUNING_FILE
from core.typed_config import ConfigError

#: Skip the interpreter's unloading of torch and Ray at exit (`cli.main.exit_without_teardown`).
EXIT_WITHOUT_TEARDOWN = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="sweep YAML file (see sweeps/ and docs/sweeps.md)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the sweep in RESULTS/<name>/ (Tuner.restore); finished trials are kept")
    parser.add_argument("--address", metavar="ADDR",
                        help="join an existing Ray cluster (host:port, or 'auto') instead of starting one here")
    parser.add_argument("--dry-run", action="store_true",
                        help="validate, print datasets, trials, the estimated compute and wall time (from a few "
                             "training steps of every distinct configuration, timed now: seconds), and exit")
    parser.add_argument("--pilot", type=Path, metavar="RUNS",
                        help=f"with --dry-run: a power plan per comparison question from a pilot's runs (a "
                             f"{RUNS_FILE}, or a results or reference folder): seed sd, MDE at the planned seeds, "
                             "seeds needed, time")
    parser.add_argument("--results", type=Path, default=Path("results"), metavar="DIR",
                        help="results root; the sweep writes DIR/<name>/ (default: results)")
    parser.add_argument("--num-cpus", type=int, default=None, metavar="N",
                        help="CPUs the local Ray may use (default: all; --dry-run sizes its concurrency with it); "
                             "ignored with --address")
    parser.add_argument("--verbose", action="store_true",
                        help="let Ray's own notices through (token authentication, Tuner.restore hints)")
    parser.add_argument("--json", action="store_true", help="print the outcome (or the plan) as one JSON object")


def run(args: argparse.Namespace) -> int:
    from harness.sweep.schema import load_sweep

    sweep = load_sweep(args.file)
    if args.pilot and not args.dry_run:
        raise ConfigError("--pilot plans a sweep: give it with --dry-run")
    if args.dry_run:
        reexec_under_malloc(args)  # time steps as trials run them: under the malloc settings
        return _dry_run(sweep, args)

    from harness.sweep.launcher import OpenRuns, run_sweep

    open_runs: OpenRuns | None = None
    if sweep.config.rounds is not None:  # the sequential rule steers its rounds (imported only then: seconds)
        from analysis import pipeline

        open_runs = pipeline.open_runs
    outcome = run_sweep(sweep, results_root=args.results, resume=args.resume, address=args.address,
                        num_cpus=args.num_cpus, verbose=args.verbose, open_runs=open_runs)
    if args.json:
        fields = {k: v for k, v in dataclasses.asdict(outcome).items() if v is not None}  # `tuning` only with one
        print(json.dumps(fields, indent=1, default=str))
    else:
        if outcome.tuning is not None:
            t = outcome.tuning
            print(f"tuning: {t['finished']}/{t['planned']} trials finished"
                  + (f" -> {outcome.sweep_dir / TUNING_FILE}" if (outcome.sweep_dir / TUNING_FILE).exists() else ""))
        print(f"{outcome.finished}/{outcome.planned} trials finished -> {outcome.sweep_dir / RUNS_FILE} "
              f"({timings_text(outcome.summary)})")
    if outcome.failed:
        print(f"recscale sweep: {len(outcome.failed)} trial(s) failed: " + "; ".join(outcome.failed)
              + f"; rerun with `{_resume_command(args)}` to retry them", file=sys.stderr)
        return 1
    if outcome.interrupted:
        print(f"recscale sweep: interrupted; finished trials are kept. Continue with `{_resume_command(args)}`",
              file=sys.stderr)
        return 130
    return 0


def timings_text(s: dict) -> str:
    """The launch's timings for the summary line; the per-trial part only when a trial trained in this
    launch (an interrupted or fully reused launch has no per-trial times, and says so instead of nan)."""
    text = f"total {s.get('total_s', 0):.0f} s, prepare {s.get('prepare_s', 0):.0f} s"
    if s.get("trials_copied"):
        text += f", {s['trials_copied']} copied from the tuning stage"
    if "mean_train_loop_s" not in s:
        return text + "; no trial trained to the end in this launch"
    return (f"{text}; per trial: training {s['mean_train_loop_s']:.1f} s, evaluation {s['mean_eval_s']:.1f} s, "
            f"overhead {s['overhead_per_trial_s']:.1f} s, of which {s['overhead_in_trial_s']:.1f} s inside the trial")


def _resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this sweep (the options that locate it, its cluster and its CPUs kept;
    shell-quoted)."""
    parts = [str(args.file), "--resume"]
    if args.results != Path("results"):
        parts += ["--results", str(args.results)]
    if args.address:
        parts += ["--address", args.address]
    if args.num_cpus is not None:
        parts += ["--num-cpus", str(args.num_cpus)]
    return "recscale sweep " + " ".join(shlex.quote(p) for p in parts)


def _dry_run(sweep, args: argparse.Namespace) -> int:
    from analysis.config import analysis_config
    from analysis.fits.reference import check_planned
    from harness.sweep.dry_run import estimate_costs, estimate_sweep, format_plan, known_vocabularies
    from harness.sweep.plan import plan_sweep

    plan = plan_sweep(sweep)
    costs = estimate_costs([*plan.tuning_trials, *plan.trials])
    estimate = estimate_sweep(plan, num_cpus=args.num_cpus, progress=not args.json,
                              vocab=known_vocabularies(sweep, args.results / sweep.name))
    records = [{**t.record(), "flops_per_target": costs[t.trial_id].flops_per_target} for t in plan.trials]
    reference = check_planned(records, sweep.config.analysis)  # refuses a reference inside a fitted family
    plan_rows = None
    seeds = len({t.seed for t in plan.trials})  # the seeds planned per setting
    if args.pilot:  # the power plan's rows (analysis/power_plan.py)
        from analysis.power_plan import load_pilot, power_plan

        pilot = load_pilot(args.pilot, analysis_config(sweep.config.analysis))
        plan_rows = power_plan(pilot, seeds, records, {t: e.total_s for t, e in estimate.trials.items()})
    if args.json:
        print(json.dumps({
            "sweep": sweep.name,
            "datasets": [{"dataset_id": d.dataset_id, **d.prepare} for d in plan.datasets],
            "trials": [{**r, "total_flops": costs[r["trial_id"]].total,
                        **{f"estimated_{k}": getattr(estimate.trials[r["trial_id"]], k)
                           for k in ("train_s", "eval_s", "overhead_s", "total_s")}} for r in records],
            **({"tuning_trials": [{**t.record(), "total_flops": costs[t.trial_id].total,
                                   "estimated_total_s": estimate.trials[t.trial_id].total_s}
                                  for t in plan.tuning_trials]} if plan.tuning_trials else {}),
            "estimated_wall_s": estimate.wall_s,
            "estimated_wall_range_s": estimate.wall_range_s,  # (low, high), null when the point is unknown
            "estimate": {"device": estimate.device, "concurrent_trials": estimate.slots,
                         "threads_per_trial": estimate.threads, "notes": estimate.notes},
            "scaling_reference": reference,
            **({"power_plan": [vars(r) for r in plan_rows]} if plan_rows is not None else {}),
        }, indent=1, default=str))
    else:
        print(format_plan(plan, costs, args.results / sweep.name, estimate) + "\n" + reference)
        if plan_rows is not None:
            from analysis.power_plan import format_power_plan

            print("\n" + format_power_plan(plan_rows, args.pilot, seeds, estimate.slots,
                                           analysis_config(sweep.config.analysis).power))
    return 0
