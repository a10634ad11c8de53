"""Sweeps on a real Ray with real (tiny) training runs.

- a 2 x 2 grid (architecture x seed) completes, and the trial whose worker is killed once in the
  middle of training (the test swaps in `tests.faults.run_trial_dying_once`) is retried from its
  checkpoint; its metrics equal a direct `train_run` of the same config (same config + seed + data
  -> identical metrics on CPU, across a worker death); a seed added to grid.seed afterwards trains only
  its own trials, the finished runs untouched;
- an interrupted sweep (SIGINT to `recscale sweep` after its 3rd trial record) exits within 5 s with its
  finished count, no nan and recscale's own exact `--resume` command (not Ray's `Tuner.restore` hint,
  nor its "Stop signal received" or token notices); that command trains only the trials that had not
  finished (counted from trials.jsonl; finished run folders untouched) and runs.parquet holds each once;
- a sweep joins a `ray start --head` cluster on 127.0.0.1 that the test starts and stops;
- on such a cluster declaring one GPU, four trials asking for a quarter of it each run at the same time;
- a search picks the best sampled value and the grid then runs at it.

Every test builds the same tiny synthetic log and prepared dataset once (session cache) and trains
tiny models on a few hundred targets. Ray start-up dominates the time, so only the first test runs
by default (~30-60 s here); the others are marked slow (`make test-slow`).
"""
from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
import yaml

from harness.sweep import launcher, ray_sessions
from harness.sweep.launcher import SweepError, run_sweep
from harness.sweep.schema import parse_sweep
from harness.sweep.trainable import read_events
from tests import faults
from tests.ray_cluster import ray_node
from tests.sweep_files import tiny_sweep

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def sweep_cache(tmp_path_factory) -> Path:
    """Shared cache for the tiny synthetic log and its prepared dataset (prepared on first use)."""
    return tmp_path_factory.mktemp("sweep_cache")


def _sweep_text(name: str, cache: Path, *, max_concurrent: int = 2, n_train: int = 384,
                seeds: tuple[int, ...] = (0, 1)) -> str:
    return yaml.safe_dump(tiny_sweep(
        name, cache, data={"n_train": n_train, "n_valid": 128, "n_test": 128},
        train={"eval_batch_size": 256, "checkpoint_every_batches": 2}, model={"num_layers": 1},
        grid={"arch": ["wukong", "whale"], "seed": list(seeds)}, max_concurrent=max_concurrent, max_failures=2))


ALL_TRIALS = {"wukong-seed0", "wukong-seed1", "whale-seed0", "whale-seed1"}


def _trained_ends(events: list[dict]) -> list[str]:
    """Trials whose trainable finished a real training (not a read-back of a finished run)."""
    return [e["trial"] for e in events if e["event"] == "end" and not e["reused"]]


@pytest.mark.fault
def test_grid_completes_and_dead_worker_is_retried(tmp_path, sweep_cache, monkeypatch, capfd):
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(faults)  # workers need not import the tests package
    monkeypatch.setattr(launcher, "run_trial", faults.run_trial_dying_once)
    assert faults.DIE_ONCE == "whale-seed1"
    sweep = parse_sweep(_sweep_text("grid2x2", sweep_cache))
    outcome = run_sweep(sweep, results_root=tmp_path, num_cpus=2)
    assert outcome.complete and outcome.finished == 4 and not outcome.failed

    sweep_dir = tmp_path / "grid2x2"
    table = pd.read_parquet(sweep_dir / "runs.parquet")
    assert set(zip(table["arch"], table["seed"])) == {("wukong", 0), ("wukong", 1), ("whale", 0), ("whale", 1)}
    assert len(table) == 4 and table["data_fingerprint"].nunique() == 1  # every arm saw the same data
    for row in table.itertuples():
        metrics = json.loads((sweep_dir / row.run_dir / "metrics.json").read_text())
        assert (row.test_auc, row.valid_logloss, row.arch) == (metrics["test_auc"], metrics["valid_logloss"],
                                                              metrics["arch"])
        assert (sweep_dir / row.run_dir / "predictions_test.parquet").exists()
    assert set(table["model.dim"]) == {8} and set(table["history_len"]) == {8}

    # the fault killed whale-seed1's worker once mid-training; Tune retried it from its checkpoint
    events = read_events(sweep_dir)
    starts = [e["trial"] for e in events if e["event"] == "start"]
    assert starts.count("whale-seed1") == 2
    assert all(starts.count(t) == 1 for t in ALL_TRIALS - {"whale-seed1"})
    assert sorted(_trained_ends(events)) == sorted(ALL_TRIALS)
    assert (sweep_dir / "runs" / "whale-seed1" / faults.FAULT_MARKER).exists()
    (end,) = [e for e in events if e["event"] == "end" and e["trial"] == "whale-seed1"]
    assert end["resumed"] and not end["reused"]  # continued from the checkpoint written before the kill
    out, err = capfd.readouterr()
    assert "Token authentication is" not in err  # Ray's notice is kept out (no --verbose)
    # the worker's death is one line: the raylet's report of it (ids, guesses why) is kept out
    assert ray_sessions.WORKER_DIED not in out + err and "(raylet)" not in out + err
    assert out.count("trial whale-seed1 failed (worker died or raised); retrying") == 1, out

    # the trial's metrics equal a direct train_run of the same config outside Ray
    from harness.config import RunConfig, TrainConfig
    from harness.train import train_run

    record = json.loads((sweep_dir / "runs" / "whale-seed1" / "sweep_trial.json").read_text())
    data_path = (sweep_dir / "runs" / "whale-seed1" / "config.yaml")
    data = yaml.safe_load(data_path.read_text())["data"]
    cfg = RunConfig(arch="whale", data=data, model={"dim": 8, "num_layers": 1, "history_len": 8},
                    train=TrainConfig(batch_size=64, eval_batch_size=256, device="cpu", num_threads=1,
                                      checkpoint_every_batches=2),
                    seed=record["seed"])
    direct = train_run(cfg, tmp_path / "direct", progress=False)
    row = table[table["trial_id"] == "whale-seed1"].iloc[0]
    assert (direct["test_auc"], direct["test_logloss"]) == (row["test_auc"], row["test_logloss"])

    # launching the finished sweep again runs nothing; a changed file is refused
    again = run_sweep(sweep, results_root=tmp_path)
    assert again.complete and len(read_events(sweep_dir)) == len(events)
    changed = parse_sweep(_sweep_text("grid2x2", sweep_cache, max_concurrent=1))
    with pytest.raises(SweepError, match="differs"):
        run_sweep(changed, results_root=tmp_path, resume=True)

    # a seed added to grid.seed: the same command trains only the new seed's trials, the finished runs are kept
    mtimes = {t: (sweep_dir / "runs" / t / "metrics.json").stat().st_mtime_ns for t in ALL_TRIALS}
    more = run_sweep(parse_sweep(_sweep_text("grid2x2", sweep_cache, seeds=(0, 1, 2))), results_root=tmp_path)
    assert more.complete and more.finished == 6 and not more.failed
    assert sorted(_trained_ends(read_events(sweep_dir)[len(events):])) == ["whale-seed2", "wukong-seed2"]
    assert {t: (sweep_dir / "runs" / t / "metrics.json").stat().st_mtime_ns for t in ALL_TRIALS} == mtimes
    assert json.loads((sweep_dir / "seeds_added.json").read_text()) == [{"seeds": [2], "after": [0, 1]}]
    extended = pd.read_parquet(sweep_dir / "runs.parquet")
    assert sorted(extended["trial_id"]) == sorted([*ALL_TRIALS, "whale-seed2", "wukong-seed2"])
    pd.testing.assert_frame_equal(extended[extended["seed"] < 2].sort_values("trial_id").reset_index(drop=True)[
        ["trial_id", "test_auc", "test_logloss"]], table.sort_values("trial_id").reset_index(drop=True)[
        ["trial_id", "test_auc", "test_logloss"]])


#: Seconds within which `recscale sweep` must exit after Ctrl-C (measured ~3 s on 2 loaded cores: Tune stops at
#: its next step, ~1.5 s for ray.shutdown, ~1.5 s for the interpreter to unload torch and Ray).
CTRL_C_EXIT_S = 5.0


@pytest.mark.fault
@pytest.mark.slow
def test_interrupted_sweep_stops_within_seconds_and_resumes_only_unfinished_trials(tmp_path, sweep_cache):
    """SIGINT to the driver once the 3rd trial record is in trials.jsonl (the 2nd trial has started: progress,
    not a clock); the sweep exits within CTRL_C_EXIT_S with an honest summary and the exact --resume
    command, which then trains only the unfinished trials: runs.parquet holds each trial once."""
    sweep_file = tmp_path / "resume.yaml"
    sweep_file.write_text(_sweep_text("resume", sweep_cache, max_concurrent=1, n_train=1536))
    sweep_dir = tmp_path / "results" / "resume"
    cmd = [str(VENV_BIN / "recscale"), "sweep", str(sweep_file), "--results", str(tmp_path / "results"),
           "--num-cpus", "1"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 300
        while len(read_events(sweep_dir)) < 3:
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "no 3rd trial record in time"
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
        stop_s = time.monotonic() - sent
        output = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"Ctrl-C to exit: {stop_s:.2f} s")
    assert proc.returncode == 130, output
    assert stop_s < CTRL_C_EXIT_S, (stop_s, output)
    finished_before = {p.parent.name for p in (sweep_dir / "runs").glob("*/metrics.json")}
    assert 1 <= len(finished_before) < 4
    # an honest summary: the finished count from disk, no nan; recscale's own hint, no Ray notice
    assert f"{len(finished_before)}/4 trials finished" in output, output
    assert "nan" not in output, output
    resume_cmd = f"recscale sweep {sweep_file} --resume --results {tmp_path / 'results'} --num-cpus 1"
    assert f"Continue with `{resume_cmd}`" in output, output
    for notice in ("Stop signal received", "Tuner.restore", "Token authentication is", "Traceback"):
        assert notice not in output, output
    mtimes = {t: (sweep_dir / "runs" / t / "metrics.json").stat().st_mtime_ns for t in finished_before}
    first_session = read_events(sweep_dir)

    argv = shlex.split(resume_cmd)
    resumed = subprocess.run([str(VENV_BIN / argv[0]), *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert "4/4 trials finished" in resumed.stdout
    events = read_events(sweep_dir)
    resumed_session = events[len(first_session):]
    assert sorted(_trained_ends(resumed_session)) == sorted(ALL_TRIALS - finished_before)
    assert sorted(_trained_ends(events)) == sorted(ALL_TRIALS)  # no trial trained twice
    assert {t: (sweep_dir / "runs" / t / "metrics.json").stat().st_mtime_ns for t in finished_before} == mtimes
    table = pd.read_parquet(sweep_dir / "runs.parquet")
    assert sorted(table["trial_id"]) == sorted(ALL_TRIALS)  # no row lost, none twice


@contextmanager
def _ray_head(tmp_path: Path, *extra: str) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """`ray start --head --block` on 127.0.0.1 with `extra` flags -> (address, process, log); stopped after,
    and no process of the cluster may be left running."""
    with ray_node(tmp_path / "ray_head.log", *extra) as head:
        yield head


@pytest.mark.slow
def test_sweep_joins_a_started_cluster(tmp_path, sweep_cache, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # `ray start` and this driver both use ~/.ray's token
    with _ray_head(tmp_path, "--num-cpus=2") as (address, head, head_log):
        sweep = parse_sweep(_sweep_text("cluster", sweep_cache))
        outcome = _run_when_cluster_is_up(sweep, tmp_path, address, head, head_log)
        assert outcome.complete and outcome.finished == 4
        table = pd.read_parquet(tmp_path / "cluster" / "runs.parquet")
        assert set(table["trial_id"]) == ALL_TRIALS


def _most_at_once(events: list[dict]) -> int:
    """The largest number of trials between their start and end events at one moment."""
    steps = sorted((e["time"], 1 if e["event"] == "start" else -1) for e in events if e["event"] in ("start", "end"))
    running = most = 0
    for _, step in steps:  # at equal times an end (-1) sorts first: touching intervals do not overlap
        running += step
        most = max(most, running)
    return most


@pytest.mark.slow
def test_fractional_gpu_trials_pack_onto_one_gpu(tmp_path, sweep_cache, monkeypatch):
    """Four trials asking for a quarter of a GPU each run at the same time on a one-GPU cluster.

    The cluster declares one GPU to Ray (`--num-gpus=1`, a logical resource: no CUDA is needed for
    Ray to schedule by it), and the trials train on the CPU, so the check runs on any machine; what it
    checks is Ray's packing of `resources.gpu: 0.25`, which is the same with a real GPU."""
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    raw = yaml.safe_load(_sweep_text("packed", sweep_cache))
    raw["grid"] = {"arch": ["whale"], "seed": [0, 1, 2, 3]}
    raw["resources"] = {"cpu": 0.5, "gpu": 0.25}
    raw["max_concurrent"] = 4
    raw["train"]["epochs"] = 20  # ~6 s of training each here; the four started within 0.8 s of each other
    with _ray_head(tmp_path, "--num-cpus=2", "--num-gpus=1") as (address, head, head_log):
        outcome = _run_when_cluster_is_up(parse_sweep(yaml.safe_dump(raw)), tmp_path, address, head, head_log)
    assert outcome.complete and outcome.finished == 4
    assert _most_at_once(read_events(tmp_path / "packed")) == 4  # one GPU's quarters, all four at once


def _run_when_cluster_is_up(sweep, results: Path, address: str, head: subprocess.Popen, log: Path):
    deadline = time.time() + 120
    while True:
        assert head.poll() is None, f"ray start --head exited early:\n{log.read_text()[-3000:]}"
        try:
            return run_sweep(sweep, results_root=results, address=address)
        except Exception as e:  # noqa: BLE001 - the head may still be starting
            starting = ("cannot join", "no Ray cluster answers", "is not a Ray cluster")  # the port opens first
            if not any(m in str(e) for m in starting) or time.time() > deadline:
                raise
            time.sleep(2)


@pytest.mark.slow
def test_search_then_grid_at_the_best_point(tmp_path, sweep_cache):
    raw = yaml.safe_load(_sweep_text("search", sweep_cache))
    raw["grid"] = {"arch": ["whale"], "seed": [0, 1]}
    raw["search"] = {"space": {"train.lr": {"choice": [1.0e-4, 1.0e-2]}}, "metric": "valid_logloss",
                     "mode": "min", "num_samples": 3}
    outcome = run_sweep(parse_sweep(yaml.safe_dump(raw)), results_root=tmp_path, num_cpus=2)
    assert outcome.complete and outcome.finished == 2

    table = pd.read_parquet(tmp_path / "search" / "runs.parquet")
    search = table[table["stage"] == "search"]
    assert len(search) == 3 and set(search["seed"]) == {0}  # the search runs at the first grid point
    best_lr = search.sort_values("valid_logloss").iloc[0]["train.lr"]
    assert json.loads((tmp_path / "search" / "search_best.json").read_text()) == {"train.lr": best_lr}
    grid = table[table["stage"] == "grid"]
    assert sorted(grid["seed"]) == [0, 1] and set(grid["train.lr"]) == {best_lr}
