"""Marginal returns along a compute ladder and the share of the oracle gap closed per scaling point.

The ladder is HELIX at five retained-token settings (a list-valued size column, stored in runs.parquet as
arrays and ordered by FLOPs, not by the tuples' own order): AUC grows by a fixed 0.004 per doubling of FLOPs
for three steps and then stops, LogLoss falls by 0.002 per doubling and then stops, with small seed noise
that is known exactly. Every step statistic is recomputed here from the constructed arrays with numpy and
scipy's t distribution; the oracle-gap share is computed by hand from the same arrays.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from analysis.collect import load_results
from analysis.fits.marginal_returns import STILL_GROWING, marginal_returns
from analysis.fits.reference import resolve_reference
from analysis.fits.scaling import scaling_analysis
from analysis.headline import headline
from analysis.pipeline import analyze
from analysis.report.terminal import terminal_summary

SEEDS = np.array([0, 1, 2, 3, 4])
TOKENS = [(2, 1), (4, 2), (8, 4), (16, 8), (32, 16)]  # sorted as tuples: (16, 8) < (2, 1) < (32, 16) < ...
FLOPS = 1e6 * np.array([1.0, 2.0, 8.0, 16.0, 32.0])  # [P]: steps of 1, 2, 1 and 1 doublings
LABELS = [f"retained_tokens={t}" for t in TOKENS]
PER_DOUBLING_AUC, PER_DOUBLING_LL = 0.004, -0.002
MISSING = (2, 4)  # (point, seed) without a run: steps 1 -> 2 and 2 -> 3 pair only four seeds
SCALING = {"reference": {"arch": "wukong"}, "size_by": ["model.retained_tokens"], "families": ["helix"]}


def _ladder(oracle: bool = False) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The runs table and the constructed truths: AUC / LogLoss [P, S] of HELIX and [S] of the reference."""
    rng = np.random.default_rng(11)
    doublings = np.minimum(np.log2(FLOPS / FLOPS[0]), 4.0)  # [P] = 0, 1, 3, 4, 4: growth stops after 16x
    ref_auc = 0.70 + rng.normal(0, 3e-4, len(SEEDS))  # [S]
    ref_ll = 0.50 + rng.normal(0, 2e-4, len(SEEDS))
    auc = ref_auc + 1e-3 + PER_DOUBLING_AUC * doublings[:, None] + rng.normal(0, 1e-4, (len(FLOPS), len(SEEDS)))
    ll = ref_ll - 5e-4 + PER_DOUBLING_LL * doublings[:, None] + rng.normal(0, 1e-4, (len(FLOPS), len(SEEDS)))
    auc[4] = auc[3] + np.array([1, -1, 2, -2, 0]) * 1e-4  # the last step: known deltas with mean 0
    ll[4] = ll[3] + np.array([-1, 1, 0, 1, -1]) * 1e-4
    auc[MISSING], ll[MISSING] = np.nan, np.nan
    oracle_auc = 0.80 + 1e-3 * SEEDS  # [S] the oracle on each seed's test targets
    rows = []
    for j, s in enumerate(SEEDS):
        common = {"seed": int(s), "protocol": "exposure", "model.dim": 16,
                  **({"oracle_test_auc": oracle_auc[j]} if oracle else {})}
        rows.append({**common, "arch": "wukong", "model.retained_tokens": None, "test_auc": ref_auc[j],
                     "test_logloss": ref_ll[j], "flops_per_target": 2e5})
        for i, tokens in enumerate(TOKENS):
            if np.isfinite(auc[i, j]):
                rows.append({**common, "arch": "helix", "model.retained_tokens": np.array(tokens),
                             "test_auc": auc[i, j], "test_logloss": ll[i, j], "flops_per_target": FLOPS[i]})
    truth = {"auc": auc, "logloss": ll, "ref_auc": ref_auc, "oracle_auc": oracle_auc}
    return pd.DataFrame(rows), truth


def _folder(root: Path, runs: pd.DataFrame) -> Path:
    root.mkdir(parents=True)
    runs.to_parquet(root / "runs.parquet")  # list-valued settings come back as arrays, read as tuples
    analysis = {"baseline": "wukong", "n_resamples": 99, "delong": False, "scaling": SCALING}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "retained_tokens", "analysis": analysis}))
    return root


def _scaling(root: Path):
    results = load_results(root)
    reference = resolve_reference(results.runs, results.config, results.baseline, results.config_columns)
    return results, reference, {f.metric: f for f in scaling_analysis(results, reference)}


def _expected_step(prev: np.ndarray, nxt: np.ndarray) -> dict[str, float]:
    """Paired-t statistics of one step by hand: numpy for the moments, scipy only for t quantiles."""
    d = (nxt - prev)[np.isfinite(prev) & np.isfinite(nxt)]
    n, mean, sd = len(d), d.mean(), np.sqrt(((d - d.mean()) ** 2).sum() / (len(d) - 1))
    se = sd / np.sqrt(n)
    half = stats.t.ppf(0.975, n - 1) * se
    return {"n": n, "mean": mean, "sd": sd, "lo": mean - half, "hi": mean + half,
            "p": 2 * stats.t.sf(abs(mean / se), n - 1)}


@pytest.mark.parametrize("metric", ["auc", "logloss"])
def test_ladder_steps_and_verdict_match_an_independent_computation(tmp_path, metric):
    runs, truth = _ladder()
    _, _, fams = _scaling(_folder(tmp_path / "ladder", runs))
    fam = fams[metric]
    # the tuple-valued size axis: five points, ordered by FLOPs, labelled by their setting
    assert [p.size_label for p in fam.points] == LABELS
    assert [p.flops for p in fam.points] == pytest.approx(FLOPS)
    m = fam.marginal
    values = truth[metric]  # [P, S]
    assert [(s.start, s.end) for s in m.steps] == list(zip(LABELS[:-1], LABELS[1:]))
    for k, step in enumerate(m.steps):
        e = _expected_step(values[k], values[k + 1])
        ratio = FLOPS[k + 1] / FLOPS[k]
        assert step.n == e["n"] == (4 if k in (1, 2) else 5)
        assert step.flops_ratio == pytest.approx(ratio)
        assert step.mean == pytest.approx(e["mean"], rel=1e-9)
        assert step.sd == pytest.approx(e["sd"], rel=1e-9)
        assert step.ci == pytest.approx((e["lo"], e["hi"]), rel=1e-9)
        assert step.p_value == pytest.approx(e["p"], rel=1e-6)
        assert step.per_doubling == pytest.approx(e["mean"] / np.log2(ratio), rel=1e-9)
        lo, hi = sorted((e["lo"] / np.log2(ratio), e["hi"] / np.log2(ratio)))
        assert step.per_doubling_ci == pytest.approx((lo, hi), rel=1e-9)
    # the known answer: a fixed gain per doubling for three steps, then nothing
    per_doubling = PER_DOUBLING_AUC if metric == "auc" else PER_DOUBLING_LL
    for step in m.steps[:3]:
        assert step.per_doubling == pytest.approx(per_doubling, abs=3e-4)
    assert m.steps[3].mean == pytest.approx(0.0, abs=1e-12)
    assert [s.improves for s in m.steps] == [True, True, True, False]
    assert m.diminish_from == LABELS[3] and m.verdict == f"returns diminish from {LABELS[3]}"
    # no oracle column: no share of the oracle gap
    assert all(np.isnan(p.oracle_gap_closed) for p in fam.points)


def test_a_ladder_that_never_stops_is_still_growing_and_a_late_rise_is_noted():
    _, truth = _ladder()
    auc = truth["auc"]
    rising = marginal_returns(LABELS[:4], FLOPS[:4], auc[:4], SEEDS, "auc")
    assert rising.verdict == STILL_GROWING and rising.diminish_from is None
    # a flat step followed by a growing one: still growing at the top, the flat step is noted
    late = np.concatenate([auc[3:5], auc[4:5] + 0.004])  # [3, S]: flat, then +0.004
    out = marginal_returns(["a", "b", "c"], np.array([1.0, 2.0, 4.0]), late, SEEDS, "auc")
    assert out.verdict == STILL_GROWING and out.diminish_from is None
    assert any("not significant" in n and "a → b" in n for n in out.notes)
    # no significant step, and a significantly worse one: said as such, never "diminish"
    falling = np.concatenate([auc[4:5], auc[4:5], auc[4:5] - 0.004])  # flat, then -0.004
    down = marginal_returns(["a", "b", "c"], np.array([1.0, 2.0, 4.0]), falling, SEEDS, "auc")
    assert down.verdict.startswith("no step improves significantly") and down.diminish_from == "a"
    assert any("significantly worse" in n and "b → c" in n for n in down.notes)
    assert marginal_returns(["a"], np.array([1.0]), auc[:1], SEEDS, "auc") is None


def test_oracle_gap_closed_per_point_by_hand_and_as_in_the_headline(tmp_path):
    runs, truth = _ladder(oracle=True)
    runs = runs[~((runs["arch"] == "wukong") & (runs["seed"] == 1))]  # the reference lacks seed 1
    results, reference, fams = _scaling(_folder(tmp_path / "oracle", runs))
    auc, ref, oracle = truth["auc"], truth["ref_auc"], truth["oracle_auc"]
    rows = {r.label: r for r in headline(results, reference).rows}
    for i, point in enumerate(fams["auc"].points):
        paired = np.isfinite(auc[i]) & (SEEDS != 1)  # seeds with a run here and a reference run
        share = np.mean(auc[i][paired] - ref[paired]) / np.mean(oracle[paired] - ref[paired])
        assert point.oracle_gap_closed == pytest.approx(share, rel=1e-12)
        assert fams["logloss"].points[i].oracle_gap_closed == pytest.approx(share, rel=1e-12)
        assert rows[f"helix, {LABELS[i]}"].share_oracle_gap == pytest.approx(share, rel=1e-12)  # one definition
    assert 0 < fams["auc"].points[0].oracle_gap_closed < fams["auc"].points[-1].oracle_gap_closed < 1


def test_analyze_writes_marginal_returns_and_oracle_share(tmp_path):
    runs, truth = _ladder(oracle=True)
    root = _folder(tmp_path / "end_to_end", runs)
    res = analyze(root, progress=False, plots=False)
    summary = json.loads((root / "analysis.json").read_text())
    fam = next(f for f in summary["scaling"] if f["metric"] == "auc")
    mr = fam["marginal_returns"]
    assert mr["diminish_from"] == LABELS[3] and [s["improves"] for s in mr["steps"]] == [True, True, True, False]
    e = _expected_step(truth["auc"][0], truth["auc"][1])
    assert mr["steps"][0]["mean"] == pytest.approx(e["mean"], rel=1e-9)
    assert mr["steps"][0]["ci"] == pytest.approx([e["lo"], e["hi"]], rel=1e-9)
    assert fam["points"][2]["setting"] == {"model.retained_tokens": [8, 4]}
    auc, ref, oracle = truth["auc"], truth["ref_auc"], truth["oracle_auc"]
    share = np.mean(auc[0] - ref) / np.mean(oracle - ref)
    assert fam["points"][0]["oracle_gap_closed"] == pytest.approx(share, rel=1e-12)
    report = (root / "report.md").read_text()
    fits, points, marginal = (report.index(h) for h in ("## Scaling fits", "### Points of each fit",
                                                         "### Marginal returns"))
    assert fits < points < marginal
    assert f"{share:.1%}" in report[points:marginal]
    assert f"**returns diminish from {LABELS[3]}**" in report[marginal:]
    line = next(x for x in terminal_summary(res, "r").splitlines() if x.lstrip().startswith("helix") and "returns" in x)
    assert f"AUC returns diminish from {LABELS[3]}" in line and f"LogLoss returns diminish from {LABELS[3]}" in line


def test_steps_are_holm_corrected_over_the_ladder_and_words_follow_the_corrected_p():
    """Four steps; one has an uncorrected p near 0.03 (significant alone), which Holm over the four steps
    lifts above 0.05: the step no longer improves and the verdict says no step improves."""
    deltas = np.array([[0.0, 0.0, 0.0], [0.004, 0.0065, 0.009], [0.0, 0.003, -0.003], [0.001, -0.001, 0.0],
                       [0.0, 0.0005, -0.0005]])  # [P, S] increments per step (row 0: the start)
    values = 0.7 + np.cumsum(deltas, axis=0)  # [P, S]
    m = marginal_returns([f"p{i}" for i in range(5)], np.geomspace(1, 16, 5), values, np.arange(3), "auc")
    p = np.array([s.p_value for s in m.steps])
    assert 0.02 < p[0] < 0.05
    order = np.argsort(p)
    expected = np.minimum(np.maximum.accumulate((len(p) - np.arange(len(p))) * p[order]), 1.0)
    np.testing.assert_allclose(np.array([s.p_holm for s in m.steps])[order], expected, rtol=1e-12)
    assert m.steps[0].p_holm > 0.05 and not m.steps[0].improves
    assert m.verdict.startswith("no step improves significantly")
