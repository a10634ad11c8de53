"""An open slope question's seed count (`analysis.compare.questions.slope_seeds_needed`) against a simulation:
per-seed slopes drawn with a known sd and mean, the t interval over `need` seeds excludes 0 in at least the
planned share of draws and over `need - 1` in fewer; and the target half-width count by brute force."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from analysis.compare.questions import slope_seeds_needed


def _interval(values: np.ndarray) -> tuple[float, float]:
    n = len(values)
    half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n)
    return float(values.mean()), float(half)


def _share_excluding_zero(mean: float, sd: float, n: int, draws: int, rng: np.random.Generator) -> float:
    x = rng.normal(mean, sd, size=(draws, n))  # [draws, n] per-seed slopes
    half = stats.t.ppf(0.975, n - 1) * x.std(axis=1, ddof=1) / np.sqrt(n)
    return float((np.abs(x.mean(axis=1)) > half).mean())


def test_the_count_reaches_the_planned_power_in_a_simulation():
    rng = np.random.default_rng(0)
    true_mean, true_sd = 0.05, 0.08
    pilot = rng.normal(true_mean, true_sd, size=4)
    value, half = _interval(pilot)
    need = slope_seeds_needed(value, half, 4, power=0.8)
    sd = pilot.std(ddof=1)  # the sd the interval implies is the pilot's own
    assert np.isclose(half * np.sqrt(4) / stats.t.ppf(0.975, 3), sd)
    draws = 40_000  # Monte-Carlo sd of a share near 0.8: 0.002; the tolerance is 4 of them
    at_need = _share_excluding_zero(value, sd, int(need), draws, rng)
    below = _share_excluding_zero(value, sd, int(need) - 1, draws, rng)
    assert at_need >= 0.8 - 0.008 and below < 0.8 + 0.008
    assert below < at_need


def test_the_target_half_width_count_by_brute_force():
    values = np.array([0.10, 0.30, 0.05, 0.22])
    value, half = _interval(values)
    sd = values.std(ddof=1)
    for target in (0.05, 0.1, half * 0.99):
        need = slope_seeds_needed(value, half, 4, target_half_width=target)
        widths = {k: stats.t.ppf(0.975, k - 1) * sd / np.sqrt(k) for k in range(2, 2000)}
        assert need == min(k for k, w in widths.items() if w <= target)


def test_no_spread_or_one_seed_gives_no_count():
    assert np.isnan(slope_seeds_needed(0.1, 0.0, 3))
    assert np.isnan(slope_seeds_needed(0.1, 0.2, 1))


def test_the_hours_count_a_multi_task_trial_once():
    """The two-task reference's open HELIX slope: its hours are the seeds it asks for times HELIX's mean
    per-seed trial time, read from runs.parquet (one row per trial), not once per task."""
    ref = Path(__file__).resolve().parents[1] / "results" / "reference" / "two_tasks"
    answer = next(q["answers"][0]["answer"] for q in json.loads((ref / "analysis.json").read_text())["questions"]
                  if q["question"].startswith("slope of helix") and not q["settled"])
    m = re.search(r"about (\d+) more seeds? for .* \(about ([\d.]+) h of trials\)", answer)
    assert m is not None, answer
    runs = pd.read_parquet(ref / "runs.parquet")
    per_seed_h = runs[runs["arch"] == "helix"].groupby("seed")["wall_s"].sum().mean() / 3600
    assert float(m[2]) == float(f"{int(m[1]) * per_seed_h:.2g}")
