"""The counted compute of each trial of a sweep plan, for `recscale sweep --dry-run`.

Forward matrix FLOPs per target (counted on a random batch, once per distinct architecture and model
settings) times the targets a run touches: 3 x train targets x epochs (forward + backward) plus the
validation and test targets (forward only).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

import architectures
from harness.config import TrainConfig
from harness.sweep.plan import TrialPlan
from protocols.schema import default_test_spec, random_batch


@dataclass(frozen=True)
class TrialCost:
    flops_per_target: float | None
    targets: float | None
    params_non_embedding: int | None = None

    @property
    def total(self) -> float | None:
        if self.flops_per_target is None or self.targets is None:
            return None
        return self.flops_per_target * self.targets


def _model_cost(arch: str, model: Mapping[str, Any], history_len: int) -> tuple[float | None, int | None]:
    """(forward matrix FLOPs per target on a random batch, non-embedding parameters); None where the model
    cannot be built or counted."""
    try:
        from architectures.flops import count_flops, count_params

        spec = default_test_spec(history_len)
        torch.manual_seed(0)
        net = architectures.build(arch, spec, dict(model)).eval()
        batch = random_batch(spec, 4, min_len=history_len)
        with torch.no_grad():
            return float(count_flops(net, batch).per_target), count_params(net)["non_embedding"]
    except Exception:  # noqa: BLE001 - the estimate is best effort; the table shows "?"
        return None, None


def estimate_costs(trials: Iterable[TrialPlan]) -> dict[str, TrialCost]:
    """Trial id -> cost; FLOPs and parameters are counted once per distinct (arch, model config)."""
    cache: dict[str, tuple[float | None, int | None]] = {}
    out: dict[str, TrialCost] = {}
    for t in trials:
        key = json.dumps([t.arch, dict(t.model)], sort_keys=True, default=str)
        if key not in cache:
            cache[key] = _model_cost(t.arch, t.model, int(t.dataset.prepare["history_len"]))
        prep = t.dataset.prepare
        epochs = int(t.train.get("epochs", TrainConfig.epochs))
        n_train, n_valid, n_test = prep.get("n_train"), prep.get("n_valid"), prep.get("n_test")
        targets = (None if n_train is None or n_valid is None or n_test is None
                   else 3.0 * n_train * epochs + n_valid + n_test)
        flops, params = cache[key]
        out[t.trial_id] = TrialCost(flops_per_target=flops, targets=targets, params_non_embedding=params)
    return out
