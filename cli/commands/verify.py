"""Verify a prepared artifact: the manifest's own checksum, and every file's size and blake2b checksum.

Exit status 0 when everything matches the manifest's integrity record; 2, with a message naming each damaged
file and what is wrong, otherwise; an artifact written before integrity records gives 2 too (docs/reliability.md,
"Data, synthetic logs and prepared artifacts").

Example:
  recscale verify artifacts/prepared/synthetic-exposure-b9c7824001448f35
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from core.errors import RecscaleError
from protocols.integrity import INTEGRITY_KEY, verify_artifact


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("artifact", type=Path, help="prepared artifact folder (as printed by `recscale prepare`)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of one line")


def run(args: argparse.Namespace) -> int:
    if not args.artifact.is_dir():
        raise RecscaleError(f"{args.artifact}: no such folder")
    manifest = verify_artifact(args.artifact)
    files = manifest[INTEGRITY_KEY]["files"]
    total = sum(entry["bytes"] for entry in files.values())
    if args.json:
        print(json.dumps({"path": str(args.artifact), "ok": True, "files": len(files), "bytes": total,
                          "fingerprint": manifest["fingerprint"]}, indent=2))
    else:
        print(f"{args.artifact}: ok ({len(files) + 1} files, {total:,} bytes; sizes and checksums match the manifest)")
    return 0
