"""Markdown tables of a `make bench` run: one file per benchmark module, written from pytest-benchmark's JSON.

`make bench` runs the benchmarks under tests/bench with `--benchmark-json`, then this script, which turns
that JSON into `docs/benchmarks/<module>.md` (`test_loader_bench.py` -> `loader.md`): when and where the
numbers were measured (date, commit, CPU, cores, Python), then one row per benchmark with its timing and every
scalar it attached to `extra_info` (targets/s, utilisation, ...). Only the modules that ran are rewritten, so
`make bench ARGS=-k loader` leaves the other tables as they were. Each file is written atomically (a temporary
file renamed into place). Measurements are never typed into the docs by hand: they point at these files.

    python tests/bench/write_tables.py BENCH_JSON OUT_DIR
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.run_folder import write_text  # noqa: E402


def table_name(fullname: str) -> str:
    """`tests/bench/test_loader_bench.py::test_x[y]` -> `loader`."""
    stem = Path(fullname.split("::", 1)[0]).stem
    stem = stem.removeprefix("test_")
    return stem.removesuffix("_bench") or stem


def fmt(value: object) -> str:
    """A cell: numbers to 4 significant digits (integers in full), booleans and strings as they are."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.4g}"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _scalar(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def render(module: str, benchmarks: list[dict], data: dict) -> str:
    """The markdown page of one benchmark module."""
    machine = data.get("machine_info", {})
    cpu = machine.get("cpu", {}) or {}
    commit = data.get("commit_info", {}) or {}
    commit_id = str(commit.get("id") or "unknown")[:12] + (" (uncommitted changes)" if commit.get("dirty") else "")
    extra_keys: list[str] = []
    for bench in benchmarks:
        for key, value in (bench.get("extra_info") or {}).items():
            if _scalar(value) and key not in extra_keys:
                extra_keys.append(key)
    header = ["benchmark", "median s", "min s", "rounds", *extra_keys]
    source = benchmarks[0]["fullname"].split("::", 1)[0]
    lines = [
        f"# Benchmark: {module}",
        "",
        f"Written by `make bench` from `{source}`; do not edit by hand (rerun the command).",
        "",
        f"- measured: {data.get('datetime', 'unknown')}, commit {commit_id}",
        f"- CPU: {cpu.get('brand_raw', machine.get('processor') or 'unknown')}, {cpu.get('count', '?')} logical cores; "
        f"{machine.get('system', '')} {machine.get('machine', '')}; Python {machine.get('python_version', '?')}; "
        f"torch {_version('torch')}",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    for bench in sorted(benchmarks, key=lambda b: b["fullname"]):
        stats = bench.get("stats") or {}
        extra = bench.get("extra_info") or {}
        row = [bench["name"], fmt(stats.get("median")), fmt(stats.get("min")), fmt(stats.get("rounds")),
               *(fmt(extra[k]) if k in extra and _scalar(extra[k]) else "" for k in extra_keys)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def write_tables(bench_json: Path, out_dir: Path) -> list[Path]:
    """Write one table per module found in `bench_json`; return the files written."""
    data = json.loads(bench_json.read_text())
    groups: dict[str, list[dict]] = defaultdict(list)
    for bench in data.get("benchmarks", []):
        groups[table_name(bench["fullname"])].append(bench)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for module, benchmarks in sorted(groups.items()):
        path = out_dir / f"{module}.md"
        write_text(path, render(module, benchmarks, data))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench_json", type=Path, help="pytest-benchmark's --benchmark-json output")
    parser.add_argument("out_dir", type=Path, help="folder for the tables (docs/benchmarks)")
    args = parser.parse_args(argv)
    if not args.bench_json.is_file():
        print(f"{args.bench_json}: no benchmark results (did the benchmarks run?)", file=sys.stderr)
        return 2
    for path in write_tables(args.bench_json, args.out_dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
