"""The model contract: what every registered architecture takes, is configured by and reports.

A model family is one file under `architectures/` (found automatically, see `architectures/__init__.py`)
holding a config dataclass and a builder registered with `@architectures.register(name, config=Cfg)`:

    @dataclass
    class MyConfig:
        dim: int = 64
        num_layers: int = 2
        history_len: int = 128          # required: the most recent history events the model reads
        reuse_requests: bool = False    # optional: only in models that support request reuse

        def __post_init__(self) -> None:  # value checks from blocks/config_checks.py
            check_choices(self)
            require_positive(self, "dim", "num_layers", "history_len")

    @architectures.register("mine", config=MyConfig)
    class Mine(nn.Module):
        def __init__(self, spec: FeatureSpec, cfg: MyConfig) -> None: ...
        def forward(self, batch: Batch) -> torch.Tensor: ...     # logits [B]

The contract, checked by `check_config_class` when a model registers and by
tests/test_model_conformance.py for every registered model:

- Config: a dataclass whose every field has a default (so `Cfg()` is the reference configuration),
  with an int field `history_len`. A batch whose history is longer is cut inside the model to the
  `history_len` most recent valid events (`blocks/history_window.py`), so one prepared dataset serves
  a sweep over history length and `recscale flops` sizes its batch from `cfg.history_len`.
- Request reuse: a model that can compute its candidate-independent (history) side once per request
  declares the bool field `reuse_requests` (default False) and nothing else does; no other field name
  starting with `reuse` is accepted. With it on, outputs equal those with it off whenever the
  candidates of a request carry the same history (`blocks/request_reuse.py`).
- Forward: `forward(batch: Batch) -> logits [B]` (float). `protocols.schema.Batch` is the batch
  schema as a type; a model reads only `ModelInputs` keys (never `label` or `event_id`), gives the
  same logits whatever PAD history positions hold, and runs on an empty history.
- History: a model that reads no history at all sets the class attribute `reads_history = False`
  (Wukong); for every other model changing a valid history event changes the logits.
- Accounting: the forward pass is traceable by `architectures.flops.count_flops`; embedding parameters
  are exactly the `nn.Embedding` weights.
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
    """What every registered model is: a torch module mapping a `Batch` to logits [B]."""

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
