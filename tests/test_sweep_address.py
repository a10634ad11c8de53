"""`recscale sweep --address` on an address where no Ray cluster listens, or where another server holds
the port: a real `recscale sweep` process fails within seconds with exit 2 and a message naming the
address, and leaves no results folder, no --results root and no prepared dataset (the check runs before
anything is prepared or written). No Ray is started."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli.main import main as cli_main
from harness.sweep.ray_sessions import ADDRESS_ANSWER_TIMEOUT_S, RaySessionError, check_address_reachable
from tests.sweep_files import tiny_sweep, write_sweep


def _closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sweep_file(tmp_path: Path) -> Path:
    """A one-trial sweep (never run: the address is checked first)."""
    return write_sweep(tmp_path, tiny_sweep("unreachable", tmp_path / "cache", grid={"seed": [0]}), "tiny.yaml")


@pytest.mark.fault
def test_unreachable_address_fails_fast_and_leaves_nothing(tmp_path: Path):
    sweep = _sweep_file(tmp_path)
    results = tmp_path / "results"
    port = _closed_port()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli", "sweep", str(sweep), "--results", str(results),
                           "--address", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr
    assert f"--address 127.0.0.1:{port}: no Ray cluster answers" in proc.stderr
    assert "ray start --head" in proc.stderr
    assert "Traceback" not in proc.stderr and "gcs_client" not in proc.stderr
    assert elapsed < 60, elapsed  # Ray itself retries for minutes; this includes the start-up of Python and torch
    assert not results.exists() and not (tmp_path / "cache").exists()
    # in-process: the same refusal, nothing written; the address check itself (what recscale waits on
    # before giving up, without loading the YAML and imports that a busy machine slows) is under 15 s
    assert cli_main(["sweep", str(sweep), "--results", str(results), "--address", f"127.0.0.1:{port}"]) == 2
    assert not results.exists()
    t0 = time.monotonic()
    with pytest.raises(RaySessionError, match="no Ray cluster answers"):
        check_address_reachable(f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 15


class _NotRay:
    """A plain TCP server on a free local port that is not Ray: it accepts and then stays silent, or
    answers like a web server and closes. Records when the first connection arrived."""

    def __init__(self, behaviour: str):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.behaviour = behaviour
        self.first_accept: float | None = None
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.first_accept = self.first_accept or time.monotonic()
            self.conns.append(conn)
            if self.behaviour == "web server":
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                conn.close()

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.fault
@pytest.mark.parametrize("behaviour", ["silent", "web server"])
def test_open_port_that_is_not_ray_fails_fast_and_leaves_nothing(tmp_path: Path, behaviour: str):
    sweep = _sweep_file(tmp_path)
    results = tmp_path / "results"
    server = _NotRay(behaviour)
    try:
        proc = subprocess.run([sys.executable, "-m", "cli", "sweep", str(sweep), "--results", str(results),
                               "--address", f"127.0.0.1:{server.port}"], capture_output=True, text=True, timeout=120)
        done = time.monotonic()
    finally:
        server.close()
    assert proc.returncode == 2, proc.stderr
    assert f"--address 127.0.0.1:{server.port}: 127.0.0.1:{server.port} accepts connections but is not a Ray cluster" \
        in proc.stderr
    why = "no gRPC answer within" if behaviour == "silent" else "it answered b'HTTP/1.1 400"
    assert why in proc.stderr and "ray start --head --port" in proc.stderr
    assert "Traceback" not in proc.stderr and "gcs_client" not in proc.stderr
    # from the moment recscale reached the port (the interpreter's start-up excluded) to its exit; generous for
    # a loaded machine (Ray itself retries for minutes)
    assert server.first_accept is not None and done - server.first_accept < ADDRESS_ANSWER_TIMEOUT_S + 15
    assert not results.exists() and not (tmp_path / "cache").exists()
