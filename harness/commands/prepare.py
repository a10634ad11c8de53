"""Build (or reuse) a prepared dataset: split, sampled targets, legal histories, encodings.

The artifact folder is content-addressed (source fingerprint + protocol + parameters): running the
same command twice does nothing the second time. The folder path is printed on stdout; with --json
a JSON object with the path and the manifest's summary is printed instead.

Example:
  recscale prepare --source synthetic --root data/synth-small --protocol exposure --delay-s 60
"""
from __future__ import annotations

import argparse
import json

from protocols.prepare import PrepareConfig, prepare
from protocols.split import SplitConfig

_SPLIT_DEFAULTS = SplitConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, help="registered source: recflow, synthetic, movielens100k")
    parser.add_argument("--root", required=True, help="folder of the log")
    parser.add_argument("--protocol", default="exposure", help="history protocol: exposure (default) or author50")
    parser.add_argument("--delay-s", type=float, default=60.0,
                        help="extra feedback delay in seconds for the exposure protocol (default 60; 0 allowed)")
    parser.add_argument("--history-len", type=int, default=None,
                        help="history length L (default: 128 for exposure, 50 for author50)")
    parser.add_argument("--train", type=int, default=None, help="training targets (default 3,000,000 scaled to the log)")
    parser.add_argument("--valid", type=int, default=None, help="validation targets (default 100,000 scaled)")
    parser.add_argument("--test", type=int, default=None, help="test targets (default 200,000 scaled)")
    parser.add_argument("--seed", type=int, default=42, help="target sampling seed (default 42)")
    parser.add_argument("--out", default="artifacts", help="root folder of prepared datasets (default artifacts/)")
    for name in ("train_start", "valid_start", "test_start", "test_end", "timezone"):
        parser.add_argument(f"--{name.replace('_', '-')}", default=getattr(_SPLIT_DEFAULTS, name),
                            help=f"split boundary / zone (default {getattr(_SPLIT_DEFAULTS, name)})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of the bare path")


def config_from_args(args: argparse.Namespace) -> PrepareConfig:
    split = SplitConfig(args.train_start, args.valid_start, args.test_start, args.test_end, args.timezone)
    return PrepareConfig(
        source=args.source, root=args.root, protocol=args.protocol, delay_s=args.delay_s,
        history_len=args.history_len, n_train=args.train, n_valid=args.valid, n_test=args.test,
        seed=args.seed, split=split, out=args.out,
    )


def run(args: argparse.Namespace) -> int:
    path = prepare(config_from_args(args), progress=not args.no_progress)
    if args.json:
        manifest = json.loads((path / "manifest.json").read_text())
        keys = ("fingerprint", "protocol", "history_len", "num_targets", "membership", "vocab_sizes",
                "protocol_diagnostics", "prepare_wall_s")
        print(json.dumps({"path": str(path), **{k: manifest.get(k) for k in keys}}, indent=2))
    else:
        print(path)
    return 0
