"""Model side of recscale: the architecture registry (`@architectures.register(name, config=Cfg)`, `build`) and the
discovery of model files (this package and `RECSCALE_MODEL_PATH`): docs/contracts.md and docs/architectures.md,
"Adding a model". A model file that cannot be used (a duplicate module or architecture name, a failed import) is
skipped and reported (`problems()`, on stderr when the registry loads and by `recscale list`); the others load.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from core.registry import Discovery, Registry
from core.typed_config import from_dict
from protocols.schema import FeatureSpec

from .blocks.masked_attention import set_attention_kernel
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
    module: str  # the builder's module (named when another file registers the same name)

    @property
    def supports_request_reuse(self) -> bool:
        return supports_request_reuse(self.config_cls)


ARCHITECTURES: Registry[ArchitectureEntry] = Registry("architecture")


def register(name: str, *, config: type) -> Callable:
    """Class or function decorator registering a model builder `builder(spec, cfg) -> nn.Module`; the config
    class is checked against the contract (`contract.check_config_class`) here."""
    check_config_class(name, config)

    def decorator(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        ARCHITECTURES.register(name)(ArchitectureEntry(name, builder, config, builder.__module__))
        return builder

    return decorator


_DISCOVERY = Discovery(__name__, __path__, env=MODEL_PATH_ENV, kind="model file", skip=HELPER_MODULES)


def model_modules() -> list[str]:
    """Names of the model modules discovery imports (sorted), from the package and the extra paths."""
    return sorted(_DISCOVERY.files())


def load_models() -> None:
    """Import every model module (registering its models); cheap after the first call."""
    _DISCOVERY.load()


def problems() -> list[str]:
    """The model files that could not be used, one line each (empty when every file loaded)."""
    return _DISCOVERY.problems()


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


def build(name: str, spec: FeatureSpec, cfg: Any = None, *, attention: str = "auto") -> nn.Module:
    """Instantiate architecture `name` for data described by `spec`, its softmax attentions computed with the
    kernel `attention` ("auto" | "sdpa" | "explicit", `blocks/masked_attention.py`; the harness passes
    `train.attention`)."""
    e = entry(name)
    return set_attention_kernel(e.builder(spec, make_config(name, cfg)), attention)

