"""The registries of components (`Registry`: name -> object, with clear errors for unknown and doubly registered
names) and the discovery that fills them (`Discovery`): every module of a package, and of the folders an
environment variable names (os.pathsep-separated, appended to the package's `__path__` so their files import as if
in the package), is imported once so that its `@register(...)` decorators fill the registries. Used by
`architectures` (`RECSCALE_MODEL_PATH`) and `protocols` (`RECSCALE_PROTOCOL_PATH`). A file that cannot be used (a
module name another file has, an import that fails, a name registered twice) is skipped and reported by
`problems()` (docs/protocols.md, "Adding a protocol or a source in one file").
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

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


def file_of(module: str) -> str:
    """The file a loaded module came from (its name when unknown)."""
    mod = sys.modules.get(module)
    return str(getattr(mod, "__file__", None) or module)


class Discovery:
    """Imports the component modules of one package (subpackages and `_private` modules excepted)."""

    def __init__(self, package: str, path: list[str], *, env: str, kind: str,
                 skip: frozenset[str] = frozenset()) -> None:
        """`path` is the package's own `__path__` list (extended in place); `kind` names the files in
        reports ("model file"); `skip` lists modules of the package that are never imported."""
        self.package, self.path, self.env, self.kind, self.skip = package, path, env, kind, skip
        self.loaded = False
        self._problems: list[str] = []
        for d in filter(None, os.environ.get(env, "").split(os.pathsep)):
            if str(Path(d).resolve()) not in self.path:
                self.path.append(str(Path(d).resolve()))

    def files(self) -> dict[str, list[str]]:
        """Module name -> the files that define it, in search order (the package first, then the path)."""
        found: dict[str, list[str]] = {}
        for directory in self.path:
            for m in pkgutil.iter_modules([directory]):
                if not m.ispkg and not m.name.startswith("_") and m.name not in self.skip:
                    found.setdefault(m.name, []).append(str(Path(directory) / f"{m.name}.py"))
        return found

    def load(self) -> None:
        """Import every component module, skipping and reporting a file that cannot be used; cheap after the first."""
        if self.loaded:
            return
        self.loaded = True
        own = self.path[0] if self.path else ""
        # the package's own modules first, so a built-in's registered names are taken before a path file's
        for mod, files in sorted(self.files().items(), key=lambda kv: (not kv[1][0].startswith(own + os.sep), kv[0])):
            if len(files) > 1:
                self._problems.append(f"{files[1]}: same module name as {files[0]}, which hides it; "
                                      "rename one of them")
            name = f"{self.package}.{mod}"
            try:
                importlib.import_module(name)
            except Exception as e:  # noqa: BLE001 - any error in a component file is that file's problem, reported
                sys.modules.pop(name, None)
                self._problems.append(f"{files[0]}: {type(e).__name__}: {e}; skipped")
        for line in self._problems:
            print(f"recscale: {self.kind} {line}", file=sys.stderr)

    def problems(self) -> list[str]:
        """The files that could not be used, one line each (empty when every file loaded)."""
        self.load()
        return list(self._problems)
