"""Fault injection: `kill -9` at seeded random times of real `recscale prepare`, `recscale train` and
`recscale sweep` processes, then the same command again (train: with --resume; sweep: with --resume).

What must hold after every kill: no partial artifact is visible under an artifact's name (every
artifact folder that exists verifies), a run folder's checkpoint loads and its metrics.json, when
present, is complete; after the rerun the artifact is byte-identical to an uninterrupted one, the run's
metrics and predictions equal an uninterrupted run's bit for bit, and runs.parquet holds each trial
exactly once with the uninterrupted metrics.

Kill times are drawn with `random.Random(seed)` between 0 and the duration of an uninterrupted run of
the same command measured just before (the default suite uses one seed per command, in the second half of
that span, where files are being written; the slow suite draws several over the whole span). A sweep is
killed on progress instead: a seeded fraction of a second after its k-th trial record (trials.jsonl), so
the kill always falls inside a trial, however fast the machine.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from protocols.integrity import verify_artifact
from tests.fixtures_data import TINY_HISTORY_LEN, TINY_SPLITS, tiny_artifact, tiny_log  # noqa: F401
from tests.sweep_files import tiny_sweep, write_sweep

CLI = [sys.executable, "-m", "cli"]


def _run(argv: list[str], *, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=timeout)
    return proc, time.monotonic() - t0


def _run_killed(argv: list[str], delay: float) -> int | None:
    """Start the command in its own session and SIGKILL the whole session after `delay` seconds (every
    process it started, Ray's included); returns the exit status when it finished before that."""
    proc = subprocess.Popen([*CLI, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        return proc.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    sid = proc.pid
    os.killpg(sid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60  # processes of the session that escaped the group (none expected)
    while True:
        left = subprocess.run(["pgrep", "-s", str(sid)], capture_output=True, text=True).stdout.split()
        if not left or time.monotonic() > deadline:
            break
        for pid in left:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
    assert not left, f"processes of the killed command still running: {left}"
    return None


def _delays(seeds: list[int], span: float, *, late: bool) -> list[float]:
    return [random.Random(s).uniform(0.5 * span if late else 0.0, span) for s in seeds]


# ----------------------------------------------------------------------------------------------
# prepare


def _prepare_argv(log: Path, out: Path) -> list[str]:
    sets = {"source": "synthetic", "protocol": "exposure", "history_len": TINY_HISTORY_LEN, "sample_seed": 3,
            **TINY_SPLITS}
    return ["prepare", "--root", str(log), "--out", str(out), "--no-progress",
            *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]


def _artifacts(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")) if out.exists() else []


def _check_prepare_kills(log: Path, tmp_path: Path, seeds: list[int], *, late: bool) -> None:
    ref_out = tmp_path / "reference"
    ref, span = _run(_prepare_argv(log, ref_out))
    assert ref.returncode == 0, ref.stderr
    (reference,) = _artifacts(ref_out)
    want = verify_artifact(reference)["integrity"]["files"]
    for seed, delay in zip(seeds, _delays(seeds, span, late=late)):
        out = tmp_path / f"killed-{seed}"
        _run_killed(_prepare_argv(log, out), delay)
        for artifact in _artifacts(out):  # whatever carries an artifact's name is complete
            verify_artifact(artifact)
        again, _ = _run(_prepare_argv(log, out))
        assert again.returncode == 0, again.stderr
        (rebuilt,) = _artifacts(out)
        assert rebuilt.name == reference.name
        assert verify_artifact(rebuilt)["integrity"]["files"] == want, f"seed {seed}, kill at {delay:.2f} s"


@pytest.mark.fault
def test_prepare_killed_then_rerun_gives_the_uninterrupted_artifact(tiny_log, tmp_path):  # noqa: F811
    _check_prepare_kills(tiny_log, tmp_path, [0], late=True)


@pytest.mark.fault
@pytest.mark.slow
def test_prepare_killed_at_many_points(tiny_log, tmp_path):  # noqa: F811
    _check_prepare_kills(tiny_log, tmp_path, list(range(1, 7)), late=False)


# ----------------------------------------------------------------------------------------------
# train


def _train_argv(data: Path, out: Path) -> list[str]:
    sets = ["model.dim=8", "train.num_threads=1", "train.epochs=2", "train.batch_size=128",
            "train.checkpoint_every_batches=1"]
    return ["train", "--arch", "wukong", "--data", str(data), "--out", str(out), "--no-progress",
            *(a for s in sets for a in ("--set", s))]


def _check_train_kills(data: Path, tmp_path: Path, seeds: list[int], *, late: bool) -> None:
    ref_dir = tmp_path / "reference"
    ref, span = _run(_train_argv(data, ref_dir))
    assert ref.returncode == 0, ref.stderr
    want = json.loads((ref_dir / "metrics.json").read_text())
    for seed, delay in zip(seeds, _delays(seeds, span, late=late)):
        out = tmp_path / f"killed-{seed}"
        _run_killed(_train_argv(data, out), delay)
        if (out / "checkpoint.pt").exists():  # never a partial checkpoint under its name
            torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
        if (out / "metrics.json").exists():
            assert json.loads((out / "metrics.json").read_text())["test_auc"] == want["test_auc"]
        if not out.exists():  # killed before the run folder was made: --resume has nothing to resume
            refused, _ = _run([*_train_argv(data, out), "--resume"])
            assert refused.returncode == 2 and "no such run folder" in refused.stderr, refused.stderr
        resumed, _ = _run([*_train_argv(data, out), *(["--resume"] if out.exists() else [])])
        assert resumed.returncode == 0, resumed.stderr
        got = json.loads((out / "metrics.json").read_text())
        where = f"seed {seed}, kill at {delay:.2f} s of {span:.2f} s"
        assert got["test_auc"] == want["test_auc"], where  # bit-identical
        assert {k: v for k, v in got.items() if k.startswith(("valid_", "test_", "oracle_"))} == \
            {k: v for k, v in want.items() if k.startswith(("valid_", "test_", "oracle_"))}, where
        for split in ("valid", "test"):
            assert pq.read_table(out / f"predictions_{split}.parquet").equals(
                pq.read_table(ref_dir / f"predictions_{split}.parquet")), where
        assert not list(out.glob(".*.tmp.*")), where


@pytest.mark.fault
def test_train_killed_then_resumed_equals_the_uninterrupted_run(tiny_artifact, tmp_path):  # noqa: F811
    _check_train_kills(tiny_artifact, tmp_path, [0], late=True)


@pytest.mark.fault
@pytest.mark.slow
def test_train_killed_at_many_points(tiny_artifact, tmp_path):  # noqa: F811
    _check_train_kills(tiny_artifact, tmp_path, list(range(1, 7)), late=False)


# ----------------------------------------------------------------------------------------------
# sweep


@pytest.fixture(scope="module")
def sweep_reference(tmp_path_factory):
    """The sweep file (its data cache prepared) and an uninterrupted run's runs.parquet."""
    root = tmp_path_factory.mktemp("kill9_sweep")
    sweep = write_sweep(root, tiny_sweep("kill9", root / "cache", grid={"seed": [0, 1, 2]}), "killed_sweep.yaml")
    ref, _ = _run(["sweep", str(sweep), "--results", str(root / "reference"), "--num-cpus", "1"], timeout=900)
    assert ref.returncode == 0, ref.stderr
    want = pq.read_table(root / "reference" / "kill9" / "runs.parquet").to_pandas().set_index("trial_id")
    return sweep, want


def _run_killed_after_records(argv: list[str], events: Path, k: int, extra_s: float) -> None:
    """Start the command in its own session and SIGKILL the whole session `extra_s` seconds after the k-th
    trial record (trials.jsonl line) appeared: a point reached by progress, not guessed from a clock."""
    proc = subprocess.Popen([*CLI, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 900
    while not (events.exists() and len(events.read_text().splitlines()) >= k):
        assert proc.poll() is None, f"the sweep ended (status {proc.returncode}) before its trial record {k}"
        assert time.monotonic() < deadline, f"no trial record {k} within 900 s"
        time.sleep(0.05)
    time.sleep(extra_s)
    assert proc.poll() is None, "the sweep finished before the kill"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while (left := subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()):
        for pid in left:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert time.monotonic() < deadline, f"processes of the killed command still running: {left}"
        time.sleep(0.5)


@pytest.mark.fault
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sweep_killed_then_resumed_has_each_trial_once_with_uninterrupted_metrics(sweep_reference, tmp_path, seed):
    """Killed after trial record 1, 3 or 5 of 6 (a trial's start; three trials run one at a time), plus a
    seeded fraction of a second: always inside a trial, never after the sweep finished."""
    sweep, want = sweep_reference
    k, extra_s = 2 * seed + 1, random.Random(seed).uniform(0.0, 0.5)
    results = tmp_path / "results"
    _run_killed_after_records(["sweep", str(sweep), "--results", str(results), "--num-cpus", "1"],
                              results / "kill9" / "trials.jsonl", k, extra_s)
    delay = f"record {k} + {extra_s:.2f} s"
    resumed, _ = _run(["sweep", str(sweep), "--results", str(results), "--num-cpus", "1", "--resume"], timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    got = pq.read_table(results / "kill9" / "runs.parquet").to_pandas()
    assert sorted(got["trial_id"]) == sorted(want.index), f"kill at {delay:.2f} s"  # none lost, none twice
    for row in got.itertuples():
        assert row.test_auc == want.at[row.trial_id, "test_auc"], (row.trial_id, delay)
