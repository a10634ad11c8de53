"""Analyse a finished sweep folder: scaling-law fits, per-ablation seed variance and significance,
plots, and report.md.

Reads only RESULTS_DIR, so results copied from another machine analyse the same; writes report.md, plots/*.png
and analysis.json there. A run of runs.parquet that could not be read is listed (with --strict: exit 1).
What it reads and writes: docs/analysis.md.

examples:
  recscale analyze results/demo
  recscale analyze results/demo --strict          # exit 1 if any expected run could not be read
  recscale analyze results/helix_ablations --baseline helix --json
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

from core import results_layout as layout


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="RESULTS_DIR", type=Path,
                        help=f"sweep folder (holds {layout.RUNS_FILE})")
    parser.add_argument("--baseline", metavar="NAME", default=None,
                        help="reference architecture for default comparisons and dAUC (default: analysis.baseline "
                             f"in {layout.SWEEP_FILE}, else the architecture with the least FLOPs per target)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG figures (report tables only)")
    parser.add_argument("--strict", action="store_true",
                        help=f"exit 1 when any run of {layout.RUNS_FILE} could not be read (report still written)")
    parser.add_argument("--trust-edits", action="store_true",
                        help=f"analyse a {layout.RUNS_FILE} whose rows no longer match their row_digest")
    parser.add_argument("--json", action="store_true",
                        help="print the full analysis as one JSON object instead of the text summary")


def run(args: argparse.Namespace) -> int:
    from analysis.collect import run_folders_absent
    from analysis.pipeline import analyze, json_safe
    from analysis.report.sections import summary_dict
    from analysis.report.terminal import terminal_summary
    from harness import runs_columns as C
    from protocols.output_location import check_writable

    if args.results_dir.is_dir():
        check_writable(args.results_dir / layout.REPORT_FILE, "the analysis report")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the summary and report list every warning themselves
        res = analyze(args.results_dir, baseline=args.baseline, progress=True,
                      plots=not args.no_plots, trust_edits=args.trust_edits)
    if C.ROW_DIGEST not in res.results.runs.columns:
        print(f"note: {args.results_dir / layout.RUNS_FILE} predates row digests; its rows cannot be verified",
              file=sys.stderr)
    if args.json:
        print(json.dumps(json_safe(summary_dict(res)), indent=2, default=str))
    else:
        print(terminal_summary(res, str(args.results_dir / layout.REPORT_FILE)))
        if res.unread_runs and not run_folders_absent(res.results):
            print(f"{len(res.unread_runs)} expected run(s) could not be read:")
            print("\n".join(f"  {m}" for m in res.unread_runs))
    if args.strict and res.health is not None and res.health.excluded:
        print(f"recscale analyze: --strict: {len(res.health.excluded)} of {res.health.total_runs} run(s) are not "
              f"healthy and were left out (listed in {args.results_dir / layout.REPORT_FILE})", file=sys.stderr)
        return 1
    if args.strict and res.unread_runs:
        where = (f"no run folder exists (only {layout.RUNS_FILE})" if run_folders_absent(res.results)
                 else f"listed in {args.results_dir / layout.REPORT_FILE}")
        print(f"recscale analyze: --strict: {len(res.unread_runs)} of {len(res.results.runs)} expected run(s) "
              f"could not be read ({where})", file=sys.stderr)
        return 1
    return 0
