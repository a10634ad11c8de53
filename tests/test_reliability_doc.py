"""docs/reliability.md against the fault tests, both ways: every test a table row names exists (module, function,
and a parameter id given in brackets), every test marked `@pytest.mark.fault` (or in a module whose `pytestmark`
holds it) is named by a row and every test a row names is so marked; the table of issue 42's cases has its 33 rows,
numbered, each naming a fault test. Read from the sources with `ast` (nothing is imported or collected)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
DOC = TESTS.parent / "docs" / "reliability.md"
CASES_HEADING = "## The 33 cases of issue 42"


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row (header and separator rows left out)."""
    rows = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| ---")]
    return [r for r in rows if r[-1] != "test"]


def named_tests(cell: str) -> list[tuple[str, str, str | None]]:
    """(module file, function, parameter id or None) of every test a test cell names: `file.py::test_x[id]`, and
    after it a bare `test_y` or `test_y[id]` (a test of the same file) or `[id]` (another id of the same test)."""
    found: list[tuple[str, str, str | None]] = []
    module = function = None
    for token in re.findall(r"`([^`]*)`", cell):
        m = re.fullmatch(r"(?:(test_\w+\.py)(?:::)?)?(test_\w+)?(?:\[(.+)\])?", token)
        if not m or not any(m.groups()):
            continue
        module, function = m.group(1) or module, m.group(2) or (function if not m.group(1) else None)
        if module and function:
            found.append((module, function, m.group(3)))
    return found


def fault_tests() -> set[tuple[str, str]]:
    """(module file, function) of every test marked `fault`, directly or through its module's `pytestmark`."""
    marked = set()
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_mark = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                          and "pytest.mark.fault" in ast.unparse(n.value) for n in tree.body)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_") and (
                    module_mark or any(ast.unparse(d) == "pytest.mark.fault" for d in node.decorator_list)):
                marked.add((path.name, node.name))
    return marked


def test_every_named_test_exists_and_every_fault_test_has_a_row():
    rows = table_rows(DOC.read_text())
    named = [t for row in rows for t in named_tests(row[-1])]
    assert len(named) > 100
    for module, function, param in named:
        source = (TESTS / module).read_text()
        assert re.search(rf"^def {function}\(", source, re.M), f"{module}::{function}: no such test"
        assert param is None or param in source, f"{module}::{function}[{param}]: no such parameter id"
    named_set = {(module, function) for module, function, _ in named}
    marked = fault_tests()
    assert not marked - named_set, f"fault tests without a row in {DOC.name}: {sorted(marked - named_set)}"
    assert not named_set - marked, f"tests named in {DOC.name} but not marked fault: {sorted(named_set - marked)}"


def test_the_33_cases_of_issue_42_each_name_a_fault_test():
    text = DOC.read_text()
    assert CASES_HEADING in text
    cases = table_rows(text.split(CASES_HEADING, 1)[1].split("\n## ", 1)[0])
    assert [row[0] for row in cases] == [str(i) for i in range(1, 34)]
    marked = fault_tests()
    for row in cases:
        tests = named_tests(row[-1])
        assert tests and all((m, f) in marked for m, f, _ in tests), row
