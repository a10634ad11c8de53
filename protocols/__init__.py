"""Data side of recscale. This module owns the two registries, PROTOCOLS (name -> history protocol dataclass) and
SOURCES (name -> `SourceEntry`), filled by discovery of this package's modules (not `synthetic/` nor `_*`) and of
`RECSCALE_PROTOCOL_PATH`, and what a protocol and a source must provide to be registered, checked when they
register: docs/protocols.md, "Adding a protocol or a source in one file". A protocol's dataclass fields are the
only place its parameters and their defaults are defined.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from core.registry import Discovery, Registry

if TYPE_CHECKING:
    from .log import ExposureLog
    from .split import SplitConfig

#: Types a protocol parameter may have (it becomes a runs.parquet column).
PARAMETER_TYPES: tuple[type, ...] = (int, float, str, bool)
#: The parameter every protocol has.
HISTORY_LEN = "history_len"


@dataclass(frozen=True)
class SourceDefaults:
    """What a log of this source gets for the prepare settings a config leaves unset."""

    split: Callable[[ExposureLog], SplitConfig]  # the default split of a loaded log (fixed, or from its dates)
    #: `scaled`: RecFlow's reference target counts scaled to the log's size (`protocols.prepare.default_size`);
    #: `all`: every exposure of each split is a target.
    sizes: Literal["scaled", "all"]
    split_doc: str  # one line saying what the default split is (help texts and docs)


@dataclass(frozen=True)
class SourceEntry:
    """One registered source: how it is read and what it defaults to. Calling it reads a log."""

    name: str
    load: Callable[..., ExposureLog]
    defaults: SourceDefaults
    module: str  # the module that registered it (named when another file registers the same name)

    def __call__(self, root: Any, **options: Any) -> ExposureLog:
        return self.load(root, **options)


def check_protocol_class(name: str, cls: type) -> None:
    """Refuse a protocol class that breaks the contract above, naming the protocol and the field."""
    where = f"protocol {name!r} ({cls.__module__}.{cls.__qualname__})"
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"{where}: must be a frozen dataclass (@dataclass(frozen=True)) whose fields are its "
                        "parameters")
    if not callable(getattr(cls, "build", None)):
        raise TypeError(f"{where}: has no build(log, request_rows, *, timeline=None, progress=False) method")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if HISTORY_LEN not in fields or hints.get(HISTORY_LEN) is not int:
        raise TypeError(f"{where}: must have the parameter `{HISTORY_LEN}: int` (the history length L)")
    for f in fields.values():
        if f.default is dataclasses.MISSING:
            raise TypeError(f"{where}: parameter {f.name!r} needs a default")
        if hints.get(f.name) not in PARAMETER_TYPES:
            allowed = ", ".join(t.__name__ for t in PARAMETER_TYPES)
            raise TypeError(f"{where}: parameter {f.name!r} has type {hints.get(f.name)!r}; allowed: {allowed}")


def parameters_of(cls: type) -> dict[str, Any]:
    """A protocol class's parameters and their defaults, in field order."""
    return {f.name: f.default for f in dataclasses.fields(cls)}


#: Environment variable naming extra directories of protocol and source files.
PROTOCOL_PATH_ENV = "RECSCALE_PROTOCOL_PATH"

PROTOCOLS: Registry[type] = Registry("protocol")
SOURCES: Registry[SourceEntry] = Registry("source")

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


def register(name: str) -> Callable[[C], C]:
    """Class decorator registering a history protocol (checked against `components.check_protocol_class`)."""

    def decorator(cls: C) -> C:
        check_protocol_class(name, cls)
        PROTOCOLS.register(name)(cls)
        return cls

    return decorator


def register_source(name: str, *, defaults: SourceDefaults) -> Callable[[F], F]:
    """Function decorator registering `load(root, **options) -> ExposureLog` as source `name`, together
    with its defaults (one registry entry)."""

    def decorator(load: F) -> F:
        SOURCES.register(name)(SourceEntry(name, load, defaults, load.__module__))
        return load

    return decorator


_DISCOVERY = Discovery(__name__, __path__, env=PROTOCOL_PATH_ENV, kind="protocol/source file")


def load_components() -> None:
    """Import every module of the package and of the protocol path, so the registries are filled."""
    _DISCOVERY.load()


def problems() -> list[str]:
    """The protocol and source files that could not be used, one line each (empty when all loaded)."""
    return _DISCOVERY.problems()


def protocol_names() -> list[str]:
    load_components()
    return PROTOCOLS.names()


def source_names() -> list[str]:
    load_components()
    return SOURCES.names()


def protocol_parameters(protocol: str) -> dict[str, Any]:
    """The parameters of a registered protocol and their defaults, e.g. exposure -> {history_len: 128,
    delay_s: 60.0}, author50 -> {history_len: 50}."""
    load_components()
    return parameters_of(PROTOCOLS.get(protocol))


def parameter_names() -> list[str]:
    """Every parameter of any registered protocol, sorted (each is a runs.parquet column and a data setting)."""
    load_components()
    return sorted({p for name in PROTOCOLS.names() for p in parameters_of(PROTOCOLS.get(name))})


def source(name: str) -> SourceEntry:
    """The registered source `name` (an unknown name is an error listing the registered ones)."""
    load_components()
    return SOURCES.get(name)
