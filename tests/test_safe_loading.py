"""Files recscale loads never run code: a payload that creates a marker file when unpickled (or, in YAML,
when constructed) is planted in each kind of file the project reads, and the real command (`recscale ...`,
a separate process) must refuse it with exit 2 and one line naming the file, and the marker must not exist.

Each payload is shown to be live first or afterwards: the same bytes given to an unrestricted loader
(`pickle.loads`, `torch.load(weights_only=False)`, `yaml.unsafe_load`) do create the marker, so a test
cannot pass because the payload was inert.
"""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)
from tests.test_run_folder_integrity import finished_run  # noqa: F401  (a finished run with its checkpoint)

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "cli"]


class Payload:
    """Unpickling this calls os.system("touch MARKER")."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def yaml_payload(marker: Path) -> str:
    return f'!!python/object/apply:os.system ["touch {marker}"]'


def recscale(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *argv], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RECSCALE_MALLOC_REEXEC": "1", **(env or {})})


def assert_refused(proc: subprocess.CompletedProcess, file: Path, marker: Path) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert str(file) in lines[0], lines[0]
    assert not marker.exists(), "the payload ran"
    return lines[0]


def _copy_run(finished_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "metrics.json").unlink()  # an unfinished run: --resume continues from the checkpoint
    return run


@pytest.mark.fault
@pytest.mark.parametrize("where", ["inside the payload", "the whole file"])
def test_checkpoint_with_a_payload_is_refused(finished_run, tmp_path, where):  # noqa: F811
    run = _copy_run(finished_run, tmp_path)
    marker = tmp_path / "ran"
    ckpt = run / "checkpoint.pt"
    if where == "inside the payload":
        payload = torch.load(ckpt, weights_only=False)  # the test's own, trusted file
        payload["best_model"] = Payload(marker)
        torch.save(payload, ckpt)
    else:
        torch.save(Payload(marker), ckpt)
    line = assert_refused(recscale("train", "--config", str(run / "config.yaml"), "--out", str(run), "--resume",
                                   "--no-progress"), ckpt, marker)
    assert "posix.system" in line or "os.system" in line
    assert not (run / "metrics.json").exists()
    torch.load(ckpt, weights_only=False)  # the payload is live: an unrestricted load runs it
    assert marker.exists()


def test_a_genuine_checkpoint_still_resumes(finished_run, tmp_path):  # noqa: F811
    run = _copy_run(finished_run, tmp_path)
    proc = recscale("train", "--config", str(run / "config.yaml"), "--out", str(run), "--resume", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "resuming from epoch 1, batch 0 (training finished; evaluating)" in proc.stderr
    assert (run / "metrics.json").read_bytes() != b""


@pytest.mark.fault
def test_artifact_manifest_with_a_payload_is_refused(tiny_artifact, tmp_path):  # noqa: F811
    marker = tmp_path / "ran"
    art = tmp_path / "art"
    shutil.copytree(tiny_artifact, art)
    (art / "manifest.json").write_bytes(pickle.dumps(Payload(marker)))
    out = tmp_path / "run"
    assert_refused(recscale("train", "--arch", "wukong", "--data", str(art), "--set", "dim=8", "--out", str(out),
                            "--no-progress"), art / "manifest.json", marker)
    assert not out.exists()
    assert_refused(recscale("verify", str(art)), art / "manifest.json", marker)
    pickle.loads((art / "manifest.json").read_bytes())
    assert marker.exists()


@pytest.mark.fault
def test_object_array_with_a_payload_is_refused_even_without_verify(tiny_artifact, tmp_path):  # noqa: F811
    """history.npy replaced by an object array (a pickle) padded to the recorded size, so only checksums would
    see it: `train --no-verify` refuses it naming the file, runs nothing and leaves no run folder."""
    import numpy as np

    marker = tmp_path / "ran"
    art = tmp_path / "art"
    shutil.copytree(tiny_artifact, art)
    history = art / "history.npy"
    size = history.stat().st_size
    with open(history, "wb") as f:
        np.save(f, np.array([Payload(marker)], dtype=object), allow_pickle=True)
    assert history.stat().st_size < size
    with open(history, "ab") as f:
        f.write(b"\0" * (size - history.stat().st_size))
    out = tmp_path / "run"
    line = assert_refused(recscale("train", "--arch", "wukong", "--data", str(art), "--set", "dim=8", "--out",
                                   str(out), "--no-progress", "--no-verify"), history, marker)
    assert "not a plain array" in line
    assert not out.exists()
    np.load(history, allow_pickle=True)
    assert marker.exists()


@pytest.mark.fault
def test_yaml_files_with_a_payload_are_refused(finished_run, tmp_path):  # noqa: F811
    marker = tmp_path / "ran"
    # a sweep file
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: {yaml_payload(marker)}\ndata: {{source: synthetic, scale: tiny}}\n")
    assert_refused(recscale("sweep", str(sweep), "--dry-run", "--results", str(tmp_path / "res")), sweep, marker)
    assert not (tmp_path / "res").exists()
    # a run config given to train
    config = tmp_path / "run.yaml"
    config.write_text(f"arch: wukong\nseed: {yaml_payload(marker)}\n")
    assert_refused(recscale("train", "--config", str(config), "--out", str(tmp_path / "r2"), "--no-progress"),
                   config, marker)
    assert not (tmp_path / "r2").exists()
    # a run folder's config.yaml, read on --resume
    run = _copy_run(finished_run, tmp_path)
    stored = run / "config.yaml"
    stored.write_text(stored.read_text() + f"planted: {yaml_payload(marker)}\n")
    assert_refused(recscale("train", "--arch", "wukong", "--data", str(yaml.safe_load(
        (finished_run / "config.yaml").read_text())["data"]), "--set", "dim=8", "--set", "train.num_threads=1",
        "--set", "train.batch_size=128", "--out", str(run), "--resume", "--no-progress"), stored, marker)
    yaml.unsafe_load(sweep.read_text())
    assert marker.exists()


@pytest.mark.fault
def test_author50_pickle_with_a_payload_is_refused(tmp_path):
    marker = tmp_path / "ran"
    log = tmp_path / "log"
    proc = recscale("synth", "--scale", "tiny", "--out", str(log), "--author50", "--quiet")
    assert proc.returncode == 0, proc.stderr
    planted = sorted((log / "seq_effective_50_dict").glob("*.pkl"))[0]
    planted.write_bytes(pickle.dumps(Payload(marker)))
    out = tmp_path / "art"
    line = assert_refused(recscale("prepare", "--source", "synthetic", "--root", str(log), "--protocol", "author50",
                                   "--history-len", "8", "--train", "500", "--valid", "100", "--test", "100",
                                   "--out", str(out), "--no-progress"), planted, marker)
    assert "posix.system" in line or "os.system" in line
    assert not out.exists() or not any(out.iterdir())
    pickle.loads(planted.read_bytes())
    assert marker.exists()
