"""Write a synthetic log in RecFlow's on-disk layout, with the true P(long_view) of every exposure.

Scales: tiny (~6k exposures, for tests), small (~1M, the demo), medium (~6M), full (~38.2M, RecFlow size). The
author-50 pickles are written only with --author50 (only the author50 protocol reads them, and they are large).
Writing is atomic; re-running with the same arguments on a finished folder does nothing. The folder's files and
the generative model: docs/data.md ("The synthetic log").
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from protocols.synthetic import DEFAULT_WORLD, MARKER, SCALES, WORLDS, generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scale", choices=list(SCALES), default="small", help="size of the log (default: small)")
    parser.add_argument("--out", type=Path, required=True, help="output folder (must not exist, or be empty)")
    parser.add_argument("--world", choices=list(WORLDS), default=DEFAULT_WORLD,
                        help="planted label model (default: default; two_timescales: effective_view and long_view "
                             "depend on history of different reach, docs/data.md \"Planted worlds\")")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed -> same files")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--author50", dest="author50", action="store_true", default=None,
                       help="write seq_effective_50_dict/*.pkl too (added to a finished log that lacks them)")
    group.add_argument("--no-author50", dest="author50", action="store_false",
                       help="skip the 50-history pickles (the default)")
    parser.add_argument("--json", action="store_true", help="print SYNTHETIC.json's summary as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    out = generate(args.scale, args.out, seed=args.seed, author50=args.author50, world=args.world,
                   progress=not args.quiet)
    summary = json.loads((out / MARKER).read_text())
    summary.pop("config", None)
    summary.pop("days", None)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(out)
        print(
            f"  {summary['exposures']:,} exposures, {summary['requests']:,} requests, {summary['users']:,} users; "
            f"long_view {summary['long_view_rate']:.3f}, effective_view {summary['effective_view_rate']:.3f}; "
            f"oracle AUC {summary['oracle_auc']:.4f}"
        )
    return 0
