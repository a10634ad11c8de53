"""Analyse a finished sweep folder: scaling-law fits of log(dAUC) and log(relative LogLoss gain) against
log(FLOPs per target), per-ablation seed variance and significance (paired t, Wilcoxon, sign-flip
permutation, BCa bootstrap interval, Holm correction, minimum detectable effect, DeLong per seed), seaborn
plots, and report.md.

Reads only RESULTS_DIR (runs.parquet, sweep.yaml's optional `analysis:` section, run folders' metrics.json
and predictions_test.parquet), so results copied from another machine analyse the same. Writes
RESULTS_DIR/report.md, RESULTS_DIR/plots/*.png and RESULTS_DIR/analysis.json.

examples:
  recscale analyze results/demo
  recscale analyze results/helix_ablations --baseline helix --json
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_dir", metavar="RESULTS_DIR", type=Path, help="sweep folder (holds runs.parquet)")
    parser.add_argument("--baseline", metavar="NAME", default=None,
                        help="reference architecture for default comparisons and dAUC (default: analysis.baseline "
                             "in sweep.yaml, else the architecture with the least FLOPs per target)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG figures (report tables only)")
    parser.add_argument("--json", action="store_true",
                        help="print the full analysis as one JSON object instead of the text summary")


def run(args: argparse.Namespace) -> int:
    from analysis.pipeline import REPORT, analyze, json_safe
    from analysis.report import summary_dict, terminal_summary

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the summary and report list every warning themselves
        res = analyze(args.results_dir, baseline=args.baseline, progress=True,
                      plots=not args.no_plots)
    if args.json:
        print(json.dumps(json_safe(summary_dict(res)), indent=2, default=str))
    else:
        print(terminal_summary(res, str(args.results_dir / REPORT)))
    return 0
