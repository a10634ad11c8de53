"""Data side of recscale: sources, validation, synthetic log, splits, legal histories, encoding,
prepared artifacts and the batch loader.

Registries:
    SOURCES    name -> callable(root: Path, **options) -> ExposureLog   (`recflow`, `synthetic`, `movielens100k`)
    PROTOCOLS  name -> history protocol class                        (`exposure`, `author50`)
    SOURCE_DEFAULTS  source name -> `protocols.sources.SourceDefaults` (its default split and sizes)
Register a new one with `@register_source("name")` / `@register("name")` in its own module and add
that module to `_COMPONENT_MODULES` below; a source declares its defaults with
`SOURCE_DEFAULTS.register("name")(SourceDefaults(...))` (one that declares none gets RecFlow's).
"""
from __future__ import annotations

import importlib

from .registry import Registry

PROTOCOLS: Registry = Registry("protocol")
SOURCES: Registry = Registry("source")
SOURCE_DEFAULTS: Registry = Registry("source defaults")

register = PROTOCOLS.register
register_source = SOURCES.register

#: Modules whose import registers sources and protocols.
_COMPONENT_MODULES: tuple[str, ...] = ("sources", "history")


def load_components() -> None:
    """Import every component module so the registries are filled."""
    for mod in _COMPONENT_MODULES:
        importlib.import_module(f"{__name__}.{mod}")


def protocol_names() -> list[str]:
    load_components()
    return PROTOCOLS.names()


def source_names() -> list[str]:
    load_components()
    return SOURCES.names()
