"""Launching a sweep through Ray Tune: datasets first, then an optional tuning stage or Optuna search, then the
grid, each stage one `tune.Tuner`, then runs.parquet and sweep_summary.json (docs/sweeps.md: the stages, "Datasets
are prepared once", "What a sweep writes", "Interruptions, failures, resume"). Ray itself is
`harness.sweep.ray_sessions`; `run_sweep` checks the address before anything is written.
"""
from __future__ import annotations

import itertools
import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import yaml
from ray import tune
from tqdm import tqdm

from core import atomic_write
from core.errors import RecscaleError, disk_full, disk_full_line, one_line
from core.results_layout import (
    METRICS_FILE,
    RAY_DIR,
    RUNS_DIR,
    SEARCH_BEST_FILE,
    SEEDS_ADDED_FILE,
    SUMMARY_FILE,
    SWEEP_FILE,
    TUNING_DIR,
    TUNING_FILE,
)
from core.typed_config import ConfigError, from_dict
from harness import runs_columns as C
from protocols.output_location import check_writable
from protocols.prepare import PrepareConfig, prepare

from . import interrupt, tuning
from .collect import collect_runs, finished_rows
from .dataset_facts import write_dataset_facts
from .interrupt import StopOnInterrupt, SweepInterrupted, catch_interrupts, watched_stage
from .plan import (
    DatasetPlan,
    SweepPlan,
    grid_points,
    plan_sweep,
    search_base_point,
    setting_id,
    trial_id_for,
    tuning_plan,
)
from .ray_sessions import RaySessionError, check_address_reachable, quiet_ray_notices, ray_session
from .schema import RoundsSection, SearchDimension, SearchSection, Sweep, parse_sweep
from .trainable import FAILS_ALIKE, GRID_POINT, TUNING_STAGE, TrialContext, read_events, run_trial

#: Trial ids of the runs the questions still open after the first k rounds need (analysis.pipeline.open_runs).
OpenRuns = Callable[[Path, int], set[str]]


class SweepError(RecscaleError):
    """The sweep cannot start or continue (existing folder, changed file, failed trials)."""


@dataclass
class SweepOutcome:
    """What a launch did: trials planned / finished / failed, and whether it was interrupted."""

    sweep_dir: Path
    planned: int
    finished: int
    failed: list[str] = field(default_factory=list)
    interrupted: bool = False
    summary: dict[str, Any] = field(default_factory=dict)
    #: tuning stage only: {"planned": n, "finished": k} (its trials are not counted in planned / finished)
    tuning: dict[str, int] | None = None

    @property
    def complete(self) -> bool:
        return self.finished >= self.planned and not self.failed and not self.interrupted


# ----------------------------------------------------------------------------------------------
# the sweep folder


#: sweep_summary.json: the cap a sequential sweep's rounds stopped at (a different cap on resume decides again).
CAP_KEY = "rounds_cap_trial_hours"


def _comparable(sweep: Sweep) -> dict[str, Any]:
    """The parts of a sweep that define its runs (the `analysis:` section and `rounds.cap_trial_hours` may
    change on resume: a raised cap lets the next round run)."""
    raw = yaml.safe_load(sweep.source_text) or {}
    raw.pop("analysis", None)
    if isinstance(raw.get("rounds"), dict):
        raw["rounds"] = {k: v for k, v in raw["rounds"].items() if k != "cap_trial_hours"}
    return raw


def added_seeds(previous: Sweep, sweep: Sweep) -> list[int]:
    """The seeds `sweep` adds to `previous`'s grid.seed, where that is their only difference outside `analysis:`
    (every finished run is then a trial of `sweep`); else []."""
    old, new = _comparable(previous), _comparable(sweep)
    before, after = (raw["grid"].pop("seed", None) if isinstance(raw.get("grid"), dict) else None for raw in (old, new))
    if old != new or not isinstance(before, list) or not isinstance(after, list) or not set(before) < set(after):
        return []
    return [s for s in after if s not in before]


def _all_finished(sweep_dir: Path, plan: SweepPlan) -> bool:
    if plan.sweep.config.tuning is not None and not (sweep_dir / TUNING_FILE).exists():
        return False
    rounds = plan.sweep.config.rounds
    if rounds is not None:  # its last launch stopped where the round rule says (_grid_rounds), at this cap
        done = _last_summary(sweep_dir)
        stopped_by_cap = "cap_trial_hours" in done.get("rounds_stopped", "")
        return "rounds_stopped" in done and not (stopped_by_cap and done.get(CAP_KEY) != rounds.cap_trial_hours)
    return all((sweep_dir / RUNS_DIR / t.trial_id / METRICS_FILE).exists() for t in plan.trials)


def _last_summary(sweep_dir: Path) -> dict[str, Any]:
    summary = sweep_dir / SUMMARY_FILE
    return json.loads(summary.read_text()) if summary.exists() else {}


def _started(sweep_dir: Path) -> bool:
    """Whether any trial of the sweep in `sweep_dir` ever started (a run folder or Ray state exists)."""
    return any(p.exists() and any(p.iterdir()) for p in (sweep_dir / RUNS_DIR, sweep_dir / RAY_DIR))


def prepare_sweep_dir(sweep: Sweep, plan: SweepPlan, results_root: Path, *, resume: bool) -> tuple[Path, bool]:
    """Create or check `results/<name>/`, store the sweep file there (atomically); returns the folder and whether
    to resume. An existing folder needs `--resume` (docs/sweeps.md), unless no trial of it ever started (no run
    folder, no Ray state: a launch that failed or was killed before its first trial), which starts again."""
    sweep_dir = (Path(results_root) / sweep.name).resolve()
    stored = sweep_dir / SWEEP_FILE
    if stored.exists():
        previous = parse_sweep(stored.read_text(), path=stored)
        added = added_seeds(previous, sweep)
        if not added and _comparable(previous) != _comparable(sweep):
            raise SweepError(f"{stored} differs from {sweep.path or 'the new sweep file'} outside `analysis:` (other "
                             "than seeds added to grid.seed); use a new `name` for a new sweep, or remove the folder "
                             "to start over")
        if added:  # Tune's saved grid holds the old points: the stage runs afresh, finished runs read back
            print(f"{sweep_dir}: seed(s) {', '.join(map(str, added))} added to grid.seed; the finished runs are kept "
                  "and the new seeds train", file=sys.stderr)
            record = sweep_dir / SEEDS_ADDED_FILE  # each extension, for the analysis's warning
            earlier = json.loads(record.read_text()) if record.exists() else []
            after = [s for s in sweep.axes["seed"] if s not in added]
            atomic_write.write_json(record, [*earlier, {"seeds": added, "after": after}], indent=1)
            shutil.rmtree(sweep_dir / RAY_DIR / "grid", ignore_errors=True)
            resume = True
        if not resume and _started(sweep_dir):
            if not _all_finished(sweep_dir, plan):
                raise SweepError(f"{sweep_dir} holds an unfinished run of sweep {sweep.name!r}; pass --resume to "
                                 "continue it (finished trials are kept) or remove the folder to start over")
            print(f"{sweep_dir}: every trial of this sweep has finished; collecting the results again", file=sys.stderr)
            resume = True
    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write.write_text(stored, sweep.source_text)
    return sweep_dir, resume


#: Prepare-setting names at the start of a word, as the prepare errors spell them.
_SETTING_RE = re.compile(r"(?<![\w.])(split\.\w+|n_(?:train|valid|test)\b)")


def log_root(sweep: Sweep) -> Path:
    """The folder of the log every dataset of this sweep is prepared from (generated if synthetic)."""
    if sweep.data_root is not None:
        return sweep.data_root
    from protocols.synthetic import DEFAULT_WORLD, generate

    data = sweep.config.data
    world = "" if data.world == DEFAULT_WORLD else f"-{data.world}"
    out = Path(data.cache) / "synthetic" / f"{data.scale}-seed{data.log_seed}{world}"
    t0 = time.perf_counter()
    generate(cast(str, data.scale), out, seed=data.log_seed, world=data.world)  # the schema requires a scale
    print(f"synthetic log ({data.scale}) ready in {out} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return out


def prepare_datasets(sweep: Sweep, datasets: Iterable[DatasetPlan]) -> dict[str, str]:
    """Dataset id -> absolute artifact path, preparing each distinct dataset once."""
    root = log_root(sweep)
    paths: dict[str, str] = {}
    for d in datasets:
        mapping = {**d.prepare, "root": str(root), "out": str(sweep.config.data.prepared_dir())}
        cfg = from_dict(PrepareConfig, mapping, prefix="data.")
        t0 = time.perf_counter()
        try:
            path = Path(prepare(cfg)).resolve()
        except RecscaleError as e:  # name the keys as the sweep file spells them (data.split..., data.n_...)
            message = _SETTING_RE.sub(r"data.\1", str(e))
            raise (ConfigError if isinstance(e, ConfigError) else RecscaleError)(
                f"dataset {d.dataset_id}: {message}") from None
        print(f"dataset {d.dataset_id} ready in {path} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        paths[d.dataset_id] = str(path)
    return paths


class TrialProgress(tune.Callback):
    """Tune callback: a tqdm bar (stderr) of finished trials, failures and retries printed above it; the bar is
    built lazily and dropped when pickled (Tune stores callbacks with the experiment state)."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self._bar = total, desc, None

    def __getstate__(self) -> dict:
        return {"total": self.total, "desc": self.desc, "_bar": None}

    def _get(self, trials: list, current: Any = None) -> Any:
        if self._bar is None:  # a restored sweep starts at the trials it had already finished
            done = sum(t.status == "TERMINATED" and t is not current for t in trials)
            self._bar = tqdm(total=self.total, initial=done, desc=self.desc, unit="trial", file=sys.stderr,
                             dynamic_ncols=True)
        return self._bar

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._get(trials, trial).update(1)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if interrupt.requested():  # StopOnInterrupt ends the stage next: end the bar's line first
            self.on_experiment_end(trials)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if FAILS_ALIKE in result:  # raised next; Tune retries while num_failures (counted then) <= max_failures
            trial.run_metadata.num_failures = trial.max_failures

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._get(trials).write(f"trial {trial} failed (worker died or raised); retrying")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        alike = " (a retry would fail alike)" if FAILS_ALIKE in (trial.last_result or {}) else ""
        self._get(trials).write(f"trial {trial} failed for good{alike}; see {trial.path}/error.txt")

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if self._bar is not None:
            self._bar.close()


def grid_trial_name(sweep: Sweep, trial: Any) -> str:
    """Tune's trial name and folder (bound to the sweep with `partial`, picklable): the grid point's trial id."""
    return trial_id_for(sweep, trial.config[GRID_POINT])


def _tune_domain(dim: SearchDimension) -> Any:
    if dim.kind == "choice":
        return tune.choice(list(dim.values or []))
    low, high = cast(float, dim.low), cast(float, dim.high)  # set for every kind but choice (schema)
    if dim.kind == "int":
        return tune.randint(int(low), int(high) + 1)  # [low, high] inclusive
    return getattr(tune, dim.kind)(low, high)  # tune.uniform, tune.loguniform


def _run_stage(ctx: TrialContext, *, resume: bool, n_trials: int, points: list[dict] | None, name: str) -> Any:
    """Run (or restore and finish) one Tune experiment, `name` (`points`: the grid points of a round); returns its
    ResultGrid."""
    sweep, cfg = ctx.sweep, ctx.sweep.config
    storage = Path(ctx.sweep_dir) / RAY_DIR
    exp_dir = storage / name
    trainable = tune.with_resources(tune.with_parameters(run_trial, context=ctx), cfg.resources.ray_request())
    if resume and tune.Tuner.can_restore(str(exp_dir)):
        damage = _state_damage(exp_dir)
        if damage is None:
            try:
                # the restored run config holds the callbacks (StopOnInterrupt among them) pickled with the experiment
                tuner = tune.Tuner.restore(str(exp_dir), trainable, resume_unfinished=True, restart_errored=True)
                return tuner.fit()
            except Exception as e:
                if disk_full(e) is not None or ctx.stage == "search":
                    raise
                damage = one_line(e)
        if ctx.stage == "search":  # its trials are Optuna's samples, which no run folder can replay
            raise SweepError(f"{exp_dir}: Ray's saved search state is unreadable ({damage}); delete {exp_dir} to "
                             "run the search again")
        print(f"{exp_dir}: Ray's saved state is unreadable ({damage}); running the {ctx.stage} stage afresh: finished "
              "trials are read back from their run folders, started ones continue from their checkpoints",
              file=sys.stderr)
        shutil.rmtree(exp_dir)

    if ctx.stage in ("grid", TUNING_STAGE):
        # one axis over the distinct grid points (plan.grid_points), so that no trial runs twice
        if points is None:
            points = grid_points(sweep) if ctx.stage == "grid" else [tp.point for tp in tuning_plan(sweep)]
        param_space = {GRID_POINT: tune.grid_search(points)}
        namer = partial(grid_trial_name, sweep)
        tune_config = tune.TuneConfig(reuse_actors=True, max_concurrent_trials=cfg.max_concurrent,
                                      trial_name_creator=namer, trial_dirname_creator=namer)
    else:  # at the first value of every grid axis (Ray's Optuna integration refuses grid axes)
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch

        s = cast(SearchSection, cfg.search)
        param_space = {**search_base_point(sweep), **{k: _tune_domain(d) for k, d in sweep.space.items()}}
        searcher = ConcurrencyLimiter(OptunaSearch(metric=s.metric, mode=s.mode, seed=s.sampler_seed),
                                      max_concurrent=cfg.max_concurrent or 1)
        tune_config = tune.TuneConfig(search_alg=searcher, metric=s.metric, mode=s.mode,
                                      num_samples=s.num_samples, reuse_actors=True)
    tracking: list[Any] = []
    if cfg.tracking == "mlflow":  # imported only then: it imports the tracker (seconds)
        from .tracking import SweepMLflowCallback

        tracking = [SweepMLflowCallback(ctx)]
    run_config = tune.RunConfig(
        name=name, storage_path=str(storage), verbose=0,
        failure_config=tune.FailureConfig(max_failures=cfg.max_failures),
        callbacks=[TrialProgress(n_trials, f"{sweep.name} {ctx.stage}"), StopOnInterrupt(), *tracking],
    )
    return tune.Tuner(trainable, param_space=param_space, tune_config=tune_config, run_config=run_config).fit()


def _state_damage(exp_dir: Path) -> str | None:
    """Why Ray's saved experiment state in `exp_dir` cannot be restored (a file cut short by a full disk or a
    kill), or None; Ray itself would log the error and go on with an empty state."""
    for path in sorted(exp_dir.glob("experiment_state-*.json")):
        try:
            json.loads(path.read_text())
        except (ValueError, OSError) as e:
            return f"{path.name}: {one_line(e)}"
    return None


def _best_point(sweep: Sweep, results: Any) -> dict[str, Any]:
    s = cast(SearchSection, sweep.config.search)  # only a search stage has a best point
    try:
        best = results.get_best_result(metric=s.metric, mode=s.mode)
    except RuntimeError as e:
        raise SweepError(f"search: no trial reported {s.metric}: {e}") from None
    return {k: best.config[k] for k in sweep.space}


def _failures(results: Any) -> list[str]:
    """One line per trial that failed for good: its folder under ray/<stage>/ and the error."""
    out = []
    for r in results:
        if r.error is not None:
            cause = getattr(r.error, "cause", None) or r.error  # a RayTaskError holds the trial's own exception
            text = one_line(cause) if isinstance(cause, RecscaleError) else f"{type(cause).__name__}: {one_line(cause)}"
            out.append(f"{Path(r.path).name}: {text} (see {r.path}/error.txt)")
    return out


@dataclass
class _StageOutcome:
    results: Any
    wall_s: float
    failed: list[str]
    interrupted: bool


def _stage(ctx: TrialContext, *, resume: bool, n_trials: int, points: list[dict] | None = None,
           name: str | None = None) -> _StageOutcome:
    """Run one stage (or round of the grid); a Ctrl-C (`.interrupt`) ends it as interrupted, with no results."""
    t0 = time.perf_counter()
    try:
        with watched_stage():
            results = _run_stage(ctx, resume=resume, n_trials=n_trials, points=points, name=name or ctx.stage)
    except SweepInterrupted:
        return _StageOutcome(None, time.perf_counter() - t0, [], True)
    full = next((r.error for r in results if r.error is not None and disk_full(r.error) is not None), None)
    if full is not None:  # every other trial would fail alike: one line, continued with --resume once freed
        raise SweepError(disk_full_line(Path(ctx.sweep_dir), "continue the sweep with --resume"))
    failed = _failures(results)
    interrupted = not failed and results.num_terminated < n_trials
    return _StageOutcome(results, time.perf_counter() - t0, failed, interrupted)


# ----------------------------------------------------------------------------------------------


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals])
    return max([0, *itertools.accumulate(step for _, step in edges)])


def _summary(sweep_dir: Path, since: float, timings: dict[str, float]) -> dict[str, Any]:
    """Timings of this launch: per trial, training, evaluation and overhead (docs/sweeps.md, "Wall-time estimate
    and per-trial timings")."""
    events = [e for e in read_events(sweep_dir) if e["time"] >= since]
    ends = [e for e in events if e["event"] == "end"]
    trained = [e for e in ends if e.get("train_loop_s") is not None]
    out: dict[str, Any] = {**{k: round(v, 3) for k, v in timings.items()}, "trials_run": len(ends),
                           "trials_trained": len(trained),
                           "trials_copied": sum(bool(e.get("copied_from")) for e in ends)}
    if trained:
        n = len(trained)
        loop = sum(e["train_loop_s"] for e in trained)
        evaluation = sum(e.get("eval_s") or 0.0 for e in trained)
        out["mean_trial_s"] = round(sum(e["trainable_s"] for e in trained) / n, 3)
        out["mean_train_run_s"] = round(sum(e["train_run_s"] for e in trained) / n, 3)
        out["mean_train_loop_s"] = round(loop / n, 3)
        out["mean_eval_s"] = round(evaluation / n, 3)
        out["overhead_in_trial_s"] = round(out["mean_trial_s"] - (loop + evaluation) / n, 3)
        slots = _max_overlap([(e["time"] - e["trainable_s"], e["time"]) for e in ends])
        stage_s = timings.get("tuning_s", 0.0) + timings.get("search_s", 0.0) + timings.get("grid_s", 0.0)
        out["trial_slots"] = slots
        out["overhead_per_trial_s"] = round((stage_s * slots - loop - evaluation) / n, 3)
    return out


def run_sweep(
    sweep: Sweep,
    *,
    results_root: Path | str = "results",
    resume: bool = False,
    address: str | None = None,
    num_cpus: int | None = None,
    verbose: bool = False,
    open_runs: OpenRuns | None = None,
) -> SweepOutcome:
    """Prepare datasets, run the tuning stage or the search (if any) and the grid (in rounds: `_grid_rounds`, which
    `open_runs` steers), collect runs.parquet (and the tuning trials' tuning/runs.parquet). Ray's token-authentication
    notice and its `Tuner.restore(...)` hint are dropped unless `verbose`."""
    t0 = time.perf_counter()
    since = time.time()
    plan: SweepPlan = plan_sweep(sweep)
    check_address_reachable(address)  # before anything is written: an unreachable cluster leaves nothing
    check_writable(Path(results_root) / sweep.name, "the sweep's results")
    root_created = not Path(results_root).exists()
    created = not (Path(results_root) / sweep.name).exists()
    sweep_dir, resume = prepare_sweep_dir(sweep, plan, Path(results_root), resume=resume)
    if resume and _all_finished(sweep_dir, plan):  # nothing to run: no Ray, timings of the last launch kept
        n, tuning_count = _collect(sweep_dir, plan)
        return SweepOutcome(sweep_dir=sweep_dir, planned=n, finished=n, summary=_last_summary(sweep_dir),
                            tuning=tuning_count)
    try:
        dataset_paths = prepare_datasets(sweep, plan.datasets)
    except RecscaleError:  # e.g. an empty split or too many targets: a new sweep folder leaves no trace
        if created:
            shutil.rmtree(sweep_dir, ignore_errors=True)
        raise
    write_dataset_facts(sweep_dir, {d.dataset_id: d.prepare for d in plan.datasets}, dataset_paths)
    timings = {"prepare_s": time.perf_counter() - t0}

    entered = False
    stage = None
    planned, rounds = len(plan.trials), dict[str, Any]()
    try:
        with catch_interrupts(), quiet_ray_notices(verbose), \
                ray_session(address, num_cpus=num_cpus, per_trial=sweep.config.resources.ray_request()):
            entered = True
            timings["ray_start_s"] = time.perf_counter() - t0 - timings["prepare_s"]
            fixed: dict[str, Any] = {}
            choice = None
            if sweep.config.tuning is not None:
                choice, stage = _tuning_stage(sweep, sweep_dir, dataset_paths, plan, resume, timings)
            if sweep.config.search is not None:
                ctx = TrialContext(sweep, str(sweep_dir), dataset_paths, stage="search")
                stage = _stage(ctx, resume=resume, n_trials=sweep.config.search.num_samples)
                timings["search_s"] = stage.wall_s
                if not (stage.failed or stage.interrupted):
                    fixed = _best_point(sweep, stage.results)
                    atomic_write.write_text(sweep_dir / SEARCH_BEST_FILE, json.dumps(fixed, indent=1) + "\n")
                    plan = plan_sweep(sweep, fixed=fixed)
            if stage is None or not (stage.failed or stage.interrupted):
                ctx = TrialContext(sweep, str(sweep_dir), dataset_paths, stage="grid", fixed=fixed, choice=choice)
                if sweep.config.rounds is None:
                    stage = _stage(ctx, resume=resume, n_trials=len(plan.trials))
                    timings["grid_s"] = stage.wall_s
                else:
                    stage, planned, rounds = _grid_rounds(ctx, resume, open_runs, timings)
    except (SweepError, RaySessionError):
        if created and not entered:  # Ray could not start or join, or the cluster is too small: no trace
            shutil.rmtree(sweep_dir, ignore_errors=True)
            if root_created:  # nor the --results root made for it (only when it is still empty)
                with suppress(OSError):
                    Path(results_root).rmdir()
        raise
    except SweepInterrupted:  # Ctrl-C while Ray started or between stages: no stage outcome to report
        stage = _StageOutcome(None, 0.0, [], True)

    finished, tuning_count = _collect(sweep_dir, plan)
    timings["total_s"] = time.perf_counter() - t0
    summary = {**_summary(sweep_dir, since, timings), **rounds}
    atomic_write.write_text(sweep_dir / SUMMARY_FILE, json.dumps(summary, indent=1) + "\n")
    return SweepOutcome(sweep_dir=sweep_dir, planned=planned, finished=finished, failed=stage.failed,
                        interrupted=stage.interrupted, summary=summary, tuning=tuning_count)


def _grid_rounds(ctx: TrialContext, resume: bool, open_runs: OpenRuns | None, timings: dict[str, float]
                 ) -> tuple[_StageOutcome, int, dict[str, Any]]:
    """The grid in rounds of seeds, steered by `open_runs` (docs/sweeps.md, "Seeds in rounds"): the last round's
    outcome, the trials planned and the rounds' record for the summary."""
    sweep, sweep_dir, rounds = ctx.sweep, Path(ctx.sweep_dir), cast(RoundsSection, ctx.sweep.config.rounds)
    points = grid_points(sweep)
    cell = {trial_id_for(sweep, p): setting_id(sweep, p) for p in points}
    cells, planned, ran = set(cell.values()), 0, []
    for k, (lo, hi) in enumerate(zip([0, *rounds.seeds], rounds.seeds), start=1):
        batch = [p for p in points if lo <= p[C.SEED] < hi and setting_id(sweep, p) in cells]
        stage = _stage(ctx, resume=resume, n_trials=len(batch), points=batch, name=f"grid-round{k}")
        timings["grid_s"] = timings.get("grid_s", 0.0) + stage.wall_s
        planned += len(batch)
        ran.append({"round": k, "seeds": hi, "cells": len(cells), "trials": len(batch)})
        if stage.failed or stage.interrupted:
            return stage, planned, {"rounds": ran}
        if k == len(rounds.seeds):
            return stage, planned, {"rounds": ran, "rounds_stopped": "last round"}
        table = collect_runs(sweep_dir)
        cells = {cell[t] for t in open_runs(sweep_dir, k) if t in cell} if open_runs is not None else cells
        wall = table.groupby(table[C.TRIAL_ID].map(cell))[C.WALL_S].mean()
        hours = (table[C.WALL_S].sum() + (rounds.seeds[k] - hi) * wall[sorted(cells)].sum()) / 3600
        stop = "every question decided" if not cells else (
            f"round {k + 1} would pass cap_trial_hours ({hours:.2g} h)"
            if rounds.cap_trial_hours is not None and hours > rounds.cap_trial_hours else "")
        print(f"{sweep.name}: round {k} done; " + (stop or f"round {k + 1}: {len(cells)} cell(s) still open"),
              file=sys.stderr)
        if stop:
            return stage, planned, {"rounds": ran, "rounds_stopped": stop, CAP_KEY: rounds.cap_trial_hours}
    raise AssertionError("unreachable: the last round returns")


def _tuning_stage(sweep: Sweep, sweep_dir: Path, dataset_paths: dict[str, str], plan: SweepPlan, resume: bool,
                  timings: dict[str, float]) -> tuple[Any, _StageOutcome | None]:
    """The tuning stage's choice, read back from tuning.json when a finished stage wrote it (resume), else
    by running (or restoring) the stage and choosing from its run folders; (None, its outcome) when it failed
    or was interrupted."""
    choice = tuning.read_choice(sweep_dir) if resume else None
    if choice is not None:
        tuning.check_matches(choice, sweep)
        return choice, None
    ctx = TrialContext(sweep, str(sweep_dir), dataset_paths, stage=TUNING_STAGE)
    stage = _stage(ctx, resume=resume, n_trials=len(plan.tuning_trials))
    timings["tuning_s"] = stage.wall_s
    if stage.failed or stage.interrupted:
        return None, stage
    choice = tuning.choose(sweep, finished_rows(sweep_dir / TUNING_DIR))
    tuning.write_choice(sweep_dir, choice)
    return choice, stage


def _collect(sweep_dir: Path, plan: SweepPlan) -> tuple[int, dict[str, int] | None]:
    """runs.parquet (and tuning/runs.parquet) rebuilt from the run folders: the grid trials finished, and the tuning
    stage's {"planned", "finished"} (None without tuning)."""
    table = collect_runs(sweep_dir)
    finished = int((table[C.STAGE] == "grid").sum()) if not table.empty else 0
    if plan.sweep.config.tuning is None:
        return finished, None
    folder = sweep_dir / TUNING_DIR  # the tuning trials' runs/ and runs.parquet
    return finished, {"planned": len(plan.tuning_trials),
                      "finished": len(collect_runs(folder)) if folder.is_dir() else 0}
