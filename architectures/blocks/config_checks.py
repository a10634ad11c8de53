"""Value checks shared by every model config dataclass, called from its `__post_init__` or inherited with
`CheckedConfig` (types of values read from YAML / `--set` are checked by `core.typed_config`; these checks also
cover configs built in code). Every message names the key and says what is allowed, in one format:
`model.<key>: <value> <problem> (allowed: ...)`.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import TYPE_CHECKING, ClassVar, Literal, cast, get_args, get_origin

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

from core.typed_config import ConfigError


def _literal_choices(tp: object) -> tuple | None:
    """Allowed values of a Literal annotation (also inside `X | None`), else None."""
    if get_origin(tp) is Literal:
        return get_args(tp)
    for arg in get_args(tp):
        if get_origin(arg) is Literal:
            return get_args(arg) + ((None,) if type(None) in get_args(tp) else ())
    return None


def check_choices(cfg: DataclassInstance) -> None:
    """Every field annotated with a Literal holds one of its values."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        allowed = _literal_choices(hints[f.name])
        value = getattr(cfg, f.name)
        if allowed is not None and value not in allowed:
            raise ConfigError(f"model.{f.name}: {value!r} is not allowed (allowed: {list(allowed)})")


def require_at_least(cfg: object, low: int, *names: str) -> None:
    """Each listed field (an int, None, or a tuple of ints checked entry by entry) is >= `low` when set."""
    for name in names:
        value = getattr(cfg, name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        if any(v is not None and v < low for v in values):
            raise ConfigError(f"model.{name}: {value!r} is not allowed (allowed: integers >= {low}"
                              f"{', each entry' if isinstance(value, (tuple, list)) else ''})")


def require_divisible(cfg: object, name: str, *by: str) -> None:
    """Field `name` is a multiple of each field in `by`."""
    value = getattr(cfg, name)
    for other in by:
        d = getattr(cfg, other)
        if value % d:
            raise ConfigError(f"model.{name}: {value!r} is not allowed (allowed: multiples of "
                              f"model.{other}={d})")


def require_positive_number(cfg: object, *names: str) -> None:
    """Each listed field (a float or an int) is finite and > 0."""
    for name in names:
        value = getattr(cfg, name)
        if not (isinstance(value, (int, float)) and 0 < value < float("inf")):
            raise ConfigError(f"model.{name}: {value!r} is not allowed (allowed: finite numbers > 0)")


#: Annotations of the fields `CheckedConfig` checks as counts.
_COUNT_TYPES = (int, int | None, tuple[int, ...], tuple[int, ...] | None)


class CheckedConfig:
    """Base of a model config dataclass (it adds no field) whose `__post_init__` checks every field by its type:
    a Literal holds one of its values, a count (int, `int | None`, `tuple[int, ...]`) is >= 1 when set, or >= 0
    when named in `NON_NEGATIVE`, and a float is finite and > 0. A subclass with more checks calls
    `super().__post_init__()` first."""

    NON_NEGATIVE: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        cfg = cast("DataclassInstance", self)
        check_choices(cfg)
        hints = typing.get_type_hints(type(self))
        names = [f.name for f in dataclasses.fields(cfg)]
        require_at_least(self, 1, *(n for n in names if hints[n] in _COUNT_TYPES and n not in self.NON_NEGATIVE))
        require_at_least(self, 0, *self.NON_NEGATIVE)
        require_positive_number(self, *(n for n in names if hints[n] is float))
