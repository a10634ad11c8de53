"""Training rates of a sweep's own trial configurations, for the wall-time estimate of `--dry-run`.

A counted-FLOP utilisation measured at one size of a model does not carry to another: on a 2-core
machine WHALE's seed configuration reached 0.31-0.39 in `recscale bench`, while in the demo sweep WHALE
reached 0.011 at width 4 and 0.090 at width 16 (medians over seeds, 2026-12-03): small models spend their
steps in the optimiser over the embedding tables and in per-operator overhead. So the
estimate prefers a rate measured for the trial's own configuration, from one of two sources, both kept in
the machine's calibration (`harness.speed.calibration`, section `trial_rate`):

- a finished sweep records, per configuration and dataset, the median training targets/s of its trials
  (`record_sweep_rates`: real batches and vocabularies, and the concurrency the sweep ran with);
- `recscale sweep FILE --dry-run --measure` times a few training steps of every distinct configuration
  now (`measure_plan_rates`), on random full-length batches with the vocabularies of the sweep's prepared
  dataset when it already exists, else those of `synth --scale small` (said so). Such a rate is measured
  alone; once some configuration has both kinds of rate, the estimate scales timed-alone rates by their
  median ratio (`contention_factor`), the slowdown of running as many trials at a time as the sweep does.

A configuration is the architecture, its model settings, history length, the training settings that
change a step (all but `epochs`, `num_threads` and `seed`), the device, the thread count and the compute
dtype (`sweep_device`, `trial_threads_bf16`: what a trial trains on, the same for the trainable and for the
estimate); a sweep-recorded rate also names the dataset.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from core.results_layout import DATASETS_FILE
from core.typed_config import from_dict
from harness.config import TrainConfig

from . import calibration

SECTION = "trial_rate"
#: Training settings that do not change how long one step takes.
_STEP_NEUTRAL = ("epochs", "num_threads", "seed")
#: Timed steps (after warm-up ones) per configuration in `measure_plan_rates`: at least MEASURE_STEPS,
#: and more until they take MEASURE_SECONDS (a small model's 10 steps take ~0.1 s, too short to time well).
MEASURE_STEPS = 10
MEASURE_SECONDS = 1.0
MEASURE_WARMUP = 3


def rate_key(trial: Any, device: str, threads: int, bf16: bool, *, dataset: bool) -> str:
    """Calibration key of `trial`'s configuration (a `plan.TrialPlan`), with its dataset id when `dataset`."""
    settings = {
        "arch": trial.arch, "model": dict(trial.model), "history_len": int(trial.dataset.prepare["history_len"]),
        "train": {k: v for k, v in dict(trial.train).items() if k not in _STEP_NEUTRAL},
    }
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]
    key = f"{trial.arch}/{device}/{threads}/{digest}"
    if dataset:
        key += f"/{trial.dataset.dataset_id}"
    return key + ("/bf16" if bf16 else "")


def lookup(cal: Mapping[str, Any], trial: Any, device: str, threads: int, bf16: bool) -> dict[str, Any] | None:
    """The recorded rate of `trial`'s configuration: the one a sweep measured on its dataset, else one
    `--dry-run --measure` measured; None when neither is there."""
    rates = cal.get(SECTION, {})
    return (rates.get(rate_key(trial, device, threads, bf16, dataset=True))
            or rates.get(rate_key(trial, device, threads, bf16, dataset=False)))


def contention_factor(cal: Mapping[str, Any], slots: int) -> tuple[float, int] | None:
    """(median ratio of sweep-recorded to `--measure`-timed rates, configurations compared) over the
    configurations that have both, from sweeps that ran `slots` trials at a time; None when there are none.

    A timed configuration runs alone; in a sweep, concurrent trials share the machine (memory bandwidth,
    their loader threads), so measured-alone rates are optimistic by about this factor."""
    rates = cal.get(SECTION, {})
    ratios = []
    for key, value in rates.items():
        if not str(value.get("source", "")).startswith("sweep") or value.get("concurrent_trials") != slots:
            continue
        alone = rates.get("/".join(key.split("/")[:4]) + ("/bf16" if calibration.is_bf16_key(key) else ""))
        if alone and alone.get("source") == "dry-run --measure" and alone.get("targets_per_s"):
            ratios.append(float(value["targets_per_s"]) / float(alone["targets_per_s"]))
    return (statistics.median(ratios), len(ratios)) if ratios else None


def record_sweep_rates(device: str, sweep_name: str, ends: Iterable[Mapping[str, Any]], slots: int) -> int:
    """Store the median training rate of every configuration among finished trials' end events (those
    carrying `rate_key` and `train_targets_per_s`); returns how many configurations were stored."""
    by_key: dict[str, list[float]] = defaultdict(list)
    for e in ends:
        rate = e.get("train_targets_per_s")
        if e.get("rate_key") and isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0:
            by_key[e["rate_key"]].append(float(rate))
    for key, values in by_key.items():
        calibration.record(device, SECTION, key, {
            "targets_per_s": statistics.median(values), "source": f"sweep {sweep_name}",
            "trials": len(values), "concurrent_trials": slots})
    return len(by_key)


def _uses_bf16(train: Mapping[str, Any], device: str) -> bool:
    """Whether a trial with these train settings autocasts to bfloat16 on `device`."""
    import torch

    return TrainConfig(bf16=train.get("bf16", TrainConfig.bf16)).use_bf16(torch.device(device))


def sweep_device(resources: Any) -> str:
    """The device kind a sweep's trials train on: "cuda" when they ask for GPUs, else "cpu"."""
    return "cuda" if resources.gpu > 0 else "cpu"


def trial_threads_bf16(trial: Any, resources: Any) -> tuple[int, bool]:
    """(torch threads, bfloat16 autocast) a trial trains with: its `train.num_threads`, else the
    sweep's CPUs per trial (as the trainable sets it), and its `train.bf16` on the sweep's device."""
    threads = int(trial.train.get("num_threads") or max(1, int(resources.cpu)))
    return threads, _uses_bf16(trial.train, sweep_device(resources))


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
        try:
            out[dataset_id] = dict(PreparedDataset.open(path).spec.vocab_sizes)
        except Exception:  # noqa: BLE001 - gone or damaged: fall back to the small log's vocabularies
            continue
    return out


def _spec_for(trial: Any, vocab: Mapping[str, Mapping[str, int]]) -> tuple[Any, bool]:
    from protocols.schema import FeatureSpec

    from .throughput import SMALL_VOCAB

    found = vocab.get(trial.dataset.dataset_id)
    return FeatureSpec(vocab_sizes=dict(found or SMALL_VOCAB),
                       history_len=int(trial.dataset.prepare["history_len"])), found is not None


def measure_plan_rates(trials: Iterable[Any], resources: Any, flops_of: Mapping[str, float | None],
                       vocab: Mapping[str, Mapping[str, int]], *, progress: bool = True) -> list[str]:
    """Time every distinct configuration among `trials` (of a sweep with these `resources`) now and store
    its rate (dataset-free key). `flops_of`: per trial id. Returns notes for the estimate's assumptions."""
    import torch
    from tqdm import tqdm

    from .throughput import measure

    device = sweep_device(resources)
    if device == "cuda" and not torch.cuda.is_available():
        return ["--measure timed nothing: the sweep trains on CUDA and this machine has no CUDA device"]
    todo: dict[str, tuple[Any, int]] = {}
    for t in trials:
        threads, bf16 = trial_threads_bf16(t, resources)
        todo.setdefault(rate_key(t, device, threads, bf16, dataset=False), (t, threads))
    before = torch.get_num_threads()
    guessed = 0
    failed: list[str] = []
    try:
        for key, (t, threads) in tqdm(todo.items(), desc="measuring trial configurations", unit="config",
                                      disable=not progress):
            spec, known = _spec_for(t, vocab)
            guessed += not known
            train = from_dict(TrainConfig, dict(t.train), prefix="train.")
            train = dataclasses.replace(train, num_threads=threads, device=device)  # type: ignore[arg-type]  # sweep_device(): cpu or cuda
            try:
                result = measure(t.arch, dict(t.model), train, spec=spec, steps=MEASURE_STEPS, warmup=MEASURE_WARMUP,
                                 flops_per_target=flops_of.get(t.trial_id), rate_seconds=0.0,
                                 min_seconds=MEASURE_SECONDS)
            except Exception as e:  # noqa: BLE001 - one configuration that cannot run does not stop the estimate
                failed.append(f"{t.trial_id} ({type(e).__name__}: {e})")
                continue
            calibration.record(device, SECTION, key, {
                "targets_per_s": result["targets_per_s"], "source": "dry-run --measure",
                "vocabulary": "dataset" if known else "synth small", "steps": result["steps"]})
    finally:
        torch.set_num_threads(before)
    notes = [f"{len(todo) - len(failed)} configuration(s) timed now (at least {MEASURE_STEPS} steps and "
             f"{MEASURE_SECONDS:g} s each, on random full-length batches, one at a time: concurrent trials run slower)"]
    if failed:
        notes.append(f"could not time {len(failed)} configuration(s), estimated without their own rate: "
                     + "; ".join(failed))
    if guessed:
        notes.append(f"{guessed} of them with the vocabularies of `synth --scale small` (their dataset is not "
                     "prepared yet): embedding-heavy steps on larger vocabularies take longer")
    return notes
