"""What `recscale sweep FILE --dry-run` shows of a sweep plan (`plan.py`): each trial's counted compute
(`estimate_costs`), the wall time (`estimate_sweep`) from each distinct trial configuration's steps timed now, here
(`harness.speed.throughput.measure`), and the text (`format_plan`). The method, its assumptions (`OVERHEAD_S`,
`START_S`, `RANGE`) and its measured error: docs/sweeps.md ("Wall-time estimate and per-trial timings").
"""
from __future__ import annotations

import dataclasses
import heapq
import json
import math
import os
from collections.abc import Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

import architectures
import protocols
from core.results_layout import DATASETS_FILE
from core.typed_config import from_dict
from harness.config import TrainConfig
from harness.speed.matmul import count_cost
from protocols.schema import FeatureSpec, default_test_spec, random_batch

from .plan import SweepPlan, format_value, search_base_point, settings
from .schema import TuningSection
from .trainable import trial_threads

#: Timed steps per configuration: at least TIMED_STEPS and STEP_SECONDS of them, after WARMUP_STEPS.
TIMED_STEPS = 3
STEP_SECONDS = 0.3
WARMUP_STEPS = 2
#: Per-trial time besides training and evaluation, seen from outside the trials (demo sweeps on 2 shared
#: cores: 0.99-1.17 s, the first trial of a fresh worker ~4 s more for its imports).
OVERHEAD_S = 1.0
#: Before the first trial: Ray's start (6.2-7.5 s in those sweeps) and the prepared datasets' check (1-2 s).
START_S = 8.0
#: (low, high) factors on the point estimate: the range printed with it.
RANGE = (0.7, 2.0)
#: Training settings that do not change how long one step takes.
_STEP_NEUTRAL = ("epochs", "num_threads", "seed")


@dataclass(frozen=True)
class TrialEstimate:
    train_s: float | None
    eval_s: float | None
    overhead_s: float = OVERHEAD_S

    @property
    def total_s(self) -> float | None:
        if self.train_s is None or self.eval_s is None:
            return None
        return self.train_s + self.eval_s + self.overhead_s


@dataclass
class SweepEstimate:
    trials: dict[str, TrialEstimate]
    device: str
    slots: int
    threads: int
    wall_s: float | None
    #: (low, high) = wall_s x RANGE; None when wall_s is
    wall_range_s: tuple[float, float] | None = None
    notes: list[str] = field(default_factory=list)


def known_vocabularies(sweep: Any, sweep_dir: Any) -> dict[str, dict[str, int]]:
    """Dataset id -> vocabulary sizes, for the datasets an earlier launch of this sweep prepared whose
    artifacts are still in the sweep's prepared-data folder (read from `sweep_dir/datasets.json`)."""
    from protocols.artifact import PreparedDataset

    try:
        facts = json.loads((Path(sweep_dir) / DATASETS_FILE).read_text()).get("datasets", {})
    except (OSError, ValueError):
        return {}
    out: dict[str, dict[str, int]] = {}
    for dataset_id, fact in facts.items():
        path = Path(sweep.config.data.prepared_dir()) / str(fact.get("artifact", ""))
        with suppress(Exception):  # gone or damaged: fall back to the small log's vocabularies
            out[dataset_id] = dict(PreparedDataset.open(path).spec.vocab_sizes)
    return out


def _time_config(job: dict[str, Any]) -> tuple[float, int]:
    """(seconds per training step, steps timed) of one configuration; runs in a worker process."""
    from harness.speed.throughput import measure

    train = from_dict(TrainConfig, job["train"], prefix="train.")
    train = dataclasses.replace(train, num_threads=job["threads"], device=job["device"])
    result = measure(job["arch"], job["model"], train, steps=TIMED_STEPS, warmup=WARMUP_STEPS, flops_per_target=0.0,
                     spec=FeatureSpec(vocab_sizes=job["vocab"], history_len=job["history_len"]),
                     rate_seconds=0.0, min_seconds=STEP_SECONDS)
    return float(result["seconds_per_step"]), int(result["steps"])


def time_steps(trials: Iterable[Any], resources: Any, vocab: Mapping[str, Mapping[str, int]], slots: int, device: str,
               *, progress: bool = True) -> tuple[dict[str, float], list[str]]:
    """Seconds per training step of every distinct configuration among `trials` (of a sweep with these
    `resources`), by trial id, timed now in `slots` worker processes at a time (as the sweep runs its trials:
    the timed steps share the machine as the trials will); and notes (what was timed, what could not be)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    from harness.speed.throughput import SMALL_VOCAB

    if device == "cuda" and not torch.cuda.is_available():
        return {}, ["nothing timed: the sweep trains on CUDA and this machine has no CUDA device; run the dry "
                    "run on the GPU machine"]
    groups: dict[str, list[Any]] = {}
    jobs: dict[str, dict[str, Any]] = {}
    for t in trials:  # one job per configuration: the training settings that change a step, the known vocabulary
        job = {"arch": t.arch, "model": dict(t.model), "train": dict(t.train), "device": device,
               "threads": trial_threads(t, resources), "history_len": int(t.dataset.prepare["history_len"]),
               "vocab": dict(vocab.get(t.dataset.dataset_id) or SMALL_VOCAB)}
        key = json.dumps({**job, "train": {k: v for k, v in job["train"].items() if k not in _STEP_NEUTRAL},
                          "vocab": t.dataset.dataset_id if t.dataset.dataset_id in vocab else None},
                         sort_keys=True, default=str)
        jobs.setdefault(key, job)
        groups.setdefault(key, []).append(t)
    per_step: dict[str, float] = {}
    failed: list[str] = []
    timed = 0.0
    workers = max(1, min(slots, len(jobs)))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_time_config, job): key for key, job in jobs.items()}
        for future in tqdm(as_completed(futures), total=len(futures), desc=f"timing training steps ({workers} at "
                           "a time)", unit="config", disable=not progress):
            group = groups[futures[future]]
            try:
                seconds, steps = future.result()
            except Exception as e:  # noqa: BLE001 - one configuration that cannot run does not stop the estimate
                failed.append(f"{group[0].trial_id} ({type(e).__name__}: {e})")
                continue
            timed += seconds * steps
            per_step.update((x.trial_id, seconds) for x in group)
    guessed = sum(1 for k in jobs if json.loads(k)["vocab"] is None)
    notes = [f"{len(jobs) - len(failed)} configuration(s) timed now on {device}, {workers} at a time "
             f"({timed:.1f} s of steps; load average {os.getloadavg()[0]:.1f}) on random full-length batches"
             + (f", {guessed} with the vocabularies of `synth --scale small` (their dataset is not prepared yet)"
                if guessed else "")]
    if failed:
        notes.append(f"could not time {len(failed)} configuration(s): " + "; ".join(failed))
    return per_step, notes


def _slots(resources: Any, max_concurrent: int | None, num_cpus: int | None, device: str) -> int:
    cpus = num_cpus or os.cpu_count() or 1
    slots = max(1, int(cpus // max(resources.cpu, 1e-9)))
    if device == "cuda":
        gpus = torch.cuda.device_count()
        slots = min(slots, max(1, int(gpus // resources.gpu))) if gpus else slots
    return min(slots, max_concurrent) if max_concurrent else slots


def _makespan(durations: list[float], slots: int) -> float:
    free = [0.0] * slots  # when each slot is free next (a heap)
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def _split_sizes(trial: Any) -> tuple[int, int, int] | None:
    """The trial's dataset's (n_train, n_valid, n_test); None where one is left to the source's default."""
    sizes = tuple(trial.dataset.prepare.get(k) for k in ("n_train", "n_valid", "n_test"))
    return None if None in sizes else sizes


def trial_estimate(trial: Any, step_s: float | None) -> TrialEstimate:
    """Training, evaluation and overhead of `trial` at `step_s` seconds per training step."""
    sizes = _split_sizes(trial)
    if step_s is None or sizes is None:
        return TrialEstimate(None, None)
    n_train, n_valid, n_test = sizes
    batch = int(trial.train.get("batch_size", TrainConfig.batch_size))
    epochs = int(trial.train.get("epochs", TrainConfig.epochs))
    per_target = step_s / batch
    return TrialEstimate(math.ceil(n_train / batch) * epochs * step_s, (n_valid * epochs + n_test) * per_target / 3)


def estimate_sweep(plan: Any, *, num_cpus: int | None = None, vocab: Mapping[str, Mapping[str, int]] | None = None,
                   progress: bool = False) -> SweepEstimate:
    """Wall-time estimate of every tuning and grid trial of `plan` and of the whole sweep (module doc)."""
    cfg = plan.sweep.config
    device = "cuda" if cfg.resources.gpu > 0 else "cpu"  # the trials ask for GPUs
    slots = _slots(cfg.resources, cfg.max_concurrent, num_cpus, device)
    stages = [list(getattr(plan, "tuning_trials", [])), list(plan.trials)]
    per_step, notes = time_steps([*stages[0], *stages[1]], cfg.resources, vocab or {}, slots, device, progress=progress)
    out = {t.trial_id: trial_estimate(t, per_step.get(t.trial_id)) for s in stages for t in s}
    out.update({t.trial_id: TrialEstimate(0.0, 0.0) for t in stages[1] if plan.reuses_tuning_run(t)})  # copied
    totals = [e.total_s for e in out.values()]
    wall = None if not totals or None in totals else START_S + sum(
        _makespan([out[t.trial_id].total_s or 0.0 for t in s], slots) for s in stages if s)
    threads = max(1, int(cfg.resources.cpu))
    notes.append(f"{slots} trial(s) at a time on {device} ({threads} thread(s) each); {OVERHEAD_S:g} s overhead "
                 f"per trial and {START_S:g} s to start assumed; preparing a new dataset not included")
    return SweepEstimate(out, device, slots, threads, wall,
                         None if wall is None else (wall * RANGE[0], wall * RANGE[1]), notes)


def format_seconds(s: float | None) -> str:
    if s is None:
        return "?"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


@dataclass(frozen=True)
class TrialCost:
    flops_per_target: float | None
    targets: float | None
    params_non_embedding: int | None = None

    @property
    def total(self) -> float | None:
        if self.flops_per_target is None or self.targets is None:
            return None
        return self.flops_per_target * self.targets


def _model_cost(arch: str, model: Mapping[str, Any], history_len: int) -> tuple[float | None, int | None]:
    """(forward matrix FLOPs per target on a random batch, non-embedding parameters); None where the model
    cannot be built or counted."""
    try:
        spec = default_test_spec(history_len)
        torch.manual_seed(0)
        cost = count_cost(architectures.build(arch, spec, dict(model)), random_batch(spec, 4, min_len=history_len))
        return cost["flops_per_target"], int(cost["params_non_embedding"])
    except Exception:  # noqa: BLE001 - the estimate is best effort; the table shows "?"
        return None, None


def estimate_costs(trials: Iterable[Any]) -> dict[str, TrialCost]:
    """Trial id -> counted compute of each trial of a plan (`harness.sweep.plan.TrialPlan`): forward matrix FLOPs
    per target (on a random batch, counted once per distinct arch and model config) times the targets a run
    touches, 3 x train targets x epochs (forward + backward) plus the validation and test targets."""
    cache: dict[str, tuple[float | None, int | None]] = {}
    out: dict[str, TrialCost] = {}
    for t in trials:
        key = json.dumps([t.arch, dict(t.model)], sort_keys=True, default=str)
        if key not in cache:
            cache[key] = _model_cost(t.arch, t.model, int(t.dataset.prepare["history_len"]))
        epochs = int(t.train.get("epochs", TrainConfig.epochs))
        sizes = _split_sizes(t)
        targets = None if sizes is None else 3.0 * sizes[0] * epochs + sizes[1] + sizes[2]
        flops, params = cache[key]
        out[t.trial_id] = TrialCost(flops_per_target=flops, targets=targets, params_non_embedding=params)
    return out


def _sizes(prep: Mapping[str, Any]) -> str:
    """Target counts of a dataset for the dry-run table (unset ones are the source's defaults)."""
    values = [prep.get(k) for k in ("n_train", "n_valid", "n_test")]
    if all(v is None for v in values):
        return "the source's defaults"
    return "/".join("default" if v is None else str(v) for v in values)


def _known_flops(costs: Mapping[str, TrialCost], trials: list[Any]) -> list[float]:
    """The total FLOPs of each of `trials` whose compute is known."""
    return [c.total for t in trials if (c := costs.get(t.trial_id)) is not None and c.total is not None]


def format_plan(plan: SweepPlan, costs: Mapping[str, TrialCost], results_dir: Path,
                estimate: SweepEstimate | None = None) -> str:
    """The `--dry-run` text: datasets, trials with swept values, FLOPs and (with `estimate`) estimated wall
    time, and totals."""
    sweep = plan.sweep
    swept = [k for k in sweep.axes if k != "arch"]
    lines = [f"sweep {sweep.name!r}: {len(plan.trials)} grid trials, {len(plan.datasets)} dataset(s), "
             f"results in {results_dir}"]
    if sweep.config.search is not None:
        s = sweep.config.search
        lines.append(f"search first: {s.num_samples} Optuna trials over {', '.join(sweep.space)} "
                     f"({s.metric}, {s.mode}) at {search_base_point(sweep)}; the grid then runs at the best point")
    if plan.tuning_trials:
        tuning = cast(TuningSection, sweep.config.tuning)  # tuning trials: the sweep has a tuning section
        budget = ", ".join(f"{k} {v}" for k, v in vars(tuning.budget).items() if v is not None)
        known = _known_flops(costs, plan.tuning_trials)
        est = ""
        if estimate is not None:
            secs = [estimate.trials[x.trial_id].total_s for x in plan.tuning_trials]
            est = "" if None in secs else f", est. {format_seconds(sum(cast(list[float], secs)))} of trial time"
        lines.append(f"tuning first: {len(plan.tuning_trials)} trials = {len(settings(sweep))} setting(s) x "
                     f"{len(sweep.tuning_values)} values of {tuning.param} {sweep.tuning_values} x seeds "
                     f"{tuning.run_seeds}"
                     + (f" (budget: {budget})" if budget else "") + f", chosen on {tuning.metric}; "
                     + (f"{sum(known) / 1e9:.1f} GFLOPs" if len(known) == len(plan.tuning_trials) else "GFLOPs ?")
                     + f"{est}; the grid then runs each setting at its chosen value"
                     + (f" ({copied} grid runs of tuning seeds copy the tuning run at that value, not trained again)"
                        if (copied := sum(map(plan.reuses_tuning_run, plan.trials))) else ""))
    lines.append("")
    lines.append("datasets (each prepared once, before any trial):")
    for d in plan.datasets:
        p = d.prepare
        params = " ".join(f"{k}={format_value(p[k])}" for k in sorted(protocols.protocol_parameters(p["protocol"])))
        lines.append(f"  {d.dataset_id}  source={p['source']} protocol={p['protocol']} {params} "
                     f"n_train/valid/test={_sizes(p)}"
                     + (f" split={p['split']}" if p.get("split") else "") + f" sample_seed={p['sample_seed']}")
    lines.append("")
    header = ["trial", "arch", *swept, "dataset", "MFLOPs/target", "non-emb. params", "GFLOPs"]
    if estimate is not None:
        header += ["est. train", "est. eval", "est. total"]
    rows = []
    for t in plan.trials:
        c = costs.get(t.trial_id, TrialCost(None, None))
        row = [t.trial_id, t.arch, *(format_value(t.point[k]) if k in t.point else "-" for k in swept),
               t.dataset.dataset_id,
               "?" if c.flops_per_target is None else f"{c.flops_per_target / 1e6:.3f}",
               "?" if c.params_non_embedding is None else f"{c.params_non_embedding:,}",
               "?" if c.total is None else f"{c.total / 1e9:.1f}"]
        if estimate is not None:
            e = estimate.trials[t.trial_id]
            row += [format_seconds(e.train_s), format_seconds(e.eval_s), format_seconds(e.total_s)]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for r in [header, *rows]:
        lines.append("  " + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    everything = [*plan.tuning_trials, *plan.trials]
    known = _known_flops(costs, everything)
    lines.append("")
    lines.append(f"estimated compute: {sum(known) / 1e12:.3f} TFLOPs of counted matrix work over {len(known)} trial(s)"
                 + ("" if len(known) == len(everything) else f" ({len(everything) - len(known)} unknown: "
                    "sample sizes left to the source's defaults or model not countable)"))
    if estimate is not None:
        totals = [e.total_s for e in estimate.trials.values() if e.total_s is not None]
        per_trial = format_seconds(sum(totals) / len(totals)) if totals else "?"
        lo, hi = estimate.wall_range_s or (None, None)
        lines.append(f"estimated wall time: {format_seconds(estimate.wall_s)} (between {format_seconds(lo)} and "
                     f"{format_seconds(hi)}) for the sweep with {estimate.slots} trial(s) at a time on "
                     f"{estimate.device}, {per_trial} per trial on average (training + evaluation + overhead), "
                     "from training steps timed now on this machine")
        lines.extend(f"  {n}" for n in estimate.notes)
    res = sweep.config.resources
    lines.append(f"resources per trial: cpu={format_value(res.cpu)} gpu={format_value(res.gpu)}; max_concurrent="
                 f"{sweep.config.max_concurrent or 'as resources allow'}; max_failures={sweep.config.max_failures}")
    return "\n".join(lines)
