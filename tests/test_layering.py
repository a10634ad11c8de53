"""The import structure of the six packages, read with `ast` from every module's source (docs/architecture.md).

- Layers: no import runs from a lower layer to a higher one: core < protocols < architectures < harness < analysis
  < cli.
- Modules: no two modules import each other, directly or through others (no import cycle, e.g.
  `a.py -> b.py -> a.py`); a cycle is a sign that a piece of one module belongs in the other, or in a third.

Every import counts wherever it is written: at module level, inside a function, under `if TYPE_CHECKING:` (a lazy or
type-only import is still a dependency, and hiding a cycle behind one does not remove it); absolute and relative
imports are both resolved. Imports of modules outside the six packages (the standard library, third-party ones such
as torch or mlflow, imported lazily where they are heavy or optional) are no edges of the module graph."""
from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Lowest first: a package may import itself and any package before it, never one after it.
LAYERS = ("core", "protocols", "architectures", "harness", "analysis", "cli")
RANK = {name: i for i, name in enumerate(LAYERS)}


def imports(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, imported module, names imported from it) of every import statement in `source`, the source of module
    `module` (dotted name; `is_package` for an `__init__.py`), at any depth, relative imports resolved against it:
    `import a.b` gives ("a.b", ()) (one entry per name), `from .x import y, z` in `p.m` gives ("p.x", ("y", "z"))."""
    found: list[tuple[int, str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_package else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found.append((node.lineno, name, tuple(alias.name for alias in node.names)))
    return found


def imported_packages(source: str, module: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in `source`, the source of module `module` (dotted name;
    `is_package` for an `__init__.py`), relative imports resolved against it. Only the six layers count."""
    return [(line, name.split(".")[0]) for line, name, _ in imports(source, module, is_package=is_package)
            if name.split(".")[0] in RANK]


def module_graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, dict[str, int]]:
    """The import graph of the modules in `sources` ({dotted name: (source, is_package)}): module -> {imported module:
    line of its first import}. `from p import n` is an edge to `p.n` where that is a module of `sources`, else to `p`;
    `import a.b.c` to the longest of `a.b.c`, `a.b`, `a` that is one. Other modules give no edge, nor does a module
    importing itself."""

    def known(name: str) -> str | None:
        while name and name not in sources:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, (source, is_package) in sources.items():
        edges = graph.setdefault(module, {})
        for line, name, names in imports(source, module, is_package=is_package):
            for target in [f"{name}.{n}" if f"{name}.{n}" in sources else name for n in names] or [name]:
                found = known(target)
                if found is not None and found != module:
                    edges[found] = min(line, edges.get(found, line))
    return graph


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One cycle `[a, b, ..., a]` (a shortest one through its first node) for every strongly connected component of
    `graph` (node -> successors) that holds one, each starting at the component's smallest node, in that order;
    [] when the graph has no cycle. Tarjan's algorithm, without recursion (a long import chain is no problem)."""
    succ = {v: sorted(set(ws)) for v, ws in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(succ):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(succ[root]))]
        while work:
            v, successors = work[-1]
            for w in successors:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ.get(w, []))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:  # every successor of v done
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        component.append(w)
                        if w == v:
                            break
                    components.append(component)
    cycles = []
    for component in components:
        start = min(component)
        if len(component) > 1 or start in succ.get(start, []):
            cycles.append(_cycle_through(start, succ, set(component)))
    return sorted(cycles)


def _cycle_through(start: str, succ: Mapping[str, list[str]], members: set[str]) -> list[str]:
    """A shortest cycle from `start` back to it inside `members` (breadth first)."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in succ.get(v, []):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [*reversed(path), start]
            if w in members and w not in came_from:
                came_from[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is on no cycle")  # find_cycles only asks for nodes of a cyclic component


def chain(cycle: list[str], graph: Mapping[str, Mapping[str, int]], files: Mapping[str, str]) -> str:
    """`a.py -> b.py -> a.py` for a cycle of modules, then where each import is (`a.py:12, b.py:7`)."""
    where = ", ".join(f"{files[a]}:{graph[a][b]}" for a, b in zip(cycle, cycle[1:]))
    return " -> ".join(files[m] for m in cycle) + f"  (imports at {where})"


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


def test_no_module_import_cycle():
    """No module imports itself through others, counting imports inside functions and under TYPE_CHECKING."""
    modules = _modules()
    graph = module_graph({m: (path.read_text(), path.name == "__init__.py") for m, path in modules})
    assert sum(len(edges) for edges in graph.values()) > 500  # the edges were found
    files = {m: str(path.relative_to(ROOT)) for m, path in modules}
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(chain(c, graph, files) for c in cycles)


@pytest.mark.parametrize("graph, cycles", [
    ({"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["a"]}, [["a", "b", "c", "a"]]),
    ({"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}, []),  # a diamond: two paths, no cycle
    ({"x": ["y"], "y": ["x"], "s": ["s"], "p": ["q"], "q": ["r"], "r": []}, [["s", "s"], ["x", "y", "x"]]),
    ({"a": ["b"], "b": ["c", "a"], "c": ["d"], "d": ["a"]}, [["a", "b", "a"]]),  # the shortest cycle through a
    ({"z": ["y"], "y": ["x"], "x": ["w"], "w": ["y"]}, [["w", "y", "x", "w"]]),  # reached from outside, named from w
    ({}, []),
])
def test_find_cycles_on_hand_built_graphs(graph, cycles):
    assert find_cycles(graph) == cycles


def test_find_cycles_follows_a_long_chain_without_recursion():
    n = 5000  # far deeper than Python's default recursion limit
    ring = {f"m{i:05d}": [f"m{(i + 1) % n:05d}"] for i in range(n)}
    assert find_cycles(ring) == [[*sorted(ring), "m00000"]]
    del ring["m04999"]  # cut the ring: a chain
    assert find_cycles(ring) == []


def test_module_graph_counts_lazy_type_only_and_relative_imports():
    sources = {
        "pkg": ("NAME = 1\n", True),
        "pkg.a": ("from . import b\nfrom pkg import NAME\n", False),  # a module of pkg; a name in pkg/__init__
        "pkg.b": ("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from .c import C\n", False),
        "pkg.c": ("import os\n\n\ndef f():\n    import pkg.a\n", False),
    }
    graph = module_graph(sources)
    assert graph == {"pkg": {}, "pkg.a": {"pkg.b": 1, "pkg": 2}, "pkg.b": {"pkg.c": 4}, "pkg.c": {"pkg.a": 5}}
    cycle = find_cycles(graph)
    assert cycle == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    files = {m: m.replace(".", "/") + ".py" for m in sources}
    assert chain(cycle[0], graph, files) == \
        "pkg/a.py -> pkg/b.py -> pkg/c.py -> pkg/a.py  (imports at pkg/a.py:1, pkg/b.py:4, pkg/c.py:5)"
    sources["pkg.c"] = ("import os\n", False)  # the function-local import gone: no cycle
    assert find_cycles(module_graph(sources)) == []
