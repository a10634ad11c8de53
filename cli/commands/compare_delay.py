"""Share of targets whose legal-history membership differs between two feedback delays.

The same split, target sample and history rule as `recscale prepare` (exposure protocol), compared target by
target under delay A and delay B (docs/protocols.md; on the real RecFlow test targets, 0 s vs 60 s: 19.4165%).

Example:
  recscale compare-delay --source synthetic --root data/synth-small --delays 0 60 --split test
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import protocols
from core.errors import RecscaleError
from core.typed_config import from_dict
from protocols.availability import UserTimeline
from protocols.history import ExposureProtocol
from protocols.legal_history import delay_membership_difference
from protocols.prepare import PrepareConfig, plan_targets
from protocols.split import SPLITS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, help="registered source: recflow, synthetic, movielens100k")
    parser.add_argument("--root", required=True, help="folder of the log")
    parser.add_argument("--delays", type=float, nargs=2, default=(0.0, 60.0), metavar=("A_S", "B_S"),
                        help="the two delays in seconds (default 0 60)")
    parser.add_argument("--split", choices=SPLITS, default="test", help="which split's targets (default test)")
    parser.add_argument("--history-len", type=int, default=None,
                        help=f"history length L (default: the exposure protocol's, {ExposureProtocol.history_len})")
    parser.add_argument("--train", type=int, default=None, help="training targets (as for prepare)")
    parser.add_argument("--valid", type=int, default=None, help="validation targets (as for prepare)")
    parser.add_argument("--test", type=int, default=None, help="test targets (as for prepare)")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"target sampling seed (default: prepare's, {PrepareConfig.sample_seed})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def compare(log, cfg: PrepareConfig, split: str, delays_s: tuple[float, float], *, progress: bool = False) -> dict:
    """Counts and share of `split` targets whose history differs between the two delays."""
    rows = plan_targets(log, cfg).rows[split]
    if len(rows) == 0:
        raise RecscaleError(f"{log.root}: the {split} split has no targets")
    _, first, request_of_target = np.unique(log["request_id"][rows], return_index=True, return_inverse=True)
    request_rows = rows[first]
    history_len = cfg.protocol_config().history_len
    differs = delay_membership_difference(
        UserTimeline.build(log), log["user_id"][request_rows], log["request_timestamp"][request_rows],
        history_len, (int(round(delays_s[0] * 1000)), int(round(delays_s[1] * 1000))), progress=progress,
    )
    n_diff = int(differs[request_of_target].sum())
    return {"split": split, "delays_s": list(delays_s), "history_len": history_len,
            "targets": int(len(rows)), "targets_differing": n_diff, "share_differing": n_diff / len(rows)}


def run(args: argparse.Namespace) -> int:
    given = {"source": args.source, "root": args.root, "protocol": "exposure", "history_len": args.history_len,
             "n_train": args.train, "n_valid": args.valid, "n_test": args.test, "sample_seed": args.seed}
    cfg = from_dict(PrepareConfig, {k: v for k, v in given.items() if v is not None})
    log = protocols.SOURCES.get(args.source)(Path(args.root))
    result = compare(log, cfg, args.split, tuple(args.delays), progress=not args.no_progress)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['targets_differing']:,} of {result['targets']:,} {args.split} targets "
              f"({100 * result['share_differing']:.4f}%) have different history members "
              f"at {args.delays[0]:g} s vs {args.delays[1]:g} s delay (L={result['history_len']})")
    return 0
