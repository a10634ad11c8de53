"""The `recscale` command line: a thin dispatcher over `cli.commands.<name>` modules, imported lazily (so
`recscale inspect` never pays for torch or Ray, and a problem in one command cannot break the others). A
RecscaleError, a failed file operation and a full disk are one line on stderr, exit status 2, no traceback
(docs/reliability.md, "Output locations"). `args.process_argv` is this process's command line when `main()`
runs as the program (None from Python): what `reexec_under_malloc` re-executes, so no flag is ever lost.
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
from contextlib import suppress
from pathlib import Path
from types import ModuleType

from core.errors import RecscaleError, disk_full, disk_full_line
from core.results_layout import REPORT_FILE
from protocols.output_location import CHECKED

#: (command, module under cli.commands, one-line help)
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("synth", "synth", "write a synthetic log in RecFlow's on-disk layout"),
    ("inspect", "inspect_log", "validate a log and print its statistics"),
    ("prepare", "prepare", "build (or reuse) a prepared dataset artifact; prints its path"),
    ("verify", "verify", "verify a prepared artifact's file sizes and checksums against its manifest"),
    ("histories", "histories", "export per-target history membership (audit trail) to parquet"),
    ("compare-delay", "compare_delay", "share of targets whose history membership differs between two delays"),
    ("list", "list_components", "list registered architectures, protocols and sources"),
    ("flops", "flops", "forward matrix FLOPs per target by module, and parameter counts"),
    ("bench", "bench", "measure loader and training-step throughput here"),
    ("train", "train", "train and evaluate one run"),
    ("metrics", "metrics", "recompute a run's metrics from its saved predictions and compare"),
    ("sweep", "sweep", "launch a sweep YAML through Ray Tune"),
    ("clean", "clean", "end the Ray processes and remove the /tmp/rs-* folders that killed sweeps left"),
    ("analyze", "analyze", f"scaling fits, seed variance, significance, plots and {REPORT_FILE}"),
    ("reference", "reference", "publish a sweep as a committed reference study, or check a fresh run against one"),
)


def reexec_under_malloc(args: argparse.Namespace) -> None:
    """Run this command line again (`-m cli ARGV`) under harness.perf's glibc malloc settings, once, when
    `main()` runs as the program (`train`, `bench` and `sweep --dry-run`); otherwise return."""
    if getattr(args, "process_argv", None):
        from harness import perf

        perf.reexec_with_malloc_env(["-m", __package__ or "cli", *args.process_argv])


def check_arch(name: str) -> None:
    """Refuse an architecture that is not registered, naming the valid ones (before anything is measured)."""
    import architectures

    if name not in architectures.names():
        raise RecscaleError(f"unknown architecture {name!r}; valid: {', '.join(architectures.names())}")


def main(argv: list[str] | None = None) -> int:
    process_argv = list(sys.argv[1:]) if argv is None else None
    argv = list(sys.argv[1:] if argv is None else argv)
    lines = "\n".join(f"  {name:<14} {help_}" for name, _, help_ in COMMANDS)
    top = argparse.ArgumentParser(
        prog="recscale",
        description="Ablation and scaling-law benchmark harness for unified recommendation rankers.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"commands:\n{lines}\n\nRun `recscale COMMAND --help` for a command's options.",
    )
    top.add_argument("command", nargs="?", help="one of the commands below")
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    table = {c: (m, h) for c, m, h in COMMANDS}
    if name not in table:
        top.error(f"unknown command {name!r}; valid: {', '.join(table)}")
    module_name, help_ = table[name]
    module = importlib.import_module(f"cli.commands.{module_name}")
    parser = argparse.ArgumentParser(
        prog=f"recscale {name}",
        description=(module.__doc__ or help_).strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    args.process_argv = process_argv
    code = _run(name, module, args)
    if process_argv is not None and getattr(module, "EXIT_WITHOUT_TEARDOWN", False):
        exit_without_teardown(code)
    return code


def _run(name: str, module: ModuleType, args: argparse.Namespace) -> int:
    try:
        return int(module.run(args) or 0)
    except RecscaleError as e:
        print(f"recscale {name}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        full = disk_full(e)
        if full is not None:
            named = getattr(full, "filename", None)  # else the output location being written
            path = Path(named) if named else CHECKED[-1] if CHECKED else Path.cwd()
            print(f"recscale {name}: error: {disk_full_line(path)}", file=sys.stderr)
        elif isinstance(e, OSError) and e.filename:  # a file operation no command anticipated
            where = f"{e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")
            print(f"recscale {name}: error: {where}: cannot write or read it: {(e.strerror or str(e)).lower()}",
                  file=sys.stderr)
        else:  # not a full disk nor about a file: a bug, shown with its traceback
            raise
        return 2
    except KeyboardInterrupt:
        print(f"recscale {name}: interrupted", file=sys.stderr)
        return 130


def exit_without_teardown(code: int) -> None:
    """End the process now: exit handlers run and the standard streams are flushed, but the interpreter's
    unloading of every module is skipped (about 1.5 s once torch and Ray are imported, on 2 busy cores: most
    of what a Ctrl-C'd sweep would otherwise spend after its summary). For commands that set
    EXIT_WITHOUT_TEARDOWN (they close every file they write), and only when `main()` runs as the program."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
