"""Training-step throughput (targets/s) of the five seed architectures, at the seed and at a small size.

One step = forward, BCE-with-logits loss, backward, AdamW update, on a random schema batch with full
histories (B = 256, the seed's batch size; one candidate per request). Vocabularies are the small test
ones, so the optimizer's share is that of the dense parameters only. Run with
`make bench ARGS=tests/bench/test_train_step_bench.py` or as a script that prints a markdown table:
`python tests/bench/test_train_step_bench.py [--repeats 3] [--batch-size 256] [--threads 1]`; the script
also reports process CPU time per step, a fairer measure than wall time on a shared machine.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import architectures  # noqa: E402
from architectures.flops import count_flops  # noqa: E402
from protocols.schema import default_test_spec, random_batch  # noqa: E402

ARCHS = ("wukong", "hstu", "shallow_hybrid", "whale", "whale_meanpool")
SIZES = {
    "seed": {"dim": 64, "num_layers": 2, "history_len": 128, "num_heads": 4, "head_dim": 16},
    "small": {"dim": 32, "num_layers": 1, "history_len": 64, "num_heads": 4, "head_dim": 8},
}
BATCH_SIZE = 256


def make_step(arch: str, size: str, batch_size: int = BATCH_SIZE):
    """(step function, batch, counted forward FLOPs per target) for one architecture and size."""
    over = dict(SIZES[size])
    if arch == "wukong":
        over = {k: over[k] for k in ("dim", "num_layers")}
    spec = default_test_spec(SIZES[size]["history_len"])
    torch.manual_seed(0)
    model = architectures.build(arch, spec, over)
    batch = random_batch(spec, batch_size, min_len=SIZES[size]["history_len"])
    flops = count_flops(model, random_batch(spec, 1, min_len=SIZES[size]["history_len"])).per_target
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-5)
    model.train()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(batch), batch["label"])
        loss.backward()
        opt.step()

    return step, batch, flops


@pytest.mark.bench
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("arch", ARCHS)
def test_train_step_throughput(benchmark, arch, size):
    step, batch, flops = make_step(arch, size)
    benchmark.pedantic(step, rounds=3, warmup_rounds=1)
    targets_per_s = BATCH_SIZE / benchmark.stats.stats.mean
    benchmark.extra_info.update(targets_per_s=targets_per_s, forward_flops_per_target=flops,
                                train_flops_per_s=3 * flops * targets_per_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"| arch | size | forward MFLOPs/target | step wall ms (B={args.batch_size}) | step CPU ms "
          "| targets/s (wall) | targets/s per CPU-second | GFLOP/s per CPU (3x fwd) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in SIZES:
        for arch in ARCHS:
            step, _, flops = make_step(arch, size, args.batch_size)
            step()  # warm-up
            walls, cpus = [], []
            for _ in range(args.repeats):
                t0, c0 = time.perf_counter(), time.process_time()
                step()
                walls.append(time.perf_counter() - t0)
                cpus.append(time.process_time() - c0)
            wall, cpu = min(walls), min(cpus)
            tps, tpc = args.batch_size / wall, args.batch_size / cpu
            print(f"| {arch} | {size} | {flops / 1e6:.3f} | {wall * 1e3:.0f} | {cpu * 1e3:.0f} | {tps:,.0f} | "
                  f"{tpc:,.0f} | {3 * flops * tpc / 1e9:.1f} |")


if __name__ == "__main__":
    main()
