"""The Ray sessions of a sweep: joining a cluster or starting a local Ray, shutting it down, and removing what a
killed driver left of a local one (what a user sees: docs/sweeps.md, "Ray settings", "Running on a Ray
cluster", and the stale-session rows of docs/reliability.md).

Where Ray has no public API, and what is used instead:
- no public way to check that an address is a Ray cluster without Ray's minutes of retries: a TCP connect and
  an HTTP/2 greeting (what any gRPC server, Ray's GCS among them, answers), which also says what answered
  instead (grpcio's `channel_ready_future` would only time out);
- `ray.init` reads RAY_AUTH_MODE once, at import, and enables token mode by itself only for a local or
  `auto` cluster: the private `ray._raylet.Config.initialize` reloads it, as Ray's own token setup does;
- `ray.init(_temp_dir=...)`, one of ray.init's "hidden / experimental options", is the only way a driver
  chooses the temporary folder of the Ray it starts (`ray start --temp-dir` is the command-line one).
- the raylet's report of a dead worker is printed to stdout by a driver thread (`ray._private.worker.
  print_to_stdstream`, no logger, no option): `quiet_ray_notices` drops it there, as the launcher says it in one line.
"""
from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.atomic_write import write_text
from core.errors import RecscaleError, one_line
from harness.perf import MALLOC_ENV

from .interrupt import TUNE_ENV


class RaySessionError(RecscaleError):
    """Ray cannot be joined or started, or its cluster cannot run one trial."""


#: Environment the driver runs Tune under (only while a Ray session is open; a value the user set wins).
#: RAY_AIR_NEW_OUTPUT=0: the legacy reporter honours verbose=0; Tune's own SIGINT handler off (`.interrupt`).
TUNE_DRIVER_ENV: dict[str, str] = {"RAY_AIR_NEW_OUTPUT": "0", **TUNE_ENV}


#: Variables of the driver's environment that every Ray worker must see too, on whichever node it runs
#: (docs/sweeps.md, "Ray settings" and "Running on a Ray cluster"; docs/training.md, "Threads").
FORWARDED_ENV = ("RECSCALE_MODEL_PATH", "RECSCALE_CACHE_DIR", "OMP_WAIT_POLICY", "OMP_PROC_BIND", "OMP_PLACES")


@contextmanager
def scoped_env(values: dict[str, str], *, override: bool = False) -> Iterator[None]:
    """Set environment variables (those not set yet, unless `override`), and restore the environment afterwards."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if override or before[k] is None})
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def check_fits(available: dict[str, float], per_trial: dict[str, float]) -> None:
    """Refuse a sweep whose trials could never be scheduled (Tune would wait forever)."""
    for kind, need in per_trial.items():
        have = available.get(kind.upper() if kind in ("cpu", "gpu") else kind, 0.0)
        if need > 0 and have < need:
            hint = " (set resources.gpu: 0 and train.device: cpu to run on CPUs)" if kind == "gpu" else ""
            key = kind if kind in ("cpu", "gpu") else f"custom.{kind}"
            raise RaySessionError(f"resources.{key}: each trial needs {need:g} but the Ray cluster has {have:g}{hint}")


#: Ray's own notices kept out of the terminal unless --verbose: (logger, text the message contains).
#: Ray logs them through Python logging in the driver; recscale says what to do itself (`--resume`).
RAY_NOTICES: tuple[tuple[str, str], ...] = (
    ("ray._private.authentication.authentication_token_setup", "Token authentication is"),
    ("ray.tune.tune", "Resume experiment with"),
    ("ray.tune.tune", "Resume training with"),
    # a failed trial's traceback: Tune writes it to RESULTS/<name>/ray/<stage>/<trial>/error.txt, which the
    # launcher's one line per failure names
    ("ray.tune.execution.tune_controller", "Trial task failed for trial"),
    ("ray.tune.tune", "Trials did not complete"),
)
#: The raylet's report of a dead worker (with its ids and guesses why), printed to stdout by the driver.
WORKER_DIED = "A worker died or was killed"


@contextmanager
def quiet_ray_notices(verbose: bool = False) -> Iterator[None]:
    """Drop RAY_NOTICES (token-authentication notice, `Tuner.restore(...)` hint) and WORKER_DIED while the block
    runs, unless `verbose`; Ray's other warnings and errors still reach the terminal."""
    if verbose:
        yield
        return
    import ray._private.worker as ray_worker

    printer = ray_worker.print_to_stdstream

    def print_unless_worker_died(data: dict, ignore_prefix: bool) -> None:
        if not any(WORKER_DIED in line for line in data.get("lines", ())):
            printer(data, ignore_prefix)

    filters = [(logging.getLogger(name), lambda record, text=text: text not in record.getMessage())
               for name, text in RAY_NOTICES]
    for logger, f in filters:
        logger.addFilter(f)
    ray_worker.print_to_stdstream = print_unless_worker_died
    try:
        yield
    finally:
        ray_worker.print_to_stdstream = printer
        for logger, f in filters:
            logger.removeFilter(f)


#: Seconds to wait for a TCP connection to the --address before giving up (Ray itself retries for minutes).
ADDRESS_CONNECT_TIMEOUT_S = 5.0
#: Seconds to wait, once connected, for the server's HTTP/2 greeting (a Ray GCS answers within milliseconds).
ADDRESS_ANSWER_TIMEOUT_S = 5.0
#: HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113, section 3.4); a gRPC server such
#: as Ray's GCS must answer with a SETTINGS frame of its own.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS = 0x4


def check_address_reachable(address: str | None, *, timeout_s: float = ADDRESS_CONNECT_TIMEOUT_S) -> None:
    """Refuse a malformed --address, one whose host:port accepts no TCP connection (within `timeout_s`), and one
    that accepts but does not speak gRPC as a Ray GCS does (within ADDRESS_ANSWER_TIMEOUT_S more), in seconds
    where `ray.init(address=...)` retries for minutes (module docstring). 'auto' passes."""
    if not address or address == "auto":
        return
    target = address.split("://", 1)[-1]
    host, sep, port_text = target.rpartition(":")
    host = host.strip("[]")
    what = ("no port" if not sep else f"port {port_text!r} is not a number from 1 to 65535"
            if not (port_text.isdigit() and 0 < int(port_text) < 65536) else "" if host else "no host")
    if what:
        raise RaySessionError(f"--address {address}: expected HOST:PORT (the head's GCS, e.g. 10.0.0.1:6379) or auto; "
                              f"{what}")
    try:
        conn = socket.create_connection((host, int(port_text)), timeout=timeout_s)
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise RaySessionError(
            f"--address {address}: no Ray cluster answers at {host}:{port_text} ({reason} after trying for at most "
            f"{timeout_s:g} s); start one there with `ray start --head --port {port_text}`, check the address, or "
            "leave out --address to run on this machine"
        ) from None
    with conn:
        problem = _not_grpc(conn, ADDRESS_ANSWER_TIMEOUT_S)
    if problem:
        raise RaySessionError(
            f"--address {address}: {host}:{port_text} accepts connections but is not a Ray cluster ({problem}); "
            f"give the port of the head's GCS (`ray start --head --port PORT`, 6379 by default), or leave out "
            "--address to run on this machine"
        )


def _not_grpc(conn: socket.socket, timeout_s: float) -> str | None:
    """None when the server on `conn` answers the HTTP/2 preface with a SETTINGS frame (any gRPC server
    does, Ray's GCS among them); else what it did instead."""
    deadline = time.monotonic() + timeout_s
    head = b""
    try:
        conn.sendall(_HTTP2_PREFACE)
        while len(head) < 9:
            conn.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = conn.recv(9 - len(head))
            if not chunk:
                return "it closed the connection without a gRPC answer"
            head += chunk
    except TimeoutError:
        return f"no gRPC answer within {timeout_s:g} s"
    except OSError as e:
        return f"the connection failed: {e.strerror or e}"
    if head[3] != _HTTP2_SETTINGS:
        with suppress(OSError):  # a little more of the answer, to show what answered
            conn.settimeout(0.2)
            head += conn.recv(40)
        return f"it answered {head[:40]!r}, not an HTTP/2 greeting"
    return None


def _enable_token_auth_when_available() -> None:
    """Present this user's Ray token when joining a cluster, as `ray start` does when it finds one (RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): set RAY_AUTH_MODE=token and reload Ray's config (module
    docstring). An explicit RAY_AUTH_MODE=disabled is left alone."""
    if "RAY_AUTH_MODE" not in os.environ:
        token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
        if os.environ.get("RAY_AUTH_TOKEN") or token_file.exists():
            os.environ["RAY_AUTH_MODE"] = "token"
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        try:
            from ray._raylet import Config  # type: ignore[attr-defined]  # private; what ray.init does for token mode
        except ImportError:
            return
        Config.initialize("")


@contextmanager
def ray_session(address: str | None = None, *, num_cpus: int | None = None,
                per_trial: dict[str, float] | None = None) -> Iterator[None]:
    """Start a local Ray (dashboard off, short temp dir, recorded: `recorded_session`) or join `address`;
    always shut down. A local start first removes the stale sessions of killed drivers."""
    import ray

    worker_env = {**MALLOC_ENV, **{k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}}
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, configure_logging=False,
                                  runtime_env={"env_vars": worker_env})
    temp_dir = None
    record: Any = nullcontext()
    if address:
        kwargs["address"] = address
        _enable_token_auth_when_available()
    else:
        removed, problems = remove_stale()  # what killed sweeps left of their local sessions
        for line in [r.line() for r in removed] + problems:
            print(f"recscale sweep: {line}", file=sys.stderr)
        temp_dir = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=TEMP_ROOT)
        session = f"{Path(temp_dir).name}-{os.getpid()}-{secrets.token_hex(3)}"
        kwargs.update(num_cpus=num_cpus, _temp_dir=temp_dir)
        record = recorded_session(session, temp_dir)
    with record, scoped_env(TUNE_DRIVER_ENV):
        try:  # a Ctrl-C during ray.init still shuts down what it started
            try:
                ray.init(**kwargs)
            except (ConnectionError, TimeoutError) as e:
                raise RaySessionError(f"--address {address}: cannot join the Ray cluster: {e}") from None
            check_fits(ray.cluster_resources(), per_trial or {})
            yield
        finally:
            ray.shutdown()
            if temp_dir:
                shutil.rmtree(temp_dir, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# records of local sessions

#: The environment variable that marks every process of a recorded session.
SESSION_ENV = "RECSCALE_RAY_SESSION"
RECORDS = "ray_sessions"
#: Where local sessions keep their temporary folders (short: Ray's Unix socket paths are limited).
TEMP_ROOT = Path("/tmp")
TEMP_PREFIX = "rs-"
#: Seconds a stale process gets to end after SIGTERM before SIGKILL.
STOP_GRACE_S = 5.0
_SESSION_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


def records_dir() -> Path:
    if os.environ.get("RECSCALE_CACHE_DIR"):
        return Path(os.environ["RECSCALE_CACHE_DIR"]) / RECORDS
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recscale" / RECORDS


def process_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot, from /proc), or None when there is none or
    it has ended (a zombie waiting for its parent to collect it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # fields 1-2 end at the ')'
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]  # fields 3 (state) and 22 (start time)


@dataclass(frozen=True)
class SessionRecord:
    session: str
    host: str
    driver_pid: int
    driver_start: str | None
    temp_dir: str
    path: Path

    def driver_alive(self) -> bool:
        """Whether the driver runs: its pid is alive with the recorded start time (a reused pid is another process)."""
        start = process_start(self.driver_pid)
        return start is not None and (self.driver_start is None or start == self.driver_start)

    def owned_temp_dir(self) -> Path | None:
        """The recorded folder when it is one this module creates (directly under /tmp, named rs-*) and still exists."""
        path = Path(self.temp_dir)
        if path.is_absolute() and path.parent == TEMP_ROOT and path.name.startswith(TEMP_PREFIX) \
                and ".." not in path.parts and path.exists():
            return path
        return None


@contextmanager
def recorded_session(session: str, temp_dir: str) -> Iterator[None]:
    """Keep the record of `session` (this process as its driver) and its environment variable while the
    block runs; both are gone afterwards."""
    path = records_dir() / f"{session}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"session": session, "host": socket.gethostname(), "driver_pid": os.getpid(),
                                     "driver_start": process_start(os.getpid()), "temp_dir": temp_dir,
                                     "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=1) + "\n")
    except OSError as e:  # an unwritable cache never stops a sweep; only its clean-up after a kill -9 is lost
        print(f"recscale sweep: {path.parent}: cannot record the Ray session ({one_line(e)}); after a kill -9 of "
              f"this sweep, remove {temp_dir} and its Ray processes by hand", file=sys.stderr)
    try:
        with scoped_env({SESSION_ENV: session}, override=True):
            yield
    finally:
        with suppress(OSError):  # its folder is gone or is not a folder: nothing to remove
            path.unlink(missing_ok=True)


def read_records() -> tuple[list[SessionRecord], list[str]]:
    """Every record (of any host) and one line per record file that cannot be read."""
    out, problems = [], []
    for path in sorted(records_dir().glob("*.json")):  # none when the folder does not exist
        try:
            raw = json.loads(path.read_text())
            rec = SessionRecord(session=str(raw["session"]), host=str(raw["host"]), driver_pid=int(raw["driver_pid"]),
                                driver_start=None if raw.get("driver_start") is None else str(raw["driver_start"]),
                                temp_dir=str(raw["temp_dir"]), path=path)
            if not _SESSION_ID.match(rec.session):
                raise ValueError(f"session {rec.session!r} is not a session id")
        except (OSError, ValueError, KeyError, TypeError) as e:
            problems.append(f"{path}: not a readable Ray session record ({one_line(e)}); left alone")
            continue
        out.append(rec)
    return out, problems


def session_processes(session: str) -> list[int]:
    """Pids of this user's processes whose environment holds SESSION_ENV=`session` exactly (not this one)."""
    marker = f"{SESSION_ENV}={session}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with suppress(OSError):  # gone, or another user's
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found


def _end(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM `pids`, SIGKILL the ones still there after `grace_s`; returns those that were signalled."""
    starts = {pid: process_start(pid) for pid in pids}
    signalled = []
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    deadline = time.monotonic() + grace_s
    left = list(signalled)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if process_start(p) is not None and process_start(p) == starts[p]]
    for pid in left:
        if process_start(pid) == starts[pid]:  # the same process, not a reused pid
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return signalled


@dataclass(frozen=True)
class Removed:
    record: SessionRecord
    processes: list[int]
    temp_dir: Path | None

    def line(self) -> str:
        what = [f"{len(self.processes)} process(es)" if self.processes else "no process left running"]
        if self.temp_dir is not None:
            what.append(str(self.temp_dir))
        return (f"stale Ray session {self.record.session} (driver pid {self.record.driver_pid} is gone): removed "
                + ", ".join(what))


def remove_stale(*, dry_run: bool = False, grace_s: float = STOP_GRACE_S) -> tuple[list[Removed], list[str]]:
    """End the processes (those carrying exactly SESSION_ENV=<session>) and remove the `/tmp/rs-*` folder and the
    record of every stale session of this host (its driver gone: `SessionRecord.driver_alive`); with `dry_run` only
    say what would go. Returns what was (or would be) removed and lines about unreadable records."""
    records, problems = read_records()
    removed = []
    for rec in [r for r in records if r.host == socket.gethostname() and not r.driver_alive()]:
        pids = session_processes(rec.session)
        folder = rec.owned_temp_dir()
        if not dry_run:
            pids = _end(pids, grace_s)
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            rec.path.unlink(missing_ok=True)
        removed.append(Removed(rec, pids, folder))
    return removed, problems
