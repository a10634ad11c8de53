"""`analysis.expectations`: claims from other studies checked on a sweep's seeds, against scipy's paired
t-test and a plain Holm correction computed here."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from cli.main import main

SEEDS = [0, 1, 2, 3, 4]
CLAIMS = [
    {"claim": "WHALE beats MeanPool", "a": {"arch": "whale"}, "b": {"arch": "whale_meanpool"},
     "source": "synthetic demo"},
    {"claim": "Wukong beats WHALE", "a": {"arch": "wukong"}, "b": {"arch": "whale"}, "source": "made up"},
    {"claim": "Shallow-hybrid beats Wukong", "a": {"arch": "shallow_hybrid"}, "b": {"arch": "wukong"}},
    {"claim": "WHALE beats Wukong on LogLoss", "a": {"arch": "whale"}, "b": {"arch": "wukong"}, "metric": "logloss"},
]


def _results(root, claims=CLAIMS):
    rng = np.random.default_rng(4)
    rows = []
    for s in SEEDS:
        base = 0.70 + rng.normal(0, 3e-3)
        auc = {"wukong": base, "whale": base + 0.02 + rng.normal(0, 5e-4),
               "whale_meanpool": base + 0.016 + rng.normal(0, 5e-4), "shallow_hybrid": base + rng.normal(0, 2e-3)}
        for arch, a in auc.items():
            rows.append({"trial_id": f"{arch}-seed{s}", "arch": arch, "seed": s, "protocol": "exposure",
                         "history_len": 32, "model.dim": 16, "test_auc": a, "test_logloss": 0.6 - 0.5 * (a - 0.7),
                         "flops_per_target": 1e5})
    root.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    analysis = {"baseline": "wukong", "delong": False, "expectations": claims}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": root.name, "analysis": analysis}))
    return root, pd.DataFrame(rows)


def _holm(p):
    order = np.argsort(p)
    out, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def test_claims_are_tested_paired_by_seed_with_holm(tmp_path, capsys):
    root, runs = _results(tmp_path / "sweep")
    assert main(["analyze", str(root), "--no-plots"]) == 0
    got = json.loads((root / "analysis.json").read_text())["expectations"]
    p_t, deltas = [], []
    for c in CLAIMS:
        col = f"test_{c.get('metric', 'auc')}"
        a = runs[runs.arch == c["a"]["arch"]].sort_values("seed")[col].to_numpy()
        b = runs[runs.arch == c["b"]["arch"]].sort_values("seed")[col].to_numpy()
        p_t.append(stats.ttest_rel(a, b).pvalue)
        deltas.append(a - b)
    p_holm = _holm(np.array(p_t))
    expected = ["holds", "does not hold", "not significant", "holds"]
    assert [g["outcome"] for g in got] == expected
    for g, p, ph, d in zip(got, p_t, p_holm, deltas):
        assert g["p_t"] == pytest.approx(p) and g["p_holm"] == pytest.approx(ph)
        np.testing.assert_allclose(g["deltas"], d)
        assert g["seeds"] == SEEDS
    assert [g["a_better"] for g in got] == [5, 0, int((deltas[2] > 0).sum()), 5]  # LogLoss: lower is better
    report = (root / "report.md").read_text()
    assert "## Expectations checked on these seeds" in report
    assert "| WHALE beats MeanPool | synthetic demo | test AUC | 5 | 5/5 |" in report
    assert "**does not hold**" in report and "**not significant**" in report
    assert "expectations  (delta = A - B" in capsys.readouterr().out


def test_no_expectations_leaves_report_and_summary_unchanged(tmp_path):
    root, _ = _results(tmp_path / "sweep", claims=[])
    assert main(["analyze", str(root), "--no-plots"]) == 0
    assert "expectations" not in json.loads((root / "analysis.json").read_text())
    assert "Expectations" not in (root / "report.md").read_text()


@pytest.mark.parametrize("claim,key", [
    ({"a": {"arch": "whale"}, "b": {"arch": "wukong"}, "metric": "acc"}, "analysis.expectations[0].metric"),
    ({"a": {"arch": "whale"}}, "analysis.expectations[0].b"),
    ({"a": {"arch": "whale"}, "b": {"arch": "wukong"}, "claimed": "x"}, "analysis.expectations[0].claimed"),
])
def test_bad_claims_name_the_key(tmp_path, capsys, claim, key):
    root, _ = _results(tmp_path / "sweep", claims=[claim])
    assert main(["analyze", str(root), "--no-plots"]) == 2
    assert key in capsys.readouterr().err
    assert not (root / "report.md").exists()
