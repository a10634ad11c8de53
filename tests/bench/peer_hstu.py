"""Meta's generative-recommenders HSTU layers built beside ours at the same shapes, for a side-by-side step.

The peer is never copied into this repository: it is imported from a local checkout of
github.com/meta-recsys/generative-recommenders named by the environment variable `RECSCALE_GR_CHECKOUT`,
with the `peer` extra installed (`pip install -e ".[peer]"`: fbgemm-gpu-cpu, the build for this torch, whose
jagged CPU ops the peer calls, and triton, which its modules import even when they run PyTorch kernels).
Tested at peer commit `TESTED_COMMIT`; the peer's later commits also import torchrec, which is not in the extra
(it requires the CUDA build of fbgemm-gpu). `import_peer` raises `PeerUnavailable` with the reason otherwise.

Three implementations of a stack of `num_layers` layers over B full-length sequences of N tokens of width D
(`Shapes`; the defaults are recscale's HSTU-only seed: B = 256, N = 2 * 128 + 1 = 257, D = 64, 2 layers of
4 heads x 16, fp32). Each `Impl` has a `forward()` from inputs built once, so a step times the layers only:

- `ours`: `blocks/hstu.HSTUEncoder` with `sequence_layout` (causal read mask, next-event time buckets) built
  in every step, as the model does per batch.
- `research`: the peer's research layer, `SequentialTransductionUnitJagged` in `HSTUJagged`
  (research/modeling/sequential/hstu.py), configured as its `HSTU` class configures it (relative position and
  time-bucket bias, `rel_bias` normalisation, SiLU, no dropout). With full-length sequences it computes the
  same function as ours, and `copy_weights_to_research` makes the two equal (outputs agree to float32
  rounding when both use the same layer-norm eps; the peer's default is 1e-6, ours 1e-5).
- `stu`: the peer's production layer, `STULayer` in `STUStack` (modules/stu.py) with its PyTorch kernels
  (`HammerKernel.PYTORCH`) and fbgemm's CPU jagged ops, target-aware with one target per sequence, no dropout.
  Not the same function: affine layer norms (eps 1e-6), a UVQK bias, q.k scaled by 1/sqrt(d), no relative
  bias, and an output projection from [u, attention, LN(attention) * u] (3 H d -> D).

`matrix_flops` counts the matrix products of one forward + backward with torch's FlopCounterMode (matmul,
bmm, addmm and the like; element-wise work and fbgemm's data movement are not counted); `check_flops` fails
when a peer's count is further from ours than its `FLOP_TOLERANCE`, so a timing never compares different work
unnoticed. Counts are nominal: ours computes every (query, key) pair there, as the peers do, although with
more than one thread it leaves out the key ranges that no query of a range reads (`run_flop_fraction` gives
the share it runs). Every product here is per sequence, so FLOPs per target do not depend on B: the check
may run at a small batch.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal, cast

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from architectures.blocks.hstu import (
    DEFAULT_NUM_BUCKETS,
    HSTUEncoder,
    HSTUKernel,
    HSTULayer,
    sequence_layout,
    set_hstu_kernel,
)

#: Environment variable naming the local generative-recommenders checkout.
CHECKOUT_ENV = "RECSCALE_GR_CHECKOUT"
#: The peer commit this module was written and tested against (2026-07-09).
TESTED_COMMIT = "6135bc30398f97e5786674192558d91f2ef2fa90"
#: Largest allowed |peer matrix FLOPs / ours - 1| for a side-by-side timing, per peer: 10% for the research
#: layer, which computes our function (the counts are equal), 25% for STU, a larger function (its output
#: projection reads 3 H d values, ours H d, and its affine first layer norm makes the first UVQK product
#: take an input gradient: 1.22 x our count per training step at the benchmark shapes).
FLOP_TOLERANCE: dict[str, float] = {"research": 0.10, "stu": 0.25}

ImplName = Literal["ours", "research", "stu"]
PEERS: tuple[ImplName, ...] = ("research", "stu")


class PeerUnavailable(RuntimeError):
    """The peer cannot be imported: no checkout named, or the `peer` extra (or a module it needs) missing."""


class FlopMismatch(RuntimeError):
    """A peer's counted matrix FLOPs differ from ours by more than FLOP_TOLERANCE."""


@dataclass(frozen=True)
class Shapes:
    batch: int = 256  # sequences (targets) per step
    seq_len: int = 257  # tokens per sequence, every one valid (HSTU-only: 2 * history_len + 1)
    dim: int = 64
    num_layers: int = 2
    num_heads: int = 4
    head_dim: int = 16
    num_buckets: int = DEFAULT_NUM_BUCKETS


def peer_checkout() -> Path:
    """The checkout named by CHECKOUT_ENV, checked to hold the `generative_recommenders` package."""
    value = os.environ.get(CHECKOUT_ENV)
    if not value:
        raise PeerUnavailable(f"{CHECKOUT_ENV} is not set: name a local checkout of meta-recsys/generative-"
                              f"recommenders (tested at commit {TESTED_COMMIT[:12]})")
    path = Path(value).expanduser()
    if not (path / "generative_recommenders" / "__init__.py").is_file():
        raise PeerUnavailable(f"{CHECKOUT_ENV}={value}: no generative_recommenders package there")
    return path


def peer_commit(path: Path) -> str:
    """The checkout's git commit, or "unknown" when it is not a git work tree."""
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def import_peer() -> SimpleNamespace:
    """The peer's modules (research `hstu`, `stu`, `common`), imported from the checkout; PeerUnavailable
    says what is missing."""
    path = peer_checkout()
    try:
        import fbgemm_gpu  # noqa: F401  (registers torch.ops.fbgemm, the jagged ops both peers call)
    except (ImportError, OSError, RuntimeError) as e:  # missing, or a build for another torch (undefined symbols)
        raise PeerUnavailable(f"fbgemm_gpu cannot be imported ({e}); install the peer extra, whose fbgemm-gpu-cpu "
                              "is the build for torch 2.13: pip install -e '.[peer]'") from None
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    try:
        from generative_recommenders import common
        from generative_recommenders.modules import stu
        from generative_recommenders.research.modeling.sequential import hstu
    except ImportError as e:
        raise PeerUnavailable(f"the peer at {path} does not import ({e}); the peer extra covers commit "
                              f"{TESTED_COMMIT[:12]} (later commits also need torchrec)") from None
    return SimpleNamespace(hstu=hstu, stu=stu, common=common, path=path, commit=peer_commit(path))


def _gr_bucketize(dt: torch.Tensor) -> torch.Tensor:
    """The time-bucket function the peer's research `HSTU` passes to its bias module (float32 log)."""
    return (torch.log(torch.abs(dt).clamp(min=1)) / 0.301).long()


@dataclass
class Impl:
    """One implementation at given shapes: its trainable module and a forward over inputs built once."""

    name: ImplName
    module: nn.Module
    forward: Callable[[], torch.Tensor]  # -> the last layer's output, every token ([B, N, D] or [B N, D])


def inputs(shapes: Shapes, seed: int = 0) -> dict[str, torch.Tensor]:
    """Tokens x [B, N, D], increasing millisecond timestamps [B, N] (gaps of 1 s to about a day), all valid."""
    g = torch.Generator().manual_seed(seed)
    B, N = shapes.batch, shapes.seq_len
    x = torch.randn(B, N, shapes.dim, generator=g)
    gaps = torch.exp(torch.empty(B, N).uniform_(0, 11.4, generator=g)).mul_(1000).to(torch.int64)
    return {"x": x, "ts": (1_700_000_000_000 + gaps.cumsum(1)), "valid": torch.ones(B, N, dtype=torch.bool)}


def build_ours(shapes: Shapes, data: dict[str, torch.Tensor], *, eps: float = 1e-5) -> Impl:
    encoder = HSTUEncoder(shapes.dim, shapes.num_layers, num_heads=shapes.num_heads, head_dim=shapes.head_dim,
                          max_len=shapes.seq_len, num_buckets=shapes.num_buckets, eps=eps)
    x, ts, valid = data["x"], data["ts"], data["valid"]

    def forward() -> torch.Tensor:
        mask, buckets = sequence_layout(ts, valid, num_buckets=shapes.num_buckets)  # [B, N, N] x2
        return encoder(x, valid, mask, buckets)[-1]  # [B, N, D]

    return Impl("ours", encoder, forward)


def build_research(peer: SimpleNamespace, shapes: Shapes, data: dict[str, torch.Tensor], *,
                   eps: float = 1e-6) -> Impl:
    h = peer.hstu
    N = shapes.seq_len
    layers = [
        h.SequentialTransductionUnitJagged(
            embedding_dim=shapes.dim, linear_hidden_dim=shapes.head_dim, attention_dim=shapes.head_dim,
            dropout_ratio=0.0, attn_dropout_ratio=0.0, num_heads=shapes.num_heads, linear_activation="silu",
            relative_attention_bias_module=h.RelativeBucketedTimeAndPositionBasedBias(
                max_seq_len=N, num_buckets=shapes.num_buckets, bucketization_fn=_gr_bucketize),
            normalization="rel_bias", linear_config="uvqk", concat_ua=False, epsilon=eps)
        for _ in range(shapes.num_layers)
    ]
    stack = h.HSTUJagged(modules=layers, autocast_dtype=None)
    x, ts = data["x"], data["ts"]
    offsets = torch.arange(shapes.batch + 1, dtype=torch.int64) * N
    keep = torch.tril(torch.ones(N, N))  # the peer's invalid_attn_mask: 1 where a token may read

    def forward() -> torch.Tensor:
        return stack(x=x, x_offsets=offsets, all_timestamps=ts, invalid_attn_mask=keep)[0]  # [B, N, D]

    return Impl("research", stack, forward)


def build_stu(peer: SimpleNamespace, shapes: Shapes, data: dict[str, torch.Tensor]) -> Impl:
    s = peer.stu
    cfg = s.STULayerConfig(embedding_dim=shapes.dim, num_heads=shapes.num_heads, hidden_dim=shapes.head_dim,
                           attention_dim=shapes.head_dim, output_dropout_ratio=0.0, causal=True, target_aware=True)
    stack = s.STUStack([s.STULayer(cfg) for _ in range(shapes.num_layers)])
    stack.set_hammer_kernel(peer.common.HammerKernel.PYTORCH)  # default would be Triton (GPU only)
    B, N = shapes.batch, shapes.seq_len
    x = data["x"].reshape(B * N, shapes.dim)  # jagged values; every sequence full length
    lengths = torch.full((B,), N, dtype=torch.int64)
    offsets = torch.arange(B + 1, dtype=torch.int64) * N
    targets = torch.ones(B, dtype=torch.int64)  # the last token of each sequence is its target

    def forward() -> torch.Tensor:
        return stack(x=x, x_lengths=lengths, x_offsets=offsets, max_seq_len=N, num_targets=targets)  # [B N, D]

    return Impl("stu", stack, forward)


def build(name: ImplName, shapes: Shapes, data: dict[str, torch.Tensor], peer: SimpleNamespace | None = None,
          seed: int = 0) -> Impl:
    """One implementation with its own default layer-norm eps, parameters drawn after torch.manual_seed(seed);
    peers need `import_peer()`."""
    torch.manual_seed(seed)
    if name == "ours":
        return build_ours(shapes, data)
    if peer is None:
        raise ValueError(f"{name}: the peer's modules are needed (import_peer())")
    if name == "research":
        return build_research(peer, shapes, data)
    if name == "stu":
        return build_stu(peer, shapes, data)
    raise ValueError(f"{name!r}: no such implementation (allowed: ours, {', '.join(PEERS)})")


def copy_weights_to_research(ours: nn.Module, research: nn.Module) -> None:
    """Make the research stack (`build_research`) compute our function (`build_ours`'s HSTUEncoder): UVQK (its
    [D, 4 H d] is our weight transposed, same u, v, q, k order), output projection, and the position and
    time-bucket tables, layer by layer."""
    my_layers = [cast(HSTULayer, m) for m in cast(HSTUEncoder, ours).layers]
    peer_layers: list[Any] = list(cast(Any, research)._attention_layers)
    if len(peer_layers) != len(my_layers):
        raise ValueError(f"{len(my_layers)} layers here, {len(peer_layers)} in the peer stack")
    with torch.no_grad():
        for mine, theirs in zip(my_layers, peer_layers):
            theirs._uvqk.copy_(mine.uvqk.weight.t())
            theirs._o.weight.copy_(mine.out.weight)
            theirs._o.bias.copy_(mine.out.bias)
            theirs._rel_attn_bias._pos_w.copy_(mine.bias.position)
            theirs._rel_attn_bias._ts_w.copy_(mine.bias.time)


def train_step(impl: Impl, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Forward, loss = mean square of every output token, backward, and one optimizer step when given."""
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    loss = impl.forward().square().mean()
    loss.backward()
    if optimizer is not None:
        optimizer.step()


def make_optimizer(impl: Impl) -> torch.optim.Optimizer:
    return torch.optim.AdamW(impl.module.parameters(), lr=1e-3, weight_decay=1e-5)


def matrix_flops(impl: Impl, *, nominal: bool = True) -> int:
    """Matrix-product FLOPs of one forward + backward (FlopCounterMode; AdamW has none). nominal: ours computes
    every (query, key) pair, as the peers do (the function's work); False: the products ours runs at torch's
    thread count (with more than one thread it leaves out key ranges no query of a range reads, see
    `pointwise_attention.key_spans`)."""
    impl.module.zero_grad(set_to_none=True)
    set_hstu_kernel(impl.module, HSTUKernel(every_pair=nominal))  # ours only: a peer holds no HSTUEncoder
    try:
        with FlopCounterMode(display=False) as counter:
            train_step(impl)
    finally:
        set_hstu_kernel(impl.module, HSTUKernel())
    impl.module.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def check_flops(flops: dict[str, int], tolerance: dict[str, float] | None = None) -> dict[str, float]:
    """peer / ours matrix-FLOP ratio of every peer in `flops` (which holds "ours"); FlopMismatch when one is
    past its tolerance (`FLOP_TOLERANCE` by default)."""
    tolerance = FLOP_TOLERANCE if tolerance is None else tolerance
    ratios = {name: flops[name] / flops["ours"] for name in flops if name != "ours"}
    bad = {name: r for name, r in ratios.items() if abs(r - 1) > tolerance[name]}
    if bad:
        raise FlopMismatch("matrix FLOPs per step differ by more than allowed: {}; ours {:,}".format(
            ", ".join(f"{n} {flops[n]:,} ({r:.3f} x ours, allowed {tolerance[n]:.0%})" for n, r in bad.items()),
            flops["ours"]))
    return ratios


def flop_ratios(peer: SimpleNamespace, shapes: Shapes, names: tuple[ImplName, ...] = PEERS,
                batch: int = 4) -> tuple[dict[str, int], dict[str, float]]:
    """(matrix FLOPs per target of ours and each peer in `names`, their checked ratios), counted at `batch`
    sequences of the given length and widths (FLOPs per target do not depend on B)."""
    small = Shapes(**{**shapes.__dict__, "batch": batch})
    data = inputs(small)
    per_target: dict[str, int] = {name: matrix_flops(build(name, small, data, peer)) // batch
                                  for name in ("ours", *names)}
    return per_target, check_flops(per_target)


def run_flop_fraction(shapes: Shapes, batch: int = 4) -> float:
    """Matrix FLOPs ours runs at torch's thread count over its nominal ones (1 at one thread)."""
    small = Shapes(**{**shapes.__dict__, "batch": batch})
    impl = build("ours", small, inputs(small))
    return matrix_flops(impl, nominal=False) / matrix_flops(impl)
