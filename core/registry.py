"""A tiny name -> object registry used by the protocol, source and architecture registries."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from .discovery import file_of

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to registered objects and gives clear errors for unknown names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                taken = self._items[name]  # a registry entry's `module`, else the object's own module
                first = file_of(str(getattr(taken, "module", None) or getattr(taken, "__module__", "")))
                raise ValueError(f"registers {self.kind} {name!r}, which {first} registered already; "
                                 "give one of them another name")
            self._items[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            valid = ", ".join(sorted(self._items)) or "(none registered)"
            raise KeyError(f"unknown {self.kind} {name!r}; valid: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items
