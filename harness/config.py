"""Run configuration: `TaskConfig`, `ScheduleConfig`, `TrainConfig` and `RunConfig` (arch, model overrides, data,
training, seed), loaded from YAML and `--set` overrides through `core.typed_config`, and `parse_set`, the one `--set`
parser of `recscale train` and `recscale flops`. Keys, defaults and the seed's training rules: docs/training.md.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import yaml

from core.errors import one_line
from core.typed_config import ConfigError, from_dict, merged, parse_set_options, to_dict
from protocols.schema import TASK_LABELS

from .metric_registry import check_split_metric


@dataclass
class TaskConfig:
    """One task of a multi-task run (docs/tasks.md): its name, the label column it predicts (the target's own
    feedback field, `TASK_LABELS`; default: the name) and its weight in the loss. A bare name is the short form."""

    SHORT_FORM_FIELD: ClassVar[str] = "name"

    name: str
    label: str = ""
    weight: float = 1.0

    def __post_init__(self) -> None:
        self.label = self.label or self.name
        if self.label not in TASK_LABELS:
            raise ConfigError(f"label: {self.label!r} is not a label column (allowed: {', '.join(TASK_LABELS)})")
        if not (self.weight >= 0 and math.isfinite(self.weight)):
            raise ConfigError(f"weight: must be a finite number >= 0, got {self.weight!r}")


@dataclass
class ScheduleConfig:
    """`train.schedule`: linear warm-up over `warmup_steps`, or `warmup_fraction` of the run's steps (0 = none; not
    both), then `kind`: "constant", or "cosine" / "linear" decay to `floor` x `train.lr` at the last step."""

    kind: Literal["constant", "cosine", "linear"] = "constant"
    warmup_steps: int = 0
    warmup_fraction: float = 0.0
    floor: float = 0.0

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ConfigError(f"train.schedule.warmup_steps must be >= 0, got {self.warmup_steps!r}")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ConfigError(f"train.schedule.warmup_fraction must be in [0, 1), got {self.warmup_fraction!r}")
        if self.warmup_steps and self.warmup_fraction:
            raise ConfigError("train.schedule.warmup_fraction: give warmup_steps or warmup_fraction, not both")
        if not 0.0 <= self.floor <= 1.0:
            raise ConfigError(f"train.schedule.floor must be in [0, 1], got {self.floor!r}")

    @property
    def is_constant(self) -> bool:
        """No warm-up and no decay: the seed's constant learning rate."""
        return self.kind == "constant" and not self.warmup_steps and not self.warmup_fraction


@dataclass
class TrainConfig:
    """How one model is trained and evaluated: every `train.` key, its default and what 0 turns off (docs/training.md:
    the run config, "Training rules", "Curves"); `__post_init__` checks the ranges."""

    lr: float = 1e-3
    weight_decay: float = 1e-5
    decay_embeddings: bool = True
    grad_clip: float = 1.0
    batch_size: int = 256
    eval_batch_size: int = 256
    epochs: int = 1
    id_mask_prob: float = 0.05
    early_stopping_patience: int = 0
    early_stopping_metric: str = "valid_auc"
    select_epoch: Literal["best_valid", "last"] = "best_valid"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    bf16: bool | Literal["auto"] = "auto"
    tf32: bool = True
    compile: bool = False
    attention: Literal["auto", "sdpa", "explicit"] = "auto"
    sparse_embeddings: bool = False
    num_threads: int = 0
    checkpoint_every_batches: int = 0
    checkpoint_every_s: float = 600.0
    tasks: list[TaskConfig] = field(default_factory=list)  # empty: the dataset's one `label` (docs/tasks.md)
    prefetch_batches: int = 2
    loader_workers: int = 1
    log_every_steps: int = 10
    eval_every_steps: int = 0
    recipe: Literal["seed", "custom"] = "seed"
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)

    def use_bf16(self, device: Any) -> bool:
        """Whether training and evaluation on `device` (a torch.device) autocast to bfloat16."""
        if self.bf16 != "auto":
            return bool(self.bf16)
        import torch

        return device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()

    def __post_init__(self) -> None:
        for key in ("lr", "batch_size", "eval_batch_size", "epochs"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"train.{key} must be > 0, got {getattr(self, key)!r}")
        for key in ("weight_decay", "grad_clip", "early_stopping_patience", "num_threads", "checkpoint_every_batches",
                    "checkpoint_every_s", "prefetch_batches", "log_every_steps", "eval_every_steps"):
            if getattr(self, key) < 0:
                raise ConfigError(f"train.{key} must be >= 0, got {getattr(self, key)!r}")
        if self.eval_every_steps and not self.log_every_steps:
            raise ConfigError(f"train.eval_every_steps={self.eval_every_steps} logs to the learning curves, which "
                              "train.log_every_steps=0 turns off; set train.log_every_steps > 0")
        if self.loader_workers < 1:
            raise ConfigError(f"train.loader_workers must be >= 1, got {self.loader_workers!r}")
        if not 0.0 <= self.id_mask_prob < 1.0:
            raise ConfigError(f"train.id_mask_prob must be in [0, 1), got {self.id_mask_prob!r}")
        check_split_metric("train.early_stopping_metric", self.early_stopping_metric)
        names = [t.name for t in self.tasks]
        task = self.early_stopping_metric.partition("@")[2]
        if task and task not in names[1:]:
            raise ConfigError(f"train.early_stopping_metric: {task!r} is not a task after the first of train.tasks "
                              f"({', '.join(names[1:]) or 'none'}; the first task's metric has no @<task>)")
        if len(set(names)) < len(names):
            raise ConfigError(f"train.tasks: task names must differ, got {names}")
        if self.tasks and not sum(t.weight for t in self.tasks) > 0:
            raise ConfigError("train.tasks: at least one task needs a weight > 0")
        if self.recipe == "seed" and self.schedule != ScheduleConfig():
            changed = next(k for k, v in vars(self.schedule).items() if v != getattr(ScheduleConfig(), k))
            raise ConfigError(f"train.schedule.{changed}: recipe seed trains at a constant learning rate (the seed's "
                              "rules); set train.recipe: custom to use a schedule")


#: TrainConfig key without effect in a one-epoch run (`checkpoint.config_differences` ignores it there).
SELECT_EPOCH_KEY = "train.select_epoch"
#: Model key added after run folders existed (HSTU and WHALE; architectures/blocks/hstu.py): runs written
#: before it trained with this eps, which `checkpoint.config_differences` reads an absent key as.
LAYER_NORM_EPS_KEY, LAYER_NORM_EPS_BEFORE = "model.layer_norm_eps", 1e-5

#: TrainConfig keys that change when or how often state is saved, never the result; a resumed run
#: may change them.
RESUME_SAFE_KEYS: tuple[str, ...] = ("train.checkpoint_every_batches", "train.checkpoint_every_s",
                                     "train.prefetch_batches", "train.loader_workers", "train.log_every_steps",
                                     "train.eval_every_steps", "data")


@dataclass
class RunConfig:
    """One run: architecture, its model config, a prepared dataset artifact, training, seed (docs/training.md).

    `model` is the architecture's config dataclass; a mapping given here (a test, a run-config file) is
    validated into it once, by `model_config`, and never again on the way to the model."""

    arch: str
    data: str
    model: Any = None
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        import architectures

        if self.arch not in architectures.names():
            raise ConfigError(f"arch: unknown architecture {self.arch!r}; valid: {', '.join(architectures.names())}")
        self.model = model_config(self.arch, self.model)


#: Top-level keys of a run's `--set` options; any other key without a section is a model field.
RUN_KEYS: tuple[str, ...] = ("arch", "data", "model", "train", "seed")


def parse_set(items: list[str] | None, *, sections: tuple[str, ...] = RUN_KEYS) -> dict[str, Any]:
    """`--set KEY=VALUE` options as nested overrides; a key without a section (`dim=32`) means `model.dim`.
    `sections`: the top-level keys the command takes (`recscale flops` takes only `model`); others are refused."""
    out: dict[str, Any] = {}
    for key, value in parse_set_options(items).items():
        if key not in RUN_KEYS:
            if key in TrainConfig.__dataclass_fields__:
                raise ConfigError(f"--set {key}: a key without a section is a model field; "
                                  f"for training write train.{key}")
            if key in out.get("model", {}):
                raise ConfigError(f"--set {key}: given twice (as {key} and model.{key})")
            out.setdefault("model", {})[key] = value
        elif key not in sections:
            spelled = f"{key}.{next(iter(value))}" if isinstance(value, Mapping) and value else key
            valid = ", ".join(f"{s}.<field>" if s in ("model", "train") else s for s in sections)
            raise ConfigError(f"--set {spelled}: this command takes only {valid} keys")
        elif key == "model" and isinstance(value, Mapping):
            for name in value:
                if name in out.get("model", {}):
                    raise ConfigError(f"--set model.{name}: given twice (as {name} and model.{name})")
            out.setdefault("model", {}).update(value)
        else:
            out[key] = value
    return out


def model_config(arch: str, model: Any) -> Any:
    """The one validation of a model's settings: the config dataclass of `arch` from a mapping of its fields
    (None: the defaults; a config instance is returned as it is, validated where it was made). Errors name
    the key and the architecture."""
    import architectures

    config_cls = architectures.entry(arch).config_cls
    if model is None or isinstance(model, config_cls):
        return architectures.make_config(arch, model)
    if not isinstance(model, Mapping):
        raise ConfigError(f"model: expected a mapping of {arch}'s config fields, got {model!r}")
    fields = [f.name for f in dataclasses.fields(config_cls)]
    unknown = [k for k in model if k not in fields]
    if unknown:
        raise ConfigError(f"model.{unknown[0]}: not a config field of {arch}; valid: {', '.join(sorted(fields))}")
    return architectures.make_config(arch, model)


def load_run_config(
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    **fields: Any,
) -> RunConfig:
    """RunConfig from an optional YAML file, then explicit `fields` (arch=, data=), then `--set` overrides."""
    base: dict[str, Any] = {}
    if path is not None:
        try:
            base = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: cannot read run config: {one_line(e)}") from None
        if not isinstance(base, dict):
            raise ConfigError(f"{path}: a run config must be a mapping")
    base.update({k: v for k, v in fields.items() if v is not None})
    return from_dict(RunConfig, merged(base, overrides or {}))


def run_config_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain dict of a RunConfig with the model section fully resolved (defaults included)."""
    out = to_dict(cfg)
    if cfg.train.recipe == "seed":  # the seed's recipe: config.yaml as before schedules existed (old folders resume)
        del out["train"]["recipe"], out["train"]["schedule"]
    if not cfg.train.tasks:  # one task, the dataset's label: config.yaml as before multi-task runs existed
        del out["train"]["tasks"]
    return out
