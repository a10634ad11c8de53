"""What `train.compile` (torch.compile, inductor's C++ backend on CPU) and `train.bf16` (bfloat16 autocast) buy the
training step, with the compile time counted against a trial.

For each family at the scaling study's width 16 (sweeps/scaling_cpu.yaml: history 32, 2 layers, 4 heads of 4)
and WHALE at the seed configuration (width 64, history 128, 4 heads of 16), all at batch 256 and one torch
thread (a trial's share in a sweep): `harness.step.TrainStep` compiled, and eager under bf16 autocast, each
beside eager float32 (the default) timed just before it. Each row gives the first two steps' seconds (the
compilation, from a cold cache: inductor's FX graph cache off and dynamo reset), the milliseconds per step
after them, the ratio to eager's, and the seconds of a scaling-study trial's training (391 steps: 100,000
targets at 256) including those first steps, against eager's. A mode pays where that last ratio is below 1.
Whether this CPU has the bf16 instructions (avx512_bf16, AMX) is recorded beside each row.
Table: docs/benchmarks/compiled_step.md.

    make bench ARGS="-k compiled_step"      # about 15-30 min on 2 cores, mostly compilation
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import architectures
from harness.config import TrainConfig
from harness.speed.throughput import SMALL_VOCAB
from harness.step import TrainStep
from protocols.schema import FeatureSpec, random_batch

BATCH = 256
#: Steps of a scaling-study trial: one epoch of 100,000 training targets at batch 256.
TRIAL_STEPS = 391
#: (name, arch, model settings) of every configuration timed.
CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("wukong-w16", "wukong", {"dim": 16, "num_layers": 2}),
    ("hstu-w16", "hstu", {"dim": 16, "num_layers": 2, "num_heads": 4, "head_dim": 4, "history_len": 32}),
    ("whale-w16", "whale", {"dim": 16, "num_layers": 2, "num_heads": 4, "head_dim": 4, "history_len": 32}),
    ("helix-w16", "helix", {"dim": 16, "embed_dim": 16, "num_heads": 4, "mix_tokens": 4, "mix_tokens_map": "dense",
                            "history_len": 32}),
    ("whale-seed", "whale", {"dim": 64, "num_layers": 2, "num_heads": 4, "head_dim": 16, "history_len": 128}),
]
MODES = ("compile", "bf16")  # each beside an eager float32 run of the same moment


def cpu_bf16_instructions() -> str:
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    found = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return ", ".join(found) or "none"


def time_mode(arch: str, settings: dict[str, Any], mode: str, steps: int) -> dict[str, float]:
    """Seconds of the first two steps and seconds per step of `steps` more, for one mode."""
    import torch._dynamo
    import torch._inductor.config

    torch._dynamo.reset()
    torch._inductor.config.fx_graph_cache = False  # every compilation from scratch, as a fresh machine's first
    spec = FeatureSpec(vocab_sizes=SMALL_VOCAB, history_len=settings.get("history_len", 32))
    torch.manual_seed(0)
    model = architectures.build(arch, spec, architectures.make_config(arch, settings))
    tc = TrainConfig(batch_size=BATCH, lr=3e-3, num_threads=1, device="cpu", compile=mode == "compile",
                     bf16=mode == "bf16")
    step = TrainStep(model, tc, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    batches = [random_batch(spec, BATCH, generator=g, min_len=spec.history_len) for _ in range(4)]
    t0 = time.perf_counter()
    step(batches[0])
    step(batches[1])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(steps):
        step(batches[i % len(batches)])
    return {"first_two_steps_s": first, "ms_per_step": (time.perf_counter() - t0) / steps * 1e3}


@pytest.mark.bench
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,arch,settings", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_compiled_step(benchmark, name, arch, settings, mode):
    torch.set_num_threads(1)
    steps = 10 if name.endswith("seed") else 40
    eager = time_mode(arch, settings, "eager", steps)["ms_per_step"]  # the same moment's eager step (pairing)
    result = benchmark.pedantic(time_mode, args=(arch, settings, mode, steps), rounds=1, iterations=1)
    trial_s = result["first_two_steps_s"] + (TRIAL_STEPS - 2) * result["ms_per_step"] / 1e3
    benchmark.extra_info.update({
        "config": name, "mode": mode, **result, "eager_ms_per_step": eager,
        "step_over_eager": result["ms_per_step"] / eager, "study_trial_s": trial_s,
        "study_trial_over_eager": trial_s / (TRIAL_STEPS * eager / 1e3),
        "cpu_bf16": cpu_bf16_instructions(), "loadavg_1min": os.getloadavg()[0]})
    assert result["ms_per_step"] > 0
