"""Model settings of a sweep: keys for every architecture and keys scoped to one (docs/sweeps.md, "Model keys").

Inside the planner a `model.<field>` / `model.<arch>.<field>` key is kept flat, as `<field>` / `<arch>.<field>`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from typing import Any

import architectures
from core.typed_config import ConfigError


@cache
def config_fields(arch: str) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(architectures.entry(arch).config_cls))


def scope(key: str) -> tuple[str | None, str]:
    """A flat model key as (architecture or None for every architecture, field)."""
    arch, dot, name = key.partition(".")
    return (arch, name) if dot else (None, key)


def flatten(mapping: Any, where: str) -> dict[str, Any]:
    """A model mapping as flat keys: `<field>` and `<arch>.<field>` for the per-architecture mappings."""
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {mapping!r}")
    archs = architectures.names()
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if key in archs:
            if not isinstance(value, Mapping) or not value:
                raise ConfigError(f"{where}.{key}: expected a mapping of {key}'s config fields "
                                  f"(settings for {key} only), got {value!r}")
            for name, v in value.items():
                out[f"{key}.{name}"] = v
        else:
            out[str(key)] = value
    return out


def applies(key: str, arch: str) -> bool:
    """Whether flat key `key` sets a field of `arch` (shared keys are checked to exist everywhere)."""
    owner, _ = scope(key)
    return owner is None or owner == arch


def for_arch(arch: str, flat: Mapping[str, Any]) -> dict[str, Any]:
    """The fields `flat` sets for `arch`: shared keys, then that architecture's own (which win)."""
    out = {k: v for k, v in flat.items() if scope(k)[0] is None}
    out.update({scope(k)[1]: v for k, v in flat.items() if scope(k)[0] == arch})
    return out


def check_key(where: str, key: str, archs: list[str]) -> None:
    """Refuse a flat key that is not a field of an architecture it applies to, naming both.

    `where` is how the user spelled the key (`model.num_heads`, `grid.model[1].helix.size`, ...)."""
    owner, name = scope(key)
    if name == "history_len":
        raise ConfigError(f"{where}: the model's history length follows the data; "
                          "set data.history_len (or sweep `history_len`) instead")
    if owner is not None:
        if owner not in archs:
            raise ConfigError(f"{where}: {owner} is not an architecture of this sweep ({', '.join(archs)})")
        if name not in config_fields(owner):
            valid = sorted(set(config_fields(owner)) - {"history_len"})
            raise ConfigError(f"{where}: not a config field of {owner}; valid: {', '.join(valid)}")
        return
    lacking = [a for a in archs if name not in config_fields(a)]
    if len(lacking) == len(archs):
        valid = sorted({f for a in archs for f in config_fields(a)} - {"history_len"})
        raise ConfigError(f"{where}: not a config field of {', '.join(archs)}; valid: {', '.join(valid)}")
    if lacking:
        owners = [a for a in archs if a not in lacking]
        raise ConfigError(
            f"{where}: architecture {', '.join(lacking)} has no config field {name!r} (only "
            f"{', '.join(owners)} {'has' if len(owners) == 1 else 'have'} it); a shared model key must be a field "
            f"of every architecture of the sweep. Set it for the ones that have it, e.g. "
            f"`model: {{{owners[0]}: {{{name}: ...}}}}` or the grid axis model.{owners[0]}.{name}")
