"""Recompute a run's metrics from its saved predictions and compare them with metrics.json: exit status 1 (and
a list of differences on stderr) when any value differs, 0 when all agree (docs/training.md, "Metrics").

  recscale metrics RUN_DIR --recompute
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from core.results_layout import CONFIG_FILE, METRICS_FILE
from core.typed_config import flat_keys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run folder written by `recscale train`")
    parser.add_argument("--recompute", action="store_true", help="recompute every metric from the prediction files")
    parser.add_argument("--data",
                        help=f"prepared dataset folder, when it moved since training (default: {CONFIG_FILE}'s)")
    parser.add_argument("--tol", type=float, default=0.0, help="allowed absolute difference (default 0: exact)")
    parser.add_argument("--json", action="store_true", help="print the recomputed metrics as JSON")


def run(args: argparse.Namespace) -> int:
    from harness import run_folder as RF
    from harness.evaluate import recompute_metrics

    run_dir = Path(args.run_dir)
    saved = RF.read_metrics(run_dir)
    if not args.recompute:
        print(json.dumps(saved, indent=2) if args.json else "\n".join(
            f"{k}: {v}" for k, v in saved.items() if not isinstance(v, (dict, list))))
        return 0
    fresh = recompute_metrics(run_dir, data=args.data)
    saved_leaves = flat_keys(saved)
    diffs = []
    for key, value in flat_keys(fresh).items():  # `key: saved -> recomputed` for every value that differs
        old = saved_leaves.get(key, "<absent>")
        numbers = isinstance(old, (int, float)) and isinstance(value, (int, float))
        if not (old == value or numbers and math.isclose(old, value, rel_tol=0, abs_tol=args.tol)):
            diffs.append(f"{key}: {old!r} -> {value!r}")
    if args.json:
        print(json.dumps(fresh, indent=2))
    if diffs:
        print(f"recscale metrics: {len(diffs)} value(s) differ from {run_dir / METRICS_FILE}:", file=sys.stderr)
        for line in diffs:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"{run_dir}: all {len(flat_keys(fresh))} recomputed metrics equal {METRICS_FILE}", file=sys.stderr)
    return 0

