"""Forward matrix FLOPs per target by module, and parameter counts (embedding / non-embedding).

FLOPs count linear, matmul, bmm, einsum and attention products at 2 per multiply-add, measured with fvcore on a
random batch whose histories are full. Embedding parameters depend on the vocabularies: --data ARTIFACT sizes
them from a prepared dataset, else a small test vocabulary is used. --set takes model fields as `recscale train
--set` does: model.<field>=V or <field>=V.

examples:
  recscale flops --arch whale
  recscale flops --arch whale_meanpool --set model.dim=32 --set history_len=64 --json
"""
from __future__ import annotations

import argparse
import dataclasses
import json

import architectures
from architectures.flops import count_flops, count_params
from cli.main import check_arch
from core.typed_config import to_dict
from harness.config import model_config, parse_set
from protocols.schema import default_test_spec, random_batch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", required=True, help="registered architecture (see `recscale list`)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a model config field, e.g. --set model.dim=32 or --set dim=32 (repeatable)")
    parser.add_argument("--data", metavar="ARTIFACT", help="prepared dataset whose vocabularies size the embeddings")
    parser.add_argument("--batch-size", type=int, default=2, help="targets in the traced batch (default 2)")
    parser.add_argument("--depth", type=int, default=2, help="module nesting depth shown in the table (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")


def run(args: argparse.Namespace) -> int:
    check_arch(args.arch)
    model = parse_set(args.set, sections=("model",)).get("model", {})
    cfg = model_config(args.arch, model)
    history_len = cfg.history_len  # every model config has it (architectures/contract.py)
    if args.data:
        from protocols.artifact import PreparedDataset

        spec = dataclasses.replace(PreparedDataset.open(args.data).spec, history_len=history_len)
    else:
        spec = default_test_spec(history_len=history_len)
    model = architectures.build(args.arch, spec, cfg)
    batch = random_batch(spec, max(1, args.batch_size), min_len=history_len)
    report = count_flops(model, batch)
    params = count_params(model)
    if args.json:
        print(json.dumps({
            "arch": args.arch,
            "config": to_dict(cfg),
            "flops_per_target": report.per_target,
            "params_embedding": params["embedding"],
            "params_non_embedding": params["non_embedding"],
            "flops_by_module": report.by_module,
            "flops_by_operator": report.by_operator,
            "vocabulary": "artifact" if args.data else "test",
        }, indent=2))
        return 0
    total = report.per_target or 1.0
    print(f"{args.arch}: {report.per_target:,.0f} FLOPs per target ({report.per_target / 1e6:.6f} MFLOPs)")
    print(f"{'module':<40} {'FLOPs/target':>16} {'share':>7}")
    for name, flops in report.by_module.items():
        depth = 0 if name == "" else name.count(".") + 1
        if depth == 0 or depth > args.depth or flops == 0:
            continue
        print(f"{'  ' * (depth - 1) + name:<40} {flops:>16,.0f} {flops / total:>7.1%}")
    vocab = "from the artifact" if args.data else "of the small test vocabulary; pass --data for real ones"
    print(f"parameters: non-embedding {params['non_embedding']:,}, embedding {params['embedding']:,} ({vocab})")
    return 0
