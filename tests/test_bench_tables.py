"""`make bench` writes its results as markdown tables (tests/bench/write_tables.py).

End to end: a real pytest-benchmark run of a two-benchmark module in a temporary folder writes its JSON, the
writer turns it into `<module>.md`, and every figure in the table is the one the benchmark recorded (its
median and min from pytest-benchmark's own JSON, its extra_info values as set). A table of another module
already in the folder is left as it was, and no temporary file remains.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "bench"))

from write_tables import fmt, table_name, write_tables  # noqa: E402

BENCH_MODULE = '''
import pytest

@pytest.mark.parametrize("n", [1, 2])
def test_speed(benchmark, n):
    benchmark.pedantic(sum, args=(range(1000 * n),), rounds=3, iterations=1)
    benchmark.extra_info.update(targets_per_s=1500.0 * n, device="cpu", nested={"not": "a cell"})
'''


def _rows(md: str) -> dict[str, list[str]]:
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])} | {
        "__header__": header}


def test_a_benchmark_run_becomes_its_table(tmp_path):
    bench_dir = tmp_path / "tests" / "bench"
    bench_dir.mkdir(parents=True)
    (bench_dir / "test_tiny_bench.py").write_text(BENCH_MODULE)
    out_json = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(bench_dir),
                           "--benchmark-enable", f"--benchmark-json={out_json}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out_json.read_text())

    out = tmp_path / "docs"
    out.mkdir()
    other = out / "loader.md"
    other.write_text("kept\n")
    written = write_tables(out_json, out)

    assert written == [out / "tiny.md"]
    assert other.read_text() == "kept\n"
    assert sorted(p.name for p in out.iterdir()) == ["loader.md", "tiny.md"]  # no temporary file left
    rows = _rows((out / "tiny.md").read_text())
    assert rows["__header__"] == ["benchmark", "median s", "min s", "rounds", "targets_per_s", "device"]
    by_name = {b["name"]: b for b in data["benchmarks"]}
    assert set(by_name) == {"test_speed[1]", "test_speed[2]"}
    for name, bench in by_name.items():
        n = int(name[-2])
        assert rows[name][1:] == [fmt(bench["stats"]["median"]), fmt(bench["stats"]["min"]), "3",
                                  f"{1500 * n:,}", "cpu"]


def test_table_names_and_cells():
    assert table_name("tests/bench/test_loader_bench.py::test_x[plain]") == "loader"
    assert table_name("tests/bench/test_serving_reuse_bench.py::test_serving_reuse[10]") == "serving_reuse"
    assert fmt(1500.0) == "1,500" and fmt(0.3456789) == "0.3457" and fmt(2.5e-05) == "2.5e-05"
    assert fmt(12_345) == "12,345" and fmt(True) == "True" and fmt("a|b") == "a\\|b"
