"""Data side of recscale. This module owns the two registries, PROTOCOLS (name -> history protocol dataclass) and
SOURCES (name -> `components.SourceEntry`), filled by discovery of this package's modules (not `synthetic/`
nor `_*`) and of `RECSCALE_PROTOCOL_PATH`: docs/protocols.md, "Adding a protocol or a source in one file".
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from core.discovery import Discovery
from core.registry import Registry

from .components import SourceDefaults, SourceEntry, check_protocol_class, parameters_of

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
