"""Where a small model's training step goes: the training loop's iteration phase by phase (loader wait,
bookkeeping, forward, backward, optimizer; `harness.speed.throughput.phase_times`, what `recscale bench
--breakdown` prints) for the scaling study's four families at widths 4, 16 and 64; and WHALE at the seed
configuration on 2 threads operation by operation (issue 44's counted-FLOP utilisation goal: what keeps it
below the ceiling the matrix products set).

The shapes are the scaling study's (sweeps/scaling_cpu.yaml: history 32, batch 256, 2 layers, heads growing
with the width, HELIX with embed_dim = dim and 4 dense mix tokens) at one torch thread, a trial's share of the
machine in a sweep; the vocabularies are those of the small synthetic log (`SMALL_VOCAB`), so the embedding
tables and the optimizer's work are a study's. The batches come through the training loader (ID masking,
prefetch) from the artifact named by RECSCALE_BENCH_ARTIFACT, else from a tiny synthetic log prepared at
history 32 (tests/fixtures_data.py). Table: docs/benchmarks/step_phases.md (with the load average of each row:
2 shared cores, so read the shares more than the milliseconds).

    make bench ARGS="-k step_phases"
"""
from __future__ import annotations

import os
from typing import Any

import pytest

from harness.config import TrainConfig
from harness.evaluate import open_dataset
from harness.speed.throughput import PHASES, SMALL_VOCAB, measure
from protocols.schema import FeatureSpec
from tests.fixtures_data import build_tiny_artifact, tiny_log  # noqa: F401  (pytest fixture)

HISTORY_LEN, BATCH, LAYERS = 32, 256, 2
#: (heads, head width) of the HSTU layers at each width: sweeps/scaling_cpu.yaml's, and the seed's at 64.
HEADS = {4: (2, 2), 16: (4, 4), 64: (4, 16)}
ARCHS = ("wukong", "hstu", "whale", "helix")
#: Loop iterations timed phase by phase (after the timed steps' warm-up).
STEPS = 30


def model_settings(arch: str, width: int) -> dict[str, Any]:
    heads, head_dim = HEADS[width]
    if arch == "wukong":
        return {"dim": width, "num_layers": LAYERS}
    if arch == "helix":
        return {"dim": width, "embed_dim": width, "num_heads": heads, "mix_tokens": 4, "mix_tokens_map": "dense",
                "history_len": HISTORY_LEN}
    return {"dim": width, "num_layers": LAYERS, "num_heads": heads, "head_dim": head_dim, "history_len": HISTORY_LEN}


@pytest.fixture(scope="module")
def dataset(tiny_log, tmp_path_factory):  # noqa: F811
    path = os.environ.get("RECSCALE_BENCH_ARTIFACT") or build_tiny_artifact(
        tiny_log, tmp_path_factory.mktemp("phases"), history_len=HISTORY_LEN)
    return open_dataset(str(path))


@pytest.mark.bench
@pytest.mark.parametrize("width", list(HEADS))
@pytest.mark.parametrize("arch", ARCHS)
def test_step_phases(benchmark, dataset, arch, width):
    vocab = {k: max(v, dataset.spec.vocab_sizes.get(k, 0)) for k, v in SMALL_VOCAB.items()}
    spec = FeatureSpec(vocab_sizes=vocab, history_len=HISTORY_LEN)
    tc = TrainConfig(batch_size=BATCH, lr=3e-3, num_threads=1, device="cpu")
    result = benchmark.pedantic(measure, args=(arch, model_settings(arch, width), tc),
                                kwargs={"spec": spec, "steps": 5, "breakdown_steps": STEPS, "dataset": dataset,
                                        "rate_seconds": 0.0}, rounds=1, iterations=1)
    phases = result["phases_ms"]
    loop_ms = sum(phases.values())
    benchmark.extra_info.update({"arch": arch, "width": width, "loop_ms": loop_ms,
                                 **{f"{p}_ms": phases[p] for p in PHASES},
                                 "forward_backward_share": (phases["forward"] + phases["backward"]) / loop_ms,
                                 "targets_per_s": BATCH / loop_ms * 1e3,
                                 "product_share": result["breakdown"]["product_share"],
                                 "utilisation": result["utilisation"], "loadavg_1min": os.getloadavg()[0]})
    assert loop_ms > 0 and phases["forward"] > 0


@pytest.mark.bench
def test_whale_seed_utilisation_op_by_op(benchmark, dataset):
    """WHALE at the seed configuration (width 64, history 128, 4 heads of 16, batch 256) on 2 threads: the
    counted-FLOP utilisation (goal 0.45, issue 44), the ceiling the matrix products alone set, and the five
    costliest other operators, which are what keeps the step below the ceiling."""
    spec = FeatureSpec(vocab_sizes=SMALL_VOCAB, history_len=128)
    settings = {"dim": 64, "num_layers": 2, "num_heads": 4, "head_dim": 16, "history_len": 128}
    tc = TrainConfig(batch_size=BATCH, num_threads=2, device="cpu")
    result = benchmark.pedantic(measure, args=("whale", settings, tc),
                                kwargs={"spec": spec, "steps": 10, "breakdown_steps": 5}, rounds=1, iterations=1)
    bd = result["breakdown"]
    benchmark.extra_info.update({
        "threads": 2, "targets_per_s": result["targets_per_s"], "utilisation": result["utilisation"],
        "utilisation_if_only_products": result["utilisation_if_only_products"],
        "product_share": bd["product_share"], "step_ms_profiled": bd["total_ms"],
        **{f"other_{i + 1}": f"{o['op']} {o['ms_per_step']:.1f} ms" for i, o in enumerate(bd["top_other"][:5])},
        "loadavg_1min": os.getloadavg()[0]})
    assert result["utilisation"] > 0
