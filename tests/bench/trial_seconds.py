"""Trial-seconds of the demo sweep's runs, as a sweep's workers spend them (standalone script).

    python tests/bench/trial_seconds.py --tree DIR --data ARTIFACT [--workers 2] [--seed 0] [--configs all]

Starts `--workers` processes at once, each with one torch thread and the malloc settings training uses (a
sweep's trial slots: `resources: {cpu: 1}`, `max_concurrent: 2`). Each imports the code under `--tree` (so the
same script measures any revision), then runs its share of the demo's 15 configurations (split round-robin;
`concurrent_trials.DEMO_TRIALS`) one after another as whole runs: `harness.train.train_run` on the prepared
dataset `ARTIFACT` (the demo's: sweeps/demo.yaml's data and training settings), set-up, training, evaluation
and the run folder's files included, in a temporary folder. It prints one JSON line per run: the configuration,
`wall_s` (train_run from call to return) and the run's own setup / train / eval seconds. What a trial costs
beyond train_run (Ray's scheduling between trials, about 0.2-0.6 s) is left out.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.concurrent_trials import DEMO_TRIALS, HISTORY_LEN, MALLOC_ENV  # noqa: E402


def worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(args.tree).resolve()))
    import torch

    torch.set_num_threads(1)
    from harness.config import RunConfig, TrainConfig
    from harness.train import train_run

    train = demo_recipe(Path(args.tree), args.set)
    with tempfile.TemporaryDirectory(prefix="recscale-trial-seconds-") as tmp:
        for i in args.indices:
            arch, settings = DEMO_TRIALS[i]
            cfg = RunConfig(arch=arch, data=args.data, model={**settings, "history_len": HISTORY_LEN},
                            train=TrainConfig(**train, num_threads=1), seed=args.seed)
            t0 = time.perf_counter()
            m = train_run(cfg, Path(tmp) / f"run{i}", progress=False, final_checkpoint=False, verify=False)
            print(json.dumps({"config": i, "arch": arch, "dim": settings["dim"],
                              "wall_s": time.perf_counter() - t0, "setup_s": m["setup_seconds"],
                              "train_s": m["train_seconds"], "eval_s": m["eval_seconds"],
                              "test_auc": m["test_auc"], "valid_auc": m.get("valid_auc")}), flush=True)


#: The demo's prepared dataset under artifacts/prepared/ (its fingerprint's first 16 hex digits; `make demo` writes it).
DEMO_ARTIFACT = "synthetic-exposure-b4b2a10b5682e01a"


def demo_data() -> str:
    """RECSCALE_BENCH_ARTIFACT, else the demo's prepared dataset in this checkout (which may be absent)."""
    repo = Path(__file__).resolve().parents[2]
    return os.environ.get("RECSCALE_BENCH_ARTIFACT") or str(repo / "artifacts" / "prepared" / DEMO_ARTIFACT)


def demo_recipe(tree: Path, overrides: list[str]) -> dict:
    """The `train:` section of `tree`'s own sweeps/demo.yaml (each revision is timed on its own recipe), then
    `KEY=VALUE` overrides (YAML values) for trying a recipe before it is committed."""
    import yaml

    train = dict(yaml.safe_load((tree / "sweeps" / "demo.yaml").read_text())["train"])
    for item in overrides:
        key, _, value = item.partition("=")
        parsed = yaml.safe_load(value)
        try:  # YAML 1.1 reads "6e-3" as a string
            train[key] = float(parsed) if isinstance(parsed, str) else parsed
        except ValueError:
            train[key] = parsed
    return train


def run(tree: str, data: str, workers: int = 2, seed: int = 0, configs: list[int] | None = None,
        overrides: tuple[str, ...] | list[str] = ()) -> list[dict]:
    """One measurement: `workers` processes at once over `configs` (all 15 by default) -> one record per run."""
    configs = list(range(len(DEMO_TRIALS))) if configs is None else configs
    env = {**os.environ, **MALLOC_ENV, "OMP_NUM_THREADS": "1", "PYTHONPATH": tree}
    procs = [subprocess.Popen([sys.executable, __file__, "worker", "--tree", tree, "--data", data, "--seed", str(seed),
                               "--indices", *map(str, configs[w::workers]),
                               *(a for o in overrides for a in ("--set", o))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tree)
             for w in range(workers)]
    records = []
    for p in procs:
        out, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"worker exited {p.returncode}:\n{err[-3000:]}")
        records += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return sorted(records, key=lambda r: r["config"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", choices=["run", "worker"], default="run")
    p.add_argument("--tree", default=str(Path(__file__).resolve().parents[2]), help="repository tree to import")
    p.add_argument("--data", required=True, help="the demo's prepared dataset")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--configs", default="all", help="comma-separated indices into DEMO_TRIALS, or all")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a train key of the tree's demo recipe (repeatable)")
    p.add_argument("--indices", type=int, nargs="*", default=[], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.mode == "worker":
        worker(args)
        return 0
    configs = None if args.configs == "all" else [int(c) for c in args.configs.split(",")]
    for record in run(args.tree, args.data, args.workers, args.seed, configs, args.set):
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
