"""Real Ray clusters on this machine for tests: `ray start --block` nodes, a head and more, started and
stopped by the test (no process of the cluster may outlive it).

`ray_node(...)` starts one node (the head when `head_address` is None) and yields (address, process, log).
Each node is yielded once `ray start` says it has joined. `prefix` runs the node under another command, e.g. `unshare
--mount` to give it a file system view of
its own (a node that cannot see a folder the driver sees). Stopping sends SIGTERM to the node's process
group: `ray start --block` then stops every process it started.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: What `ray start` prints once its node has joined the cluster.
STARTED = "Ray runtime started"


def _wait_until_started(proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while STARTED not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"ray start did not start a node:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.5)


@contextmanager
def ray_node(log: Path, *extra: str, head_address: str | None = None, prefix: Sequence[str] = (),
             env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen, Path]]:
    """A `ray start --block` node on 127.0.0.1 with `extra` flags; the head (own port and temp folder) when
    `head_address` is None, else a node joining it. Yields (the cluster's address, the process, its log)."""
    ports = [f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
             f"--runtime-env-agent-port={free_port()}"]
    temp_dir = None
    if head_address is None:
        port = free_port()
        temp_dir = Path(f"/tmp/rs-test-{os.getpid()}-{port}")  # short: Unix socket paths are limited
        address = f"127.0.0.1:{port}"
        role = ["--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp_dir}"]
    else:
        address = head_address
        role = [f"--address={head_address}"]
    cmd = [*prefix, str(VENV_BIN / "ray"), "start", "--block", "--node-ip-address=127.0.0.1", *role, *ports, *extra]
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env=env)
    try:
        _wait_until_started(proc, log)
        yield address, proc, log
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # `ray start --block` stops every process of this node
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
            leftover = subprocess.run(["pgrep", "-f", str(temp_dir)], capture_output=True, text=True).stdout.split()
            assert not leftover, f"cluster processes left running: {leftover}"
