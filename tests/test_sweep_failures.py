"""A trial that fails reaches the user as one line, and is not retried when a retry would fail alike
(docs/reliability.md, "Runs, analysis and sweeps"; docs/sweeps.md, "Interruptions, failures, resume").

- `fails_alike` (no Ray): an input error (config, data, refused checkpoint, damaged run folder) fails alike at
  once; any other error when it repeats the previous attempt's type and message, as recorded in trials.jsonl.
- a real sweep (Ray started by the test, slow): a run folder holding a crafted checkpoint is refused on the
  trial's only attempt, a trial raising the same error twice stops after its second attempt although
  `max_failures` allows three more; stderr holds one line for both failures, naming error.txt files that exist,
  no traceback and no Ray notice; once the checkpoint is removed, `--resume` finishes the sweep.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from cli.main import main as cli_main
from core.typed_config import ConfigError
from harness.checkpoint import ResumeRefused
from harness.sweep import launcher
from harness.sweep.trainable import fails_alike, log_event, read_events
from tests import faults
from tests.sweep_files import tiny_sweep, write_sweep


@pytest.mark.fault
def test_fails_alike_is_an_input_error_or_the_previous_attempts_failure(tmp_path):
    log_event(tmp_path, trial="t", event="start")
    assert fails_alike(ResumeRefused("RUN/checkpoint.pt: refusing to load"), tmp_path, "t")
    assert fails_alike(ConfigError("train.lr: expected a number"), tmp_path, "u")
    assert not fails_alike(RuntimeError("CUDA error"), tmp_path, "v")  # the first of its kind: retried
    assert fails_alike(RuntimeError("CUDA error"), tmp_path, "v")  # the same again: not
    assert not fails_alike(RuntimeError("another error"), tmp_path, "v")
    log_event(tmp_path, trial="w", event="error", error="RuntimeError: once")
    log_event(tmp_path, trial="w", event="end")  # a success in between: a later failure is new
    assert not fails_alike(RuntimeError("once"), tmp_path, "w")
    errors = [e["error"] for e in read_events(tmp_path) if e["event"] == "error" and e["trial"] == "v"]
    assert errors == ["RuntimeError: CUDA error"] * 2 + ["RuntimeError: another error"]


class Payload:
    """Unpickling it would create the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def terminal_lines(text: str) -> list[str]:
    """The lines a terminal would keep: progress-bar frames (carriage returns, tqdm's bars) dropped."""
    lines = (part.strip() for line in text.split("\n") for part in line.split("\r"))
    return [ln for ln in lines if ln and not re.search(r"\d+%\|", ln)]


@pytest.mark.fault
@pytest.mark.slow
def test_a_refused_checkpoint_and_a_repeated_error_fail_at_once_in_one_line(tmp_path, monkeypatch, capfd):
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(faults)  # workers need not import the tests package
    monkeypatch.setattr(launcher, "run_trial", faults.run_trial_failing_alike)
    assert faults.FAILS_ALIKE == "wukong-seed2"
    sweep = write_sweep(tmp_path, tiny_sweep("failing", tmp_path / "cache", grid={"seed": [0, 1, 2]},
                                             max_failures=3))
    results, marker = tmp_path / "results", tmp_path / "ran"
    crafted = results / "failing" / "runs" / "wukong-seed1" / "checkpoint.pt"
    crafted.parent.mkdir(parents=True)
    torch.save(Payload(marker), crafted)
    argv = ["sweep", str(sweep), "--results", str(results), "--num-cpus", "1", "--resume"]

    assert cli_main(argv) == 1
    out, err = capfd.readouterr()
    starts = [e["trial"] for e in read_events(results / "failing") if e["event"] == "start"]
    assert sorted(starts) == ["wukong-seed0", "wukong-seed1", "wukong-seed2", "wukong-seed2"]
    assert not marker.exists()  # refused, never run
    lines = terminal_lines(err)
    assert len(lines) == 3 and lines[0].startswith("synthetic log (tiny) ready") and " ready in " in lines[1], err
    assert lines[2].startswith("recscale sweep: 2 trial(s) failed: wukong-seed1: ") and lines[2].endswith(
        f"rerun with `recscale sweep {sweep} --resume --results {results} --num-cpus 1` to retry them"), lines[2]
    assert f"{crafted}: refusing to load: the file names posix.system" in lines[2]
    assert "wukong-seed2: RuntimeError: the same failure every time (see " in lines[2]
    *trial_lines, summary = terminal_lines(out)
    grid = results / "failing" / "ray" / "grid"
    assert trial_lines == [
        f"trial wukong-seed1 failed for good (a retry would fail alike); see {grid / 'wukong-seed1/error.txt'}",
        "trial wukong-seed2 failed (worker died or raised); retrying",
        f"trial wukong-seed2 failed for good (a retry would fail alike); see {grid / 'wukong-seed2/error.txt'}"]
    assert summary.startswith(f"1/3 trials finished -> {results / 'failing/runs.parquet'} (total"), summary
    for named in re.findall(r"see (\S+/error\.txt)", out + err):
        assert Path(named).is_file(), named

    crafted.unlink()
    monkeypatch.undo()  # the real run_trial: wukong-seed2 trains too
    assert cli_main(argv) == 0
    assert "3/3 trials finished" in capfd.readouterr().out
    assert sorted(pd.read_parquet(results / "failing" / "runs.parquet")["trial_id"]) == [
        "wukong-seed0", "wukong-seed1", "wukong-seed2"]
