"""Publish a finished sweep as a committed reference study, or check a fresh sweep against one.

`publish` copies SWEEP_DIR's sweep.yaml, runs.parquet and datasets.json (when present) into OUT (default
results/reference/<sweep>/), adds score_ranks_test.parquet (the score order of the runs that comparisons
varying a data setting compare, all DeLong's test needs) and analyses the copy there (analysis.json,
report.md, plots/). Run folders, checkpoints and predictions are never copied, so `recscale analyze OUT` on
a copy of OUT reproduces its analysis.json.

`check` compares a fresh sweep with its reference trial by trial (test AUC and LogLoss) and exits 1
unless every reference trial is present and identical.

examples:
  recscale reference publish results/demo                  # -> results/reference/demo/
  recscale reference check results/demo results/reference/demo
"""
from __future__ import annotations

import argparse
import warnings
from pathlib import Path

DEFAULT_ROOT = Path("results/reference")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="{publish,check}")
    pub = sub.add_parser("publish", help="copy a finished sweep into a reference folder and analyse it there")
    pub.add_argument("sweep_dir", metavar="SWEEP_DIR", type=Path, help="finished sweep folder (results/<sweep>)")
    pub.add_argument("--out", type=Path, default=None,
                     help=f"reference folder (default: {DEFAULT_ROOT}/<name of SWEEP_DIR>)")
    pub.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    chk = sub.add_parser("check", help="compare a fresh sweep with its reference, trial by trial")
    chk.add_argument("fresh_dir", metavar="FRESH_DIR", type=Path, help="the fresh sweep folder")
    chk.add_argument("reference_dir", metavar="REFERENCE_DIR", type=Path, help="the committed reference folder")
    chk.add_argument("--tolerance", type=float, default=0.0,
                     help="largest accepted |fresh - reference| per metric (default 0: bit-identical)")


def run(args: argparse.Namespace) -> int:
    from analysis.reference import compare_with_reference, publish_reference

    if args.action == "publish":
        from analysis.pipeline import REPORT, analyze
        from analysis.report import terminal_summary

        out = args.out or DEFAULT_ROOT / args.sweep_dir.resolve().name
        publish_reference(args.sweep_dir, out)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the summary lists every warning itself
            res = analyze(out, progress=True, plots=not args.no_plots)
        print(terminal_summary(res, str(out / REPORT)))
        print(f"reference written to {out}")
        return 0
    check = compare_with_reference(args.fresh_dir, args.reference_dir)
    print(f"{check.matched} trial(s) in both; {len(check.missing)} missing from the fresh sweep; "
          f"{len(check.extra)} not in the reference")
    for name in check.missing:
        print(f"  missing: {name}")
    ok = not check.missing and not check.extra
    for col, diff in check.max_abs_diff.items():
        within = diff <= args.tolerance
        ok &= within
        print(f"  {col}: largest |fresh - reference| = {diff:.3g}"
              + (f" ({check.worst_trial[col]})" if diff > 0 else "") + ("" if within else "  <- differs"))
    print("reproduced" if ok else "NOT reproduced")
    return 0 if ok else 1
