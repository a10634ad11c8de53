"""Share of targets whose legal-history membership differs between two feedback delays.

Uses the same split, target sample and history rule as `recscale prepare` (exposure protocol) and
compares, target by target, the set of history events under delay A and delay B. On the real
RecFlow test targets, 0 s vs 60 s differ for 19.4165% of targets.

Example:
  recscale compare-delay --source synthetic --root data/synth-small --delays 0 60 --split test
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import protocols
from protocols.availability import UserTimeline
from protocols.errors import RecscaleError
from protocols.legal_history import delay_membership_difference
from protocols.prepare import PrepareConfig, plan_targets
from protocols.split import SPLITS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, help="registered source: recflow, synthetic, movielens100k")
    parser.add_argument("--root", required=True, help="folder of the log")
    parser.add_argument("--delays", type=float, nargs=2, default=(0.0, 60.0), metavar=("A_S", "B_S"),
                        help="the two delays in seconds (default 0 60)")
    parser.add_argument("--split", choices=SPLITS, default="test", help="which split's targets (default test)")
    parser.add_argument("--history-len", type=int, default=128, help="history length L (default 128)")
    parser.add_argument("--train", type=int, default=None, help="training targets (as for prepare)")
    parser.add_argument("--valid", type=int, default=None, help="validation targets (as for prepare)")
    parser.add_argument("--test", type=int, default=None, help="test targets (as for prepare)")
    parser.add_argument("--seed", type=int, default=42, help="target sampling seed (default 42)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def compare(log, cfg: PrepareConfig, split: str, delays_s: tuple[float, float], *, progress: bool = False) -> dict:
    """Counts and share of `split` targets whose history differs between the two delays."""
    rows = plan_targets(log, cfg).rows[split]
    if len(rows) == 0:
        raise RecscaleError(f"{log.root}: the {split} split has no targets")
    _, first, request_of_target = np.unique(log["request_id"][rows], return_index=True, return_inverse=True)
    request_rows = rows[first]
    differs = delay_membership_difference(
        UserTimeline.build(log), log["user_id"][request_rows], log["request_timestamp"][request_rows],
        cfg.history_len or 128, tuple(int(round(d * 1000)) for d in delays_s), progress=progress,
    )
    n_diff = int(differs[request_of_target].sum())
    return {"split": split, "delays_s": list(delays_s), "history_len": cfg.history_len or 128,
            "targets": int(len(rows)), "targets_differing": n_diff, "share_differing": n_diff / len(rows)}


def run(args: argparse.Namespace) -> int:
    protocols.load_components()
    cfg = PrepareConfig(source=args.source, root=args.root, history_len=args.history_len,
                        n_train=args.train, n_valid=args.valid, n_test=args.test, seed=args.seed)
    if args.source not in protocols.SOURCES:
        raise RecscaleError(f"unknown source {args.source!r}; valid: {', '.join(protocols.source_names())}")
    log = protocols.SOURCES.get(args.source)(Path(args.root))
    result = compare(log, cfg, args.split, tuple(args.delays), progress=not args.no_progress)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['targets_differing']:,} of {result['targets']:,} {args.split} targets "
              f"({100 * result['share_differing']:.4f}%) have different history members "
              f"at {args.delays[0]:g} s vs {args.delays[1]:g} s delay (L={result['history_len']})")
    return 0
