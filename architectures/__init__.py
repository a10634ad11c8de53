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

A model file that cannot be used never stops the others: a file on the model path with the same module
name as another (a built-in included), a file that fails to import, and a file that registers a name
another file registered are each skipped and reported (`problems()`, printed once on stderr when the
registry loads and by `recscale list`), naming the files involved; every other model still lists and runs.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
        if name in ARCHITECTURES and ARCHITECTURES.get(name).builder is not builder:
            first = _file_of(ARCHITECTURES.get(name).builder.__module__)
            raise ValueError(f"registers architecture {name!r}, which {first} registered already; "
                             "give one of them another name")
        ARCHITECTURES.register(name)(ArchitectureEntry(name, builder, config))
        return builder

    return decorator


def add_model_path(directory: str | os.PathLike) -> None:
    """Search `directory` for model files as well (what `RECSCALE_MODEL_PATH` does at import)."""
    d = str(Path(directory).resolve())
    if d not in __path__:
        __path__.append(d)


def _file_of(module: str) -> str:
    mod = sys.modules.get(module)
    return str(getattr(mod, "__file__", None) or module)


def _model_files() -> dict[str, list[str]]:
    """Module name -> the files that define it, in search order (the package first, then the model path)."""
    found: dict[str, list[str]] = {}
    for directory in __path__:
        for m in pkgutil.iter_modules([directory]):
            if not m.ispkg and not m.name.startswith("_") and m.name not in HELPER_MODULES:
                found.setdefault(m.name, []).append(str(Path(directory) / f"{m.name}.py"))
    return found


def model_modules() -> list[str]:
    """Names of the model modules discovery imports (sorted), from the package and the extra paths."""
    return sorted(_model_files())


#: Model files that could not be used, one line each naming the file(s); filled by `load_models`.
_PROBLEMS: list[str] = []
_LOADED = False


def load_models() -> None:
    """Import every model module (registering its models); cheap after the first call. A file that cannot
    be used is skipped and reported (module docstring); the others load."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod, files in sorted(_model_files().items()):
        if len(files) > 1:
            _PROBLEMS.append(f"{files[1]}: same module name as {files[0]}, which hides it; rename one of them")
        name = f"{__name__}.{mod}"
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any error in a model file is that file's problem, reported
            sys.modules.pop(name, None)
            _PROBLEMS.append(f"{files[0]}: {type(e).__name__}: {e}; skipped")
    for line in _PROBLEMS:
        print(f"recscale: model file {line}", file=sys.stderr)


def problems() -> list[str]:
    """The model files that could not be used, one line each (empty when every file loaded)."""
    load_models()
    return list(_PROBLEMS)


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
