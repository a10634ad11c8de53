"""`make gpu-check`'s timed part: one WHALE epoch at the seed configuration (d = 64, 2 layers, L = 128,
batch 256) on the medium synthetic log, on the CUDA device, printing targets/s and the counted-FLOP
utilisation (bf16 autocast and TF32 at their defaults), plus `recscale bench --breakdown` figures for the
loader and the training step (with the matrix products' share of the step's device time). Without a
CUDA device it says so and exits 0 (the CUDA tests skip the same way).

    python tests/bench/gpu_check.py [--scale medium] [--arch whale] [--set model.k=v ...]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def _cli(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"recscale {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc.stdout


def main(argv: list[str] | None = None) -> int:
    import torch

    from protocols.synthetic import MARKER

    p = argparse.ArgumentParser(prog="tests/bench/gpu_check.py", description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="medium")
    p.add_argument("--arch", default="whale")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu-check: no CUDA device on this machine; the timed epoch was skipped")
        return 0
    log = Path("artifacts/synthetic") / f"{args.scale}-seed0"
    if not (log / MARKER).exists():
        _cli("synth", "--scale", args.scale, "--out", str(log))
    artifact = _cli("prepare", "--source", "synthetic", "--root", str(log), "--history-len",
                    "128").strip().splitlines()[-1]
    sets = [x for s in args.set for x in ("--set", s)]
    bench = json.loads(_cli("bench", "--data", artifact, "--arch", args.arch, "--set", "train.device=cuda", *sets,
                            "--breakdown", "3", "--json"))
    t0 = time.perf_counter()
    out = Path("results/gpu_check") / time.strftime("%Y%m%d-%H%M%S")
    metrics = json.loads(_cli("train", "--arch", args.arch, "--data", artifact, "--set", "train.device=cuda", *sets,
                              "--out", str(out), "--no-progress", "--json").strip().splitlines()[-1])
    wall = time.perf_counter() - t0
    print(f"gpu-check on {torch.cuda.get_device_name(0)} (torch {torch.__version__}):")
    print(f"  loader: {bench['loader_targets_per_s']:,.0f} targets/s ({bench['loader_copy_ratio']:.3f} x memory copy)")
    print(f"  bench step {args.arch}: {bench['train_targets_per_s']:,.0f} targets/s, "
          f"utilisation {bench['utilisation']:.3f} "
          f"of {bench['matmul_flops_per_s'] / 1e12:.1f} TFLOP/s {bench['matmul_dtype']} matmul, "
          f"peak {bench['peak_memory_bytes'] / 2**30:.2f} GiB")
    bd = bench["breakdown"]
    print(f"  breakdown: products {bd['product_share']:.1%} of {bd['total_ms']:.1f} ms {bd['time_kind']} per step at "
          f"{bd['product_flops_per_s'] / 1e12:.1f} TFLOP/s; ceiling {bench['utilisation_if_only_products']:.3f}; "
          "costliest others: " + ", ".join(f"{o['op']} {o['ms_per_step']:.2f} ms" for o in bd["top_other"][:4]))
    print(f"  epoch of {metrics['train_targets']:,} targets: {metrics['train_seconds']:.1f} s training "
          f"({metrics['train_targets_per_s']:,.0f} targets/s, utilisation {metrics['utilisation']:.3f}, bf16 "
          f"{metrics['bf16']}), {wall:.1f} s for the whole run; test AUC {metrics['test_auc']:.4f} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
