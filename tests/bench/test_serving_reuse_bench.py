"""Serving benchmark of HELIX's request-level reuse: n candidates of one request, with and without reuse.

For n in {1, 10, 100, 500} candidates of one request (full 128-event history), measures
- wall time of one scoring pass without reuse (every candidate runs the encoder) and with reuse (the
  user side -- history tokenizer, encoder, K/V cache -- runs once and is gathered to the candidates);
- p, the user side's share of the per-candidate cost, from the no-reuse pass (time of `user_side` on
  the n rows / time of the whole forward), and p from FLOPs (user-side FLOPs / total FLOPs);
- the measured speedup next to Amdahl's prediction 1 / ((1 - p) + p / n);
- forward FLOPs per target unamortised (no reuse) and amortised over the n candidates (reuse).

Run as pytest-benchmark (`make bench` or `pytest tests/bench/test_serving_reuse_bench.py -m bench
--benchmark-enable`), or as a script printing the markdown table of docs/helix.md:
`python tests/bench/test_serving_reuse_bench.py [--size S] [--repeats 5] [--json]`.
Timings are CPU times of the process with one intra-op thread, the minimum over interleaved repeats.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import cast

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import architectures  # noqa: E402
from architectures.flops import count_flops  # noqa: E402
from architectures.helix import Helix  # noqa: E402
from protocols.schema import CAT_FIELDS, default_test_spec, random_batch  # noqa: E402

HISTORY_LEN = 128
CANDIDATES = (1, 10, 100, 500)
USER_SIDE_MODULES = ("events", "event_proj", "encoder", "cache_kv")


def request_batch(n: int, history_len: int = HISTORY_LEN, seed: int = 0) -> dict[str, torch.Tensor]:
    """n candidates of one request with a full history; candidates match some history events."""
    spec = default_test_spec(history_len)
    b = random_batch(spec, n, generator=torch.Generator().manual_seed(seed), min_len=history_len, requests=1)
    b["cat"][:, CAT_FIELDS.index("category_level_two")] = b["hist_cat"][0, torch.arange(n) % history_len, 3]
    return b


def build(size: str, reuse: bool, history_len: int = HISTORY_LEN) -> Helix:
    torch.manual_seed(0)
    model = architectures.build("helix", default_test_spec(history_len), {"size": size, "reuse_requests": reuse})
    return cast(Helix, model.eval())


def best_times(fns: dict, repeats: int) -> dict[str, float]:
    """Minimum CPU time (s) of each `fns[name]()` over `repeats` interleaved rounds, after one warm-up round.

    CPU time of this process (one intra-op thread) rather than wall time: on a machine shared with other
    jobs it excludes the time the process waits for a core; interleaving spreads any drift evenly.
    """
    for fn in fns.values():
        fn()
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - t0)
    return best


def measure(n: int, size: str = "S", repeats: int = 5) -> dict:
    """One row of the serving table for n candidates."""
    batch = request_batch(n)
    plain = build(size, reuse=False)
    reuse = build(size, reuse=True)
    with torch.no_grad():
        t = best_times({"plain": lambda: plain(batch), "user": lambda: plain.user_side(batch),
                        "reuse": lambda: reuse(batch)}, repeats)
        plain_flops = count_flops(plain, batch)
        reuse_flops = count_flops(reuse, batch)
    p_time = t["user"] / t["plain"]
    p_flops = sum(plain_flops.by_module[m] for m in USER_SIDE_MODULES) / plain_flops.per_target
    amdahl = lambda p: 1.0 / ((1.0 - p) + p / n)  # noqa: E731
    return {
        "size": size,
        "n": n,
        "ms_no_reuse": 1e3 * t["plain"],
        "ms_reuse": 1e3 * t["reuse"],
        "speedup": t["plain"] / t["reuse"],
        "p_time": p_time,
        "amdahl_p_time": amdahl(p_time),
        "p_flops": p_flops,
        "amdahl_p_flops": amdahl(p_flops),
        "mflops_per_target_unamortised": plain_flops.per_target / 1e6,
        "mflops_per_target_amortised": reuse_flops.per_target / 1e6,
    }


def markdown(rows: list[dict]) -> str:
    head = (
        "| size | n | no reuse (CPU ms) | reuse (CPU ms) | measured speedup | p (time) | Amdahl(p time) | p (FLOPs) "
        "| Amdahl(p FLOPs) | MFLOPs/target unamortised | MFLOPs/target amortised |\n"
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n"
    )
    body = "".join(
        f"| {r['size']} | {r['n']} | {r['ms_no_reuse']:.1f} | {r['ms_reuse']:.1f} | {r['speedup']:.2f}x | "
        f"{r['p_time']:.3f} | {r['amdahl_p_time']:.2f}x | {r['p_flops']:.3f} | {r['amdahl_p_flops']:.2f}x | "
        f"{r['mflops_per_target_unamortised']:.3f} | {r['mflops_per_target_amortised']:.3f} |\n"
        for r in rows
    )
    return head + body


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models, shared cores


@pytest.mark.bench
@pytest.mark.parametrize("n", CANDIDATES)
def test_serving_reuse(benchmark, n):
    row = measure(n, repeats=2)
    benchmark.extra_info.update(row)
    model = build("S", reuse=True)
    batch = request_batch(n)
    with torch.no_grad():
        benchmark.pedantic(model, args=(batch,), rounds=3, iterations=1)
    # FLOPs: reuse removes exactly (1 - 1/n) of the user side per target
    saved = row["mflops_per_target_unamortised"] - row["mflops_per_target_amortised"]
    assert saved == pytest.approx(row["p_flops"] * row["mflops_per_target_unamortised"] * (1 - 1 / n), rel=1e-6)
    if n >= 100:
        assert row["speedup"] > 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", action="append", help="HELIX size(s) (S, M, L, XL); default S")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of markdown")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rows = [measure(n, size, args.repeats) for size in (args.size or ["S"]) for n in CANDIDATES]
    print(json.dumps(rows, indent=2) if args.json else markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
