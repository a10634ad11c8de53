"""Run configuration: `TrainConfig` (optimiser, schedule, execution options) and `RunConfig`
(architecture + model overrides + prepared dataset + training + seed).

Defaults follow the seed's training rules: AdamW, lr 1e-3, weight decay 1e-5 on every
parameter including the embedding tables, gradient-norm clip 1.0, batch 256, one epoch, ID masking
with p = 0.05, no early stopping. A run of more than one epoch evaluates the validation set after every
epoch and tests the best one (`select_epoch`). Configs are loaded from YAML and `--set key=value` overrides through
`core.typed_config`, so unknown keys and wrong types are refused with the key named.

`parse_set` is the one `--set` parser of `recscale train` and `recscale flops`: both take a model field as
`model.<field>=V` or, for short, `<field>=V`; `check_model_keys` refuses a field the architecture lacks,
naming the key and the architecture.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from core.errors import one_line
from core.typed_config import ConfigError, apply_overrides, from_dict, parse_set_options, to_dict

from .lr_schedule import ScheduleConfig
from .metric_registry import check_split_metric


@dataclass
class TrainConfig:
    """How one model is trained and evaluated.

    Attributes:
        lr: AdamW learning rate.
        weight_decay: AdamW decoupled weight decay.
        decay_embeddings: apply weight decay to embedding tables too (the seed does; with lr 1e-3 and
            1e-5 the shrink over one epoch is ~1e-4, so this mainly matters for long runs).
        grad_clip: max global gradient norm (0 disables clipping).
        batch_size: training targets per step; the last, partial batch is kept.
        eval_batch_size: targets per forward pass during evaluation (results do not depend on it
            beyond float rounding).
        epochs: full passes over the training targets.
        id_mask_prob: probability of replacing a known user/device/video/author id by UNK in training.
        early_stopping_patience: stop after this many epochs without a better validation metric and
            keep the best epoch's weights; 0 = off (the seed's rule: a fixed number of epochs).
        early_stopping_metric: validation metric watched by early stopping and by `select_epoch`,
            `valid_<name>` of a registered metric (harness/metric_registry.py), improved in that metric's
            direction.
        select_epoch: which epoch's weights are evaluated and tested when `epochs` > 1: "best_valid" (the
            default) evaluates the validation set after every epoch and keeps the epoch with the best
            `early_stopping_metric`; "last" keeps the last epoch (the rule before, which let extra epochs
            overfit silently). metrics.json records the chosen epoch (`selected_epoch`). One-epoch runs
            have one epoch to choose and evaluate nothing extra.
        device: "auto" = cuda when available, else cpu.
        bf16: autocast matmuls to bfloat16; metrics stay fp32. "auto" = on for CUDA devices that support
            bf16, off elsewhere (so CPU runs stay fp32); true / false force it.
        tf32: let CUDA fp32 matmuls and convolutions use TF32 tensor cores (no effect on CPU).
        compile: wrap the model in torch.compile.
        attention: kernel of the softmax attentions (architectures/blocks/attention_kernel.py): "auto" =
            fused scaled_dot_product_attention on CUDA, the explicit matmuls on CPU; "sdpa" / "explicit"
            force one. Passed to `architectures.build(..., attention=)`, which sets it on the model's
            attention modules; every forward of the run (cost count, steps, evaluation) uses it.
        sparse_embeddings: sparse embedding gradients, updated by SparseAdam (lazy moments, no decay
            on embeddings); dense parameters keep AdamW.
        num_threads: torch intra-op threads; 0 = leave torch's default.
        checkpoint_every_batches: also write a resumable checkpoint every N training batches (0 = off).
        checkpoint_every_s: write a resumable checkpoint when this many seconds passed since the last.
        prefetch_batches: batches the loader assembles ahead of the step in background threads
            (0 = assemble in the training thread); never changes the batches or their order.
        loader_workers: threads assembling those batches.
        log_every_steps: write a learning-curve point (train loss, learning rate, gradient norm, throughput) to
            the run folder's TensorBoard event files every N optimiser steps (harness/curves.py); 0 = off.
        eval_every_steps: also evaluate the validation split every N optimiser steps (global steps) during
            training and log its metrics to the curves, where the still-falling health check reads them
            (harness/loss_trend.py); 0 = off (validation only after the epochs that need it). Evaluation
            uses no random state and leaves the weights, the optimisers and the data order alone, so it
            changes no trained number; needs `log_every_steps` > 0.
        recipe: "seed" (default) = the seed's rules: AdamW at a constant `lr`, `schedule` left at its defaults;
            "custom" = `schedule` applies (harness/lr_schedule.py). Study YAMLs say which they use.
        schedule: warm-up and decay of the learning rate (`recipe: custom` only).
    """

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
        positive = {"lr": self.lr, "batch_size": self.batch_size, "eval_batch_size": self.eval_batch_size,
                    "epochs": self.epochs}
        for key, value in positive.items():
            if value <= 0:
                raise ConfigError(f"train.{key} must be > 0, got {value!r}")
        non_negative = {"weight_decay": self.weight_decay, "grad_clip": self.grad_clip,
                        "early_stopping_patience": self.early_stopping_patience, "num_threads": self.num_threads,
                        "checkpoint_every_batches": self.checkpoint_every_batches,
                        "checkpoint_every_s": self.checkpoint_every_s,
                        "prefetch_batches": self.prefetch_batches, "log_every_steps": self.log_every_steps,
                        "eval_every_steps": self.eval_every_steps}
        for key, value in non_negative.items():
            if value < 0:
                raise ConfigError(f"train.{key} must be >= 0, got {value!r}")
        if self.eval_every_steps and not self.log_every_steps:
            raise ConfigError(f"train.eval_every_steps={self.eval_every_steps} logs to the learning curves, which "
                              "train.log_every_steps=0 turns off; set train.log_every_steps > 0")
        if self.loader_workers < 1:
            raise ConfigError(f"train.loader_workers must be >= 1, got {self.loader_workers!r}")
        if not 0.0 <= self.id_mask_prob < 1.0:
            raise ConfigError(f"train.id_mask_prob must be in [0, 1), got {self.id_mask_prob!r}")
        check_split_metric("train.early_stopping_metric", self.early_stopping_metric)
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
                                     "train.eval_every_steps",
                                     "data")


@dataclass
class RunConfig:
    """One run: architecture, its config overrides, a prepared dataset artifact, training, seed.

    `seed` drives model initialisation, training order and ID masking (same config + seed + data ->
    identical metrics on CPU).
    """

    arch: str
    data: str
    model: dict[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0

    def __post_init__(self) -> None:
        import architectures

        if self.arch not in architectures.names():
            raise ConfigError(f"arch: unknown architecture {self.arch!r}; valid: {', '.join(architectures.names())}")
        check_model_keys(self.arch, self.model)
        architectures.make_config(self.arch, self.model)  # validates model.* types and ranges

    def model_config(self) -> Any:
        """The architecture's validated config dataclass."""
        import architectures

        return architectures.make_config(self.arch, self.model)


#: Top-level keys of a run's `--set` options; any other key without a section is a model field.
RUN_KEYS: tuple[str, ...] = ("arch", "data", "model", "train", "seed")


def parse_set(items: list[str] | None, *, sections: tuple[str, ...] = RUN_KEYS) -> dict[str, Any]:
    """`--set KEY=VALUE` options as nested overrides; a key without a section (`dim=32`) means `model.dim`.

    `sections` are the top-level keys the command takes (`recscale flops` takes only `model`); any other
    is refused naming it. Values are parsed as YAML scalars.
    """
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


def check_model_keys(arch: str, model: Any) -> None:
    """Refuse model keys that are not config fields of `arch`, naming the key and the architecture."""
    import architectures

    if not isinstance(model, Mapping):
        raise ConfigError(f"model: expected a mapping of {arch}'s config fields, got {model!r}")
    fields = [f.name for f in dataclasses.fields(architectures.entry(arch).config_cls)]
    unknown = [k for k in model if k not in fields]
    if unknown:
        raise ConfigError(f"model.{unknown[0]}: not a config field of {arch}; valid: {', '.join(sorted(fields))}")


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
    cfg = from_dict(RunConfig, base)
    return apply_overrides(cfg, overrides or {}) if overrides else cfg


def run_config_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain dict of a RunConfig with the model section fully resolved (defaults included)."""
    out = to_dict(cfg)
    out["model"] = to_dict(cfg.model_config())
    if cfg.train.recipe == "seed":  # the seed's recipe: config.yaml as before schedules existed (old folders resume)
        del out["train"]["recipe"], out["train"]["schedule"]
    return out
