"""After kill -9 of a sweep's driver, what its local Ray session left (agents and workers still running for
about a minute, its /tmp/rs-* folder for good) is removed by `recscale clean` or by the next launch, found
through the session's record (harness/sweep/ray_sessions.py), never by name.

Real processes throughout: a `ray start --head` cluster the test starts (which must be left alone, its
/tmp/rs-test-* folder included), a `recscale sweep` subprocess whose driver alone is SIGKILLed once its first
trial record is in trials.jsonl (progress, not a clock), `recscale clean`, and a relaunch with --resume.
How many of Ray's own processes are still running after the kill varies from run to run (some end within a
second, the agents linger for up to a minute), so beside them the test starts one process of its own in
the killed session's environment (standing in for a lingering agent: it must be ended) and one whose
variable differs by a character (it must not be).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.sweep import ray_sessions
from harness.sweep.trainable import read_events
from tests.ray_cluster import ray_node
from tests.test_sweep_ray import ALL_TRIALS, _sweep_text

RECSCALE = str(Path(sys.executable).parent / "recscale")


def _sweep_file(tmp_path: Path) -> Path:
    """test_sweep_ray's tiny 2 x 2 grid, one trial at a time."""
    path = tmp_path / "stale.yaml"
    path.write_text(_sweep_text("stale", tmp_path / "cache", max_concurrent=1, n_train=1536))
    return path


def _kill_driver_after_records(argv: list[str], events: Path, k: int) -> subprocess.Popen:
    """Start `recscale sweep` in its own session and SIGKILL its driver process alone once trials.jsonl holds
    k records (Ray's processes are left to themselves, as after `kill -9 PID`)."""
    proc = subprocess.Popen([RECSCALE, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while len(read_events(events.parent)) < k:
        assert proc.poll() is None, f"the sweep ended (status {proc.returncode}) before its trial record {k}"
        assert time.monotonic() < deadline, f"no trial record {k} within 300 s"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc


def _the_stale_record(driver: int) -> ray_sessions.SessionRecord:
    records, problems = ray_sessions.read_records()
    assert not problems
    (record,) = [r for r in records if r.driver_pid == driver]
    return record


def _left_behind(record: ray_sessions.SessionRecord) -> list[int]:
    return ray_sessions.session_processes(record.session)


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if ray_sessions.process_start(p) is not None]


def _sleeper(session: str) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "600"], env={**os.environ, ray_sessions.SESSION_ENV: session})


@pytest.mark.fault
@pytest.mark.slow
def test_clean_and_the_next_launch_remove_what_a_killed_driver_left_and_nothing_else(tmp_path):
    sweep = _sweep_file(tmp_path)
    results = tmp_path / "results"
    argv = ["sweep", str(sweep), "--results", str(results), "--num-cpus", "1"]
    events = results / "stale" / "trials.jsonl"
    killed: list[subprocess.Popen] = []
    sleepers: list[subprocess.Popen] = []
    with ray_node(tmp_path / "head.log", "--num-cpus=1") as (_address, head, _log):
        head_group = subprocess.run(["pgrep", "-g", str(head.pid)], capture_output=True, text=True).stdout.split()
        head_temp = next(Path("/tmp").glob(f"rs-test-{os.getpid()}-*"))
        try:
            # 1. kill -9 of the driver after its first trial record; then `recscale clean`
            killed.append(_kill_driver_after_records(argv, events, 1))
            record = _the_stale_record(killed[-1].pid)
            print(f"Ray processes of the killed session still running: {len(_left_behind(record))}")
            sleepers += [_sleeper(record.session), _sleeper(record.session + "0")]
            left = _left_behind(record)
            assert sleepers[0].pid in left and sleepers[1].pid not in left
            assert Path(record.temp_dir).is_dir() and Path(record.temp_dir).name.startswith("rs-")

            listed = subprocess.run([RECSCALE, "clean", "--dry-run"], capture_output=True, text=True, timeout=60)
            assert listed.returncode == 0 and f"stale Ray session {record.session}" in listed.stdout, listed
            assert "would remove" in listed.stdout and _alive(left) and record.path.exists()

            cleaned = subprocess.run([RECSCALE, "clean"], capture_output=True, text=True, timeout=60)
            assert cleaned.returncode == 0, cleaned.stderr
            print(cleaned.stdout.strip())
            assert f"stale Ray session {record.session} (driver pid {record.driver_pid} is gone): removed" \
                in cleaned.stdout
            assert record.temp_dir in cleaned.stdout
            assert not _alive(left) and not _left_behind(record)
            assert sleepers[0].wait(timeout=10) == -signal.SIGTERM and sleepers[1].poll() is None
            assert not Path(record.temp_dir).exists() and not record.path.exists()
            again = subprocess.run([RECSCALE, "clean"], capture_output=True, text=True, timeout=60)
            assert again.returncode == 0 and again.stdout.startswith("no stale Ray session"), again

            # 2. the same after a kill of the resumed sweep; this time the next launch removes it
            before = len(read_events(results / "stale"))
            killed.append(_kill_driver_after_records([*argv, "--resume"], events, before + 1))
            record = _the_stale_record(killed[-1].pid)
            sleepers.append(_sleeper(record.session))
            left = _left_behind(record)
            assert Path(record.temp_dir).is_dir()
            relaunch = subprocess.run([RECSCALE, *argv, "--resume"], capture_output=True, text=True, timeout=600)
            assert relaunch.returncode == 0, relaunch.stderr
            assert f"recscale sweep: stale Ray session {record.session}" in relaunch.stderr, relaunch.stderr
            assert not _alive(left) and not _left_behind(record) and sleepers[-1].poll() is not None
            assert not Path(record.temp_dir).exists() and not record.path.exists()
            table = pd.read_parquet(results / "stale" / "runs.parquet")
            assert sorted(table["trial_id"]) == sorted(ALL_TRIALS)

            # the cluster this test started with `ray start` was never touched
            assert head.poll() is None and head_temp.is_dir()
            assert _alive([int(p) for p in head_group]) == [int(p) for p in head_group]
            assert ray_sessions.read_records() == ([], [])  # the relaunch ended and removed its own record
        finally:
            for proc in sleepers:
                proc.kill()
                proc.wait()
            for proc in killed:  # whatever a failed check left: only the killed sweeps' own sessions
                subprocess.run(["pkill", "-KILL", "-s", str(proc.pid)], check=False)


@pytest.mark.fault
def test_an_unreadable_or_foreign_record_is_left_alone(tmp_path, monkeypatch):
    """A damaged record is reported, kept, and nothing is done for it; a record of a live driver, of
    another host, or naming a folder outside /tmp/rs-* removes nothing but what it may."""
    monkeypatch.setenv("RECSCALE_CACHE_DIR", str(tmp_path / "cache"))
    folder = ray_sessions.records_dir()
    folder.mkdir(parents=True)
    (folder / "broken.json").write_text("{not json")
    outside = tmp_path / "rs-not-under-tmp"
    outside.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    records = {
        "alive": {"driver_pid": os.getpid(), "driver_start": ray_sessions.process_start(os.getpid()),
                  "host": os.uname().nodename, "temp_dir": str(outside)},
        "elsewhere": {"driver_pid": dead.pid, "driver_start": "1", "host": "another-host", "temp_dir": str(outside)},
        "dead-outside": {"driver_pid": dead.pid, "driver_start": "1", "host": os.uname().nodename,
                         "temp_dir": str(outside)},
    }
    for name, rec in records.items():
        (folder / f"{name}.json").write_text(json.dumps({"session": name, **rec}))
    removed, problems = ray_sessions.remove_stale(grace_s=0.5)
    assert [r.record.session for r in removed] == ["dead-outside"]
    assert removed[0].temp_dir is None and removed[0].processes == []  # a folder outside /tmp/rs-* is never removed
    assert outside.is_dir()
    assert len(problems) == 1 and "broken.json: not a readable Ray session record" in problems[0]
    assert sorted(p.name for p in folder.iterdir()) == ["alive.json", "broken.json", "elsewhere.json"]


@pytest.mark.fault
def test_an_unwritable_record_folder_does_not_stop_the_session(tmp_path, monkeypatch, capfd):
    """A cache that cannot hold the record (here a regular file) costs only the clean-up after a kill -9:
    one line says so, and the session's variable is still set, then removed."""
    plain = tmp_path / "plain_file"
    plain.write_text("")
    monkeypatch.setenv("RECSCALE_CACHE_DIR", str(plain))
    monkeypatch.delenv(ray_sessions.SESSION_ENV, raising=False)
    with ray_sessions.recorded_session("rs-x-1-abc", "/tmp/rs-x"):
        assert os.environ[ray_sessions.SESSION_ENV] == "rs-x-1-abc"
    assert ray_sessions.SESSION_ENV not in os.environ
    err = capfd.readouterr().err.strip()
    assert err.startswith(f"recscale sweep: {plain}/ray_sessions: cannot record the Ray session (") and "\n" not in err
