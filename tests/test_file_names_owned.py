"""Every results, run and artifact file name is spelled only in `core/results_layout.py`.

The owned names are read from the layout module itself: each string constant that names a file (it holds
a dot: `runs.parquet`, `.data_fingerprint`, ...) and each name-building function (`score_ranks_file`,
`predictions_file`, ...), called with a sentinel to get its fixed prefix and suffix. The package source is
parsed with `ast`, so only string constants count (f-string parts included); docstrings and comments may
describe the files freely. Bare folder names (`runs`, `plots`, `vocab`, ...) are too common as words to
check this way; the layout module owns them too.
"""
from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from core import results_layout

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "protocols", "architectures", "harness", "analysis", "cli")
LAYOUT_FILE = ROOT / "core" / "results_layout.py"
_SENTINEL = "\x00"
_EXTENSION = re.compile(r"\.[A-Za-z0-9]+")
#: Extensions only owned files have: every PNG the package writes is a figure of the analysis (plot_file).
OWNED_EXTENSIONS = (".png",)


def owned_patterns() -> dict[str, re.Pattern[str]]:
    """{what the layout module calls it: regex that finds it in a string literal}."""
    out: dict[str, re.Pattern[str]] = {}
    for name, value in vars(results_layout).items():
        if name.isupper() and isinstance(value, str) and "." in value:
            out[name] = re.compile(rf"(?<![\w.]){re.escape(value)}(?!\w)")
        elif inspect.isfunction(value) and value.__module__ == results_layout.__name__:
            prefix, suffix = value(_SENTINEL).split(_SENTINEL)
            # a bare extension (`.parquet`, `.npy`) names no particular file, unless only owned files have it
            fixed = [part for part in (prefix, suffix)
                     if part and (not _EXTENSION.fullmatch(part) or part in OWNED_EXTENSIONS)]
            if fixed:
                out[f"{name}()"] = re.compile("|".join(re.escape(part) for part in fixed))
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, nodes) and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}


def owned_name_hits(source: str, patterns: dict[str, re.Pattern[str]]) -> list[tuple[int, str, str]]:
    """(line, literal, owner) for every non-docstring string constant of `source` that spells an owned name."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            hits += [(node.lineno, node.value, owner) for owner, p in patterns.items() if p.search(node.value)]
    return sorted(hits)


def test_the_layout_module_owns_every_file_name():
    patterns = owned_patterns()
    # the names this test exists for are among the checked ones
    for name in ("REPORT_FILE", "ANALYSIS_FILE", "RUNS_FILE", "MANIFEST_FILE", "DATA_FINGERPRINT_FILE",
                 "METRICS_FILE", "CONFIG_FILE", "CHECKPOINT_FILE", "score_ranks_file()", "predictions_file()",
                 "targets_file()", "cat_file()", "plot_file()"):
        assert name in patterns, name
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == LAYOUT_FILE:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}: {literal!r} ({owner})"
                      for line, literal, owner in owned_name_hits(path.read_text(), patterns)]
    assert not found, "file names spelled outside core/results_layout.py:\n" + "\n".join(found)


def test_the_check_finds_a_reintroduced_literal_and_ignores_prose():
    source = '''"""A module whose docstring names report.md and score_ranks_test.parquet: allowed."""
from core import results_layout as layout

# a comment naming runs.parquet: allowed

def paths(root, split):
    """manifest.json in a docstring: allowed."""
    ok = root / layout.REPORT_FILE
    report = root / "report.md"
    ranks = root / f"score_ranks_{split}.parquet"
    message = f"no analysis.json in {root}"
    hidden = root / ".data_fingerprint"
    targets = root / f"{split}_targets.parquet"
    figure = root / "plots" / "forest.png"
    similar = "runs.parquet_backup", "my_report.md"
    return ok, report, ranks, message, hidden, targets, figure, similar
'''
    hits = owned_name_hits(source, owned_patterns())
    assert [(line, owner) for line, _, owner in hits] == [
        (9, "REPORT_FILE"), (10, "score_ranks_file()"), (11, "ANALYSIS_FILE"), (12, "DATA_FINGERPRINT_FILE"),
        (13, "targets_file()"), (14, "plot_file()")]
