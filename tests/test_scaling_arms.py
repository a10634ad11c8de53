"""Arms of one architecture as families (analysis.scaling.arms): two arms of one HELIX ladder that share their
smallest size, each an exact power law with a known slope, and noisy seeds against per-seed least squares done
here (scipy's curve_fit per seed, the t interval of the per-seed slopes' differences from scipy.stats)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from test_scaling_fit import curve_fit_power_law

from analysis.pipeline import analyze
from core.typed_config import ConfigError

AUC_REF = 0.70
SEEDS = (0, 1, 2, 3)
# name -> (GFLOPs per target, arm); d1 is in both arms
SIZES = {"d1": 1.0, "e2": 3.0, "e4": 9.0, "b2": 4.0, "b4": 16.0}
ARMS = {"enc": ["d1", "e2", "e4"], "both": ["d1", "b2", "b4"]}
SLOPES = {"enc": 0.30, "both": 0.10}
WALL_S = {"d1": 10.0, "e2": 20.0, "e4": 40.0, "b2": 30.0, "b4": 90.0}


def _gain(name: str, seed: int, noise: np.ndarray) -> float:
    arm = "enc" if name in ARMS["enc"] else "both"
    return float(np.exp(-5.0 + SLOPES[arm] * np.log(SIZES[name]) + noise[seed]))


def make_arms(root: Path, *, noise_sd: float = 0.0, questions: list | None = None) -> tuple[Path, dict]:
    rng = np.random.default_rng(7)
    noise = {n: rng.normal(0.0, noise_sd, len(SEEDS)) if noise_sd else np.zeros(len(SEEDS)) for n in SIZES}
    rows = [{"trial_id": f"wukong-seed{s}", "arch": "wukong", "seed": s, "model.name": None,
             "test_auc": AUC_REF, "test_logloss": 0.5, "flops_per_target": 1e5, "wall_s": 5.0} for s in SEEDS]
    rows += [{"trial_id": f"helix-seed{s}-{n}", "arch": "helix", "seed": s, "model.name": n,
              "test_auc": AUC_REF + _gain(n, s, noise[n]), "test_logloss": 0.5, "flops_per_target": x * 1e9,
              "wall_s": WALL_S[n]} for n, x in SIZES.items() for s in SEEDS]
    root.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    scaling = {"reference": {"arch": "wukong"}, "x_unit": "gflops", "size_by": ["model.name"],
               "arms": {arm: {"arch": "helix", "model.name": names} for arm, names in ARMS.items()},
               "compare": [["enc", "both"]]}
    analysis = {"scaling": scaling, "questions": questions or [], "n_resamples": 999, "delong": False}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "arms", "analysis": analysis}))
    return root, noise


def _summary(root: Path) -> dict:
    analyze(root, progress=False, plots=False)
    return json.loads((root / "analysis.json").read_text())


def test_exact_arms_share_a_point_and_give_their_own_slopes(tmp_path):
    root, _ = make_arms(tmp_path / "exact")
    summary = _summary(root)
    fits = {f["family"]: f for f in summary["scaling"] if f["metric"] == "auc"}
    assert set(fits) == {"enc", "both"}  # the arms replace the architecture's own family
    for arm, names in ARMS.items():
        assert fits[arm]["fit"]["slope"] == pytest.approx(SLOPES[arm], abs=1e-9)
        assert len(fits[arm]["points"]) == len(names)
    (c,) = [c for c in summary["family_comparisons"] if c["metric"] == "auc"]
    sign = 1.0 if c["a"] == "enc" else -1.0
    assert sign * c["slope_diff"]["value"] == pytest.approx(SLOPES["enc"] - SLOPES["both"], abs=1e-9)


def test_noisy_arms_match_per_seed_least_squares_and_time_their_own_runs(tmp_path):
    questions = [{"kind": "slope", "family": "enc"}, {"kind": "slope", "family": "both"},
                 {"kind": "slope_difference", "families": ["enc", "both"]}]
    root, noise = make_arms(tmp_path / "noisy", noise_sd=0.4, questions=questions)
    summary = _summary(root)
    fits = {f["family"]: f["fit"] for f in summary["scaling"] if f["metric"] == "auc"}
    per_seed = {}
    for arm, names in ARMS.items():
        x = np.array([SIZES[n] for n in names])
        per_seed[arm] = np.array([curve_fit_power_law(x, np.array([_gain(n, s, noise[n]) for n in names]))[0]
                                  for s in SEEDS])
        got = [fits[arm]["seed_slopes"][str(s)] for s in SEEDS]
        assert got == pytest.approx(list(per_seed[arm]), abs=1e-6)
    d = per_seed["enc"] - per_seed["both"]
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    answers = {q["question"]: q for q in summary["questions"]}
    diff = next(q for name, q in answers.items() if name.startswith("slope enc - both"))
    text = diff["answers"][0]["answer"]
    assert text.startswith(f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}] at {len(SEEDS)} seeds")
    both = answers["slope of both"]  # open at this noise; its hours come from its own runs (d1, b2, b4)
    m = re.search(r"about (\d+) more seeds .* \(about ([\d.]+) h of trials\)", both["answers"][0]["answer"])
    assert not both["settled"] and m is not None
    per_seed_h = sum(WALL_S[n] for n in ARMS["both"]) / 3600
    assert float(m.group(2)) == pytest.approx(int(m.group(1)) * per_seed_h, rel=0.01)


def test_an_arm_must_name_one_architecture(tmp_path):
    from analysis.config import ScalingConfig

    with pytest.raises(ConfigError, match="analysis.scaling.arms.enc"):
        ScalingConfig(arms={"enc": {"model.name": ["d1"]}})
