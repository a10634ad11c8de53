"""Train and evaluate one run, writing its run folder.

Examples:
  recscale train --arch whale --data artifacts/prepared/<name>
  recscale train --arch wukong --data ART --set model.dim=32 --set train.epochs=2 --out results/runs/w32
  recscale train --config run.yaml --out RUN_DIR --resume

The prepared dataset's checksums are checked first (--no-verify skips it). A folder that holds a run is refused
without --resume; Ctrl-C (SIGINT) or SIGTERM writes a checkpoint and exits 130 / 143 (continue with --resume).
The run folder, resume and signals: docs/training.md ("Checkpoints and resume"); the one re-exec under glibc
malloc settings (RECSCALE_MALLOC_REEXEC=1 disables it): docs/training.md ("Speed").
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from cli.main import reexec_under_malloc
from core.results_layout import CHECKPOINT_FILE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", help="registered architecture (see `recscale list`)")
    parser.add_argument("--data", help="prepared dataset folder written by `recscale prepare`")
    parser.add_argument("--config", help="optional run config YAML (arch, data, model, train, seed)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key, e.g. model.dim=32 (or dim=32), train.lr=3e-4, seed=1 (repeatable)",
    )
    parser.add_argument("--seed", type=int, help="run seed (initialisation, data order, ID masking)")
    parser.add_argument("--out", help="run folder (default: results/runs/<arch>-seed<seed>-<time>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its checkpoint (refused when config or data differ; "
                             "starts fresh when no checkpoint was written yet)")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip checking the prepared dataset's checksums before training (about 2 s per GB; "
                             "for an artifact you just verified)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar or summary line")
    parser.add_argument("--json", action="store_true", help="print the metrics as one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    from core.typed_config import ConfigError

    if args.config is None and (args.arch is None or args.data is None):
        raise ConfigError("give --arch and --data (or a --config file that names them)")
    if args.resume and args.out is None:
        raise ConfigError("--resume needs --out RUN_DIR")
    reexec_under_malloc(args)

    from harness.config import load_run_config, parse_set
    from harness.train import TrainingAborted, TrainingInterrupted, train_run

    cfg = load_run_config(args.config, parse_set(args.set), arch=args.arch, data=args.data, seed=args.seed)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("results/runs") / f"{cfg.arch}-seed{cfg.seed}-{stamp}"
    created = not out.exists()
    try:
        metrics = train_run(cfg, out, resume=args.resume, progress=not args.no_progress, verify=not args.no_verify)
    except (TrainingInterrupted, TrainingAborted) as e:
        print(f"recscale train: {e}", file=sys.stderr)
        return e.exit_code
    except Exception:  # a failed new run leaves no folder behind unless a checkpoint makes it resumable
        if created and not (out / CHECKPOINT_FILE).exists():
            shutil.rmtree(out, ignore_errors=True)
        raise
    if args.json:
        print(json.dumps(metrics))
    else:
        print(out)
    return 0
