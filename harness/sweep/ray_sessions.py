"""Records of the local Ray sessions recscale starts, and removal of the ones a killed driver left behind.

A sweep without --address starts Ray itself (`launcher.ray_session`) in a fresh `/tmp/rs-XXXXXXXX` folder.
When its driver ends normally it shuts Ray down and removes the folder. After `kill -9` of the driver,
Ray's GCS and raylet die with it (kernel fate sharing), but Ray's agents and workers linger for about a
minute and the temporary folder stays for good. So, while a session is open:

- a record `<cache>/ray_sessions/<session>.json` (`harness.calibration.cache_dir()`: per user, outside the
  repository) names the session, this host, the driver's pid and its start time (as /proc gives it, so a
  reused pid is not mistaken for the driver) and the temporary folder;
- every process of the session carries `RECSCALE_RAY_SESSION=<session>` in its environment: the driver sets
  it before `ray.init`, and the GCS, the raylet, its agents and every worker inherit it.

A session is stale when its record is of this host and its driver is gone. `remove_stale()` (run by every
sweep before it starts a local Ray, and by `recscale clean`) then ends the processes whose environment
carries exactly that session's variable (SIGTERM, SIGKILL after STOP_GRACE_S), removes the recorded
folder when it is a `/tmp/rs-*` folder, and deletes the record. Nothing is ever found by process name: a
Ray cluster started otherwise (`ray start`, another tool, another user), a session whose driver still runs
and every folder no record names are left alone. A record that cannot be read is reported and kept.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.atomic_write import write_text
from core.errors import one_line
from harness import calibration

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
    return calibration.cache_dir() / RECORDS


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
        start = process_start(self.driver_pid)
        if start is None:
            return False
        return self.driver_start is None or start == self.driver_start

    def owned_temp_dir(self) -> Path | None:
        """The recorded folder when it is one this module creates (directly under /tmp, named rs-*)."""
        path = Path(self.temp_dir)
        if path.is_absolute() and path.parent == TEMP_ROOT and path.name.startswith(TEMP_PREFIX) \
                and ".." not in path.parts:
            return path
        return None


def new_temp_dir() -> tuple[str, str]:
    """A fresh session: (its id, its temporary folder /tmp/rs-XXXXXXXX, created)."""
    import tempfile

    temp_dir = tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=TEMP_ROOT)
    return f"{Path(temp_dir).name}-{os.getpid()}-{secrets.token_hex(3)}", temp_dir


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
    before = os.environ.get(SESSION_ENV)
    os.environ[SESSION_ENV] = session
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SESSION_ENV, None)
        else:
            os.environ[SESSION_ENV] = before
        _unlink(path)


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # its folder is gone or is not a folder: nothing to remove
        pass


def read_records() -> tuple[list[SessionRecord], list[str]]:
    """Every record (of any host) and one line per record file that cannot be read."""
    out, problems = [], []
    folder = records_dir()
    if not folder.is_dir():
        return [], []
    for path in sorted(folder.glob("*.json")):
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


def stale_records() -> tuple[list[SessionRecord], list[str]]:
    """Records of this host whose driver is gone, and the lines about unreadable records."""
    records, problems = read_records()
    host = socket.gethostname()
    return [r for r in records if r.host == host and not r.driver_alive()], problems


def session_processes(session: str) -> list[int]:
    """Pids of this user's processes whose environment holds SESSION_ENV=`session` exactly (not this one)."""
    marker = f"{SESSION_ENV}={session}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:  # gone, or another user's
            continue
        if marker in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def _end(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM `pids`, SIGKILL the ones still there after `grace_s`; returns those that were signalled."""
    starts = {pid: process_start(pid) for pid in pids}
    signalled = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    left = list(signalled)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if process_start(p) is not None and process_start(p) == starts[p]]
    for pid in left:
        if process_start(pid) == starts[pid]:  # the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
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
    """End the processes and remove the folder and record of every stale session (see the module doc);
    with `dry_run` only say what would go. Returns what was (or would be) removed and lines about unreadable
    records."""
    stale, problems = stale_records()
    removed = []
    for rec in stale:
        pids = session_processes(rec.session)
        folder = rec.owned_temp_dir()
        if folder is not None and not folder.exists():
            folder = None
        if not dry_run:
            pids = _end(pids, grace_s)
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
            rec.path.unlink(missing_ok=True)
        removed.append(Removed(rec, pids, folder))
    return removed, problems
