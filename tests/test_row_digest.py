"""runs.parquet rows carry their own proof: a digest written with each row, re-digested here with hashlib; an
edited value stops `analyze` and `reference check` with one line naming the run and the column; and
`reference check` names configuration differences before anything about the machines."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.collect import read_runs
from analysis.reference import publish_reference
from cli.main import main
from core.results_layout import METRICS_FILE, RUNS_DIR, TRIAL_RECORD_FILE
from harness.sweep.collect import collect_runs

REPO = Path(__file__).resolve().parents[1]


def _digest(row: dict) -> str:
    """The digest as this test computes it: sha256 of the row's other values as sorted-key JSON."""
    values = {k: v for k, v in row.items() if k != "row_digest"}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def _sweep(folder: Path, num_heads: int = 2) -> Path:
    """A sweep folder with four finished run folders (two architectures, two seeds) and its runs.parquet."""
    for arch in ("wukong", "whale"):
        for seed in (0, 1):
            run = folder / RUNS_DIR / f"{arch}-seed{seed}"
            run.mkdir(parents=True)
            record = {"trial_id": run.name, "stage": "grid", "arch": arch, "seed": seed,
                      "model.num_heads": num_heads, "train.lr": 0.01}
            (run / TRIAL_RECORD_FILE).write_text(json.dumps(record))
            metrics = {"test_auc": 0.6 + seed / 100 + (arch == "whale") / 50, "test_logloss": 0.5 - seed / 1000,
                       "wall_s": 1.5 + seed}
            (run / METRICS_FILE).write_text(json.dumps(metrics))
    (folder / "sweep.yaml").write_text(f"name: {folder.name}\n")
    collect_runs(folder)
    return folder


def _edit(path: Path, column: str, row: int, value) -> None:
    """Change one cell of a parquet file with pyarrow, leaving every other value (and the digests) as they are."""
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[row] = value
    i = table.column_names.index(column)
    pq.write_table(table.set_column(i, column, pa.array(values, table.schema.field(column).type)), path)


def test_collected_rows_carry_a_digest_of_their_values(tmp_path):
    sweep = _sweep(tmp_path / "s")
    rows = pq.read_table(sweep / "runs.parquet").to_pylist()
    assert len(rows) == 4
    assert [r["row_digest"] for r in rows] == [_digest(r) for r in rows]
    assert len({r["row_digest"] for r in rows}) == 4
    read_runs(sweep / "runs.parquet")  # verifies without complaint


@pytest.mark.fault
def test_analyze_refuses_an_edited_value_naming_the_run_and_the_column(tmp_path, capsys):
    sweep = _sweep(tmp_path / "s")
    _edit(sweep / "runs.parquet", "test_auc", 2, 0.9)
    assert main(["analyze", str(sweep), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "wukong-seed0" in err[0] and "test_auc is 0.9" in err[0] and "--trust-edits" in err[0]
    assert not (sweep / "report.md").exists() and not (sweep / "analysis.json").exists()  # nothing written
    # a timing column is digested too: an edit there is an edit
    sweep2 = _sweep(tmp_path / "s2")
    _edit(sweep2 / "runs.parquet", "wall_s", 0, 99.0)
    assert main(["analyze", str(sweep2), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "whale-seed0" in err and "wall_s is 99.0" in err


@pytest.mark.fault
def test_a_committed_reference_with_one_edited_value_is_refused_unless_trusted(tmp_path, capsys):
    ref = tmp_path / "demo"
    shutil.copytree(REPO / "results" / "reference" / "demo", ref)
    table = _without_digests(ref / "runs.parquet")
    digests = pa.array([_digest(r) for r in table.to_pylist()], pa.string())
    pq.write_table(table.append_column("row_digest", digests), ref / "runs.parquet")
    trial = table.column("trial_id")[3].as_py()
    _edit(ref / "runs.parquet", "test_auc", 3, 0.99)
    assert main(["analyze", str(ref), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"trial {trial}" in err[0] and "do not match its row_digest" in err[0], err
    assert main(["analyze", str(ref), "--no-plots", "--trust-edits"]) == 0
    assert "predates row digests" not in capsys.readouterr().err


@pytest.mark.fault
def test_a_table_written_before_digests_is_analysed_with_a_note(tmp_path, capsys):
    ref = tmp_path / "demo"
    shutil.copytree(REPO / "results" / "reference" / "demo", ref)
    pq.write_table(_without_digests(ref / "runs.parquet"), ref / "runs.parquet")  # as written before digests
    assert main(["analyze", str(ref), "--no-plots"]) == 0
    assert "predates row digests; its rows cannot be verified" in capsys.readouterr().err


def _without_digests(path):
    """The table at `path` without its row_digest column (a committed reference may have one or not)."""
    table = pq.read_table(path)
    return table.drop_columns([c for c in ("row_digest",) if c in table.column_names])


@pytest.mark.fault
def test_publish_keeps_the_digest_valid_and_refuses_an_edited_sweep(tmp_path, capsys):
    sweep = _sweep(tmp_path / "s")
    out = publish_reference(sweep, tmp_path / "ref" / "s")
    rows = pq.read_table(out / "runs.parquet").to_pylist()
    assert [r["row_digest"] for r in rows] == [_digest(r) for r in rows]
    _edit(sweep / "runs.parquet", "test_logloss", 1, 0.1)
    assert main(["reference", "publish", str(sweep), "--out", str(tmp_path / "ref2"), "--no-plots"]) == 2
    assert "test_logloss is 0.1" in capsys.readouterr().err and not (tmp_path / "ref2").exists()
    assert main(["reference", "check", str(sweep), str(out)]) == 2
    assert main(["reference", "check", str(sweep), str(out), "--trust-edits"]) == 1


@pytest.mark.fault
def test_reference_check_names_config_differences_before_the_machines(tmp_path, capsys):
    fresh, ref = _sweep(tmp_path / "fresh", num_heads=4), _sweep(tmp_path / "ref", num_heads=2)
    assert main(["reference", "check", str(fresh), str(ref)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "4 configuration difference(s) (trial, column: fresh vs reference):" in out
    assert "  whale-seed0, model.num_heads: 4 vs 2" in out
    assert out[-1] == "NOT reproduced: a different study (the trials' configurations differ)"
    assert not any("where the two ran" in line or "fingerprint" in line for line in out)
    assert main(["reference", "check", str(ref), str(_sweep(tmp_path / "again", num_heads=2))]) == 0
