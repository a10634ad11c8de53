"""docs/sweeps.md's table "Sweeps in this repository" against the files in sweeps/: every file is listed once,
with the trials `harness.sweep.plan.plan_sweep` plans for it (and its tuning trials), and every reference it
names is a committed folder. The counts in the table are typed; this keeps them from going stale."""
from __future__ import annotations

import re
from pathlib import Path

from harness.sweep.plan import plan_sweep
from harness.sweep.schema import load_sweep

REPO = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `(sweeps/[\w.]+\.yaml)` \|.*\| (\d+)(?: \+ (\d+) tuning)? \|\s*([\w/.]*)\s*\|$")


def _table() -> dict[str, tuple[int, int, str]]:
    text = (REPO / "docs" / "sweeps.md").read_text()
    section = text.split("## Sweeps in this repository", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[int, int, str]] = {}
    for line in section.splitlines():
        m = ROW.match(line)
        if m:
            assert m.group(1) not in rows, f"{m.group(1)} is listed twice"
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3) or 0), m.group(4))
    return rows


def test_every_sweep_file_is_listed_with_the_trials_it_plans(monkeypatch, tmp_path):
    for var in ("RECSCALE_ML100K", "RECFLOW_ROOT"):  # planning only expands the paths; nothing is read
        monkeypatch.setenv(var, str(tmp_path))
    rows = _table()
    files = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "sweeps").glob("*.yaml"))
    assert sorted(rows) == files
    for name in files:
        plan = plan_sweep(load_sweep(REPO / name))
        trials, tuning, reference = rows[name]
        assert (trials, tuning) == (len(plan.trials), len(plan.tuning_trials)), name
        if reference:
            assert (REPO / reference / "runs.parquet").is_file(), f"{name}: {reference} holds no reference"


def test_the_table_pattern_reads_a_row():
    row = "| `sweeps/x.yaml` | what, with | pipes | 75 + 90 tuning | results/reference/x/ |"
    m = ROW.match(row)
    assert m is not None and m.groups() == ("sweeps/x.yaml", "75", "90", "results/reference/x/")
    assert ROW.match("| `sweeps/x.yaml` | what | many | |") is None
    assert ROW.match("| sweeps/x.yaml | what | 5 | |") is None
