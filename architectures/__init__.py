"""Model side of recscale: the architecture registry, shared blocks and one file per model family.

    @architectures.register("whale", config=WhaleConfig)
    class Whale(nn.Module):
        def __init__(self, spec: FeatureSpec, cfg: WhaleConfig): ...
        def forward(self, batch) -> torch.Tensor:  # logits [B]

`build(name, spec, cfg)` accepts a config instance, a mapping of overrides (validated against the
config dataclass) or None for the defaults. A model family is added by one new file listed in
`_MODEL_MODULES`; nothing else changes.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch.nn as nn

from protocols.registry import Registry
from protocols.schema import FeatureSpec
from protocols.typed_config import from_dict


@dataclass(frozen=True)
class ArchitectureEntry:
    name: str
    builder: Callable[..., nn.Module]
    config_cls: type


ARCHITECTURES: Registry[ArchitectureEntry] = Registry("architecture")

#: Modules (under architectures/) whose import registers models.
_MODEL_MODULES: tuple[str, ...] = (
    "wukong",
    "hstu",
    "shallow_hybrid",
    "whale",
    "helix",
    "rankmixer_transformer",
    "onetrans",
    "din",
    "deepfm",
)


def register(name: str, *, config: type) -> Callable:
    """Class or function decorator registering a model builder `builder(spec, cfg) -> nn.Module`."""

    def decorator(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        ARCHITECTURES.register(name)(ArchitectureEntry(name, builder, config))
        return builder

    return decorator


def load_models() -> None:
    for mod in _MODEL_MODULES:
        importlib.import_module(f"{__name__}.{mod}")


def names() -> list[str]:
    load_models()
    return ARCHITECTURES.names()


def entry(name: str) -> ArchitectureEntry:
    load_models()
    return ARCHITECTURES.get(name)


def make_config(name: str, cfg: Any = None) -> Any:
    """The validated config dataclass of architecture `name` from an instance, a mapping or None."""
    e = entry(name)
    if cfg is None:
        return e.config_cls()
    if isinstance(cfg, e.config_cls):
        return cfg
    if isinstance(cfg, Mapping):
        return from_dict(e.config_cls, cfg, prefix="model.")
    raise TypeError(f"config for {name!r} must be {e.config_cls.__name__} or a mapping, got {type(cfg)}")


def build(name: str, spec: FeatureSpec, cfg: Any = None) -> nn.Module:
    """Instantiate architecture `name` for data described by `spec`."""
    e = entry(name)
    return e.builder(spec, make_config(name, cfg))
