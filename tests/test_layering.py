"""No import runs from a lower layer to a higher one: core < protocols < architectures < harness < analysis < cli
(docs/architecture.md). Every module of the six packages is parsed with `ast`, imports inside functions
included (a lazy import is still a dependency); absolute and relative imports are both resolved."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Lowest first: a package may import itself and any package before it, never one after it.
LAYERS = ("core", "protocols", "architectures", "harness", "analysis", "cli")
RANK = {name: i for i, name in enumerate(LAYERS)}


def imported_packages(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in `source`, the source of module `module` (dotted name;
    `is_package` for an `__init__.py`), relative imports resolved against it. Only the six layers count."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                names = [".".join([*base, *([node.module] if node.module else [])])]
            else:
                names = [node.module or ""]
        else:
            continue
        found += [(node.lineno, name.split(".")[0]) for name in names if name.split(".")[0] in RANK]
    return found


def upward_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """'module:line imports package' for every import of a layer above the module's own."""
    own = RANK[module.split(".")[0]]
    return [f"{module}:{line} imports {package} ({LAYERS[own]} < {package})"
            for line, package in imported_packages(source, module, is_package=is_package) if RANK[package] > own]


def _modules() -> list[tuple[str, Path]]:
    out = []
    for package in LAYERS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out.append((".".join(parts[:-1] if parts[-1] == "__init__" else parts), path))
    return out


def test_every_package_is_a_layer():
    """A new top-level package must be placed in LAYERS (else its imports go unchecked)."""
    top = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert top == set(LAYERS)


def test_no_import_runs_upward():
    modules = _modules()
    assert len(modules) > 100  # the walk found the packages
    problems = [p for module, path in modules
                for p in upward_imports(path.read_text(), module, is_package=path.name == "__init__.py")]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("source, module, flagged", [
    ("import analysis.pipeline\n", "harness.train", True),
    ("def f():\n    from cli.main import main\n", "core.registry", True),  # inside a function
    ("from ..analysis import x\n", "harness.sweep.plan", False),  # relative: harness.analysis, inside harness
    ("from .. import train\n", "harness.sweep.plan", False),
    ("from core.errors import RecscaleError\nimport protocols\n", "harness.train", False),
    ("import numpy\nfrom harness import metric_registry\n", "analysis.fits", False),
    ("from architectures import build\n", "protocols.prepare", True),
])
def test_upward_import_in_synthetic_source_is_flagged(source, module, flagged):
    assert bool(upward_imports(source, module)) is flagged


def test_relative_import_resolves_to_its_package():
    assert imported_packages("from ..registry import Registry\n", "core.sub.mod") == [(1, "core")]
    assert imported_packages("from . import errors\n", "protocols", is_package=True) == [(1, "protocols")]
