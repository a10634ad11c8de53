"""Integrity records of a prepared artifact and the checks that read them; run folders use the same record for
their prediction files (`record_of`, `file_problems`). The records, which command checks what and the messages:
docs/protocols.md, "Prepared dataset (artifact)", Integrity.
"""
from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from core.errors import RecscaleError
from core.results_layout import MANIFEST_FILE

ALGORITHM = "blake2b-128"
INTEGRITY_KEY = "integrity"
MANIFEST_DIGEST_KEY = "manifest_blake2b"
#: Keys every artifact manifest (old or new) has; a manifest without one is damaged.
REQUIRED_MANIFEST_KEYS: tuple[str, ...] = ("fingerprint", "vocab_sizes", "history_len", "is_synthetic", "num_targets",
                                           INTEGRITY_KEY, MANIFEST_DIGEST_KEY)
_CHUNK = 1 << 20
#: Checking checksums shows a progress bar (when asked to) from this many bytes on.
PROGRESS_MIN_BYTES = 256 << 20
_REBUILD = "rerun `recscale prepare` with the same settings to rebuild it"


class ArtifactDamagedError(RecscaleError):
    """A prepared artifact's file is missing, truncated or altered; names the file and what is wrong."""


def file_checksum(path: Path, on_chunk: Callable[[int], Any] | None = None) -> str:
    """blake2b-128 hex digest of a file's bytes, read in 1 MiB chunks (`on_chunk(n)` after each)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
    return h.hexdigest()


def record_of(folder: Path, names: list[str]) -> dict[str, Any]:
    """The integrity record (size and checksum) of the files `names` (paths relative to `folder`)."""
    folder = Path(folder)
    files = {rel: {"bytes": (folder / rel).stat().st_size, "blake2b": file_checksum(folder / rel)} for rel in names}
    return {"algorithm": ALGORITHM, "files": files}


def manifest_digest(manifest: dict) -> str:
    """blake2b-128 of the manifest's canonical JSON (sorted keys), without its own digest key."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST_KEY}
    return hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=16).hexdigest()


def seal_manifest(manifest: dict, folder: Path) -> dict:
    """`manifest` with the integrity record of every file under `folder` but manifest.json, and its own digest."""
    folder = Path(folder)
    names = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*")) if p.is_file()]
    sealed = {**manifest, INTEGRITY_KEY: record_of(folder, [rel for rel in names if rel != MANIFEST_FILE])}
    sealed[MANIFEST_DIGEST_KEY] = manifest_digest(sealed)
    return sealed


def read_manifest(folder: Path) -> dict:
    """Parse and self-check `folder`/manifest.json; raises ArtifactDamagedError naming the problem."""
    path = Path(folder) / MANIFEST_FILE
    if not path.is_file():
        raise ArtifactDamagedError(f"{path}: missing; {_REBUILD}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ArtifactDamagedError(
            f"{path}: not valid JSON ({e}); the manifest is truncated or damaged; {_REBUILD}") from e
    if not isinstance(manifest, dict):
        raise ArtifactDamagedError(f"{path}: not a JSON object; the manifest is damaged; {_REBUILD}")
    missing = [k for k in REQUIRED_MANIFEST_KEYS if k not in manifest]
    if missing:
        raise ArtifactDamagedError(f"{path}: required key(s) {', '.join(missing)} missing; {_REBUILD}")
    if manifest[MANIFEST_DIGEST_KEY] != manifest_digest(manifest):
        raise ArtifactDamagedError(f"{path}: content differs from its recorded checksum ({MANIFEST_DIGEST_KEY}); "
                                   f"the manifest was altered or damaged; {_REBUILD}")
    return manifest


def file_problems(folder: Path, manifest: dict, *, checksums: bool, only: list[str] | None = None,
                  recorded_in: str = MANIFEST_FILE, progress: bool = False) -> list[str]:
    """One line per recorded file (of `only`, when given) that is missing, has another size or (with
    `checksums`) other bytes. `recorded_in` names the file holding the record, for messages; `progress`
    shows a bar while checksumming large files."""
    folder = Path(folder)
    record = manifest.get(INTEGRITY_KEY) or {}
    if not isinstance(record, dict) or record.get("algorithm", ALGORITHM) != ALGORITHM:
        algorithm = record.get("algorithm") if isinstance(record, dict) else record
        return [f"{folder / recorded_in}: unknown checksum algorithm {algorithm!r}"]
    problems = []
    entries = {rel: e for rel, e in record.get("files", {}).items() if only is None or rel in only}
    total = sum(int(e.get("bytes", 0)) for e in entries.values() if isinstance(e, dict))
    shown = progress and checksums and total >= PROGRESS_MIN_BYTES  # a bar over the bytes to checksum
    with tqdm(total=total, unit="B", unit_scale=True, desc=f"verifying {folder.name}", file=sys.stderr,
              dynamic_ncols=True, leave=False, disable=not shown) as bar:
        for rel, entry in entries.items():
            problem = _file_problem(folder, rel, entry, checksums, recorded_in, bar.update if shown else None)
            if problem:
                problems.append(problem)
    return problems


def _file_problem(folder: Path, rel: str, entry: dict, checksums: bool, recorded_in: str,
                  on_chunk: Callable[[int], Any] | None) -> str | None:
    """The problem of one recorded file, or None."""
    p = folder / rel
    if not p.is_file():
        return f"{p}: missing"
    size = p.stat().st_size
    if size != entry["bytes"]:
        kind = "truncated" if size < entry["bytes"] else "grown"
        return f"{p}: {size} bytes, {_short(recorded_in)} records {entry['bytes']} ({kind} or damaged)"
    if checksums and file_checksum(p, on_chunk) != entry["blake2b"]:
        return f"{p}: checksum differs from {_short(recorded_in)}'s (content damaged)"
    return None


def _short(recorded_in: str) -> str:
    return "the manifest" if recorded_in == MANIFEST_FILE else recorded_in


def check_files(folder: Path, manifest: dict, *, checksums: bool, progress: bool = False) -> None:
    """Raise ArtifactDamagedError listing every problem of `file_problems` (nothing for an old artifact)."""
    problems = file_problems(folder, manifest, checksums=checksums, progress=progress)
    if problems:
        head = f"{folder}: damaged prepared artifact; {_REBUILD}" if len(problems) > 1 else ""
        lines = "\n  ".join(problems)
        raise ArtifactDamagedError(f"{head}\n  {lines}" if head else f"{lines}; {_REBUILD}")


def verify_artifact(folder: Path) -> dict:
    """Full check (manifest, sizes, checksums); returns the manifest."""
    manifest = read_manifest(folder)
    check_files(folder, manifest, checksums=True)
    return manifest
