"""Timing the training step on schema-valid random batches (`recscale bench --arch`, the sweep's dry run and the
benchmarks in tests/bench): `measure`, and for `bench --breakdown` `phase_times` and `profile_steps`; for
`bench --data`, `loader_rate` and `copy_rate`. What each measures: docs/training.md ("`recscale bench`").
`profile_steps` counts the products' FLOPs with `torch.utils.flop_counter` over one more step outside the profiled
ones (the profiler's own `with_flops` slowed WHALE's step by ~17 %).
"""
from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

import architectures
from harness import perf
from harness.config import TrainConfig
from harness.evaluate import loader_options, move_batch
from harness.step import TrainStep, place
from harness.train import CurveLogger, LRSchedule, Meter
from protocols.schema import FeatureSpec, random_batch

from . import matmul

#: Vocabulary sizes of a prepared `synth --scale small` log (about 1M exposures, 78k training targets).
SMALL_VOCAB: dict[str, int] = {
    "user_id": 2_419, "device_id": 2_469, "age": 10, "gender": 5, "province": 81, "video_id": 142_814,
    "author_id": 49_978, "category_level_one": 142, "category_level_two": 786, "upload_type": 42,
}


#: Seconds of matmul products timed before and again after the timed steps (`matmul.matmul_rate`).
CALIBRATION_SECONDS = 1.0


def measure(
    arch: str,
    model_overrides: dict[str, Any] | None = None,
    train: TrainConfig | None = None,
    *,
    spec: FeatureSpec | None = None,
    steps: int = 20,
    warmup: int = 3,
    seed: int = 0,
    breakdown_steps: int = 0,
    flops_per_target: float | None = None,
    rate_seconds: float = CALIBRATION_SECONDS,
    min_seconds: float = 0.0,
    dataset: Any = None,
) -> dict[str, Any]:
    """Time `steps` training steps of `arch` (after `warmup`) at batch size `train.batch_size`; with `breakdown_steps`,
    time that many more phase by phase (`phase_times`: on the training batches of `dataset`, a `PreparedDataset`,
    through the training loop's loader when given) and profile them (`profile_steps`). `min_seconds` adds steps until
    the timed ones take at least that long; `flops_per_target` skips counting them; `rate_seconds=0` takes this
    process's cached matmul rate (`matmul.matmul_rate_cached`) instead of timing products around the steps."""
    tc = train or TrainConfig()
    device = place(tc)  # as the training loop does
    spec = spec or FeatureSpec(vocab_sizes=SMALL_VOCAB, history_len=128)
    spec = replace(spec, num_tasks=len(tc.tasks)) if tc.tasks else spec  # one head per task
    torch.manual_seed(seed)
    model = architectures.build(arch, spec, model_overrides or {}, attention=tc.attention).to(device)
    g = torch.Generator().manual_seed(seed)
    batches = [random_batch(spec, tc.batch_size, generator=g, min_len=spec.history_len) for _ in range(4)]
    if tc.tasks:  # one label per task (docs/tasks.md)
        batches = [dict(b, label=torch.randint(0, 2, (tc.batch_size, len(tc.tasks)), generator=g).float())
                   for b in batches]
    batches = [{k: v.to(device) for k, v in b.items()} for b in batches]

    flops = matmul.count_cost(model, batches[0])["flops_per_target"] if flops_per_target is None else flops_per_target
    step = TrainStep(model, tc, device)
    for i in range(warmup):
        step(batches[i % len(batches)])
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    dtype = matmul.compute_dtype(step.bf16)
    if rate_seconds > 0:  # and again after the steps: the best
        rate = matmul.matmul_rate(device, dtype, min_seconds=rate_seconds)
    else:
        rate = matmul.matmul_rate_cached(device, dtype)
    sync()
    t0 = time.perf_counter()
    done, elapsed = 0, 0.0
    while done < steps or elapsed < min_seconds:  # at least `steps`, and at least `min_seconds` of them
        step(batches[done % len(batches)])
        done += 1
        if done >= steps:
            sync()
        elapsed = time.perf_counter() - t0
    steps = done
    if rate_seconds > 0:
        rate = max(rate, matmul.matmul_rate(device, dtype, min_seconds=rate_seconds))
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else perf.peak_rss_bytes()
    targets_per_s = steps * tc.batch_size / elapsed
    extra: dict[str, Any] = {}
    if breakdown_steps:
        source: Generator[Any, None, None] = (training_batches(dataset, tc, seed) if dataset is not None
                                              else (b for b in itertools.cycle(batches)))
        with contextlib.closing(source):  # stops the loader's prefetch
            extra["phases_ms"] = phase_times(step, source, device, steps=breakdown_steps)
        extra["loader_measured"] = dataset is not None
        bd = profile_steps(step, batches, device, steps=breakdown_steps)
        extra["breakdown"] = {**asdict(bd), "product_share": bd.product_share}  # asdict: top_other as dicts too
        products_only = tc.batch_size / (bd.product_ms / 1e3) if bd.product_ms else float("nan")  # targets/s
        extra["utilisation_if_only_products"] = matmul.utilisation(flops, products_only, rate)
    return {
        "arch": arch,
        "batch_size": tc.batch_size,
        "steps": steps,
        "seconds_per_step": elapsed / steps,
        "targets_per_s": targets_per_s,
        "flops_per_target": flops,
        "matmul_flops_per_s": rate,
        "matmul_dtype": str(dtype).removeprefix("torch."),
        "utilisation": matmul.utilisation(flops, targets_per_s, rate),
        "threads": torch.get_num_threads(),
        "peak_memory_bytes": int(peak),
        "peak_memory_kind": "cuda max_memory_allocated" if device.type == "cuda" else "process peak RSS",
        "malloc_env": perf.malloc_env_active(),
        "device": str(device),
        "bf16": step.bf16,
    } | extra


#: The parts of one iteration of the training loop that `phase_times` times, in the loop's order.
PHASES = ("loader_wait", "bookkeeping", "forward", "backward", "optimizer")


def training_batches(dataset: Any, tc: TrainConfig, seed: int) -> Generator[Any, None, None]:
    """The training split's batches epoch after epoch, from the loader as `harness.train.train_epoch` opens it
    (ID masking, background prefetch)."""
    for epoch in itertools.count():
        yield from dataset.batches("train", tc.batch_size, seed=seed, epoch=epoch, id_mask_prob=tc.id_mask_prob,
                                   **loader_options(torch.device("cpu"), tc.prefetch_batches, tc.loader_workers))


def phase_times(step: TrainStep, batches: Iterator[Any], device: torch.device, *, steps: int) -> dict[str, float]:
    """Milliseconds per iteration of each of `PHASES` (docs/training.md, "`recscale bench`") over `steps` iterations
    of `harness.train.train_epoch`'s work on `batches` (the loader's start-up in the first wait, as every epoch pays
    it), the device synchronised before each clock reading."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    totals = dict.fromkeys(PHASES, 0.0)
    last = [time.perf_counter()]

    def lap(phase: str) -> None:  # the time since the last lap goes to `phase`
        sync()
        now = time.perf_counter()
        totals[phase] += now - last[0]
        last[0] = now

    tc = TrainConfig()
    schedule = LRSchedule(tc.schedule, step.optimizers, steps_per_epoch=steps, epochs=1)
    meter = Meter(device)
    with tempfile.TemporaryDirectory(prefix="recscale-phases-") as log_dir:
        curves = CurveLogger(Path(log_dir), tc.log_every_steps, device)
        curves.writer()  # opened (its module imported) once per trial, not per step
        last[0] = time.perf_counter()
        for i in range(steps):
            batch = next(batches)
            lap("loader_wait")
            schedule.apply(0, i)
            batch = move_batch(batch, device)
            lap("bookkeeping")
            loss = step.forward_loss(batch)
            lap("forward")
            step.backward(loss)
            lap("backward")
            step.update()
            lap("optimizer")
            meter.add(loss.detach())
            curves.step(i + 1, loss.detach(), int(batch["label"].shape[0]), step.grad_norm, schedule.lr())
            lap("bookkeeping")
        curves.close()
    return {phase: seconds / steps * 1e3 for phase, seconds in totals.items()}


#: ATen operators that are matrix products (their self time is the product kernel's time).
PRODUCT_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm",
                         "aten::_addmm_activation"})


@dataclass(frozen=True)
class OpTime:
    """One operator's share of the profiled steps."""

    op: str
    ms_per_step: float
    calls_per_step: float


@dataclass(frozen=True)
class StepBreakdown:
    """The profiled steps' operator time, split into matrix products and the rest (per step)."""

    steps: int
    time_kind: str  # "cpu self time" or "cuda self time"
    total_ms: float  # all operators' self time
    product_ms: float
    product_flops: float  # executed by the products (backward recomputations included)
    product_flops_per_s: float
    other_ms: float
    top_other: tuple[OpTime, ...]  # the costliest non-product operators

    @property
    def product_share(self) -> float:
        return self.product_ms / self.total_ms if self.total_ms else 0.0


def profile_steps(step: Callable[[Any], Any], batches: list[Any], device: torch.device, *, steps: int = 3,
                  top: int = 8) -> StepBreakdown:
    """Run `step` on `steps` batches (cycling) under the profiler and split its operator time; one more
    step on the first batch counts the products' FLOPs (every batch must have the same shapes)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    cuda = device.type == "cuda"
    counter = FlopCounterMode(display=False)
    with counter:
        step(batches[0])
    product_flops = float(sum(n for op, n in counter.get_flop_counts()["Global"].items()
                              if str(op).replace(".", "::", 1) in PRODUCT_OPS))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            step(batches[i % len(batches)])
        if cuda:
            torch.cuda.synchronize(device)
    events = prof.key_averages()

    def self_us(e: Any) -> float:
        return float(e.self_device_time_total if cuda else e.self_cpu_time_total)

    total = sum(self_us(e) for e in events)
    products = [e for e in events if e.key in PRODUCT_OPS]
    product_us = sum(self_us(e) for e in products)
    others = sorted((e for e in events if e.key not in PRODUCT_OPS and self_us(e) > 0), key=self_us, reverse=True)
    return StepBreakdown(
        steps=steps,
        time_kind="cuda self time" if cuda else "cpu self time",
        total_ms=total / steps / 1e3,
        product_ms=product_us / steps / 1e3,
        product_flops=product_flops,
        product_flops_per_s=product_flops * steps / (product_us / 1e6) if product_us else 0.0,
        other_ms=(total - product_us) / steps / 1e3,
        top_other=tuple(OpTime(e.key, self_us(e) / steps / 1e3, e.count / steps) for e in others[:top]),
    )


def loader_rate(ds: Any, batch_size: int, n_batches: int, *, repeats: int = 3, via: Any = None,
                **options: Any) -> dict[str, float]:
    """Best-of-`repeats` targets/s of the training split's first `n_batches` batches (masking at the default
    probability); `options` go to `PreparedDataset.batches` (prefetch, workers, narrow, pin_memory), or to
    `via(ds, split, batch_size, seed=0, **options)` when another loader is measured."""
    n_batches = max(1, min(n_batches, ds.num_batches("train", batch_size)))
    best = float("inf")
    targets = nbytes = 0
    for _ in range(repeats):
        it = iter(via(ds, "train", batch_size, seed=0, **options) if via is not None
                  else ds.batches("train", batch_size, seed=0, **options))
        t0 = time.perf_counter()
        targets = nbytes = 0
        for _ in range(n_batches):
            batch = next(it)
            targets += int(batch["label"].shape[0])
            nbytes += sum(v.numel() * v.element_size() for v in batch.values())
        best = min(best, time.perf_counter() - t0)
        if hasattr(it, "close"):
            it.close()
    return {"targets_per_s": targets / best, "bytes_per_target": nbytes / targets, "targets": targets, "seconds": best}


def copy_rate(block_bytes: float, *, region_bytes: int = 256 << 20, repeats: int = 3) -> float:
    """Best-of-`repeats` bytes/s of copying `block_bytes` blocks (np.copyto) taken in turn from a region of
    `region_bytes` (larger than the caches, as the loader's sources are) into one destination block."""
    block_bytes = max(1, int(block_bytes))
    n = max(2, region_bytes // block_bytes)
    src = np.ones((n, block_bytes), dtype=np.uint8)
    dst = np.empty(block_bytes, dtype=np.uint8)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(n):
            np.copyto(dst, src[i])
        best = min(best, time.perf_counter() - t0)
    return n * block_bytes / best
