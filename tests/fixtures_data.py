"""Shared data fixtures for training tests: a real prepared artifact built from a tiny synthetic log.

Import the fixtures into a test module (`from tests.fixtures_data import tiny_log, tiny_artifact  # noqa: F401`)
or expose them from conftest.py. The artifact is built once per test session in a temporary folder:
`recscale synth --scale tiny` then `recscale prepare` with small split sizes, so every training test
runs on exactly what users run on, only smaller.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

#: Split sizes of the tiny training artifact (kept small so a run takes a second or two on CPU).
TINY_SPLITS: dict[str, Any] = {"n_train": 1200, "n_valid": 300, "n_test": 300}  # PrepareConfig keywords
#: History length of the tiny artifact (models are built with the same history_len).
TINY_HISTORY_LEN = 16


def build_tiny_artifact(log: Path, out: Path, *, seed: int = 42, history_len: int = TINY_HISTORY_LEN) -> Path:
    """Prepare the log at `log` (exposure protocol, tiny splits sampled with `seed`) under `out`."""
    from protocols.prepare import PrepareConfig, prepare

    cfg = PrepareConfig.of(source="synthetic", root=str(log), protocol="exposure", history_len=history_len,
                        sample_seed=seed, out=str(out), **TINY_SPLITS)
    return prepare(cfg, progress=False)


@pytest.fixture(scope="session")
def tiny_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny synthetic log (`recscale synth --scale tiny`)."""
    from protocols.synthetic import generate

    return generate("tiny", tmp_path_factory.mktemp("tiny_log") / "log", seed=0)


@pytest.fixture(scope="session")
def tiny_artifact(tiny_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of a prepared artifact (exposure protocol, history length 16) from the tiny log."""
    return build_tiny_artifact(tiny_log, tmp_path_factory.mktemp("tiny_artifacts"))


@pytest.fixture(scope="session")
def tiny_artifact_other(tiny_log: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same log prepared with another sampling seed: different targets, different fingerprint."""
    return build_tiny_artifact(tiny_log, tmp_path_factory.mktemp("tiny_artifacts_other"), seed=7)
