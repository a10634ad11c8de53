"""Output locations that cannot be written: every writing command exits 2 with one line naming the path
and what it was to write there, creates nothing, and a rerun to a good location works.

Root ignores permission bits, so the read-only location is a real read-only mount (a tmpfs mounted
`ro`); where mounting is not permitted those cases skip. A path whose parent is a regular file needs no
mount and always runs. Also here: a malformed `--address`, and a sweep folder left by a launch that
never started a trial, which must not block the next launch.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.main import main as cli_main
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)
from tests.test_analyze_cli import make_results

REPO = Path(__file__).resolve().parents[1]
SWEEP = ("name: ro\ndata: {source: synthetic, scale: tiny, history_len: 8, n_train: 500, n_valid: 100, n_test: 100}\n"
         "model: {dim: 8}\ngrid: {arch: [wukong], seed: [0]}\nresources: {cpu: 1, gpu: 0}\n")


def _mount(target: Path, *options: str) -> bool:
    target.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=16m", *options)), "tmpfs", str(target)],
                          capture_output=True).returncode == 0


@pytest.fixture
def readonly(tmp_path) -> Iterator[Path]:
    """An empty read-only file system (skips where mounting is not permitted)."""
    target = tmp_path / "ro"
    if not _mount(target, "ro"):
        pytest.skip("mounting a read-only tmpfs is not permitted here")
    yield target
    subprocess.run(["umount", str(target)], check=False)


@pytest.fixture
def under_a_file(tmp_path) -> Path:
    """A path whose parent is a regular file."""
    (tmp_path / "plain_file").write_text("x")
    return tmp_path / "plain_file"


def _refused(argv: list[str], path: Path, what: str, capsys) -> str:
    assert cli_main(argv) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert str(path) in lines[0] and f"cannot write {what}" in lines[0], lines[0]
    return lines[0]


def _only(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


@pytest.mark.fault
@pytest.mark.parametrize("kind", ["read-only mount", "parent is a file"])
def test_writing_commands_refuse_an_unwritable_location(kind, request, tiny_log, tiny_artifact, tmp_path,  # noqa: F811
                                                        capsys):
    root = request.getfixturevalue("readonly" if kind == "read-only mount" else "under_a_file")
    reason = "read-only file system" if kind == "read-only mount" else "is a file, not a folder"
    line = _refused(["synth", "--scale", "tiny", "--out", str(root / "log"), "--quiet"], root / "log",
                    "the synthetic log", capsys)
    assert reason in line
    _refused(["prepare", "--source", "synthetic", "--root", str(tiny_log), "--history-len", "8", "--train", "300",
              "--valid", "50", "--test", "50", "--out", str(root / "art"), "--no-progress"], root / "art",
             "the prepared artifact", capsys)
    _refused(["train", "--arch", "wukong", "--data", str(tiny_artifact), "--set", "dim=8", "--out", str(root / "run"),
              "--no-progress"], root / "run", "the run folder", capsys)
    _refused(["histories", str(tiny_artifact), "--split", "test", "--out", str(root / "h.parquet")], root / "h.parquet",
             "the history table", capsys)
    sweep = tmp_path / "ro.yaml"
    sweep.write_text(SWEEP)
    _refused(["sweep", str(sweep), "--results", str(root / "results")], root / "results" / "ro",
             "the sweep's results", capsys)
    if kind == "read-only mount":
        assert _only(root) == []  # nothing at all was created


@pytest.mark.fault
def test_analyze_refuses_a_results_folder_on_a_read_only_mount(tmp_path, capsys):
    target = tmp_path / "mnt"
    if not _mount(target):
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        results = make_results(target / "study")
        subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        before = sorted(p.name for p in results.iterdir())
        _refused(["analyze", str(results), "--no-plots"], results / "report.md", "the analysis report", capsys)
        assert sorted(p.name for p in results.iterdir()) == before
    finally:
        subprocess.run(["umount", str(target)], check=False)


@pytest.mark.fault
def test_a_subprocess_prints_one_line_and_no_traceback(under_a_file, tiny_artifact):  # noqa: F811
    proc = subprocess.run([sys.executable, "-m", "cli", "train", "--arch", "wukong", "--data",
                           str(tiny_artifact), "--set", "dim=8", "--out", str(under_a_file / "run"), "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RECSCALE_MALLOC_REEXEC": "1"})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"recscale train: error: {under_a_file / 'run'}: cannot write the run folder: "
                                   f"{under_a_file} is a file, not a folder")


@pytest.mark.fault
@pytest.mark.parametrize("address,why", [("notahost:abc", "port 'abc' is not a number"),
                                         ("10.0.0.1:99999", "port '99999' is not a number"),
                                         ("notahost", "no port"), (":6379", "no host")])
def test_malformed_address_exits_2_before_anything_is_written(address, why, tmp_path):
    sweep = tmp_path / "ro.yaml"
    sweep.write_text(SWEEP)
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "cli", "sweep", str(sweep), "--results", str(results),
                           "--address", address], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"recscale sweep: error: --address {address}: ") and why in lines[0]
    assert not results.exists()


@pytest.mark.fault
def test_a_sweep_folder_without_any_started_trial_does_not_block_the_next_launch(tmp_path):
    from harness.sweep.launcher import SweepError, prepare_sweep_dir
    from harness.sweep.plan import plan_sweep
    from harness.sweep.schema import parse_sweep

    sweep = parse_sweep(SWEEP)
    plan = plan_sweep(sweep)
    stub = tmp_path / "ro"
    stub.mkdir()
    (stub / "sweep.yaml").write_text(SWEEP)  # what a launch that died before its first trial leaves
    (stub / "datasets.json").write_text("{}")
    folder, resume = prepare_sweep_dir(sweep, plan, tmp_path, resume=False)
    assert folder == stub.resolve() and resume is False
    (stub / "runs" / "wukong-seed0").mkdir(parents=True)  # a trial started: now the folder needs --resume
    with pytest.raises(SweepError, match="pass --resume"):
        prepare_sweep_dir(sweep, plan, tmp_path, resume=False)
    shutil.rmtree(stub)
