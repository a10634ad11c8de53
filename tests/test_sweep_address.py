"""`recscale sweep --address` on an address where no Ray cluster listens: a real `recscale sweep` process
fails within seconds with exit 2 and a message naming the address, and leaves no results folder (the
TCP check runs before anything is prepared or written). No Ray is started."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml


def _closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_address_fails_fast_and_leaves_nothing(tmp_path: Path):
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "unreachable",
        "data": {"source": "synthetic", "scale": "tiny", "history_len": 8, "n_train": 128, "n_valid": 64,
                 "n_test": 64, "cache": str(tmp_path / "cache")},
        "train": {"device": "cpu"},
        "model": {"dim": 8},
        "grid": {"arch": ["wukong"], "seed": [0]},
        "resources": {"cpu": 1},
    }))
    results = tmp_path / "results"
    port = _closed_port()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "sweep", str(sweep), "--results", str(results),
                           "--address", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr
    assert f"--address 127.0.0.1:{port}: no Ray cluster answers" in proc.stderr
    assert "ray start --head" in proc.stderr
    assert "Traceback" not in proc.stderr and "gcs_client" not in proc.stderr
    assert elapsed < 15, elapsed
    assert not results.exists() and not (tmp_path / "cache").exists()
