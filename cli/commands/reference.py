"""Publish a finished sweep as a committed reference study, or check a fresh sweep against one.

`publish` copies SWEEP_DIR's sweep.yaml, runs.parquet and datasets.json (when present) into OUT (default
results/reference/<sweep>/), adds score_ranks_test.parquet (the score order DeLong's test needs) and analyses the
copy there; run folders are never copied. An OUT that already holds a reference is replaced only with --force:
without it, publish prints what would change and exits 2.

`check` compares a fresh sweep with its reference trial by trial (configs first, then test AUC and LogLoss): its
verdict, "bit-exact", "within tolerance" or "NOT reproduced", and the rule: docs/reproducibility.md ("recscale
reference check"). Exit 0 for the first two (only the first with --exact), 1 otherwise.

examples:
  recscale reference publish results/demo                  # -> results/reference/demo/
  recscale reference publish results/demo --force          # replace an existing reference
  recscale reference check results/demo results/reference/demo
  recscale reference check results/demo results/reference/demo --exact
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from core import results_layout as layout

DEFAULT_ROOT = Path("results/reference")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from analysis.reference import DEFAULT_SD_FRACTION

    sub = parser.add_subparsers(dest="action", required=True, metavar="{publish,check}")
    pub = sub.add_parser("publish", help="copy a finished sweep into a reference folder and analyse it there")
    pub.add_argument("sweep_dir", metavar="SWEEP_DIR", type=Path, help="finished sweep folder (results/<sweep>)")
    pub.add_argument("--out", type=Path, default=None,
                     help=f"reference folder (default: {DEFAULT_ROOT}/<name of SWEEP_DIR>)")
    pub.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    pub.add_argument("--force", action="store_true",
                     help="replace a reference that OUT already holds (without it: show what would change, exit 2)")
    chk = sub.add_parser("check", help="compare a fresh sweep with its reference, trial by trial")
    chk.add_argument("fresh_dir", metavar="FRESH_DIR", type=Path, help="the fresh sweep folder")
    chk.add_argument("reference_dir", metavar="REFERENCE_DIR", type=Path, help="the committed reference folder")
    chk.add_argument("--exact", action="store_true", help="accept only a bit-exact reproduction")
    chk.add_argument("--sd-fraction", type=float, default=DEFAULT_SD_FRACTION,
                     help="tolerance as this multiple of the seed SD of each trial's setting "
                          f"(default {DEFAULT_SD_FRACTION})")
    chk.add_argument("--tolerance", type=float, default=None,
                     help="an absolute tolerance per metric instead of the seed-noise rule")
    for p in (pub, chk):
        p.add_argument("--trust-edits", action="store_true",
                       help=f"use a {layout.RUNS_FILE} whose rows no longer match their row_digest")


def run(args: argparse.Namespace) -> int:
    from analysis.reference import BIT_EXACT, WITHIN_TOLERANCE, check_lines, compare_with_reference

    if args.action == "check":
        check = compare_with_reference(args.fresh_dir, args.reference_dir, sd_fraction=args.sd_fraction,
                                       absolute=args.tolerance, trust_edits=args.trust_edits)
        print("\n".join(check_lines(check, exact=args.exact)))
        return 0 if check.verdict == BIT_EXACT or (check.verdict == WITHIN_TOLERANCE and not args.exact) else 1
    from analysis.pipeline import analyze
    from analysis.reference import publish_reference
    from analysis.report.terminal import terminal_summary

    out = args.out or DEFAULT_ROOT / args.sweep_dir.resolve().name
    if (out / layout.RUNS_FILE).is_file() and not args.force:
        check = compare_with_reference(args.sweep_dir, out, trust_edits=args.trust_edits)
        print(f"{out} already holds a reference; publishing {args.sweep_dir} would change it as follows:")
        print("\n".join("  " + line for line in check_lines(check)))
        print(f"{out}: holds a reference already; pass --force to replace it", file=sys.stderr)
        return 2
    publish_reference(args.sweep_dir, out, trust_edits=args.trust_edits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the summary lists every warning itself
        res = analyze(out, progress=True, plots=not args.no_plots)
    print(terminal_summary(res, str(out / layout.REPORT_FILE)))
    print(f"reference written to {out}")
    return 0
