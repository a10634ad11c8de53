"""A disk that fills up: the real commands, run as subprocesses on a small tmpfs the test mounts, print one
line naming the path and what to free, exit 2, show no traceback and leave nothing half-written; a
checkpoint that does not fit leaves the previous one, and the run resumes once space is freed; a sweep on a
full disk resumes to the uninterrupted runs, even when Ray's experiment state was cut short (slow).

Mounting needs root (or a user namespace that allows it); where it is refused the tests skip.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)
from tests.sweep_files import tiny_sweep, write_sweep

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "RECSCALE_MALLOC_REEXEC": "1"}


@contextmanager
def small_fs(target: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `target` (skips where mounting is not permitted), unmounted afterwards."""
    target.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.decode().strip()}")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False)


def recscale(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=600, env=ENV)


def one_disk_full_line(proc: subprocess.CompletedProcess, command: str, path: Path) -> str:
    """The single stderr line of a command that ran out of space, checked for exit 2 and the named path."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"recscale {command}: error: {path}") and "no space left on device" in lines[0], lines
    assert "free space there" in lines[0] and "Traceback" not in proc.stderr
    return lines[0]


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


@pytest.mark.fault
def test_synth_and_prepare_on_a_full_disk_leave_nothing(tiny_log, tmp_path):  # noqa: F811
    with small_fs(tmp_path / "mnt", "512k") as mnt:  # pyarrow's OSError names no file: the --out folder is named
        one_disk_full_line(recscale("synth", "--scale", "tiny", "--out", str(mnt / "log"), "--quiet"), "synth",
                           mnt / "log")
        assert list(mnt.iterdir()) == []
    with small_fs(tmp_path / "mnt2", "256k") as mnt:  # numpy's short write keeps no errno at all
        one_disk_full_line(recscale("prepare", "--source", "synthetic", "--root", str(tiny_log), "--out",
                                    str(mnt / "art"), "--no-progress"), "prepare", mnt / "art")
        assert files_under(mnt) == []  # no artifact, no .tmp- folder (the empty --out root stays)


@pytest.mark.fault
def test_train_whose_first_checkpoint_does_not_fit_leaves_no_run_folder(tiny_artifact, tmp_path):  # noqa: F811
    with small_fs(tmp_path / "mnt", "64k") as mnt:  # torch's RuntimeError hides the ENOSPC in its context
        one_disk_full_line(recscale("train", "--arch", "wukong", "--data", str(tiny_artifact), "--set", "dim=8",
                                    "--out", str(mnt / "run"), "--no-progress"), "train", mnt / "run")
        assert list(mnt.iterdir()) == []


@pytest.mark.fault
def test_a_checkpoint_that_does_not_fit_keeps_the_previous_and_the_run_resumes(tiny_artifact, tmp_path):  # noqa: F811
    from harness.checkpoint import read_checkpoint_file

    # the first checkpoints (about 400 kB) fit; a later one (about 530 kB, written beside the last) does not
    argv = ("train", "--arch", "wukong", "--data", str(tiny_artifact), "--set", "dim=8", "--set", "train.epochs=2",
            "--set", "train.checkpoint_every_batches=1", "--no-progress")
    with small_fs(tmp_path / "mnt", "800k") as mnt:
        run = mnt / "run"
        one_disk_full_line(recscale(*argv, "--out", str(run)), "train", run)
        assert sorted(p.name for p in run.iterdir()) == [".data_fingerprint", "checkpoint.pt", "config.yaml", "curves"]
        position = read_checkpoint_file(run / "checkpoint.pt")["position"]  # the previous one, whole
        assert not position["finished"]
        subprocess.run(["mount", "-o", "remount,size=4m", str(mnt)], check=True)  # space freed
        resumed = recscale(*argv, "--out", str(run), "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert f"resuming from epoch {position['epoch']}, batch {position['batch']}" in resumed.stderr
        assert (run / "metrics.json").exists() and not list(run.glob(".*.tmp.*"))


@pytest.mark.fault
@pytest.mark.slow
def test_a_sweep_on_a_full_disk_resumes_once_space_is_freed_to_the_uninterrupted_runs(tmp_path):
    """The trials' checkpoints do not fit on 400 kB: one line naming the sweep folder, exit 2, no traceback. Ray's
    experiment state, which a full disk can leave cut short, is then cut short for certain; once space is freed
    `sweep --resume` says so in one line, runs the stage afresh from the run folders and ends with the
    uninterrupted sweep's runs, bit for bit."""
    sweep = write_sweep(tmp_path, tiny_sweep("full", tmp_path / "cache", max_failures=0))
    reference = recscale("sweep", str(sweep), "--results", str(tmp_path / "reference"), "--num-cpus", "1")
    assert reference.returncode == 0, reference.stderr
    want = pq.read_table(tmp_path / "reference" / "full" / "runs.parquet").to_pandas().set_index("trial_id")
    with small_fs(tmp_path / "mnt", "400k") as mnt:
        failed = recscale("sweep", str(sweep), "--results", str(mnt), "--num-cpus", "1")
        assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr
        errors = [ln for ln in failed.stderr.splitlines() if ln.startswith("recscale sweep: error: ")]
        assert errors == [ln for ln in errors if f"{mnt / 'full'}: no space left on device" in ln] and len(errors) == 1
        assert "continue the sweep with --resume" in errors[0]
        state = next((mnt / "full" / "ray" / "grid").glob("experiment_state-*.json"))
        state.write_text(state.read_text()[:100])
        subprocess.run(["mount", "-o", "remount,size=16m", str(mnt)], check=True)  # space freed
        resumed = recscale("sweep", str(sweep), "--results", str(mnt), "--num-cpus", "1", "--resume")
        assert resumed.returncode == 0, resumed.stderr
        assert "Ray's saved state is unreadable" in resumed.stderr and "Traceback" not in resumed.stderr
        got = pq.read_table(mnt / "full" / "runs.parquet").to_pandas()
    assert sorted(got["trial_id"]) == sorted(want.index)  # none lost, none twice
    for row in got.itertuples():
        assert row.test_auc == want.at[row.trial_id, "test_auc"], row.trial_id
