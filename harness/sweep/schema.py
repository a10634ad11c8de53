"""The sweep YAML schema: the typed sections of a sweep file (`SweepConfig`), their validation at load
(`load_sweep`; every key and rule: docs/sweeps.md, "The sweep file"), the grid-axis vocabulary the planner
shares and the model keys, shared or scoped to one architecture. Errors name the offending key; nothing here
starts Ray.
"""
from __future__ import annotations

import bisect
import dataclasses
import importlib.util
import itertools
import json
import math
import os
import re
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

import numpy as np
import yaml

import architectures
import protocols
from core.errors import one_line
from core.results_layout import ARTIFACTS_DIR, PREPARED_DIR
from core.typed_config import ConfigError, check_renamed, from_dict, to_dict
from harness import run_health as H
from harness import runs_columns as C
from harness.config import TrainConfig, model_config
from harness.metric_registry import MetricSpec, check_split_metric
from protocols.prepare import DEFAULT_TASK, DEFAULT_VOCABULARY, PrepareConfig

#: PrepareConfig fields that are the same for every dataset of a sweep: the log (one per sweep) and
#: where prepared datasets go.
PER_SWEEP_DATA_FIELDS: tuple[str, ...] = ("source", "root", "out")
#: PrepareConfig fields a grid may vary (each distinct combination is prepared once): every other field
#: (the protocol parameters are set by name; `data_axis_fields()` adds them).
DATA_AXIS_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(PrepareConfig)
    if f.name not in PER_SWEEP_DATA_FIELDS and f.name != PrepareConfig.EXTRA_KEYS_FIELD)


def data_axis_fields() -> tuple[str, ...]:
    """Data settings a grid may vary: the PrepareConfig fields and every registered protocol's parameters."""
    return DATA_AXIS_FIELDS + tuple(protocols.parameter_names())


def data_axis_shorthands() -> dict[str, str]:
    """Grid axes that change the prepared dataset, short form -> canonical key: `protocol`, `task` and
    every registered protocol's parameters (`delay_s`, `history_len`, ...)."""
    return {f: f"data.{f}" for f in ("protocol", *protocols.parameter_names(), "task")}

#: Run-level axes.
RUN_AXES: tuple[str, ...] = (C.ARCH, C.SEED)
#: Axes whose values are mappings setting several fields of one section together (e.g. the three
#: arms exposure 0 s / exposure 60 s / author50, or named model sizes), instead of a product.
BUNDLE_AXES: tuple[str, ...] = ("data", "model", "train")
#: Distribution kinds of a search-space entry.
SEARCH_KINDS: tuple[str, ...] = ("choice", "uniform", "loguniform", "int")
#: The type of the sweep's `tracking` field (None: no tracker; docs/sweeps.md, "Experiment tracking").
Tracker = Literal["mlflow"]
#: Statuses a retry may be triggered by: every unhealthy one.
RETRY_STATUSES: tuple[str, ...] = tuple(s for s in H.STATUSES if s != H.OK)
#: Training keys the tuning stage can choose: a positive float of TrainConfig each.
TUNABLE_PARAMS: tuple[str, ...] = ("train.lr", "train.weight_decay")
#: Significant digits log-spaced grid values are rounded to (they appear in trial ids and tables).
GRID_DIGITS = 3
#: Fewest grid values: with fewer, every value is an edge and no choice can be told apart from one.
MIN_TUNING_POINTS = 3
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_RE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


@dataclass(frozen=True)
class DataSection(PrepareConfig):
    """A sweep's `data:` section: every PrepareConfig field plus what only a sweep needs (root optional with
    `scale`, out, scale, log_seed, cache, prepare); docs/sweeps.md, "The data section is a PrepareConfig"."""

    root: str | None = None  # type: ignore[assignment]
    out: str | None = None  # type: ignore[assignment]
    scale: str | None = None
    world: str = "default"  # the synthetic log's planted label model (protocols/synthetic/config.py WORLDS)
    log_seed: int = 0
    cache: str = ARTIFACTS_DIR
    prepare: dict[str, Any] = field(default_factory=dict)
    RENAMED_KEYS: ClassVar[dict[str, str]] = {**PrepareConfig.RENAMED_KEYS, "synth_seed": "log_seed"}

    def prepared_dir(self) -> Path:
        """The folder prepared datasets are written into."""
        return Path(self.out) if self.out is not None else Path(self.cache) / Path(PREPARED_DIR).name

    def prepare_settings(self) -> dict[str, Any]:
        """The PrepareConfig settings every dataset of the sweep starts from (before grid axes), as plain values:
        `source`, every data axis field, the protocol parameters given, and the `prepare:` entries. A default that
        dataset ids predate (vocabulary, a nested section such as `split`; the task: module `prepare_settings`)
        is left out, so that the ids of sweeps that never set it do not depend on it."""
        out: dict[str, Any] = {"source": self.source}
        for name in DATA_AXIS_FIELDS:
            value = getattr(self, name)
            if name == "vocabulary" and value in (None, DEFAULT_VOCABULARY):
                continue
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                if value == type(value)():
                    continue
                value = {k: v for k, v in to_dict(value).items() if v is not None}  # the keys given
            out[name] = value
        out.update(self.protocol_params)
        out.update(self.prepare)
        return out


@dataclass
class Resources:
    """Ray resources of one trial: CPU cores, a GPU share (a fraction lets trials share a GPU) and custom resources
    (names a cluster's nodes declare with `ray start --resources`, e.g. to place trials on some nodes only)."""

    cpu: float = 1.0
    gpu: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)

    def ray_request(self) -> dict[str, float]:
        """What one trial asks Ray for (`tune.with_resources`'s spelling)."""
        return {"cpu": self.cpu, "gpu": self.gpu, **self.custom}


@dataclass
class SearchDimension:
    """One search-space entry: `choice` over values, `uniform`/`loguniform` on [low, high], `int` in [low, high]."""

    kind: Literal["choice", "uniform", "loguniform", "int"]
    values: list[Any] | None = None
    low: float | None = None
    high: float | None = None


@dataclass
class SearchSection:
    """An Optuna search over model/train keys; the grid then runs at the best point found."""

    space: dict[str, Any]
    metric: str = "valid_auc"
    mode: Literal["max", "min"] = "max"
    num_samples: int = 8
    sampler_seed: int = 0
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"seed": "sampler_seed"}


@dataclass
class RoundsSection:
    """Seeds in rounds: the cumulative seed counts at each look, how alpha is spent over them, and an optional cap
    in trial-hours (docs/sweeps.md, "Seeds in rounds")."""

    seeds: list[int]
    spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"
    cap_trial_hours: float | None = None

    def round_of(self, seed: int) -> int:
        """The round (1, 2, ...) whose seeds hold `seed`."""
        return bisect.bisect_right(self.seeds, seed) + 1


@dataclass
class TuningGrid:
    """The values tried: `points` values log-spaced from `log_min` to `log_max` (both included, rounded to
    GRID_DIGITS significant digits), or the `values` listed."""

    log_min: float | None = None
    log_max: float | None = None
    points: int | None = None
    values: list[float] | None = None


@dataclass
class TuningBudget:
    """A shorter run for tuning trials: `epochs` replaces train.epochs; `n_train_fraction` trains on that
    share of each setting's training targets (a nested sample: the validation targets stay the same)."""

    epochs: int | None = None
    n_train_fraction: float | None = None


@dataclass
class TuningSection:
    """A sweep's `tuning:` section (keys and rules: docs/sweeps.md, "Tuning"); checked on its own by
    `section_values`, against the rest of the sweep by `_check_tuning`; what the stage does: `harness.sweep.tuning`."""

    grid: TuningGrid
    param: str = "train.lr"
    run_seeds: list[int] = field(default_factory=lambda: [0])
    metric: str = "valid_auc"
    budget: TuningBudget = field(default_factory=TuningBudget)
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"seeds": "run_seeds"}


@dataclass
class RetrySection:
    """A sweep's `retry:` section (keys and rules: docs/sweeps.md, "Retry"), checked on its own when it is built;
    what the retry does with it: `harness.sweep.trainable.train_with_retries`."""

    when: list[str] = field(default_factory=lambda: [H.DIVERGED, H.COLLAPSED])
    lr_factor: float = 0.5
    max_retries: int = 2
    tuning_trials: bool = False

    def __post_init__(self) -> None:
        if not self.when:
            raise ConfigError(f"retry.when: empty; give the statuses that trigger a retry "
                              f"({', '.join(RETRY_STATUSES)}), or leave out `retry:` for none")
        for s in self.when:
            if s not in RETRY_STATUSES:
                raise ConfigError(f"retry.when: unknown status {s!r}; valid: {', '.join(RETRY_STATUSES)}")
        if len(set(self.when)) != len(self.when):
            raise ConfigError(f"retry.when: repeated statuses in {self.when!r}")
        if not (math.isfinite(self.lr_factor) and self.lr_factor > 0) or self.lr_factor == 1:
            raise ConfigError(f"retry.lr_factor: must be a finite number > 0 other than 1, got {self.lr_factor!r}")
        if self.max_retries < 1:
            raise ConfigError(f"retry.max_retries: must be >= 1, got {self.max_retries!r} (leave out `retry:` for no "
                              "retry)")

    def lr_of(self, lr: float, attempt: int) -> float:
        """The learning rate of attempt `attempt` (0: the planned one) of a run planned at `lr`."""
        return lr * self.lr_factor ** attempt


@dataclass
class SweepConfig:
    """A whole sweep file (docs/sweeps.md, "The sweep file")."""

    name: str
    data: DataSection = field(default_factory=DataSection)
    arch: str | None = None
    seed: int = 0
    train: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    grid: dict[str, Any] = field(default_factory=dict)
    search: SearchSection | None = None
    tuning: TuningSection | None = None
    retry: RetrySection | None = None
    resources: Resources = field(default_factory=Resources)
    max_concurrent: int | None = None
    max_failures: int = 2
    keep_checkpoints: bool = False
    tracking: Tracker | None = None
    rounds: RoundsSection | None = None
    analysis: dict[str, Any] | None = None


@dataclass
class Sweep:
    """A validated sweep: the typed config plus derived facts the planner and launcher use."""

    config: SweepConfig
    #: grid axes in file order, canonical keys (`arch`, `seed`, `data.<f>`, `model.<f>`, `train.<f>`, or a bundle
    #: `data` / `model` / `train` whose values are mappings) -> values; `arch` always (one value when not swept)
    axes: dict[str, list[Any]]
    space: dict[str, SearchDimension]  # search space, canonical `model.<f>` / `train.<f>` keys
    data_root: Path | None  # resolved log folder (None: a synthetic log generated into the cache)
    source_text: str  # the file as written (copied to results/<name>/sweep.yaml)
    path: Path | None = None
    tuning_values: list[float] = field(default_factory=list)  # `tuning.param`'s values, ascending
    #: every trial's model config, validated once (`model_config`), by architecture and settings
    model_configs: dict[str, Any] = field(default_factory=dict)

    def model_config(self, arch: str, model: Mapping[str, Any]) -> Any:
        """The config dataclass of `arch` with the flat `model` fields: validated the first time it is asked
        for (`harness.config.model_config`, the one validator), then read from `model_configs`."""
        key = json.dumps([arch, model], sort_keys=True, default=str)
        if key not in self.model_configs:
            self.model_configs[key] = model_config(arch, model)
        return self.model_configs[key]

    @property
    def name(self) -> str:
        return self.config.name


# ----------------------------------------------------------------------------------------------
# loading


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep YAML file; raises ConfigError naming the key on any problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read sweep file: {e.strerror}") from None
    return parse_sweep(text, path=path)


def parse_sweep(text: str, *, path: Path | None = None) -> Sweep:
    """Validate sweep YAML text (see `load_sweep`)."""
    where = f"{path}: " if path else ""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}not valid YAML: {one_line(e)}") from None
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}a sweep file must be a mapping with at least `name` and `data`")
    try:
        check_raw(raw.get("retry"))
        return _validate(from_dict(SweepConfig, raw), text, path)
    except ConfigError as e:
        raise ConfigError(f"{where}{e}") from None


def _validate(cfg: SweepConfig, text: str, path: Path | None) -> Sweep:
    if not _NAME_RE.match(cfg.name):
        raise ConfigError(f"name: {cfg.name!r} must be a folder name (letters, digits, '_', '-', '.')")
    data_root = _check_data_root(cfg.data)

    axes = _normalise_grid(cfg)
    archs = axes["arch"]
    _check_data_values(cfg)
    _resolve_vocabulary(cfg, axes)

    grid_model_fields = _check_model_keys(cfg, axes, archs)
    _check_train(cfg.train, "train")
    for key, values in axes.items():
        for value in values:
            train = section_settings(axis_settings(key, value), "train")
            if train:
                _check_train({**cfg.train, **train}, f"grid.{key}")

    _check_rounds(cfg, axes)
    tuning_values = _check_tuning(cfg, axes)
    _check_retry(cfg)
    space = _check_search(cfg, axes, archs, grid_model_fields)
    _check_resources(cfg)
    check_installed(cfg.tracking)
    sweep = Sweep(config=cfg, axes=axes, space=space, data_root=data_root, source_text=text, path=path,
                  tuning_values=tuning_values)
    _check_model_configs(sweep)
    return sweep


# ----------------------------------------------------------------------------------------------
# grid points: what one trial sets


def grid_points(sweep: Sweep) -> list[dict[str, Any]]:
    """The distinct grid points: the cartesian product of the axes (first axis varying slowest), each without the
    model axes that set nothing for its architecture, duplicates dropped (a model axis scoped to some architectures,
    e.g. `model.helix.retained_tokens` beside a Wukong reference, would otherwise run the others once per value)."""
    axes = sweep.axes
    points = (_applicable(dict(zip(axes, combo))) for combo in itertools.product(*axes.values()))
    return list({json.dumps(p, sort_keys=True, default=str): p for p in points}.values())  # first-seen order


def _applicable(point: dict[str, Any]) -> dict[str, Any]:
    """`point` without model axes (or model bundle entries) that set no field of the point's architecture."""
    if "arch" not in point:
        return point
    arch = str(point["arch"])
    keep = {}
    for axis, value in point.items():
        keys = list(section_settings(axis_settings(axis, value), "model"))
        if keys and not any(model_key_applies(k, arch) for k in keys):
            continue
        keep[axis] = value
    return keep


def point_settings(point: Mapping[str, Any]) -> dict[str, Any]:
    """A grid point as flat canonical settings (`data.delay_s`, `model.dim`, ...; bundles expanded)."""
    return {k: v for axis, value in point.items() for k, v in axis_settings(axis, value).items()}


def prepare_settings(cfg: SweepConfig, settings: Mapping[str, Any]) -> dict[str, Any]:
    """The PrepareConfig settings of a trial's dataset: the data section with the trial's `data.` settings,
    holding exactly its protocol's parameters, resolved to the values the protocol will use (unset or
    None -> the protocol's default). A parameter only other protocols take (author50 has no delay) is
    dropped, so that axis does not split it into several datasets."""
    prep = {**cfg.data.prepare_settings(), **section_settings(settings, "data")}
    if prep.get("task") == DEFAULT_TASK:  # dataset ids predating tasks stay the same
        del prep["task"]
    used = to_dict(from_dict(PrepareConfig, prep).protocol_config())
    for name in protocols.parameter_names():
        prep.pop(name, None)
    prep.update(used)
    return prep


def trial_model(cfg: SweepConfig, arch: str, settings: Mapping[str, Any], history_len: int) -> dict[str, Any]:
    """The flat model fields of one trial of `arch` (the one place nested model keys become a trial's fields):
    the `model:` section, replaced by the trial's `model.` settings; `<arch>.<field>` keys win over a shared
    key of the same mapping. `history_len` is the dataset's (every model config has it, architectures/contract.py)."""
    model = model_for_arch(arch, flatten_model(cfg.model, "model"))
    model.update(model_for_arch(arch, section_settings(settings, "model")))
    model["history_len"] = history_len
    return model


# ----------------------------------------------------------------------------------------------
# model keys (docs/sweeps.md, "Model keys"): inside the planner a `model.<field>` / `model.<arch>.<field>` key is
# kept flat, as `<field>` / `<arch>.<field>`


@cache
def config_fields(arch: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(architectures.entry(arch).config_cls))


def model_scope(key: str) -> tuple[str | None, str]:
    """A flat model key as (architecture or None for every architecture, field)."""
    arch, dot, name = key.partition(".")
    return (arch, name) if dot else (None, key)


def flatten_model(mapping: Any, where: str) -> dict[str, Any]:
    """A model mapping as flat keys: `<field>` and `<arch>.<field>` for the per-architecture mappings."""
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {mapping!r}")
    archs = architectures.names()
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if key in archs:
            if not isinstance(value, Mapping) or not value:
                raise ConfigError(f"{where}.{key}: expected a mapping of {key}'s config fields "
                                  f"(settings for {key} only), got {value!r}")
            for name, v in value.items():
                out[f"{key}.{name}"] = v
        else:
            out[str(key)] = value
    return out


def model_key_applies(key: str, arch: str) -> bool:
    """Whether flat key `key` sets a field of `arch` (shared keys are checked to exist everywhere)."""
    return model_scope(key)[0] in (None, arch)


def model_for_arch(arch: str, flat: Mapping[str, Any]) -> dict[str, Any]:
    """The fields `flat` sets for `arch`: shared keys, then that architecture's own (which win)."""
    out = {k: v for k, v in flat.items() if model_scope(k)[0] is None}
    out.update({model_scope(k)[1]: v for k, v in flat.items() if model_scope(k)[0] == arch})
    return out


def check_model_key(where: str, key: str, archs: list[str]) -> None:
    """Refuse a flat key that is not a field of an architecture it applies to, naming both.

    `where` is how the user spelled the key (`model.num_heads`, `grid.model[1].helix.size`, ...)."""
    owner, name = model_scope(key)
    if name == "history_len":
        raise ConfigError(f"{where}: the model's history length follows the data; "
                          "set data.history_len (or sweep `history_len`) instead")
    if owner is not None:
        if owner not in archs:
            raise ConfigError(f"{where}: {owner} is not an architecture of this sweep ({', '.join(archs)})")
        if name not in config_fields(owner):
            valid = sorted(set(config_fields(owner)) - {"history_len"})
            raise ConfigError(f"{where}: not a config field of {owner}; valid: {', '.join(valid)}")
        return
    lacking = [a for a in archs if name not in config_fields(a)]
    if len(lacking) == len(archs):
        valid = sorted({f for a in archs for f in config_fields(a)} - {"history_len"})
        raise ConfigError(f"{where}: not a config field of {', '.join(archs)}; valid: {', '.join(valid)}")
    if lacking:
        owners = [a for a in archs if a not in lacking]
        raise ConfigError(
            f"{where}: architecture {', '.join(lacking)} has no config field {name!r} (only "
            f"{', '.join(owners)} {'has' if len(owners) == 1 else 'have'} it); a shared model key must be a field "
            f"of every architecture of the sweep. Set it for the ones that have it, e.g. "
            f"`model: {{{owners[0]}: {{{name}: ...}}}}` or the grid axis model.{owners[0]}.{name}")


# ----------------------------------------------------------------------------------------------
# section checks


def section_settings(settings: Mapping[str, Any], section: str) -> dict[str, Any]:
    """The fields of one section (`data`, `model`, `train`) among canonical `section.field` settings: the one
    place a flat `section.field` key loses its section."""
    return {k.partition(".")[2]: v for k, v in settings.items() if k.startswith(f"{section}.")}


def _check_choice(key: str, value: Any, valid: list[str]) -> None:
    if value not in valid:
        raise ConfigError(f"{key}: unknown value {value!r}; valid: {', '.join(valid)}")


def expand_path(key: str, value: str) -> Path:
    """`~` and `${VAR}` expanded; an unset variable is an error naming `key`."""
    missing = [m for m in _ENV_RE.findall(value) if m not in os.environ]
    if missing:
        raise ConfigError(f"{key}: environment variable {missing[0]} is not set (used in {value!r})")
    return Path(os.path.expanduser(os.path.expandvars(value)))


def _check_data_root(data: DataSection) -> Path | None:
    from protocols.synthetic import DEFAULT_WORLD, SCALES, WORLDS

    if data.world != DEFAULT_WORLD and data.scale is None:
        raise ConfigError("data.world: only a generated synthetic log (data.scale) has a planted world")
    if data.scale is not None:
        if data.source != "synthetic":
            raise ConfigError(f"data.scale: only the synthetic source is generated (data.source is {data.source!r})")
        _check_choice("data.scale", data.scale, list(SCALES))
        _check_choice("data.world", data.world, list(WORLDS))
        if data.root is not None:
            raise ConfigError("data: give either `root` (an existing log) or `scale` (generate one), not both")
        return None
    if data.root is None:
        hint = f" or data.scale ({', '.join(SCALES)}) to generate one" if data.source == "synthetic" else ""
        raise ConfigError(f"data.root: missing; name the folder of the {data.source} log{hint}")
    root = expand_path("data.root", data.root)
    if not root.is_dir():
        raise ConfigError(f"data.root: folder {str(root)!r} does not exist")
    return root


def axis_settings(axis: str, value: Any) -> dict[str, Any]:
    """The canonical `section.field` settings one axis value makes (bundles set several at once); a model
    bundle's per-architecture mappings become `model.<arch>.<field>` (`flatten_model`)."""
    if axis == "model":
        fields = flatten_model({k: v for k, v in value.items() if k != "name"}, "grid.model")
        return {f"model.{k}": v for k, v in fields.items()}
    if axis in BUNDLE_AXES:
        return {f"{axis}.{k}": v for k, v in value.items() if k != "name"}
    return {axis: value}


def _normalise_grid(cfg: SweepConfig) -> dict[str, list[Any]]:
    axes: dict[str, list[Any]] = {}
    shorthands, data_fields = data_axis_shorthands(), data_axis_fields()
    valid = ", ".join([*RUN_AXES, *shorthands, *(f"data.{f}" for f in data_fields),
                       "model.<field>", "model.<arch>.<field>", "train.<field>",
                       *(f"{b} (list of mappings)" for b in BUNDLE_AXES)])
    for key, values in cfg.grid.items():
        canon = shorthands.get(key, key)
        section, _, sub = canon.partition(".")
        parts = sub.split(".")
        ok = canon in RUN_AXES or canon in BUNDLE_AXES or (section == "data" and sub in data_fields) or (
            section in ("model", "train") and all(parts) and len(parts) <= (2 if section == "model" else 1))
        if section == "data":
            check_renamed(PrepareConfig, [sub], "grid.data.")
        if not ok:
            raise ConfigError(f"grid.{key}: not a grid axis; valid: {valid}")
        if canon in axes:
            raise ConfigError(f"grid.{key}: axis given twice (as {canon})")
        if not isinstance(values, list) or not values:
            raise ConfigError(f"grid.{key}: expected a non-empty list of values, got {values!r}")
        if len({repr(v) for v in values}) != len(values):
            raise ConfigError(f"grid.{key}: repeated values in {values!r}")
        if canon in BUNDLE_AXES:
            _check_bundle(canon, values)
        axes[canon] = list(values)
    # (model fields set twice for one architecture are refused in _check_model_keys)
    bundled = {k for b in ("data", "train") if b in axes for v in axes[b] for k in axis_settings(b, v)}
    for key in bundled & set(axes):
        raise ConfigError(f"grid.{key}: also set by the grid.{key.split('.')[0]} list; keep one")
    if "model.history_len" in axes:
        raise ConfigError("grid.model.history_len: the model's history length follows the data; "
                          "sweep `history_len` (data.history_len) instead")
    if "arch" not in axes:
        if cfg.arch is None:
            raise ConfigError("arch: missing; name an architecture at the top level or sweep grid.arch")
        axes = {"arch": [cfg.arch], **axes}
    elif cfg.arch is not None:
        raise ConfigError("arch: given both at the top level and as grid.arch; keep one")
    for a in axes["arch"]:
        _check_choice("grid.arch" if "arch" in cfg.grid else "arch", a, architectures.names())
    for s in axes.get("seed", []):
        if not isinstance(s, int) or isinstance(s, bool):
            raise ConfigError(f"grid.seed: expected integers, got {s!r}")
    return axes


def _resolve_vocabulary(cfg: SweepConfig, axes: Mapping[str, list[Any]]) -> None:
    """Arms that vary the history (grid axes of the protocol or a protocol parameter, directly or inside a `data`
    bundle) get vocabularies fit without it (`train_window`), so that their models have identical embedding tables
    at the same seed; `data.vocabulary: train_inputs` there is refused."""
    fields, bundles = ("protocol", *protocols.parameter_names()), axes.get("data", [])
    varied = [f"data.{f}" for f in fields if len(axes.get(f"data.{f}", [])) > 1]
    varied += [f"grid.data[].{f}" for f in fields if len({repr(b.get(f)) for b in bundles}) > 1]
    if "data.vocabulary" in axes or any("vocabulary" in b for b in axes.get("data", [])):
        raise ConfigError("grid: data.vocabulary is not a grid axis (it would confound the arms' embedding tables)")
    if not varied:
        return
    given = cfg.data.prepare.get("vocabulary", cfg.data.vocabulary)
    if given == DEFAULT_VOCABULARY:
        raise ConfigError(
            f"data.vocabulary: train_inputs fits vocabularies on each arm's own histories, so the arms of "
            f"{', '.join(varied)} would differ in their embedding tables as well as in their histories; "
            "use train_window (the default for such sweeps)")
    if given is None:
        object.__setattr__(cfg, "data", dataclasses.replace(cfg.data, vocabulary="train_window"))


def _check_bundle(axis: str, values: list[Any]) -> None:
    """A bundle axis is a list of mappings (optionally with a `name`) of fields set together."""
    data_fields = data_axis_fields()
    valid_data = ", ".join(data_fields)
    names = []
    for i, v in enumerate(values):
        if not isinstance(v, Mapping) or not v:
            raise ConfigError(f"grid.{axis}[{i}]: expected a mapping of {axis} fields, got {v!r}")
        if "name" in v:
            if not isinstance(v["name"], str) or not _NAME_RE.match(v["name"]):
                raise ConfigError(f"grid.{axis}[{i}].name: {v['name']!r} must be letters, digits, '_', '-', '.'")
            names.append(v["name"])
        if axis == "data":
            check_renamed(PrepareConfig, v, f"grid.data[{i}].")
            for k in v:
                if k != "name" and k not in data_fields:
                    raise ConfigError(f"grid.data[{i}].{k}: not a data field a grid may vary; valid: {valid_data}")
        if axis == "model":
            flatten_model({k: x for k, x in v.items() if k != "name"}, f"grid.model[{i}]")
    if names and len(names) != len(values):
        raise ConfigError(f"grid.{axis}: give every entry a `name` or none")
    if len(set(names)) != len(names):
        raise ConfigError(f"grid.{axis}: repeated names {names}")


def _check_data_values(cfg: SweepConfig) -> None:
    """Every dataset the sweep asks for must be a valid PrepareConfig: the data section with its
    `prepare:` entries, and that with each value of each data axis (errors name the grid key)."""
    data = cfg.data
    data_fields = data_axis_fields()
    check_renamed(PrepareConfig, data.prepare, "data.prepare.")
    for key in data.prepare:
        if key not in data_fields:
            raise ConfigError(f"data.prepare.{key}: not a PrepareConfig field or protocol parameter a sweep "
                              f"passes on; valid: {', '.join(data_fields)}")
    base = data.prepare_settings()
    from_dict(PrepareConfig, base, prefix="data.")
    shorthands = data_axis_shorthands()
    for key, values in cfg.grid.items():
        canon = shorthands.get(key, key)
        for i, value in enumerate(values):
            given = section_settings(axis_settings(canon, value), "data")
            if not given:
                continue
            try:
                from_dict(PrepareConfig, {**base, **given}, prefix="data.")
            except ConfigError as e:  # name the grid key instead of the data field
                message = str(e)
                old = "data." if canon == "data" else canon
                new = f"grid.data[{i}]." if canon == "data" else f"grid.{key}"
                raise ConfigError(new + message[len(old):] if message.startswith(old) else message) from None


def _check_model_keys(cfg: SweepConfig, axes: Mapping[str, list[Any]], archs: list[str]) -> dict[tuple[str, str], str]:
    """Every model key must be a field of every architecture it applies to (a shared key: all of them; `<arch>.<field>`:
    that one), and no grid axis may set a field another axis sets for the same architecture (the values are validated
    with each trial's config: `_check_model_configs`). Returns (architecture, field) -> the grid axis that sets it."""
    base = flatten_model(cfg.model, "model")
    for key in base:
        check_model_key(f"model.{key}", key, archs)
    # the grid axes that set model fields -> per value, the flat model keys it sets (flatten_model)
    flats_of = {axis: [section_settings(axis_settings(axis, v), "model") for v in vs] for axis, vs in axes.items()}
    model_axes = {axis: flats for axis, flats in flats_of.items() if any(flats)}
    for axis, flats in model_axes.items():
        for i, flat in enumerate(flats):
            for key in flat:
                check_model_key(f"grid.{axis}" if axis != "model" else f"grid.model[{i}].{key}", key, archs)
    owner: dict[tuple[str, str], str] = {}
    for a in archs:
        for axis, flats in model_axes.items():
            for name in sorted({n for flat in flats for n in model_for_arch(a, flat)}):
                if (a, name) in owner:
                    raise ConfigError(f"grid.{axis}: sets model.{name} for {a}, which grid.{owner[a, name]} also "
                                      "sets; keep one")
                owner[a, name] = axis
    return owner


def _check_model_configs(sweep: Sweep) -> None:
    """Validate every grid trial's model config (its `history_len` the dataset's), once each, into
    `sweep.model_configs`; an error names the grid axes whose values differ from their first."""
    firsts = {k: v[0] for k, v in sweep.axes.items()}
    for point in grid_points(sweep):
        arch, settings = str(point["arch"]), point_settings(point)
        history_len = prepare_settings(sweep.config, settings)["history_len"]
        try:
            sweep.model_config(arch, trial_model(sweep.config, arch, settings, history_len))
        except ConfigError as e:
            varied = [f"grid.{k}" for k, v in point.items() if k not in RUN_AXES and v != firsts[k]]
            raise ConfigError(f"{', '.join(varied) + ': ' if varied else ''}{e} (architecture {arch})") from None


def _check_train(mapping: Mapping[str, Any], where: str) -> None:
    try:
        from_dict(TrainConfig, mapping, prefix="train.")
    except ConfigError as e:
        raise ConfigError(f"{e}" if where == "train" else f"{where}: {e}") from None


def _check_search(cfg: SweepConfig, axes: Mapping[str, list[Any]], archs: list[str],
                  grid_model_fields: Mapping[tuple[str, str], str]) -> dict[str, SearchDimension]:
    search = cfg.search
    if search is None:
        return {}
    # a search optimises validation metrics only (choosing on test would leak it), in their registered direction
    mode = check_split_metric("search.metric", search.metric).mode
    if search.mode != mode:
        raise ConfigError(f"search.mode: {search.metric} is optimised with mode {mode!r}")
    if search.num_samples < 1:
        raise ConfigError(f"search.num_samples: must be >= 1, got {search.num_samples}")
    if not search.space:
        raise ConfigError("search.space: empty; give at least one model.<field> or train.<field> entry")
    space: dict[str, SearchDimension] = {}
    for key, spec in search.space.items():
        section, _, sub = key.partition(".")
        if section not in ("model", "train") or not sub:
            raise ConfigError(f"search.space.{key}: only model.<field> and train.<field> keys can be searched "
                              "(data axes would need a dataset per sample)")
        if key in {k for a, vs in axes.items() for v in vs for k in axis_settings(a, v)}:
            raise ConfigError(f"search.space.{key}: also a grid axis; the grid runs at the searched value, drop one")
        if section == "model":
            check_model_key(f"search.space.{key}", sub, archs)
            name = model_scope(sub)[1]
            clash = next((a for a in archs if model_key_applies(sub, a) and (a, name) in grid_model_fields), None)
            if clash is not None:
                raise ConfigError(f"search.space.{key}: grid.{grid_model_fields[clash, name]} also sets model.{name} "
                                  f"for {clash}; the grid runs at the searched value, drop one")
        dim = _parse_dimension(f"search.space.{key}", spec)
        probes: list[Any] = cast(list[Any], dim.values) if dim.kind == "choice" else [dim.low, dim.high]
        if dim.kind == "int":
            probes = [int(p) for p in probes]
        for v in probes:
            if section == "model":
                _check_search_value(f"search.space.{key}", cfg, sub, v, archs)
            else:
                _check_train({**cfg.train, sub: v}, f"search.space.{key}")
        space[key] = dim
    return space


def log_grid(low: float, high: float, points: int) -> list[float]:
    """`points` values log-spaced over [low, high], rounded to GRID_DIGITS significant digits."""
    return [float(f"{v:.{GRID_DIGITS}g}") for v in np.logspace(math.log10(low), math.log10(high), points)]


def section_values(t: TuningSection) -> list[float]:
    """Validate the section on its own; return its grid values, ascending. Errors name the `tuning.` key."""
    _check_choice("tuning.param", t.param, list(TUNABLE_PARAMS))
    metric_spec(t)
    g = t.grid
    logs = {"log_min": g.log_min, "log_max": g.log_max, "points": g.points}
    if g.values is not None:
        given = [k for k, v in logs.items() if v is not None]
        if given:
            raise ConfigError(f"tuning.grid: give either `values` or log_min, log_max and points, not both "
                              f"(also given: {', '.join(given)})")
        values = sorted(float(v) for v in g.values)
        if len(set(values)) != len(values):
            raise ConfigError(f"tuning.grid.values: repeated values in {g.values!r}")
        if any(not (math.isfinite(v) and v > 0) for v in values):
            raise ConfigError(f"tuning.grid.values: every value must be a finite number > 0, got {g.values!r}")
    else:
        missing = [k for k, v in logs.items() if v is None]
        if missing:
            raise ConfigError(f"tuning.grid.{missing[0]}: missing; give log_min, log_max and points "
                              "(or `values`)")
        log_min, log_max, points = cast(float, g.log_min), cast(float, g.log_max), cast(int, g.points)
        if not (math.isfinite(log_min) and log_min > 0):
            raise ConfigError(f"tuning.grid.log_min: must be a finite number > 0, got {g.log_min!r}")
        if not (math.isfinite(log_max) and log_max > log_min):
            raise ConfigError(f"tuning.grid.log_max: must be > log_min ({g.log_min!r}), got {g.log_max!r}")
        values = log_grid(log_min, log_max, max(points, 1))
        if points >= MIN_TUNING_POINTS and len(set(values)) != len(values):
            raise ConfigError(f"tuning.grid.points: {g.points} values between {g.log_min!r} and {g.log_max!r} repeat "
                              f"once rounded to {GRID_DIGITS} digits; give fewer points or a wider range")
    if len(values) < MIN_TUNING_POINTS:
        key = "values" if g.values is not None else "points"
        raise ConfigError(f"tuning.grid.{key}: at least {MIN_TUNING_POINTS} values, got {len(values)} (with fewer, "
                          "every value is at the grid's edge)")
    if not t.run_seeds:
        raise ConfigError("tuning.run_seeds: empty; give at least one seed, e.g. [0]")
    if len(set(t.run_seeds)) != len(t.run_seeds):
        raise ConfigError(f"tuning.run_seeds: repeated seeds in {t.run_seeds!r}")
    b = t.budget
    if b.epochs is not None and b.epochs < 1:
        raise ConfigError(f"tuning.budget.epochs: must be >= 1, got {b.epochs}")
    if b.n_train_fraction is not None and not 0 < b.n_train_fraction <= 1:
        raise ConfigError(f"tuning.budget.n_train_fraction: must be in (0, 1], got {b.n_train_fraction}")
    return values


def metric_spec(t: TuningSection) -> MetricSpec:
    """The registered metric `t.metric` names (a validation metric only: choosing on test would leak it)."""
    return check_split_metric("tuning.metric", t.metric)


def _check_tuning(cfg: SweepConfig, axes: Mapping[str, list[Any]]) -> list[float]:
    """The tuning section on its own (`section_values`) and against the rest of the sweep."""
    t = cfg.tuning
    if t is None:
        return []
    if cfg.search is not None:
        raise ConfigError("tuning: a sweep has either `tuning:` (a value per setting) or `search:` (one point for "
                          "the whole grid), not both")
    values = section_values(t)
    for axis, vs in axes.items():
        if any(t.param in axis_settings(axis, v) for v in vs):
            raise ConfigError(f"tuning.param: {t.param} is also set by grid.{axis}; the tuning stage chooses it per "
                              "setting, drop one")
    if "@" in t.metric:  # a task's metric: the task must be one the sweep trains
        _check_train({**cfg.train, "early_stopping_metric": t.metric}, "tuning.metric")
    sub = t.param.partition(".")[2]
    for v in values:
        _check_train({**cfg.train, sub: v}, "tuning.grid")
    if t.budget.epochs is not None:
        _check_train({**cfg.train, "epochs": t.budget.epochs}, "tuning.budget")
    if t.budget.n_train_fraction is not None:
        bundles = axes.get("data", [])
        sizes = list(axes.get("data.n_train", [])) + [b["n_train"] for b in bundles if "n_train" in b]
        if "data.n_train" not in axes and not (bundles and all("n_train" in b for b in bundles)):
            sizes.append(cfg.data.prepare_settings().get("n_train"))
        for n in sizes:
            if not isinstance(n, int) or isinstance(n, bool):
                raise ConfigError(f"tuning.budget.n_train_fraction: needs a count of training targets in every "
                                  f"dataset (data.n_train), found {n!r}")
            if round(n * t.budget.n_train_fraction) < 1:
                raise ConfigError(f"tuning.budget.n_train_fraction: {t.budget.n_train_fraction} of {n} training "
                                  "targets is none")
    return values


def _check_rounds(cfg: SweepConfig, axes: dict[str, list[Any]]) -> None:
    """`rounds.seeds` increasing from at least 2; the seed axis becomes seeds 0 to the last count - 1."""
    r = cfg.rounds
    if r is None:
        return
    if not r.seeds or r.seeds[0] < 2 or any(b <= a for a, b in zip(r.seeds, r.seeds[1:])):
        raise ConfigError(f"rounds.seeds: increasing cumulative seed counts, the first at least 2, got {r.seeds}")
    if C.SEED in axes:
        raise ConfigError(f"grid.seed: a sweep with `rounds:` runs seeds 0 to {r.seeds[-1] - 1}; drop grid.seed")
    if r.cap_trial_hours is not None and not r.cap_trial_hours > 0:
        raise ConfigError(f"rounds.cap_trial_hours: must be > 0, got {r.cap_trial_hours}")
    axes[C.SEED] = list(range(r.seeds[-1]))


def check_raw(raw: Any) -> None:
    """Refuse what YAML turned into something else before the section is typed: a bare `on:` (or yes/no/off)
    key, which YAML 1.1 reads as a boolean."""
    if isinstance(raw, Mapping):
        for key in raw:
            if isinstance(key, bool):
                raise ConfigError(f"retry: a key YAML reads as {key} (`on`, `off`, `yes` or `no` unquoted); the "
                                  f"statuses that trigger a retry are given as `when: [{', '.join(RETRY_STATUSES)}]`")


def _check_retry(cfg: SweepConfig) -> None:
    """The retry section against the tuning stage (docs/sweeps.md, "Retry")."""
    r = cfg.retry
    if r is not None and r.tuning_trials:
        if cfg.tuning is None:
            raise ConfigError("retry.tuning_trials: the sweep has no `tuning:` stage")
        if cfg.tuning.param == "train.lr":
            raise ConfigError("retry.tuning_trials: the tuning stage chooses train.lr; retrying its trials at a lower "
                              "rate would credit a grid value with another rate's result (a diverged value is what the "
                              "stage must see); leave it false")


def _check_search_value(where: str, cfg: SweepConfig, sub: str, value: Any, archs: list[str]) -> None:
    base = flatten_model(cfg.model, "model")
    for a in archs:
        if model_key_applies(sub, a):
            try:
                model_config(a, {**model_for_arch(a, base), model_scope(sub)[1]: value})
            except ConfigError as e:
                raise ConfigError(f"{where}: {e} (architecture {a})") from None


def _parse_dimension(key: str, spec: Any) -> SearchDimension:
    kinds = ", ".join(SEARCH_KINDS)
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ConfigError(f"{key}: expected one of {{{kinds}}}: ..., e.g. {{loguniform: [1.0e-4, 1.0e-2]}}")
    kind, arg = next(iter(spec.items()))
    if kind not in SEARCH_KINDS:
        raise ConfigError(f"{key}: unknown distribution {kind!r}; valid: {kinds}")
    if not isinstance(arg, list) or not arg:
        raise ConfigError(f"{key}.{kind}: expected a list, got {arg!r}")
    if kind == "choice":
        return SearchDimension(kind="choice", values=list(arg))
    if len(arg) != 2 or not all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in arg):
        raise ConfigError(f"{key}.{kind}: expected [low, high] numbers, got {arg!r}")
    low, high = float(arg[0]), float(arg[1])
    if not low < high:
        raise ConfigError(f"{key}.{kind}: low must be < high, got {arg!r}")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(f"{key}.loguniform: bounds must be > 0, got {arg!r}")
    if kind == "int" and not (low.is_integer() and high.is_integer()):
        raise ConfigError(f"{key}.int: bounds must be integers, got {arg!r}")
    return SearchDimension(kind=kind, low=low, high=high)


def check_installed(tracker: str | None) -> None:
    """Refuse a tracker whose package (named as the tracker) cannot be imported, naming the extra that installs it."""
    if tracker is None:
        return
    found = False
    with suppress(ImportError, ValueError):  # a parent package missing, or a module without a spec
        found = importlib.util.find_spec(tracker) is not None
    if not found:
        raise ConfigError(f"tracking: {tracker} needs the `{tracker}` package, which is not installed here; install "
                          "recscale's `tracking` extra (pip install 'recscale[tracking]', or -e '.[tracking]' in a "
                          "checkout), or remove `tracking:`")


def _check_resources(cfg: SweepConfig) -> None:
    r = cfg.resources
    if r.cpu <= 0:
        raise ConfigError(f"resources.cpu: must be > 0, got {r.cpu}")
    if r.gpu < 0 or (r.gpu > 1 and not float(r.gpu).is_integer()):
        raise ConfigError(f"resources.gpu: a fraction in [0, 1] or a whole number of GPUs, got {r.gpu}")
    if cfg.max_concurrent is not None and cfg.max_concurrent < 1:
        raise ConfigError(f"max_concurrent: must be >= 1, got {cfg.max_concurrent}")
    if cfg.max_failures < 0:
        raise ConfigError(f"max_failures: must be >= 0, got {cfg.max_failures}")
    if math.isnan(r.cpu) or math.isnan(r.gpu):
        raise ConfigError("resources: cpu and gpu must be numbers")
    for name, amount in r.custom.items():
        if name.lower() in ("cpu", "gpu", "memory") or not isinstance(amount, (int, float)) \
                or isinstance(amount, bool) or not amount > 0:
            raise ConfigError(f"resources.custom.{name}: a custom resource name (not CPU, GPU or memory) with an "
                              f"amount > 0, got {amount!r}")
