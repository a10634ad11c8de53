"""What a history protocol and a data source must provide to be registered (`protocols.register`,
`protocols.register_source`), checked when they register; the contract in words: docs/protocols.md, "Adding a
protocol or a source in one file". A protocol's dataclass fields are the only place its parameters and their
defaults are defined.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

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
    #: `scaled`: RecFlow's reference target counts scaled to the log's size (`protocols.sampling.default_size`);
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
