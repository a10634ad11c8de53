"""Validate a log and print what a user checks first.

Reads ROOT with the chosen source (validation errors name the file, record, field and value, and exit with
status 2), then prints its statistics (docs/data.md, "Statistics printed by `recscale inspect`") and a one-line
verdict. Writes nothing.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import protocols
from protocols.log_stats import format_summary, summarize
from protocols.synthetic import MARKER


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", type=Path, help="log folder (RecFlow layout, or a MovieLens-100k folder)")
    parser.add_argument(
        "--source", choices=["recflow", "synthetic", "movielens100k"], default=None,
        help="how to read ROOT (default: synthetic if ROOT has SYNTHETIC.json, else recflow)",
    )
    parser.add_argument("--days", default=None, help="comma-separated days to read (default: RecFlow's 37 days)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    source = args.source or ("synthetic" if (args.root / MARKER).is_file() else "recflow")
    options: dict = {}
    if source != "movielens100k":
        options["progress"] = not args.quiet
        if args.days:
            options["days"] = [d for d in args.days.split(",") if d.strip()]
    log = protocols.source(source)(args.root, **options)
    stats = summarize(log)
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        print(format_summary(stats))
        print(f"verdict: valid: {args.root} reads as a {source} log, every file and record passed validation")
    return 0
