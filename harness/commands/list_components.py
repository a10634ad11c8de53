"""List registered architectures (with their config fields), data protocols and sources."""
from __future__ import annotations

import argparse
import dataclasses
import json

import architectures
import protocols


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    archs = {}
    for name in architectures.names():
        cfg = architectures.entry(name).config_cls()
        archs[name] = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    out = {"architectures": archs, "protocols": protocols.protocol_names(), "sources": protocols.source_names()}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print("architectures:")
    for name, fields in archs.items():
        shown = ", ".join(f"{k}={v}" for k, v in list(fields.items())[:6])
        print(f"  {name:<24} {shown}{' ...' if len(fields) > 6 else ''}")
    print("protocols:")
    for name in out["protocols"]:
        print(f"  {name}")
    print("sources:")
    for name in out["sources"]:
        print(f"  {name}")
    return 0
