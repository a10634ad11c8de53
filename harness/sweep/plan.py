"""Expanding a validated sweep into trials and the distinct datasets they need (the grid, scoped model axes and
the tuning trials: docs/sweeps.md). A grid point is a mapping axis -> value (`{"arch": "whale", "seed": 1,
"model.dim": 32}`); the same function (`resolve_trial`) turns it into a run description for `--dry-run`, for
Ray's trial folder names and inside the trainable, so the table a user sees is exactly what runs.
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness import runs_columns as C
from protocols.prepare import DEFAULT_TASK

from .schema import BUNDLE_AXES, Sweep, grid_points, point_settings, prepare_settings, section_settings, trial_model

#: Dataset ids hash the dataset's settings. They were first computed when every dataset carried
#: `delay_s`, pinned to 60 s where its protocol has no delay (author50); a dataset whose protocol has no
#: `delay_s` hashes that value still, so the ids of existing sweeps stay the same.
_ID_PINNED: dict[str, Any] = {C.DELAY_S: 60.0}
#: Settings hashed into dataset ids under their first name (data.seed was renamed data.sample_seed), so the
#: ids of existing sweeps stay the same.
_ID_NAMES: dict[str, str] = {"sample_seed": "seed"}
#: Characters allowed in a trial id (it is a folder name).
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class DatasetPlan:
    """One distinct prepared dataset: its PrepareConfig settings except `root` and `out` (filled in by
    `datasets.prepare_datasets`), with the protocol parameters resolved; `dataset_id` hashes them."""

    dataset_id: str
    prepare: Mapping[str, Any]


@dataclass(frozen=True)
class TrialPlan:
    """One run of the sweep (everything `train_run` needs except the prepared dataset's path)."""

    trial_id: str
    stage: str  # "grid", "search" or "tuning"
    arch: str
    seed: int
    point: Mapping[str, Any]
    dataset: DatasetPlan
    model: Mapping[str, Any]
    #: `model` validated into the architecture's config dataclass (once per distinct config: `Sweep.model_config`)
    model_config: Any
    train: Mapping[str, Any]
    #: the key a tuning stage chose for this (measurement) trial's setting, e.g. "train.lr"; None otherwise
    tuned: str | None = None
    round: int | None = None  # its round of seeds (sweeps with `rounds:`, grid trials)

    def record(self) -> dict[str, Any]:
        """Config columns of this trial for runs.parquet / the dry-run table."""
        prep = self.dataset.prepare
        # every registered protocol's parameters are columns (None where this dataset's protocol has none)
        row: dict[str, Any] = {
            C.TRIAL_ID: self.trial_id, C.STAGE: self.stage, C.ARCH: self.arch, C.SEED: self.seed,
            C.PROTOCOL: prep["protocol"],
            **{p: prep.get(p) for p in C.protocol_parameter_columns()},
            C.TASK: prep.get("task", DEFAULT_TASK),
            C.DATASET_ID: self.dataset.dataset_id,
        }
        # a scalar data axis beyond the plain columns above (e.g. `data.n_train`) gets its own column
        row.update({k: prep.get(k[len(C.DATA_PREFIX):]) for k in self.point
                    if k.startswith(C.DATA_PREFIX) and k[len(C.DATA_PREFIX):] not in C.data_setting_columns()})
        row.update({f"{C.MODEL_PREFIX}{k}": v for k, v in self.model.items() if k != C.HISTORY_LEN})
        row.update({f"{C.TRAIN_PREFIX}{k}": v for k, v in self.train.items()})
        if self.train.get("tasks"):  # a multi-task run: its task names; `task` names task 0 (docs/tasks.md)
            names = [t if isinstance(t, str) else t["name"] for t in self.train["tasks"]]
            row[C.TASK], row[C.TASKS] = names[0], ",".join(names)
        for axis in BUNDLE_AXES:
            value = self.point.get(axis)
            if isinstance(value, Mapping) and "name" in value:
                row[f"{axis}.name"] = value["name"]  # C.DATA_NAME for the data bundle
        if self.tuned is not None:  # only sweeps with a tuning stage have the column
            row[C.TUNED] = self.tuned
        if self.round is not None:
            row[C.ROUND] = self.round
        return row


@dataclass
class SweepPlan:
    """All grid trials of a sweep, its tuning trials (run first) and the datasets they use (search trials
    are drawn by Optuna)."""

    sweep: Sweep
    trials: list[TrialPlan]
    datasets: list[DatasetPlan] = field(default_factory=list)
    tuning_trials: list[TrialPlan] = field(default_factory=list)

    def reuses_tuning_run(self, trial: TrialPlan) -> bool:
        """Whether grid trial `trial` will reuse a tuning run (`tuning_twin`) whichever value is chosen."""
        return bool(self.tuning_trials) and tuning_twin(self.sweep, trial, self.sweep.tuning_values[0]) is not None


# ----------------------------------------------------------------------------------------------


def dataset_for(sweep: Sweep, point: Mapping[str, Any]) -> DatasetPlan:
    """The dataset a grid point needs (its settings: `schema.prepare_settings`), with its hashed id."""
    prep = prepare_settings(sweep.config, point_settings(point))
    hashed = {**{k: v for k, v in _ID_PINNED.items() if k not in prep},
              **{_ID_NAMES.get(k, k): v for k, v in prep.items()}}
    digest = hashlib.sha1(json.dumps(hashed, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return DatasetPlan(dataset_id=f"d-{digest}", prepare=prep)


def format_value(value: Any) -> str:
    """A swept value as trial ids and the dry-run table print it: a bundle by its name (else its fields), a list
    joined by "x", a whole float as an int, characters unsafe in a folder name replaced by "_"."""
    if isinstance(value, Mapping):  # a bundle value: its name, else its fields
        if "name" in value:
            return format_value(value["name"])
        return "_".join(f"{k}{format_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):  # e.g. retained tokens [16, 8] -> 16x8
        return "x".join(format_value(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return _UNSAFE.sub("_", str(value))


def trial_id_for(sweep: Sweep, point: Mapping[str, Any]) -> str:
    """Readable, deterministic trial id, e.g. `whale-seed1-dim32-delay_s0` (a folder name)."""
    return "-".join(_id_parts(sweep, point))


def setting_id(sweep: Sweep, point: Mapping[str, Any]) -> str:
    """The trial id without its seed part (`whale-dim32-delay_s0`): one per setting the tuning stage chooses for."""
    parts = _id_parts(sweep, point)
    return "-".join(parts[:1] + parts[2:])


def _id_parts(sweep: Sweep, point: Mapping[str, Any]) -> list[str]:
    """The trial id's parts: architecture, `seed<s>`, then each other axis value."""
    parts = [format_value(point[C.ARCH]), f"seed{format_value(point.get(C.SEED, sweep.config.seed))}"]
    others = [k for k in point if k not in (C.ARCH, C.SEED)]
    short = [k.rsplit(".", 1)[1] if "." in k else k for k in others]  # model.helix.dim -> dim
    for key, label in zip(others, short):
        if short.count(label) > 1:
            label = key.replace(".", "_")
        if key in BUNDLE_AXES:
            label = ""  # the bundle's name (or its fields) says enough
        parts.append(f"{label}{format_value(point[key])}")
    return parts


def resolve_trial(
    sweep: Sweep,
    point: Mapping[str, Any],
    *,
    stage: str = "grid",
    trial_id: str | None = None,
    fixed: Mapping[str, Any] | None = None,
    tuned: str | None = None,
) -> TrialPlan:
    """Turn a grid point (plus `fixed` model./train. values, e.g. a search's best point) into a trial (its model
    fields: `schema.trial_model`); `tuned` marks the key a tuning stage chose (in `fixed`)."""
    cfg = sweep.config
    arch = str(point[C.ARCH])
    seed = int(point.get(C.SEED, cfg.seed))
    settings = {**(fixed or {}), **point_settings(point)}
    train = {**cfg.train, **section_settings(settings, "train")}
    dataset = dataset_for(sweep, point)
    model = trial_model(cfg, arch, settings, dataset.prepare["history_len"])
    return TrialPlan(
        trial_id=trial_id or trial_id_for(sweep, point), stage=stage, arch=arch, seed=seed,
        point=dict(point), dataset=dataset, model=model, model_config=sweep.model_config(arch, model), train=train,
        tuned=tuned, round=cfg.rounds.round_of(seed) if cfg.rounds is not None and stage == "grid" else None,
    )


def plan_sweep(sweep: Sweep, *, fixed: Mapping[str, Any] | None = None) -> SweepPlan:
    """Every grid trial and the distinct datasets (in first-use order)."""
    trials = [resolve_trial(sweep, p, fixed=fixed) for p in grid_points(sweep)]
    ids = [t.trial_id for t in trials]
    if len(set(ids)) != len(ids):  # cannot happen with distinct axis values; guard the folder layout
        raise AssertionError(f"duplicate trial ids in {ids}")
    tuning = [resolve_trial(sweep, tp.point, stage="tuning") for tp in tuning_plan(sweep)]
    datasets = list({t.dataset.dataset_id: t.dataset for t in [*tuning, *trials]}.values())
    if sweep.config.search is not None:
        search_ds = dataset_for(sweep, search_base_point(sweep))
        if search_ds.dataset_id not in {d.dataset_id for d in datasets}:
            datasets.insert(0, search_ds)
    return SweepPlan(sweep=sweep, trials=trials, datasets=datasets, tuning_trials=tuning)


def settings(sweep: Sweep) -> dict[str, dict[str, Any]]:
    """The distinct settings of the grid, in grid order: setting id -> its grid point without `seed`."""
    out: dict[str, dict[str, Any]] = {}
    for point in grid_points(sweep):
        setting = {k: v for k, v in point.items() if k != "seed"}
        out.setdefault(setting_id(sweep, point), setting)
    return out


@dataclass(frozen=True)
class TuningPoint:
    """One tuning trial: its setting (`setting_id`), tuning seed, value of the tuned key and grid point."""

    setting: str
    seed: int
    value: float
    point: dict[str, Any]


def tuning_plan(sweep: Sweep) -> list[TuningPoint]:
    """The tuning stage's trials (none without `tuning:`): per setting, tuning seed and value of the tuned key,
    the setting with that seed, the value (`train.lr: 0.001`) and the budget (`train.epochs`, a fraction of
    `data.n_train`). Their trial ids end in the value and budget (`wukong-seed0-dim8-lr0.001`)."""
    t = sweep.config.tuning
    if t is None:
        return []
    out = []
    for sid, setting in settings(sweep).items():
        budget: dict[str, Any] = {}
        if t.budget.epochs is not None:
            budget["train.epochs"] = t.budget.epochs
        if t.budget.n_train_fraction is not None:
            n = dataset_for(sweep, setting).prepare["n_train"]  # a count: checked at load
            budget["data.n_train"] = max(1, round(n * t.budget.n_train_fraction))
        for seed in t.run_seeds:
            for value in sweep.tuning_values:
                point = {"arch": setting["arch"], "seed": seed, **{k: v for k, v in setting.items() if k != "arch"},
                         t.param: value, **budget}
                out.append(TuningPoint(sid, seed, value, point))
    return out


def tuning_twin(sweep: Sweep, trial: TrialPlan, value: float | None = None) -> TrialPlan | None:
    """The tuning trial that trains exactly grid trial `trial` with the tuned key at `value` (None: the value
    `trial` holds, its setting's choice): a tuning seed's run without a budget, the same architecture, seed,
    dataset, model and training settings. The grid reuses its run instead of training it again; None where
    there is none (another seed, a budget)."""
    t = sweep.config.tuning
    if t is None or trial.stage != "grid" or trial.seed not in t.run_seeds:
        return None
    key = t.param.partition(".")[2]  # a training field (schema.TUNABLE_PARAMS)
    train = {**trial.train, key: trial.train.get(key) if value is None else value}
    sid = setting_id(sweep, trial.point)
    for tp in tuning_plan(sweep):
        if tp.setting == sid and tp.seed == trial.seed and tp.value == train[key]:
            twin = resolve_trial(sweep, tp.point, stage="tuning")
            same = (twin.arch, twin.dataset.dataset_id, dict(twin.model), dict(twin.train)) == (
                trial.arch, trial.dataset.dataset_id, dict(trial.model), train)
            return twin if same else None
    return None


def search_base_point(sweep: Sweep) -> dict[str, Any]:
    """The grid point a search runs at: the first value of every grid axis."""
    return {k: v[0] for k, v in sweep.axes.items()}
