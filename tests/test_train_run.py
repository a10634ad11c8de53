"""End-to-end training on a real tiny artifact: run folder, metrics vs an independent computation,
recompute, determinism, kill-and-resume equality and refused resumes."""
from __future__ import annotations

import json
import os
import platform
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from sklearn.metrics import log_loss, roc_auc_score

import architectures
from cli.main import main as cli_main
from harness.checkpoint import ResumeRefused
from harness.config import load_run_config
from harness.train import train_run
from protocols.artifact import PreparedDataset
from tests.faults import Interrupted, interrupt_training_after
from tests.fixtures_data import tiny_artifact, tiny_artifact_other, tiny_log  # noqa: F401  (pytest fixtures)

ARCH = "whale"
#: Small model so each run takes about a second; checkpoints every 2 batches for the resume test.
OVERRIDES = {"model": {"dim": 16}, "train": {"checkpoint_every_batches": 2, "num_threads": 1}}
QUALITY_PREFIXES = ("valid_", "test_", "oracle_")


def quality(m: dict) -> dict:
    return {k: v for k, v in m.items() if k.startswith(QUALITY_PREFIXES)} | {"groups": m["groups"]}


def make_cfg(data: Path, *, seed: int = 0, train: dict | None = None):
    over = {"model": dict(OVERRIDES["model"]), "train": {**OVERRIDES["train"], **(train or {})}, "seed": seed}
    return load_run_config(None, over, arch=ARCH, data=str(data))


@pytest.fixture(scope="module")
def reference_run(tiny_artifact, tmp_path_factory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("runs") / "reference"
    train_run(make_cfg(tiny_artifact), out, progress=False)
    return out


def test_run_folder_and_metrics_match_independent_computation(reference_run, tiny_artifact):  # noqa: F811
    for name in ("config.yaml", "metrics.json", "predictions_valid.parquet", "predictions_test.parquet",
                 "checkpoint.pt"):
        assert (reference_run / name).is_file(), name
    m = json.loads((reference_run / "metrics.json").read_text())
    ds = PreparedDataset.open(tiny_artifact)
    for split in ("valid", "test"):
        pred = pq.read_table(reference_run / f"predictions_{split}.parquet").to_pandas()
        targets = ds.targets(split).to_pandas()
        assert pred["event_id"].tolist() == targets["event_id"].tolist()  # every target, stored order
        assert np.array_equal(pred["label"].to_numpy(), targets["label"].to_numpy(np.float32))
        assert pred["score"].between(0, 1).all()
        y, p = pred["label"].to_numpy(), pred["score"].to_numpy()
        assert m[f"{split}_auc"] == pytest.approx(roc_auc_score(y, p), abs=1e-9)
        assert m[f"{split}_logloss"] == pytest.approx(log_loss(y, p), abs=1e-9)
        assert m[f"oracle_{split}_auc"] == pytest.approx(roc_auc_score(y, targets["true_p"]), abs=1e-9)
        users = targets["user_id"].to_numpy()  # UAUC: plain mean of sklearn AUC over users with both labels
        per_user = [roc_auc_score(y[users == u], p[users == u]) for u in np.unique(users)
                    if 0 < y[users == u].sum() < (users == u).sum()]
        assert m[f"{split}_uauc"] == pytest.approx(float(np.mean(per_user)), abs=1e-9)
    for key in ("flops_per_target", "params_embedding", "params_non_embedding", "wall_s", "train_targets_per_s",
                "utilisation", "peak_rss_bytes", "data_fingerprint", "env_cpu", "env_torch_cpu_capability"):
        assert m[key] is not None, key
    assert m["flops_per_target"] > 0 and m["train_targets_per_s"] > 0
    assert m["train_targets"] == ds.num_targets("train")
    assert set(m["groups"]["test"]) >= {"video_seen", "video_unseen", "author_seen", "author_unseen",
                                        "duration_gt_180s"}


@pytest.mark.fault
def test_recompute_equals_metrics_json_and_detects_tampering(reference_run, tmp_path, capsys):
    assert cli_main(["metrics", str(reference_run), "--recompute"]) == 0
    tampered = tmp_path / "tampered"
    shutil.copytree(reference_run, tampered)
    m = json.loads((tampered / "metrics.json").read_text())
    m["groups"]["test"]["video_unseen"]["logloss"] += 1e-6
    (tampered / "metrics.json").write_text(json.dumps(m))
    assert cli_main(["metrics", str(tampered), "--recompute"]) == 1
    assert "groups.test.video_unseen.logloss" in capsys.readouterr().err


def test_same_seed_identical_other_seed_differs(reference_run, tiny_artifact, tmp_path):  # noqa: F811
    ref = json.loads((reference_run / "metrics.json").read_text())
    again = train_run(make_cfg(tiny_artifact), tmp_path / "again", progress=False)
    assert quality(again) == quality(ref)
    other = train_run(make_cfg(tiny_artifact, seed=1), tmp_path / "other", progress=False)
    assert other["test_auc"] != ref["test_auc"]


@pytest.mark.fault
def test_kill_mid_epoch_and_resume_is_bitwise_identical(reference_run, tiny_artifact, tmp_path):  # noqa: F811
    ref = json.loads((reference_run / "metrics.json").read_text())
    cfg = make_cfg(tiny_artifact)
    out = tmp_path / "killed"
    with interrupt_training_after(3), pytest.raises(Interrupted):
        train_run(cfg, out, progress=False)  # last checkpoint after batch 2
    assert not (out / "metrics.json").exists()
    # scramble every global RNG: a resume must restore them from the checkpoint, not inherit them
    torch.manual_seed(12345), random.seed(12345), np.random.seed(12345)
    resumed = train_run(cfg, out, resume=True, progress=False)
    assert quality(resumed) == quality(ref)
    for split in ("valid", "test"):
        a = pq.read_table(reference_run / f"predictions_{split}.parquet")
        b = pq.read_table(out / f"predictions_{split}.parquet")
        assert a.equals(b)


@pytest.mark.fault
def test_resume_refuses_changed_config_or_data(tiny_artifact, tiny_artifact_other, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    with interrupt_training_after(2), pytest.raises(Interrupted):
        train_run(make_cfg(tiny_artifact), out, progress=False)
    with pytest.raises(ResumeRefused, match=r"train\.lr"):
        train_run(make_cfg(tiny_artifact, train={"lr": 0.01}), out, resume=True, progress=False)
    with pytest.raises(ResumeRefused, match="data"):
        train_run(make_cfg(tiny_artifact_other), out, resume=True, progress=False)
    with pytest.raises(Exception, match="--resume"):  # never silently overwrite a run folder
        train_run(make_cfg(tiny_artifact), out, progress=False)


def test_cli_train_end_to_end_with_malloc_reexec(tiny_artifact, tmp_path):  # noqa: F811
    out = tmp_path / "cli_run"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "RECSCALE_MALLOC"))}
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "train", "--arch", ARCH, "--data", str(tiny_artifact),
         "--set", "model.dim=16", "--set", "train.num_threads=1", "--out", str(out), "--json", "--no-progress"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)
    if platform.libc_ver()[0] == "glibc":
        assert m["malloc_env"] is True  # the command re-executed itself with the glibc settings
    assert (out / "metrics.json").exists()


class _Execed(Exception):
    pass


def test_train_reexecs_its_exact_command_line_and_only_as_the_program(tiny_artifact, tmp_path, monkeypatch):  # noqa: F811
    """The re-exec replays sys.argv as typed (every flag kept); a call from Python never replaces the caller."""
    from harness import perf

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the malloc re-exec is glibc-only")
    for key in [*perf.MALLOC_ENV, perf.REEXEC_MARKER]:
        monkeypatch.delenv(key, raising=False)
    calls = []

    def fake_execve(path, argv, env):
        calls.append((argv, env))
        raise _Execed

    monkeypatch.setattr(perf.os, "execve", fake_execve)
    typed = ["train", "--arch", ARCH, "--data", str(tiny_artifact), "--set", "model.dim=16", "--seed", "3",
             "--set", "train.num_threads=1", "--out", str(tmp_path / "a"), "--no-progress", "--json"]
    monkeypatch.setattr(sys, "argv", ["recscale", *typed])
    with pytest.raises(_Execed):
        cli_main()
    (argv, env), = calls
    assert argv == [sys.executable, "-m", "cli", *typed]
    assert all(env[k] == v for k, v in perf.MALLOC_ENV.items())

    calls.clear()  # called from Python with an explicit list: trains in this process, no exec
    assert cli_main(["train", "--arch", ARCH, "--data", str(tiny_artifact), "--set", "model.dim=16",
                     "--set", "train.num_threads=1", "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    assert not calls and (tmp_path / "b" / "metrics.json").exists()


@pytest.mark.fault
def test_bad_config_is_refused_with_the_key_named(tiny_artifact):  # noqa: F811
    from core.typed_config import ConfigError

    with pytest.raises(ConfigError, match="train.lrr"):
        load_run_config(None, {"train": {"lrr": 1}}, arch=ARCH, data=str(tiny_artifact))
    with pytest.raises(ConfigError, match="no_such_arch"):
        load_run_config(None, None, arch="no_such_arch", data=str(tiny_artifact))


@pytest.mark.parametrize("arch", architectures.names())
def test_every_registered_architecture_trains(arch, tiny_artifact, tmp_path):  # noqa: F811
    over = {"model": {"dim": 16}, "train": {"num_threads": 1}}
    cfg = load_run_config(None, over, arch=arch, data=str(tiny_artifact))
    m = train_run(cfg, tmp_path / arch, progress=False)
    assert 0.0 <= m["test_auc"] <= 1.0 and np.isfinite(m["test_logloss"])


def test_early_stopping_keeps_the_best_epoch(tiny_artifact, tmp_path):  # noqa: F811
    over = {"model": {"dim": 8}, "train": {"epochs": 4, "early_stopping_patience": 1, "lr": 0.01, "num_threads": 1}}
    m = train_run(load_run_config(None, over, arch="wukong", data=str(tiny_artifact)), tmp_path / "es", progress=False)
    history = [e["valid_auc"] for e in m["epoch_history"]]
    assert m["epochs_run"] == len(history) <= 4
    # the final evaluation uses the best epoch's weights, so it reproduces that epoch's validation AUC
    assert m["valid_auc"] == max(history)
    if len(history) < 4:  # stopped early: the last epoch did not improve
        assert history[-1] <= max(history[:-1])


@pytest.mark.fault
def test_used_folder_without_checkpoint_is_refused_and_resume_checks_config_and_data(
        reference_run, tiny_artifact, tiny_artifact_other, tmp_path, capsys):  # noqa: F811
    """Killed before its first checkpoint (config.yaml only): a plain `train` is refused, `--resume` with
    another config or other data is refused, and `--resume` with the same ones starts fresh, saying so."""
    out = tmp_path / "early"
    with interrupt_training_after(1), pytest.raises(Interrupted):
        train_run(make_cfg(tiny_artifact), out, progress=False)  # first checkpoint would be after batch 2
    assert (out / "config.yaml").exists() and not (out / "checkpoint.pt").exists()
    with pytest.raises(Exception, match=r"already holds a run \(config\.yaml"):
        train_run(make_cfg(tiny_artifact), out, progress=False)
    with pytest.raises(ResumeRefused, match=r"train\.lr"):
        train_run(make_cfg(tiny_artifact, train={"lr": 0.01}), out, resume=True, progress=False)
    with pytest.raises(ResumeRefused, match="data"):
        train_run(make_cfg(tiny_artifact_other), out, resume=True, progress=False)
    capsys.readouterr()
    resumed = train_run(make_cfg(tiny_artifact), out, resume=True, progress=False)
    assert "no checkpoint: starting fresh" in capsys.readouterr().err
    assert quality(resumed) == quality(json.loads((reference_run / "metrics.json").read_text()))


@pytest.mark.fault
def test_resume_says_where_and_cleans_stale_temporaries(reference_run, tiny_artifact, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "stale"
    with interrupt_training_after(3), pytest.raises(Interrupted):
        train_run(make_cfg(tiny_artifact), out, progress=False)
    stale = [out / ".checkpoint.pt.tmp.999999", out / ".metrics.json.tmp.424242"]
    for path in stale:
        path.write_bytes(b"half-written by a killed process")
    capsys.readouterr()
    resumed = train_run(make_cfg(tiny_artifact), out, resume=True, progress=False)
    assert "resuming from epoch 0, batch 2" in capsys.readouterr().err
    assert not any(path.exists() for path in stale)
    assert not list(out.glob(".*.tmp.*"))
    assert quality(resumed) == quality(json.loads((reference_run / "metrics.json").read_text()))


@pytest.mark.fault
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_real_signal_checkpoints_and_resume_is_bitwise_identical(sig, tiny_artifact, tmp_path):  # noqa: F811
    """`recscale train` as a real process, signalled once its first checkpoint exists: it writes a
    checkpoint, exits 128 + signal, and `--resume` finishes with the uninterrupted run's exact metrics."""
    import signal
    import time

    out = tmp_path / "signalled"
    sets = ["model.dim=16", "train.num_threads=1", "train.epochs=20", "train.checkpoint_every_batches=1"]
    argv = ["train", "--arch", ARCH, "--data", str(tiny_artifact), "--out", str(out), "--no-progress"]
    for s in sets:
        argv += ["--set", s]
    proc = subprocess.Popen([sys.executable, "-m", "cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / "checkpoint.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + getattr(signal, sig), err
    assert "checkpoint written at epoch" in err and "--resume" in err
    assert (out / "checkpoint.pt").exists() and not (out / "metrics.json").exists()
    assert not list(out.glob(".*.tmp.*"))

    resumed = subprocess.run([sys.executable, "-m", "cli", *argv, "--resume"], capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from epoch" in resumed.stderr
    over = {"model": {"dim": 16}, "train": {"num_threads": 1, "epochs": 20}, "seed": 0}
    straight = train_run(load_run_config(None, over, arch=ARCH, data=str(tiny_artifact)), tmp_path / "straight",
                         progress=False)
    got = json.loads((out / "metrics.json").read_text())
    assert got["test_auc"] == straight["test_auc"]
    assert quality(got) == quality(straight)


@pytest.mark.fault
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_second_signal_during_the_checkpoint_write_aborts_and_keeps_the_last_complete_checkpoint(
        sig, reference_run, tiny_artifact, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Real signals to this process: the first after 3 batches (checkpoint of batch 2 on disk), the second
    while the checkpoint the first one asked for is being written (from inside the file write). The
    write is abandoned (no temporary file), checkpoint.pt still holds batch 2 and loads, the command
    exits 128 + signal naming it, and --resume finishes with the uninterrupted run's exact metrics."""
    import signal

    signum = getattr(signal, sig)
    real_save = torch.save
    state = {"first": False, "second": False}

    class SignalMidWrite:  # the checkpoint's file, signalling once 4 kB are written
        def __init__(self, file):
            self.file = file

        def write(self, b):
            n = self.file.write(b)
            if state["first"] and not state["second"] and self.file.tell() > 4096:
                state["second"] = True
                os.kill(os.getpid(), signum)  # the handler runs before this method returns
            return n

        def flush(self):
            self.file.flush()

    def save(obj, f, *args, **kwargs):
        return real_save(obj, SignalMidWrite(f) if state["first"] else f, *args, **kwargs)

    def first_signal():
        state["first"] = True
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(torch, "save", save)
    handler_before = signal.getsignal(signal.SIGINT)
    out = tmp_path / "twice"
    argv = ["train", "--arch", ARCH, "--data", str(tiny_artifact), "--out", str(out), "--no-progress",
            "--set", "model.dim=16", "--set", "train.checkpoint_every_batches=2", "--set", "train.num_threads=1"]
    with interrupt_training_after(3, first_signal):
        code = cli_main(argv)
    err = capsys.readouterr().err
    assert state["second"] and code == 128 + signum, err
    assert (f"aborted by a second {sig}: the checkpoint being written was abandoned; checkpoint.pt holds the last "
            f"complete checkpoint (epoch 0, batch 2) in {out}") in err
    assert not list(out.glob(".*.tmp.*")) and not (out / "metrics.json").exists()
    assert signal.getsignal(signal.SIGINT) is handler_before  # handlers are put back
    payload = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert (payload["position"]["epoch"], payload["position"]["batch"]) == (0, 2)

    monkeypatch.setattr(torch, "save", real_save)
    assert cli_main([*argv, "--resume"]) == 0
    assert "resuming from epoch 0, batch 2" in capsys.readouterr().err
    got = json.loads((out / "metrics.json").read_text())
    assert quality(got) == quality(json.loads((reference_run / "metrics.json").read_text()))
