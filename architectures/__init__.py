"""Model side of recscale: the architecture registry and the automatic discovery of model files.

    @architectures.register("whale", config=WhaleConfig)
    class Whale(nn.Module):
        def __init__(self, spec: FeatureSpec, cfg: WhaleConfig): ...
        def forward(self, batch: Batch) -> torch.Tensor:  # logits [B]

What a model must provide is the contract of `architectures/contract.py`; shared layers live in
`architectures/blocks/`, FLOP and parameter accounting in `architectures/flops.py`.

Discovery: every module of this package is imported on first use of the registry (`names`, `entry`,
`build`, `make_config`) except subpackages (`blocks/`), private modules (`_*`) and the helpers in
`HELPER_MODULES`. A model family is therefore added by one new file with `@register(...)`; nothing else
changes. Directories listed in the environment variable `RECSCALE_MODEL_PATH` (os.pathsep-separated) are
searched too, as if their files were in this package (relative imports such as `from .blocks.mlp import
MLP` work there), so a model can live outside the repository.

`build(name, spec, cfg)` accepts a config instance, a mapping of overrides (validated against the
config dataclass) or None for the defaults.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import torch.nn as nn

from protocols.registry import Registry
from protocols.schema import FeatureSpec
from protocols.typed_config import from_dict

from .contract import check_config_class, supports_request_reuse

#: Modules of this package that hold no model (never imported by discovery).
HELPER_MODULES: frozenset[str] = frozenset({"contract", "flops"})
#: Environment variable naming extra directories of model files.
MODEL_PATH_ENV = "RECSCALE_MODEL_PATH"


@dataclass(frozen=True)
class ArchitectureEntry:
    name: str
    builder: Callable[..., nn.Module]
    config_cls: type

    @property
    def supports_request_reuse(self) -> bool:
        return supports_request_reuse(self.config_cls)


ARCHITECTURES: Registry[ArchitectureEntry] = Registry("architecture")


def register(name: str, *, config: type) -> Callable:
    """Class or function decorator registering a model builder `builder(spec, cfg) -> nn.Module`.

    The config class is checked against the contract (`contract.check_config_class`) here.
    """
    check_config_class(name, config)

    def decorator(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        ARCHITECTURES.register(name)(ArchitectureEntry(name, builder, config))
        return builder

    return decorator


def add_model_path(directory: str | os.PathLike) -> None:
    """Search `directory` for model files as well (what `RECSCALE_MODEL_PATH` does at import)."""
    d = str(Path(directory).resolve())
    if d not in __path__:
        __path__.append(d)


def model_modules() -> list[str]:
    """Names of the model modules discovery imports (sorted), from the package and the extra paths."""
    found = {
        m.name for m in pkgutil.iter_modules(__path__)
        if not m.ispkg and not m.name.startswith("_") and m.name not in HELPER_MODULES
    }
    return sorted(found)


def load_models() -> None:
    """Import every model module (registering its models); cheap after the first call."""
    for mod in model_modules():
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


for _d in filter(None, os.environ.get(MODEL_PATH_ENV, "").split(os.pathsep)):
    add_model_path(_d)
