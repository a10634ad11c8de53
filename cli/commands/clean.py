"""Remove what killed sweeps left of the local Ray sessions they started: Ray processes still running and
their /tmp/rs-* folders.

A session is stale when its driver (the `recscale sweep` process) is gone, e.g. after kill -9. Processes and
folders are found only through the sessions' records, never by name (docs/sweeps.md, "Interruptions, failures,
resume"); every sweep does the same before it starts Ray.

examples:
  recscale clean             # remove stale sessions, one line each
  recscale clean --dry-run   # only list them
"""
from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true",
                        help="list the stale sessions and what would go; remove nothing")


def run(args: argparse.Namespace) -> int:
    from harness.sweep.ray_sessions import records_dir, remove_stale

    removed, problems = remove_stale(dry_run=args.dry_run)
    for r in removed:
        line = r.line()
        print(line.replace(": removed ", ": would remove ") if args.dry_run else line)
    for line in problems:
        print(f"recscale clean: {line}")
    if not removed:
        print(f"no stale Ray session (records in {records_dir()})")
    return 0
