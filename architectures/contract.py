"""The model contract: what every registered architecture takes, is configured by and reports, and how to add a
model (docs/architectures.md, "Adding a model" and "The model contract"). `check_config_class` checks the config
part when a model registers; tests/test_model_conformance.py checks the rest for every model.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import ClassVar, Protocol, runtime_checkable

import torch

from protocols.schema import Batch

#: The one name of the request-reuse switch.
REUSE_SWITCH = "reuse_requests"


@runtime_checkable
class ModelConfig(Protocol):
    """What every model config has (besides its own fields)."""

    history_len: int


@runtime_checkable
class RequestReuseConfig(ModelConfig, Protocol):
    """A config of a model that supports request reuse."""

    reuse_requests: bool


class Model(Protocol):
    """What every registered model is: a torch module mapping a `Batch` to logits [B], or [B, T] for a spec of
    `num_tasks` T > 1 (one head per task through `blocks/mlp.py`'s `PredictionHead`; docs/tasks.md)."""

    cfg: ModelConfig
    reads_history: ClassVar[bool]

    def forward(self, batch: Batch) -> torch.Tensor: ...

    def __call__(self, batch: Batch) -> torch.Tensor: ...


def check_config_class(name: str, config_cls: type) -> None:
    """Raise TypeError when `config_cls` breaks the config contract (see the module docstring)."""
    where = f"architecture {name!r}: config {config_cls.__name__}"
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{where} must be a dataclass")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    no_default = [f.name for f in fields.values()
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if no_default:
        raise TypeError(f"{where}: fields {no_default} need defaults")
    hints = typing.get_type_hints(config_cls)
    if "history_len" not in fields or hints["history_len"] is not int:
        raise TypeError(f"{where} needs an int field `history_len` (the most recent history events read)")
    other = sorted(n for n in fields if n.startswith("reuse") and n != REUSE_SWITCH)
    if other:
        raise TypeError(f"{where}: the request-reuse switch is named `{REUSE_SWITCH}`, not {other}")
    if REUSE_SWITCH in fields and (hints[REUSE_SWITCH] is not bool or fields[REUSE_SWITCH].default is not False):
        raise TypeError(f"{where}: `{REUSE_SWITCH}` must be a bool field defaulting to False")


def supports_request_reuse(config_cls: type) -> bool:
    """Whether the model configured by `config_cls` has the request-reuse switch."""
    return REUSE_SWITCH in {f.name for f in dataclasses.fields(config_cls)}


def reads_history(model: object) -> bool:
    """Whether `model` reads the history at all (False only for models that declare `reads_history = False`)."""
    return bool(getattr(type(model), "reads_history", True))
