"""Build (or reuse) a prepared dataset: split, sampled targets, legal histories, encodings.

Settings are `protocols.prepare.PrepareConfig`'s fields and the protocol's parameters, given as `--set
key=value` (repeatable; `--set split.valid_start=2024-02-09` for a nested one) or through the flags below,
aliases of those keys (docs/protocols.md, "Settings"). The artifact folder is content-addressed: the same
command twice does nothing the second time. Its path is printed on stdout (with --json, also the manifest's
summary).

Examples:
  recscale prepare --source synthetic --root data/synth-small --protocol exposure --delay-s 60
  recscale prepare --set source=synthetic --set root=data/synth-small --set delay_s=0 --set n_test=30000
  recscale prepare --source movielens100k --root path/to/ml-100k --test-start 1998-04-06
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import protocols
from core import results_layout as layout
from core.typed_config import ConfigError, flat_keys, from_dict, parse_set_options
from protocols import protocol_parameters
from protocols.prepare import REFERENCE_SIZES, PrepareConfig, prepare
from protocols.split import SplitSettings

#: Flag (argparse dest) -> PrepareConfig key it sets (dotted for nested sections).
FLAG_KEYS: dict[str, str] = {
    **{key: key for key in ("source", "root", "protocol", "delay_s", "history_len")},
    **{split: f"n_{split}" for split in ("train", "valid", "test")},
    "seed": "sample_seed",
    "out": "out",
    **{f.name: f"split.{f.name}" for f in dataclasses.fields(SplitSettings)},
}
#: Keys without a default that makes sense for every log: they must be given.
REQUIRED_KEYS: tuple[str, ...] = ("source", "root")


def _default(key: str) -> Any:
    section, _, sub = key.partition(".")
    if sub:
        return "the source's default split"
    if section in protocols.parameter_names():
        return "the protocol's: " + ", ".join(
            f"{p} {protocol_parameters(p)[section]}" for p in protocols.protocol_names()
            if section in protocol_parameters(p))
    return getattr(PrepareConfig, section)


_HELP: dict[str, str] = {
    "source": "registered source: recflow, synthetic, movielens100k (required)",
    "root": "folder of the log (required)",
    "protocol": "registered history protocol (recscale list): exposure, author50, ...",
    "delay_s": "protocol parameter: extra feedback delay in seconds (exposure; 0 allowed)",
    "history_len": "protocol parameter: history length L",
    "n_train": "training targets: a count or all",
    "n_valid": "validation targets: a count or all",
    "n_test": "test targets: a count or all",
    "sample_seed": "target sampling seed",
    "out": "root folder of prepared datasets",
    "split.timezone": "time zone of the split boundaries",
}
#: What a None default means.
_NONE_MEANS: dict[str, str] = {f"n_{split}": f"the source's: {size:,} scaled to the log for recflow/synthetic, "
                                             "all for movielens100k" for split, size in REFERENCE_SIZES.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for dest, key in FLAG_KEYS.items():
        text = _HELP.get(key, "split boundary (date or ISO date-time)")
        if key not in REQUIRED_KEYS:
            text += f" (default: {_NONE_MEANS.get(key, _default(key))})"
        parser.add_argument(f"--{dest.replace('_', '-')}", dest=dest, default=None,
                            metavar=key.split(".")[-1].upper(), help=f"{text}; same as --set {key}=...")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any PrepareConfig key or protocol parameter, e.g. delay_s=0, n_train=20000, "
                             "split.valid_start=2024-02-09 (repeatable)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of the bare path")


def config_from_args(args: argparse.Namespace) -> PrepareConfig:
    """The PrepareConfig of `--set` entries and alias flags; a key given both ways is refused."""
    settings = parse_set_options(args.set)
    given = flat_keys(settings)
    for dest, key in FLAG_KEYS.items():
        value = getattr(args, dest)
        if value is None:
            continue
        if key in given:
            raise ConfigError(f"{key}: given twice (--{dest.replace('_', '-')} and --set {key}=...); keep one")
        node = settings
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
        given[key] = value
    missing = [k for k in REQUIRED_KEYS if k not in given]
    if missing:
        raise ConfigError(f"{missing[0]}: missing; give --{missing[0]} or --set {missing[0]}=...")
    return from_dict(PrepareConfig, settings)


def run(args: argparse.Namespace) -> int:
    path = prepare(config_from_args(args), progress=not args.no_progress)
    if args.json:
        manifest = json.loads((path / layout.MANIFEST_FILE).read_text())
        keys = ("fingerprint", "protocol", "history_len", "num_targets", "membership", "vocab_sizes",
                "protocol_diagnostics", "prepare_wall_s")
        print(json.dumps({"path": str(path), **{k: manifest.get(k) for k in keys}}, indent=2))
    else:
        print(path)
    return 0
