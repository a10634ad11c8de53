"""Wall-time estimate of a sweep for `recscale sweep --dry-run`.

Per trial: training time = train targets x epochs / an estimated training rate, evaluation time =
validation + test targets / (3 x that rate) (a forward pass costs about a third of a training step),
plus a fixed overhead per trial. The training rate comes from the machine's calibration
(`harness.speed.calibration`):

- the rate measured for the trial's own configuration when there is one (`harness.speed.trial_rates`:
  recorded by a finished sweep on the same dataset, else timed by `--dry-run --measure`, then scaled by
  the contention factor that sweeps here showed against such timings, when one is known);
- else `rate = u x R / (3 x F)`: F = the trial's forward FLOPs/target (counted for the table anyway), R = the
  matmul rate at the trial's thread count in the trial's compute dtype (bfloat16 when its `train.bf16`
  autocasts on this device, else float32; calibrated, else measured now, in well under a second),
  u = the counted-FLOP utilisation that `recscale bench --arch` measured for the same architecture on this
  device in the same dtype (at the same thread count when there is one), else the median over every
  architecture measured here in that dtype, else ASSUMED_UTILISATION;
- the rate is capped by the calibrated loader rate at the trial's history length when there is one
  (training reads batches through the prefetching loader, so the slower of the two sets the pace);
- the overhead per trial is the one the last sweep on this machine measured (recorded in the calibration
  by the launcher): seen from outside the trials (Ray's scheduling and start-up included) where recorded,
  else inside them, else ASSUMED_OVERHEAD_S.

A sweep with a tuning stage estimates its tuning trials the same way; the stage runs before the grid, so
the sweep's wall time is the two stages' one after the other.

The sweep's wall time packs the trials, in plan order, onto the concurrent slots (CPUs / resources.cpu,
or GPUs / resources.gpu, capped by max_concurrent), each trial starting when a slot frees, and adds Ray's
start-up as the last sweep here measured it (else ASSUMED_RAY_START_S). Trials that share a GPU (a
fraction) are assumed to share its throughput, not add to it. Preparing datasets is not included. Every
assumption made is listed with the estimate.

The calibration is this machine's and this code's (`harness.speed.calibration.machine_key`). The estimate is
calibrated when every trial's rate was measured for its own configuration (by a sweep, or by `--measure`
with the contention factor known) and a sweep measured the overhead and Ray's start-up. Otherwise it is
uncalibrated, says why, and gives a range instead of one number: each trial's time spread by the factors
of RATE_SPREAD for where its rate came from, the overhead over OVERHEAD_RANGE_S, Ray's start over
RAY_START_RANGE_S (`SweepEstimate.wall_range_s`).
"""
from __future__ import annotations

import heapq
import os
import statistics
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from harness.config import TrainConfig

from . import calibration, matmul, trial_rates
from .trial_rates import sweep_device, trial_threads_bf16

#: Counted-FLOP utilisation assumed when nothing was measured on this machine (CPU training steps of
#: small models measured here lie around 0.05-0.3).
ASSUMED_UTILISATION = 0.1
#: Per-trial overhead (model build, FLOP count, start-up, writing) assumed when no sweep measured it here.
ASSUMED_OVERHEAD_S = 2.0
#: Ray's start-up before the first trial, assumed when no sweep measured it here.
ASSUMED_RAY_START_S = 5.0
#: (low, high) factors on an uncalibrated trial's training and evaluation time, by where its rate came from.
#: `timed alone`: `--measure` without a contention factor (the demo's sweep rates were 0.56-0.94 of the
#: timed-alone ones, two trials at a time); `bench of this architecture`: the utilisation `recscale bench`
#: measured for the same architecture at another size (WHALE: 0.31-0.39 in bench, 0.011-0.090 in the demo);
#: `bench of other architectures`, `assumed utilisation`: their median, or 0.1, against the 0.011-0.39 measured here.
RATE_SPREAD: dict[str, tuple[float, float]] = {
    "timed alone": (1.0, 2.5),
    "bench of this architecture": (0.5, 4.0),
    "bench of other architectures": (0.3, 9.0),
    "assumed utilisation": (0.25, 10.0),
}
#: Per-trial overhead range when no sweep measured it here (0.44-9.4 s measured on 2-core machines).
OVERHEAD_RANGE_S = (0.5, 10.0)
#: Ray start-up range when no sweep measured it here (2-10 s measured on 2 shared cores).
RAY_START_RANGE_S = (2.0, 15.0)


@dataclass(frozen=True)
class TrialEstimate:
    train_s: float | None
    eval_s: float | None
    overhead_s: float
    #: (low, high) factors on training + evaluation time; (1, 1) when the rate is calibrated
    spread: tuple[float, float] = (1.0, 1.0)
    #: (low, high) overhead; None when measured
    overhead_range_s: tuple[float, float] | None = None

    @property
    def total_s(self) -> float | None:
        if self.train_s is None or self.eval_s is None:
            return None
        return self.train_s + self.eval_s + self.overhead_s

    def total_range_s(self) -> tuple[float, float] | None:
        if self.train_s is None or self.eval_s is None:
            return None
        work = self.train_s + self.eval_s
        lo, hi = self.overhead_range_s or (self.overhead_s, self.overhead_s)
        return work * self.spread[0] + lo, work * self.spread[1] + hi


@dataclass
class SweepEstimate:
    trials: dict[str, TrialEstimate]
    device: str
    slots: int
    threads: int
    wall_s: float | None
    assumptions: list[str] = field(default_factory=list)
    #: why the estimate is uncalibrated (empty: calibrated)
    uncalibrated: list[str] = field(default_factory=list)
    #: (low, high) wall time when uncalibrated, else None
    wall_range_s: tuple[float, float] | None = None

    @property
    def calibrated(self) -> bool:
        return not self.uncalibrated


def _matmul_rate(device: str, threads: int, bf16: bool, cal: Mapping[str, Any], notes: list[str]) -> float | None:
    key = calibration.matmul_key(device, threads, bf16)
    if key in cal.get("matmul", {}):
        return float(cal["matmul"][key])
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return None
    dtype = matmul.compute_dtype(bf16)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rate = matmul.matmul_rate(torch.device(device), dtype)
    finally:
        torch.set_num_threads(before)
    notes.append(f"{str(dtype).removeprefix('torch.')} matmul rate on {device} with {threads} thread(s) measured "
                 f"now: {rate / 1e9:.0f} GFLOP/s (load average {os.getloadavg()[0]:.1f})")
    return rate


def _utilisation(arch: str, device: str, threads: int, bf16: bool, cal: Mapping[str, Any], notes: list[str],
                 said: set[str]) -> tuple[float, str]:
    """(utilisation, its source: a RATE_SPREAD key)."""
    train = {k: v for k, v in cal.get("train", {}).items() if calibration.is_bf16_key(k) == bf16}
    exact = train.get(calibration.train_key(arch, device, threads, bf16))
    same_arch = [v for k, v in train.items() if k.startswith(f"{arch}/{device}/")]
    if exact or same_arch:
        return float((exact or same_arch[0])["utilisation"]), "bench of this architecture"
    kind = "bf16 " if bf16 else ""
    everything = [float(v["utilisation"]) for k, v in train.items() if f"/{device}/" in k]
    if everything:
        u, source = statistics.median(everything), "bench of other architectures"
        if arch not in said:
            notes.append(f"{arch}: no {kind}`recscale bench --arch {arch}` here; utilisation {u:.3f} assumed "
                         f"(median of {len(everything)} architecture(s) measured on this {device})")
    else:
        source = "assumed utilisation"
        u = ASSUMED_UTILISATION
        if arch not in said:
            notes.append(f"{arch}: nothing {kind}measured on this {device}; utilisation {u} assumed "
                         f"(run `recscale bench --arch {arch}` to calibrate)")
    said.add(arch)
    return u, source


def _slots(resources: Any, max_concurrent: int | None, num_cpus: int | None, device: str) -> int:
    cpus = num_cpus or os.cpu_count() or 1
    slots = max(1, int(cpus // max(resources.cpu, 1e-9)))
    if device == "cuda":
        import torch

        gpus = torch.cuda.device_count()
        slots = min(slots, max(1, int(gpus // resources.gpu))) if gpus else slots
    return min(slots, max_concurrent) if max_concurrent else slots


def _makespan(durations: list[float], slots: int) -> float:
    free = [0.0] * slots
    heapq.heapify(free)
    end = 0.0
    for d in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + d)
        end = max(end, start + d)
    return end


def estimate_sweep(plan: Any, costs: Mapping[str, Any], *, num_cpus: int | None = None) -> SweepEstimate:
    """Wall-time estimate of every tuning and grid trial of `plan` and of the whole sweep (see the module doc)."""
    cfg = plan.sweep.config
    device = sweep_device(cfg.resources)
    cal = calibration.entry(device)
    notes: list[str] = []
    said: set[str] = set()
    threads = max(1, int(cfg.resources.cpu))
    slots = _slots(cfg.resources, cfg.max_concurrent, num_cpus, device)
    share = 1.0
    if device == "cuda" and 0 < cfg.resources.gpu < 1:
        share = 1.0 / max(1, int(1 // cfg.resources.gpu))
        notes.append(f"{int(1 // cfg.resources.gpu)} trials share a GPU and its throughput "
                     "(no gain from packing assumed)")
    measured_overhead = cal.get("sweep", {})
    uncalibrated: list[str] = []
    kind = next((k for k in ("overhead_per_trial_s", "overhead_in_trial_s") if k in measured_overhead), None)
    overhead_range = None
    if kind is None:
        overhead, overhead_range = ASSUMED_OVERHEAD_S, OVERHEAD_RANGE_S
        notes.append(f"overhead per trial {overhead:.1f} s assumed, {overhead_range[0]:g}-{overhead_range[1]:g} s "
                     "in the range (no sweep of this code has measured it on this machine yet)")
        uncalibrated.append("no sweep of this code has run on this machine (per-trial overhead, Ray's start)")
    else:
        overhead = float(measured_overhead[kind]["value"])
        where = "seen from outside the trials, Ray's scheduling included" if kind == "overhead_per_trial_s" \
            else "inside the trials"
        notes.append(f"overhead per trial {overhead:.2f} s, as the last sweep here measured it ({where})")
    rates: dict[tuple[int, bool], float | None] = {}
    out: dict[str, TrialEstimate] = {}
    loader = cal.get("loader", {})
    from_config: Counter[str] = Counter()
    unmeasured: Counter[str] = Counter()
    contention = trial_rates.contention_factor(cal, slots)
    stages = [list(getattr(plan, "tuning_trials", [])), list(plan.trials)]
    n_trials = sum(len(s) for s in stages)
    for t in [*stages[0], *stages[1]]:
        c = costs.get(t.trial_id)
        threads_t, bf16 = trial_threads_bf16(t, cfg.resources)
        prep = t.dataset.prepare
        sizes = (prep.get("n_train"), prep.get("n_valid"), prep.get("n_test"))
        measured = trial_rates.lookup(cal, t, device, threads_t, bf16)
        spread = (1.0, 1.0)
        if measured and None not in sizes:
            from_sweep = str(measured.get("source", "")).startswith("sweep")
            train_rate = float(measured["targets_per_s"]) * (1.0 if from_sweep else share)
            if not from_sweep and contention is not None:
                train_rate *= contention[0]
            elif not from_sweep:
                spread = RATE_SPREAD["timed alone"]
                unmeasured["timed alone, no contention factor known"] += 1
            from_config[measured.get("source", "?")] += 1
        else:
            if (threads_t, bf16) not in rates:
                rates[threads_t, bf16] = _matmul_rate(device, threads_t, bf16, cal, notes)
            rate = rates[threads_t, bf16]
            if rate is None or c is None or c.flops_per_target in (None, 0) or None in sizes:
                out[t.trial_id] = TrialEstimate(None, None, overhead)
                continue
            u, source = _utilisation(t.arch, device, threads_t, bf16, cal, notes, said)
            spread = RATE_SPREAD[source]
            unmeasured[f"rate from {source}"] += 1
            train_rate = u * rate / (3.0 * c.flops_per_target) * share
        batch = int(t.train.get("batch_size", TrainConfig.batch_size))
        load = loader.get(calibration.loader_key(prep["history_len"], batch, device))
        if load:
            train_rate = min(train_rate, float(load["targets_per_s"]))
        epochs = int(t.train.get("epochs", TrainConfig.epochs))
        out[t.trial_id] = TrialEstimate(sizes[0] * epochs / train_rate, (sizes[1] + sizes[2]) / (3.0 * train_rate),
                                        overhead, spread, overhead_range)
    for source, n in sorted(from_config.items()):
        notes.append(f"{n} trial(s) at the training rate measured for their own configuration ({source})")
    if contention is not None and from_config.get("dry-run --measure"):
        notes.append(f"rates timed alone scaled by {contention[0]:.2f}: the median ratio of sweep-recorded to "
                     f"timed-alone rates of {contention[1]} configuration(s) run {slots} at a time here")
    if device == "cuda" and rates and all(r is None for r in rates.values()):
        notes.append("no CUDA device here and no GPU calibration for this machine: run `recscale bench --arch NAME` "
                     "on the GPU machine, then --dry-run there")
    for what, n in sorted(unmeasured.items()):
        uncalibrated.append(f"{n} of {n_trials} trial(s) without a rate measured for their configuration "
                            f"({what})")
    ray_start = measured_overhead.get("ray_start_s")
    ray_range = None
    if ray_start is None:
        ray_start_s, ray_range = ASSUMED_RAY_START_S, RAY_START_RANGE_S
        notes.append(f"Ray's start-up {ray_start_s:.0f} s assumed, {ray_range[0]:g}-{ray_range[1]:g} s in the range")
    else:
        ray_start_s = float(ray_start["value"])
        notes.append(f"Ray's start-up {ray_start_s:.1f} s, as the last sweep here measured it")
    totals = [e.total_s for e in out.values()]
    wall = wall_range = None
    if totals and None not in totals:
        per_stage = [[out[t.trial_id] for t in s] for s in stages if s]  # tuning, then the grid
        # every total is known here, so every range is too
        wall = sum(_makespan(cast(list[float], [e.total_s for e in s]), slots) for s in per_stage) + ray_start_s
        if uncalibrated:
            lo, hi = ray_range or (ray_start_s, ray_start_s)
            ranges = [[cast(tuple[float, float], e.total_range_s()) for e in s] for s in per_stage]
            wall_range = (sum(_makespan([r[0] for r in s], slots) for s in ranges) + lo,
                          sum(_makespan([r[1] for r in s], slots) for s in ranges) + hi)
    notes.append(f"{slots} trial(s) at a time on {device} ({threads} thread(s) each"
                 + (f", gpu share {cfg.resources.gpu}" if device == "cuda" else "")
                 + "); dataset preparation not included")
    return SweepEstimate(out, device, slots, threads, wall, notes, uncalibrated, wall_range)


def format_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
