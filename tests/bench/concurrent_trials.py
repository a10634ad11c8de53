"""Total training targets/s of trials that share this machine, as a sweep runs them (standalone script).

    python tests/bench/concurrent_trials.py --tree DIR --workers 2 --threads 1 [--wait-policy passive]
        [--configs all] [--seconds 20]

Starts `--workers` processes of `worker` mode at once, each with `--threads` torch threads and
OMP_WAIT_POLICY=`--wait-policy` (unset: OpenMP's default) in its environment before torch loads, and the
malloc settings training uses. Each builds its share of the demo sweep's trial configurations
(`DEMO_TRIALS`, split round-robin; sweeps/demo.yaml: history 16, widths 4 / 8 / 16, batch 256, lr 3e-3) and
random full-length batches, warms up, says it is ready and waits for a common start time, then trains step
after step, cycling through its configurations, until `--seconds` have passed (the step running then
finishes); it prints the targets it trained and the seconds they took. The total targets/s is the sum of
the workers'. The code trained is the one under `--tree` (imported from there), so the same script measures
any revision: it uses only `architectures.build`, `architectures.make_config`, `harness.step.TrainStep`,
`harness.config.TrainConfig`, `harness.speed.throughput.SMALL_VOCAB` and `protocols.schema.random_batch`.

Data loading, evaluation and Ray's scheduling are left out: this is the training part of a sweep's
throughput, which is what kernels and thread policies change. Prints one JSON line per run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: (arch, model settings) of the demo sweep's grid at its three widths (one seed: seeds do not change speed).
DEMO_TRIALS: list[tuple[str, dict]] = [
    (arch, {"dim": d, "num_layers": 2, **({} if arch == "wukong" else {"num_heads": h, "head_dim": hd})})
    for d, h, hd in ((4, 2, 2), (8, 2, 4), (16, 4, 4))
    for arch in ("hstu", "whale", "whale_meanpool", "shallow_hybrid", "wukong")
]
#: The demo's history length and batch size (sweeps/demo.yaml).
HISTORY_LEN, BATCH = 16, 256
#: Same as harness.perf.MALLOC_ENV (copied so that the script runs against revisions that predate it).
MALLOC_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 34), "MALLOC_ARENA_MAX": "1"}


def worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(args.tree).resolve()))
    import torch

    torch.set_num_threads(args.threads)
    import architectures
    from harness.config import TrainConfig
    from harness.speed.throughput import SMALL_VOCAB
    from harness.step import TrainStep
    from protocols.schema import FeatureSpec, random_batch

    spec = FeatureSpec(vocab_sizes=SMALL_VOCAB, history_len=HISTORY_LEN)
    chosen = [DEMO_TRIALS[i] for i in args.indices]
    tc = TrainConfig(batch_size=BATCH, lr=3e-3)
    g = torch.Generator().manual_seed(0)
    steps = []
    for arch, settings in chosen:
        torch.manual_seed(0)
        config = architectures.make_config(arch, {**settings, "history_len": HISTORY_LEN})
        model = architectures.build(arch, spec, config)
        steps.append(TrainStep(model, tc, torch.device("cpu")))
    batches = [random_batch(spec, BATCH, generator=g, min_len=HISTORY_LEN) for _ in range(2)]
    for step in steps:  # warm-up: first-call allocations and kernel choices
        step(batches[0])
    print("ready", flush=True)
    start_at = float(sys.stdin.readline())  # the common start, once every worker is ready
    late_start = time.time() - start_at
    time.sleep(max(0.0, -late_start))
    end = start_at + args.seconds
    done = 0
    while time.time() < end:
        steps[done % len(steps)](batches[done % 2])
        done += 1
    elapsed = time.time() - max(start_at, start_at + late_start)  # the last step ends past the window's end
    print(json.dumps({"steps": done, "targets": done * BATCH, "late_start_s": late_start, "elapsed_s": elapsed}))


def run(tree: str, workers: int, threads: int, wait_policy: str | None, seconds: float,
        configs: list[int]) -> dict:
    """One measurement: `workers` processes at once over `configs` -> total targets/s and per worker."""
    env = {**os.environ, **MALLOC_ENV, "OMP_NUM_THREADS": str(threads)}
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy.upper()
    procs = []
    for w in range(workers):
        share = configs[w::workers]
        cmd = [sys.executable, __file__, "worker", "--tree", tree, "--threads", str(threads),
               "--seconds", str(seconds), "--indices", *map(str, share)]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=tree))
    for p in procs:  # each says `ready` after its imports, builds and warm-up
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        if line != "ready":
            _, err = p.communicate(timeout=60)
            raise RuntimeError(f"worker exited {p.returncode} before its start:\n{err[-3000:]}")
    start_at = repr(time.time() + 0.5)
    results = []
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(start_at + "\n")
        p.stdin.flush()
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"worker exited {p.returncode}:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    if any(r["late_start_s"] > 0.1 * seconds for r in results):
        raise RuntimeError(f"a worker started over 10% of the window late: {results}")
    per_worker = [r["targets"] / r["elapsed_s"] for r in results]
    return {"targets_per_s": sum(per_worker), "per_worker_targets_per_s": per_worker}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", choices=["run", "worker"], default="run")
    p.add_argument("--tree", default=str(Path(__file__).resolve().parents[2]), help="repository tree to import")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--wait-policy", choices=["active", "passive"], default=None)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--configs", default="all", help="comma-separated indices into DEMO_TRIALS, or all")
    p.add_argument("--indices", type=int, nargs="*", default=[], help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.mode == "worker":
        worker(args)
        return 0
    configs = list(range(len(DEMO_TRIALS))) if args.configs == "all" else [int(c) for c in args.configs.split(",")]
    print(json.dumps(run(args.tree, args.workers, args.threads, args.wait_policy, args.seconds, configs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
