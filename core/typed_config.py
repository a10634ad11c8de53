"""Typed dataclass configs built from YAML / `--set key=value` overrides, validated at load time.

Every config in recscale is a dataclass (run, train, model, sweep, prepare, protocol, analysis); this
module is the one validation layer that turns plain mappings into them. It refuses unknown keys
(listing the valid ones), a renamed key (`RENAMED_KEYS`: old name -> new) naming the new one, and values
of the wrong type (naming the key with its full path, e.g. `data.split.timezone`); a value that fits no
member of a union gets every member's reason. A dataclass whose keys are partly open (a prepare config
takes its protocol's parameters by name) names a mapping field in `EXTRA_KEYS_FIELD`: keys that are not
fields go there and the class validates them itself. A dataclass naming a field in `SHORT_FORM_FIELD` may also
be given as that field's value alone (`train.tasks=[long_view]` for `[{name: long_view}]`). Range
checks live in each dataclass's `__post_init__` and raise ConfigError with the field name; `from_dict`
prefixes it with the section path.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml

from .errors import RecscaleError

if typing.TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")


class ConfigError(RecscaleError, ValueError):
    """A config value or key is invalid; the message names the key."""


def _coerce(value: Any, tp: Any, key: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is typing.Union or origin is types.UnionType:
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        reasons = []
        for a in members:
            try:
                return _coerce(value, a, key)
            except ConfigError as e:
                reasons.append((a, str(e)))
        if len(reasons) == 1:  # X | None: X's own reason names the key (or the nested key) precisely
            message = reasons[0][1]
            if type(None) in args and message.startswith(f"{key}: "):
                message += " (or null)"
            raise ConfigError(message)
        allowed = " | ".join(_type_name(a) for a in args)
        why = "; ".join(f"as {_type_name(a)}: {msg.removeprefix(f'{key}: ')}" for a, msg in reasons)  # key named once
        raise ConfigError(f"{key}: {value!r} matches none of {allowed} ({why})")
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(f"{key}: {value!r} is not one of {list(choices)}")
        return value
    if origin in (tuple, list):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v != ""]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(args) != len(value):
                raise ConfigError(f"{key}: expected {len(args)} items, got {len(value)}")
        else:  # one element type for every item
            args = (args[0] if args else Any,) * len(value)
        out = [_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args))]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        short = getattr(tp, "SHORT_FORM_FIELD", None)
        if short is not None and isinstance(value, str):
            value = {short: value}
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return from_dict(tp, value, prefix=f"{key}.")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if tp is int or tp is float:
        if not isinstance(value, bool):
            if isinstance(value, int) or (isinstance(value, float) and (tp is float or value.is_integer())):
                return tp(value)
            if isinstance(value, str):
                with contextlib.suppress(ValueError):
                    return int(value.replace("_", "")) if tp is int else float(value)
        raise ConfigError(f"{key}: expected {'an integer' if tp is int else 'a number'}, got {value!r}")
    if tp is str:
        if isinstance(value, (dt.date, dt.time)):  # YAML reads 2024-02-08 as a date; the field wants the text
            return value.isoformat()
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    return value


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    if get_origin(tp) is None and isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def from_dict(cls: type[C], data: Mapping[str, Any] | None, *, prefix: str = "") -> C:
    """Build dataclass `cls` from `data`, validating keys and types; defaults fill the rest."""
    data = dict(data or {})
    check_renamed(cls, data, prefix)
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    extra = getattr(cls, "EXTRA_KEYS_FIELD", None)
    if extra is not None:  # keys that are not fields go into that mapping field; the class validates them
        spill = {k: data.pop(k) for k in list(data) if k not in fields}
        if spill:
            given = dict(data.get(extra) or {})
            twice = sorted(set(spill) & set(given))
            if twice:
                raise ConfigError(f"{prefix}{twice[0]}: given twice (also as {prefix}{extra}.{twice[0]}); keep one")
            data[extra] = {**given, **spill}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown key(s) {', '.join(prefix + u for u in unknown)}; valid keys: {', '.join(sorted(fields))}"
        )
    kwargs = {k: _coerce(v, hints[k], prefix + k) for k, v in data.items()}
    try:
        obj = cls(**kwargs)
    except TypeError as e:  # missing required fields
        raise ConfigError(f"{prefix or cls.__name__}: {e}") from None
    except ConfigError as e:  # a range check in __post_init__: name the key with its full path
        message = str(e)
        if prefix and not message.startswith(prefix):
            message = prefix + message
        raise ConfigError(message) from None
    return obj


def check_renamed(cls: type, keys: Any, prefix: str = "") -> None:
    """Refuse a key `cls` has renamed (its `RENAMED_KEYS`, old -> new), naming the new key."""
    renamed = getattr(cls, "RENAMED_KEYS", {})
    for key in keys:
        if key in renamed:
            raise ConfigError(f"{prefix}{key}: renamed; write {prefix}{renamed[key]}")


def to_dict(cfg: Any) -> dict[str, Any]:
    """Plain, YAML-safe dict of a dataclass (tuples become lists)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(cfg)


def flat_keys(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings spelled as dotted keys, one per leaf: {"train": {"lr": 1}} -> {"train.lr": 1}.
    An empty mapping is a leaf (kept as its value)."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, Mapping) and value:
            out.update(flat_keys(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def parse_set_options(items: list[str] | None) -> dict[str, Any]:
    """Turn ['width=32', 'train.lr=1e-3'] into a nested dict; values are parsed as YAML scalars."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw != "" else ""
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {p!r} is not a section")
        node[parts[-1]] = value
    return out


def merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied, nested sections merged key by key (validate the result once)."""
    out = dict(base)
    for key, value in overrides.items():
        nested = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = merged(out[key], value) if nested else value
    return out


def apply_overrides(cfg: C, overrides: Mapping[str, Any]) -> C:
    """A copy of dataclass `cfg` with `overrides` (validated) applied, nested sections included."""
    return from_dict(type(cfg), merged(to_dict(cfg), overrides))
