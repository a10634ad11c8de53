"""Measure this machine: loader throughput on a prepared artifact and/or a timed training step.

--data ARTIFACT times the batch loader (training split, ID masking on, prefetch as training uses it)
and states it as a ratio to this machine's memory-copy rate of the same bytes. --arch NAME [--set ...]
times training steps (`harness.step.TrainStep`, the training loop's step) on schema-valid random batches
with full histories (vocabularies from --data when given), and reports targets/s, the counted-FLOP
utilisation against a matmul rate measured in the same run in the step's own dtype (bfloat16 when
train.bf16 autocasts, else float32), peak memory and the device. Like `recscale train`, the command
re-executes itself once under the glibc malloc settings of harness/perf.py. (`recscale sweep --dry-run`
times its own trials' steps the same way: harness/sweep/dry_run.py.)

examples:
  recscale bench --data artifacts/prepared/synthetic-exposure-<hash>
  recscale bench --arch whale --json
  recscale bench --arch whale --data ART --set model.dim=32 --set train.num_threads=2 --steps 10
  recscale bench --arch whale --breakdown        # and where the step's time goes
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any

from cli.main import check_arch, reexec_under_malloc
from core.errors import RecscaleError
from harness import perf


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", metavar="ARTIFACT", help="prepared dataset: time its loader (and size vocabularies)")
    parser.add_argument("--arch", help="registered architecture: time its training step")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="model.KEY=V (or KEY=V) and train.KEY=V overrides, e.g. train.num_threads=2 (repeatable)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="targets per batch (default: train.batch_size, 256)")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps (default 20, after 3 warm-up)")
    parser.add_argument("--batches", type=int, default=100, help="loader batches per timed pass (default 100)")
    parser.add_argument("--breakdown", type=int, nargs="?", const=3, default=0, metavar="STEPS",
                        help="time STEPS more steps (default 3) phase by phase (loader wait on --data's training "
                             "batches, bookkeeping, forward, backward, optimizer), profile them and show where "
                             "their time goes: matrix products (time, achieved GFLOP/s, the utilisation ceiling "
                             "they set) and the costliest other operators (harness/speed/throughput.py)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if not args.data and not args.arch:
        raise RecscaleError("give --data ARTIFACT (loader), --arch NAME (training step) or both")
    reexec_under_malloc(args)  # as `recscale train` does: time the step under the malloc settings
    import torch

    from core.typed_config import apply_overrides
    from harness.config import TrainConfig, model_config, parse_set
    from harness.step import resolve_device

    over = parse_set(args.set, sections=("model", "train"))  # the spellings `train --set` takes
    model_over = over.get("model", {})
    if args.arch:
        check_arch(args.arch)
        model_cfg = model_config(args.arch, model_over)
    tc = apply_overrides(TrainConfig(), over.get("train", {}))
    if args.batch_size:
        tc = dataclasses.replace(tc, batch_size=args.batch_size)
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    device = resolve_device(tc.device)
    threads = torch.get_num_threads()
    out: dict = {"device": str(device), "threads": threads, "loadavg_1min": os.getloadavg()[0],
                 "malloc_env": perf.malloc_env_active(), "loader_targets_per_s": None,
                 "train_targets_per_s": None, "utilisation": None}
    ds = None
    if args.data:
        from harness.evaluate import loader_options, open_dataset
        from harness.speed.throughput import copy_rate, loader_rate

        ds = open_dataset(args.data)
        progress(f"timing the loader: {args.batches} batches of {tc.batch_size} targets, and this machine's copy rate")
        opts = loader_options(device, tc.prefetch_batches, tc.loader_workers)
        opts["pin_memory"] = opts["pin_memory"] and torch.cuda.is_available()
        loader = loader_rate(ds, tc.batch_size, args.batches, **opts)
        copy = copy_rate(loader["bytes_per_target"] * tc.batch_size) / loader["bytes_per_target"]
        out.update({"loader_targets_per_s": loader["targets_per_s"],
                    "loader_bytes_per_target": loader["bytes_per_target"],
                    "loader_copy_ratio": loader["targets_per_s"] / copy, "loader_history_len": ds.spec.history_len,
                    "batch_size": tc.batch_size, "loader_options": opts})
    if args.arch:
        from harness.speed.throughput import SMALL_VOCAB, measure
        from protocols.schema import FeatureSpec

        vocab = ds.spec.vocab_sizes if ds is not None else SMALL_VOCAB
        spec = FeatureSpec(vocab_sizes=dict(vocab), history_len=model_cfg.history_len)
        progress(f"timing {args.arch}: 3 warm-up and {args.steps} training steps"
                 + (f", {args.breakdown} profiled" if args.breakdown else "") + ", and this machine's matmul rate")
        result = measure(args.arch, model_over, tc, spec=spec, steps=args.steps, breakdown_steps=args.breakdown,
                         dataset=ds)
        reported: dict[str, Any] = {k: result[k] for k in (
            "flops_per_target", "utilisation", "matmul_flops_per_s", "matmul_dtype", "bf16", "seconds_per_step",
            "peak_memory_bytes", "peak_memory_kind", "phases_ms", "loader_measured", "breakdown",
            "utilisation_if_only_products") if k in result}
        out.update({"arch": args.arch, "model": model_over, "train_targets_per_s": result["targets_per_s"],
                    **reported, "batch_size": tc.batch_size, "history_len": model_cfg.history_len})
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    print(f"device {out['device']}, {threads} torch thread(s), load average {out['loadavg_1min']:.2f}")
    if out["loader_targets_per_s"] is not None:
        print(f"loader: {out['loader_targets_per_s']:,.0f} targets/s (batch {tc.batch_size}, "
              f"L={out['loader_history_len']}, "
              f"masking on, {out['loader_bytes_per_target']:,.0f} B/target), {out['loader_copy_ratio']:.3f} x this "
              "machine's memory-copy rate of the same bytes")
    if out["train_targets_per_s"] is not None:
        print(f"train {args.arch}: {out['train_targets_per_s']:,.0f} targets/s "
              f"({out['seconds_per_step'] * 1e3:.1f} ms/step), "
              f"{out['flops_per_target'] / 1e6:.2f} MFLOPs/target forward, utilisation {out['utilisation']:.3f} of "
              f"{out['matmul_flops_per_s'] / 1e9:.0f} GFLOP/s {out['matmul_dtype']} matmul, peak memory "
              f"{out['peak_memory_bytes'] / 2**20:,.0f} MiB ({out['peak_memory_kind']})")
    if "breakdown" in out:
        _print_breakdown(out)
    return 0


def progress(text: str) -> None:
    """A line on stderr before each measurement (each takes seconds), so the command is never silent."""
    print(f"recscale bench: {text} ...", file=sys.stderr, flush=True)


def _print_breakdown(out: dict) -> None:
    phases = out["phases_ms"]
    total = sum(phases.values())
    print(f"phases of {out['breakdown']['steps']} more loop iteration(s), {total:.1f} ms each:")
    for phase, ms in phases.items():
        note = " (pre-built batches: give --data to time the loader)" \
            if phase == "loader_wait" and not out["loader_measured"] else ""
        print(f"  {phase:<16s} {ms:8.2f} ms  {ms / total:6.1%}{note}")
    bd = out["breakdown"]
    print(f"breakdown of {bd['steps']} profiled step(s), {bd['time_kind']} {bd['total_ms']:.1f} ms/step "
          "(the profiler's overhead included):")
    print(f"  matrix products  {bd['product_ms']:8.1f} ms  {bd['product_share']:6.1%}  "
          f"{bd['product_flops'] / 1e9:.2f} GFLOP executed at {bd['product_flops_per_s'] / 1e9:.0f} GFLOP/s "
          f"({bd['product_flops_per_s'] / out['matmul_flops_per_s']:.2f} of the matmul rate)")
    print(f"  everything else  {bd['other_ms']:8.1f} ms  {1 - bd['product_share']:6.1%}, the costliest:")
    for op in bd["top_other"]:
        print(f"    {op['op']:<36s}{op['ms_per_step']:8.1f} ms  {op['calls_per_step']:6.0f} calls")
    print(f"  utilisation if only the products took time: {out['utilisation_if_only_products']:.3f} "
          "(the ceiling at these shapes)")
