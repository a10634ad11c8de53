"""List registered architectures (with their config fields), data protocols (with their parameters) and
sources, and the model, protocol and source files that could not be loaded (each named, with why)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import textwrap
from typing import Any

import architectures
import protocols


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    configs = {name: architectures.entry(name).config_cls() for name in architectures.names()}
    archs = {name: {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)} for name, cfg in configs.items()}
    out: dict[str, Any] = {
        "architectures": archs,
        "protocols": {name: protocols.protocol_parameters(name) for name in protocols.protocol_names()},
        "sources": protocols.source_names(),
        "model_file_problems": architectures.problems(),
        "protocol_file_problems": protocols.problems(),
    }
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print("architectures:")
    for name, fields in archs.items():
        print(_entry(name, fields))
    if out["model_file_problems"]:
        print("model files not loaded:")
        for line in out["model_file_problems"]:
            print(f"  {line}")
    print("protocols:")
    for name, params in out["protocols"].items():
        print(_entry(name, params))
    print("sources:")
    for name in out["sources"]:
        print(f"  {name}")
    if out["protocol_file_problems"]:
        print("protocol/source files not loaded:")
        for line in out["protocol_file_problems"]:
            print(f"  {line}")
    return 0


def _entry(name: str, fields: dict[str, Any]) -> str:
    """`name` and every `key=value`, wrapped under one another (nothing left out)."""
    return textwrap.fill(", ".join(f"{k}={v}" for k, v in fields.items()), width=110, initial_indent=f"  {name:<24} ",
                         subsequent_indent=" " * 27, break_long_words=False, break_on_hyphens=False)
