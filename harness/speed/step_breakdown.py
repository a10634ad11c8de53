"""Where a training step's time goes (`recscale bench --breakdown`; docs/training.md): the operators' self time
of a few profiled steps (device time on CUDA) split into the matrix products (`PRODUCT_OPS`) and the rest, the
products' achieved rate and the utilisation ceiling it sets. The products' executed FLOPs are counted by
`torch.utils.flop_counter` over one more step outside the profiled ones: the profiler's own `with_flops` slowed
WHALE's step by ~17 % here, against ~3 % for the plain profiler.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

#: ATen operators that are matrix products (their self time is the product kernel's time).
PRODUCT_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm",
                         "aten::_addmm_activation"})


@dataclass(frozen=True)
class OpTime:
    """One operator's share of the profiled steps."""

    op: str
    ms_per_step: float
    calls_per_step: float


@dataclass(frozen=True)
class StepBreakdown:
    """The profiled steps' operator time, split into matrix products and the rest (per step)."""

    steps: int
    time_kind: str  # "cpu self time" or "cuda self time"
    total_ms: float  # all operators' self time
    product_ms: float
    product_flops: float  # executed by the products (backward recomputations included)
    product_flops_per_s: float
    other_ms: float
    top_other: tuple[OpTime, ...]  # the costliest non-product operators

    @property
    def product_share(self) -> float:
        return self.product_ms / self.total_ms if self.total_ms else 0.0

    def targets_per_s_if_only_products(self, batch_size: int) -> float:
        """The training rate if the products were the whole step (the ceiling's numerator)."""
        return batch_size / (self.product_ms / 1e3) if self.product_ms else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["top_other"] = [asdict(o) for o in self.top_other]
        d["product_share"] = self.product_share
        return d


def profile_steps(step: Callable[[Any], Any], batches: list[Any], device: torch.device, *, steps: int = 3,
                  top: int = 8) -> StepBreakdown:
    """Run `step` on `steps` batches (cycling) under the profiler and split its operator time; one more
    step on the first batch counts the products' FLOPs (every batch must have the same shapes)."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    cuda = device.type == "cuda"
    counter = FlopCounterMode(display=False)
    with counter:
        step(batches[0])
    product_flops = float(sum(n for op, n in counter.get_flop_counts()["Global"].items()
                              if str(op).replace(".", "::", 1) in PRODUCT_OPS))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            step(batches[i % len(batches)])
        if cuda:
            torch.cuda.synchronize(device)
    events = prof.key_averages()

    def self_us(e: Any) -> float:
        return float(e.self_device_time_total if cuda else e.self_cpu_time_total)

    total = sum(self_us(e) for e in events)
    products = [e for e in events if e.key in PRODUCT_OPS]
    product_us = sum(self_us(e) for e in products)
    others = sorted((e for e in events if e.key not in PRODUCT_OPS and self_us(e) > 0), key=self_us, reverse=True)
    return StepBreakdown(
        steps=steps,
        time_kind="cuda self time" if cuda else "cpu self time",
        total_ms=total / steps / 1e3,
        product_ms=product_us / steps / 1e3,
        product_flops=product_flops,
        product_flops_per_s=product_flops * steps / (product_us / 1e6) if product_us else 0.0,
        other_ms=(total - product_us) / steps / 1e3,
        top_other=tuple(OpTime(e.key, self_us(e) / steps / 1e3, e.count / steps) for e in others[:top]),
    )
