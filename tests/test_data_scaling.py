"""The L(N, D) fit (analysis/fits/data_scaling.py) against known surfaces, and its
pipeline wiring.

Known truth: L = 0.40 + 3.0 / N^0.35 + 8.0 / D^0.28 on a 4 x 5 grid of sizes like sweeps/data_scaling.yaml's,
3 seeds, multiplicative noise of 0.2% (about the seed noise of the synthetic log's LogLoss) plus a per-seed
offset shared by every size of that seed.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import optimize

from analysis.fits.data_scaling import (
    E_FLOOR,
    FLOPS_PER_PARAM_TARGET,
    Surface,
    data_scaling_analysis,
    fit_surface,
    surface_points,
)
from analysis.pipeline import analyze
from harness import runs_columns as C

TRUE = Surface(E=0.40, A=3.0, B=8.0, alpha=0.35, beta=0.28)
N_SIZES = np.array([4.4e3, 1.05e4, 3.06e4, 1.03e5])
D_SIZES = np.array([6250, 12500, 25000, 50000, 100000])
SEEDS = (0, 1, 2)
NOISE = 2e-3
SEED_EFFECT = 1e-3
#: Stated recovery tolerance on the exponents (absolute), for every one of the noise draws below.
EXPONENT_TOL = 0.06


def _draw(rng: np.random.Generator, surface: Surface = TRUE) -> pd.DataFrame:
    rows = []
    for seed in SEEDS:
        shared = rng.normal(0, SEED_EFFECT)
        for n in N_SIZES:
            for d in D_SIZES:
                loss = float(surface.predict(n, d)) * np.exp(shared + rng.normal(0, NOISE))
                rows.append({"n": n, "d": d, "loss": loss, "seed": seed})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("draw", range(5))
def test_known_surface_recovers_exponents(draw):
    pts = _draw(np.random.default_rng(100 + draw))
    fit = fit_surface(pts["n"], pts["d"], pts["loss"])
    assert fit is not None and fit.identified
    assert abs(fit.alpha - TRUE.alpha) < EXPONENT_TOL
    assert abs(fit.beta - TRUE.beta) < EXPONENT_TOL
    assert fit.E == pytest.approx(TRUE.E, rel=0.1)


def test_noise_free_surface_is_recovered_exactly():
    pts = _draw(np.random.default_rng(0))
    fit = fit_surface(pts["n"], pts["d"], TRUE.predict(pts["n"], pts["d"]))
    for k, v in TRUE.params().items():
        assert getattr(fit, k) == pytest.approx(v, rel=1e-4), k


def test_a_surface_without_irreducible_loss_puts_e_at_its_floor_and_recovers_the_rest():
    """E = 0 truth: the objective is flat in E below E_FLOOR of the smallest loss, so E ends at that floor (the
    same value on any kernel, not wherever the line search stopped) and the other parameters are the truth's."""
    truth = Surface(E=0.0, A=3.0, B=8.0, alpha=0.35, beta=0.28)
    pts = _draw(np.random.default_rng(0), truth)
    loss = truth.predict(pts["n"], pts["d"])
    fit = fit_surface(pts["n"], pts["d"], loss)
    assert fit.E == pytest.approx(E_FLOOR * loss.min(), rel=1e-9)
    for k in ("A", "B", "alpha", "beta"):
        assert getattr(fit, k) == pytest.approx(getattr(truth, k), rel=1e-3), k


def test_compute_optimal_allocation_follows_the_closed_form():
    """N*(C) minimises L(N, C / 6N) numerically; its log-log slope is beta / (alpha + beta), D* = C / 6 N*."""
    cs = np.geomspace(1e9, 1e15, 7)
    for c in cs:
        res = optimize.minimize_scalar(lambda ln_n: float(TRUE.predict(np.exp(ln_n), c / (6 * np.exp(ln_n)))),  # noqa: B023  # called within this iteration  # noqa: B023  # called within this iteration
                                       bounds=(0, 40), method="bounded", options={"xatol": 1e-10})
        assert TRUE.n_opt(c) == pytest.approx(np.exp(res.x), rel=1e-4)
        assert TRUE.d_opt(c) * TRUE.n_opt(c) * FLOPS_PER_PARAM_TARGET == pytest.approx(c, rel=1e-12)
    slope = np.polyfit(np.log(cs), np.log(TRUE.n_opt(cs)), 1)[0]
    assert slope == pytest.approx(TRUE.beta / (TRUE.alpha + TRUE.beta), abs=1e-12)
    # the fitted surface's frontier exponent is within the tolerance the exponents carry
    pts = _draw(np.random.default_rng(7))
    fit = fit_surface(pts["n"], pts["d"], pts["loss"])
    assert abs(fit.n_exponent - TRUE.n_exponent) < 0.05


def _runs(pts: pd.DataFrame) -> pd.DataFrame:
    """runs.parquet rows for `pts` as a data_scaling sweep writes them."""
    return pd.DataFrame({
        "trial_id": [f"whale-seed{r.seed}-n{int(r.n)}-d{int(r.d)}" for r in pts.itertuples()],
        "arch": "whale", "seed": pts["seed"], "protocol": "exposure", "delay_s": 60.0, "history_len": 32,
        "task": "long_view", "dataset_id": [f"d-{int(d)}" for d in pts["d"]], C.N_TRAIN: pts["d"].astype(int),
        "model.dim": pts["n"].rank(method="dense").astype(int) * 4, "params_non_embedding": pts["n"].astype(int),
        "train_targets": pts["d"].astype(int), "flops_per_target": 20.0 * pts["n"],
        "valid_logloss": pts["loss"], "test_logloss": pts["loss"] + 0.01, "test_auc": 0.7 - 0.1 * pts["loss"],
    })


def _folder(tmp_path, runs: pd.DataFrame):
    tmp_path.mkdir(parents=True, exist_ok=True)
    runs.to_parquet(tmp_path / "runs.parquet")
    analysis = {"data_scaling": {"metric": "logloss", "split": "valid"}, "n_resamples": 999, "delong": False}
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"name": tmp_path.name, "analysis": analysis}))
    return tmp_path


def test_points_keep_every_run_and_list_the_unusable_ones():
    runs = _runs(_draw(np.random.default_rng(1)))
    runs.loc[3, "valid_logloss"] = np.nan
    pts, dropped = surface_points(runs, "valid_logloss")
    assert len(pts) == len(runs) - 1
    assert dropped == [f"{runs.at[3, 'trial_id']}: no positive finite loss (left out of the L(N, D) fit)"]


def test_pipeline_writes_the_section_intervals_and_figures_only_when_n_train_varies(tmp_path):
    root = _folder(tmp_path / "ds", _runs(_draw(np.random.default_rng(3))))
    analyze(root, progress=False)
    summary = json.loads((root / "analysis.json").read_text())
    ds = summary["data_scaling"]
    assert ds["n_points"] == 60 and ds["n_seeds"] == 3 and ds["dropped"] == []
    for k in ("alpha", "beta"):
        iv = ds["intervals"][k]
        assert iv["lo"] <= iv["value"] <= iv["hi"]
        assert abs(iv["value"] - getattr(TRUE, k)) < EXPONENT_TOL
    frontier = pd.DataFrame(ds["frontier"])
    assert (frontier["n_lo"] <= frontier["n_opt"] * (1 + 1e-9)).all()
    assert (frontier["n_opt"] <= frontier["n_hi"] * (1 + 1e-9)).all()
    assert {"isoflop", "frontier"} <= set(summary["plots"])
    assert (root / "plots" / "isoflop.png").exists() and (root / "plots" / "frontier.png").exists()
    report = (root / "report.md").read_text()
    assert "## Data as a compute axis" in report and "C = 6 N D" in report
    assert len([h for h in ds["held_out"] if h["left_out"] == "largest D"]) == len(N_SIZES)
    # the same runs at one training-set size: no section, no key, no figures
    one = _runs(_draw(np.random.default_rng(3)))
    one = one[one[C.N_TRAIN] == 100000]
    root2 = _folder(tmp_path / "one", one)
    analyze(root2, progress=False)
    summary2 = json.loads((root2 / "analysis.json").read_text())
    assert "data_scaling" not in summary2 and "isoflop" not in summary2["plots"]
    assert "Data as a compute axis" not in (root2 / "report.md").read_text()


def test_analysis_returns_none_without_an_n_train_column():
    from analysis.collect import SweepResults
    from analysis.config import analysis_config

    runs = _runs(_draw(np.random.default_rng(1))).drop(columns=[C.N_TRAIN])
    res = SweepResults(root=None, name="x", runs=runs, config=analysis_config(None), config_columns=[],
                       baseline="whale")
    assert data_scaling_analysis(res) is None


def test_a_reanalysis_compares_the_fit_at_the_optimisers_precision():
    """The data_scaling entry is an iterative fit: moved by 1e-6 relative it is the same analysis (another BLAS
    kernel's rounding can steer L-BFGS-B that far), moved by 1e-3 it is not."""
    from output_diff import json_differences

    entry = {"form": "loss surface L(N, D)", "surface": {"alpha": 0.35}, "frontier": [{"n_opt": 1234.5}]}
    near = {"form": entry["form"], "surface": {"alpha": 0.35 * (1 + 1e-6)},
            "frontier": [{"n_opt": 1234.5 * (1 + 1e-6)}]}
    far = {"form": entry["form"], "surface": {"alpha": 0.35 * (1 + 1e-3)}, "frontier": [{"n_opt": 1234.5}]}
    assert json_differences({"data_scaling": near}, {"data_scaling": entry}) == []
    assert len(json_differences({"data_scaling": far}, {"data_scaling": entry})) == 1
