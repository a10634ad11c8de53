"""Side-by-side training step: our HSTU stack against generative-recommenders' (built by peer_hstu.py beside it).

From the repository root (a benchmark helper, not part of the package):

    python -m tests.bench.peer_bench time --peer research --threads 2 --load busy [--rounds 15] [--batch 256]
    python -m tests.bench.peer_bench memory --impl stu [--batch 256]

`time` builds ours and one peer at the same shapes (`peer_hstu.Shapes`; defaults B = 256, N = 257, D = 64,
2 layers of 4 heads x 16, fp32), first checks that their matrix FLOPs per target match within
`peer_hstu.FLOP_TOLERANCE` (exit 3 otherwise), then runs their training steps (forward, backward, one AdamW
step each) interleaved, ours then the peer's, `warmup` + `rounds` times. It reports each one's targets/s
(B / step seconds), median and best, and the paired ratio peer step time / ours (above 1: ours is faster):
the median over rounds of the per-round ratio, with a 95% percentile-bootstrap interval over rounds
(`paired_ratio`). Interleaving puts both under the same drift of a shared machine, and pairing by round takes
that drift out of the ratio. `--load busy` keeps one core busy for the whole measurement, as a sweep's
second trial does: a bounded busy loop in a child process (`busy_core`), always stopped in a finally.

`memory` runs one implementation alone for a few steps and reports the process's peak resident memory
(`resource.getrusage(RUSAGE_SELF).ru_maxrss`: every page the kernel gave the process, torch's allocations,
fbgemm's and the allocator's slack included; Python-level tracers such as tracemalloc do not see torch's
buffers) and its resident memory just before the first step (interpreter, imports, model, inputs), so
`step_peak_mb` = peak - before is what the steps themselves added. One process per implementation: the peak
is a process-wide high-water mark.

Both print one JSON line; a missing peer exits 2 with the reason. tests/bench/test_peer_hstu_bench.py runs
them in fresh processes with the malloc settings training uses (`perf.MALLOC_ENV`) and `make bench` writes
the table to docs/benchmarks/peer_hstu.md.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from scipy import stats

#: Upper bound on a busy loop's life, so that it ends by itself if its parent dies without stopping it.
BUSY_LIMIT_S = 3600.0
MIB = 1 << 20


@contextmanager
def busy_core(enabled: bool = True, limit_s: float = BUSY_LIMIT_S) -> Iterator[subprocess.Popen | None]:
    """Keep one core busy while the block runs: a child process spinning until `limit_s` have passed, killed
    and reaped on leaving the block, whatever happened in it. Yields the child (None when not enabled)."""
    if not enabled:
        yield None
        return
    code = f"import time\nend = time.monotonic() + {float(limit_s)!r}\nwhile time.monotonic() < end:\n    pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.2)  # past the interpreter's start-up, into the loop
        yield proc
    finally:
        proc.kill()
        proc.wait()


def interleaved_seconds(steps: Sequence[Callable[[], None]], *, rounds: int, warmup: int = 1) -> list[list[float]]:
    """Wall seconds of each step over `rounds` rounds (after `warmup` untimed ones); each round runs every step
    once, in the order given (A B A B ...). -> one list of `rounds` times per step."""
    times: list[list[float]] = [[] for _ in steps]
    for r in range(warmup + rounds):
        for i, step in enumerate(steps):
            t0 = time.perf_counter()
            step()
            elapsed = time.perf_counter() - t0
            if r >= warmup:
                times[i].append(elapsed)
    return times


def paired_ratio(ours: Sequence[float], peer: Sequence[float], *, confidence: float = 0.95,
                 n_resamples: int = 9999, seed: int = 0) -> tuple[float, float, float]:
    """Median over rounds of peer / ours step time, round by round, with a percentile-bootstrap interval
    (rounds resampled; BCa's jackknife is unreliable for a median). -> (median, low, high)."""
    r = np.asarray(peer, dtype=float) / np.asarray(ours, dtype=float)
    median = float(np.median(r))
    if len(r) < 2 or np.ptp(r) == 0:
        return median, median, median
    res = stats.bootstrap((r,), np.median, confidence_level=confidence, n_resamples=n_resamples,
                          method="percentile", random_state=np.random.default_rng(seed))
    return median, float(res.confidence_interval.low), float(res.confidence_interval.high)


def _rss_bytes() -> int:
    """Current resident memory of this process (Linux /proc), 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _peak_rss_bytes() -> int:
    """Peak resident memory of this process (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _shapes(args: argparse.Namespace) -> Any:
    from tests.bench.peer_hstu import Shapes

    return Shapes(batch=args.batch, seq_len=args.seq_len, dim=args.dim, num_layers=args.num_layers,
                  num_heads=args.num_heads, head_dim=args.head_dim)


def measure_time(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from harness.perf import malloc_env_active
    from tests.bench import peer_hstu as P

    peer = P.import_peer()
    shapes = _shapes(args)
    flops, ratios = P.flop_ratios(peer, shapes, (args.peer,))  # FlopMismatch before anything is timed
    data = P.inputs(shapes)
    impls = [P.build("ours", shapes, data), P.build(args.peer, shapes, data, peer)]
    optimizers = [P.make_optimizer(impl) for impl in impls]
    steps = [lambda impl=impl, opt=opt: P.train_step(impl, opt) for impl, opt in zip(impls, optimizers)]
    with busy_core(args.load == "busy"):
        ours_s, peer_s = interleaved_seconds(steps, rounds=args.rounds, warmup=args.warmup)
    ratio, low, high = paired_ratio(ours_s, peer_s)
    B = shapes.batch
    return {
        "peer": args.peer, "threads": torch.get_num_threads(), "load": args.load, "rounds": args.rounds,
        **shapes.__dict__,
        "ours_targets_per_s_median": B / float(np.median(ours_s)), "ours_targets_per_s_best": B / min(ours_s),
        "peer_targets_per_s_median": B / float(np.median(peer_s)), "peer_targets_per_s_best": B / min(peer_s),
        "ratio_peer_time_over_ours": ratio, "ratio_low": low, "ratio_high": high,
        "flops_per_target_ours": flops["ours"], "flops_per_target_peer": flops[args.peer],
        "flop_ratio": ratios[args.peer], "ours_run_flop_fraction": P.run_flop_fraction(shapes),
        "malloc_env": malloc_env_active(), "peer_commit": peer.commit[:12],
    }


def measure_memory(args: argparse.Namespace) -> dict[str, Any]:
    from tests.bench import peer_hstu as P

    peer = P.import_peer() if args.impl != "ours" else None
    shapes = _shapes(args)
    impl = P.build(args.impl, shapes, P.inputs(shapes), peer)
    opt = P.make_optimizer(impl)
    before = _rss_bytes()
    for _ in range(args.steps):
        P.train_step(impl, opt)
    peak = _peak_rss_bytes()
    return {"impl": args.impl, **shapes.__dict__, "steps": args.steps, "rss_before_mb": before / MIB,
            "peak_rss_mb": peak / MIB, "step_peak_mb": (peak - before) / MIB}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.bench.peer_bench", description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["time", "memory"])
    p.add_argument("--peer", choices=["research", "stu"], default="research", help="time: the peer timed")
    p.add_argument("--impl", choices=["ours", "research", "stu"], default="ours", help="memory: the one measured")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--load", choices=["quiet", "busy"], default="quiet", help="time: keep one core busy or not")
    p.add_argument("--rounds", type=int, default=15, help="time: timed rounds (one step of each per round)")
    p.add_argument("--warmup", type=int, default=2, help="time: untimed rounds first")
    p.add_argument("--steps", type=int, default=3, help="memory: training steps run")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seq-len", type=int, default=257)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=16)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import torch

    from tests.bench.peer_hstu import FlopMismatch, PeerUnavailable

    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        result = measure_time(args) if args.mode == "time" else measure_memory(args)
    except PeerUnavailable as e:
        print(f"peer unavailable: {e}", file=sys.stderr)
        return 2
    except FlopMismatch as e:
        print(f"not comparable: {e}", file=sys.stderr)
        return 3
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
