"""Error control and power of seeds in rounds (analysis/stats/sequential.py) by simulation with a planted truth.

Looks at 3, 5 and 8 seeds, alpha 0.05, both spending functions; seed-level paired deltas with sd 1, drawn
normal or Student-t with 3 df scaled to sd 1 (heavier tails). Scenarios: one question with a planted null
(type-I error); one question whose planted effect is the one the fixed 8-seed design detects with 80% power
(the report's `minimum_detectable_effect`): the sequential power, the expected seeds used and the seeds the
fixed design needs for the same power (at alpha / 4, Holm's first step, for four questions); four questions,
two null and two with that effect, under Holm-type recycling (family-wise error and power). Each row asserts
its tolerances: type-I and family-wise error at most alpha + 3 Monte Carlo standard errors; O'Brien-Fleming-type
power 0.8 within 0.03 on fewer expected seeds than the fixed design (normal deltas).

Tables: docs/benchmarks/sequential.md (`make bench`). About 30 s on 2 shared cores.
"""
from __future__ import annotations

import numpy as np
import pytest

from analysis.stats.paired import minimum_detectable_effect, seeds_for_power
from analysis.stats.sequential import SequentialDesign, holm_sequential, paired_t_pvalues

N_SIMS = 200_000
SEEDS = (3, 5, 8)
ALPHA = 0.05
EFFECT = minimum_detectable_effect(1.0, SEEDS[-1], alpha=ALPHA, power=0.8)
SCENARIOS = {"null": [0.0], "effect": [EFFECT], "four_questions": [0.0, 0.0, EFFECT, EFFECT]}


def _looks(design: SequentialDesign, effects: list[float], draw: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (N_SIMS, len(effects), SEEDS[-1])
    noise = rng.standard_normal(shape) if draw == "normal" else rng.standard_t(3, shape) / np.sqrt(3.0)
    return holm_sequential(paired_t_pvalues(noise + np.array(effects)[:, None], SEEDS), design)[0]


@pytest.mark.slow
@pytest.mark.bench
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("draw", ["normal", "t3"])
@pytest.mark.parametrize("spending", ["obrien_fleming", "pocock"])
def test_sequential_error_control_and_power(benchmark, spending, draw, scenario):
    design = SequentialDesign(SEEDS, alpha=ALPHA, spending=spending)
    effects = SCENARIOS[scenario]
    look = benchmark.pedantic(_looks, args=(design, effects, draw, 2026), rounds=1, iterations=1)
    null = np.array(effects) == 0.0
    info: dict[str, object] = {"spending": spending, "deltas": draw, "questions": len(effects),
                               "planted": scenario, "effect_over_sd": EFFECT if not null.all() else 0.0}
    mc_se = np.sqrt(ALPHA * (1 - ALPHA) / N_SIMS)
    if null.any():
        family_error = float((look[:, null] >= 0).any(axis=1).mean())
        info["family_wise_error"] = family_error
        info["mc_se"] = float(mc_se)
        assert family_error <= ALPHA + 3 * mc_se
    if (~null).any():
        hit = look[:, ~null] >= 0
        power = float(hit.mean())
        used = np.where(hit, np.array(SEEDS)[look[:, ~null]], SEEDS[-1])
        fixed = seeds_for_power(1.0, EFFECT, alpha=ALPHA / len(effects) if len(effects) > 1 else ALPHA, power=power)
        info.update({"power": power, "expected_seeds": float(used.mean()), "fixed_design_seeds_same_power": fixed,
                     **{f"rejected_at_{n}_seeds": float((look[:, ~null] == k).mean()) for k, n in enumerate(SEEDS)}})
        if spending == "obrien_fleming" and len(effects) == 1 and draw == "normal":
            assert power == pytest.approx(0.8, abs=0.03)
            assert used.mean() < fixed
    benchmark.extra_info.update(info)
