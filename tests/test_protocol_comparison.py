"""Comparisons across data arms on hand-made sweep folders: pairing whatever the dataset's name or id (author50
has no delay), an unpaired comparison is an error, the difference-in-differences against a hand computation,
shared-target AUC when a protocol drops targets (sklearn), history membership against Python sets, and
DeLong from the published score ranks equal to DeLong from the scores."""
from __future__ import annotations

import json
import shutil
import warnings
import zlib

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from sklearn.metrics import roc_auc_score

from analysis.pipeline import analyze
from analysis.reference import publish_reference
from harness.sweep.dataset_facts import membership_difference

SEEDS = [0, 1, 2]
ARMS = [("exposure-0s", "exposure", 0.0, "d-0"), ("exposure-60s", "exposure", 60.0, "d-60"),
        ("author50", "author50", None, "d-a50")]
ARCHS = ["whale", "whale_meanpool", "wukong"]
N = 400


def _auc(arch: str, arm: str, seed: int) -> float:
    """A deterministic table of AUCs: WHALE gains 0.004 under author50 over MeanPool, seeds shift everything."""
    base = {"whale": 0.700, "whale_meanpool": 0.696, "wukong": 0.660}[arch] + 0.001 * seed
    bump = {"exposure-0s": 0.0, "exposure-60s": -0.0005, "author50": 0.002}[arm]
    extra = 0.004 if (arch == "whale" and arm == "author50") else 0.0
    wiggle = ((zlib.crc32(f"{arch}{arm}{seed}".encode()) % 1000) - 500) * 1e-6
    return base + bump + extra + wiggle


def make_arms(root, *, drop_b: int = 0, comparisons=None, facts: bool = True):
    """A sweep folder with three data arms x three architectures x three seeds, predictions, datasets.json."""
    rng = np.random.default_rng(0)
    labels = (rng.random(N) < 0.3).astype(np.float32)
    rows = []
    for arch in ARCHS:
        for name, protocol, delay, dataset in ARMS:
            for s in SEEDS:
                trial = f"{arch}-seed{s}-{name}"
                run = root / "runs" / trial
                run.mkdir(parents=True)
                keep = np.arange(N) if (name != "author50" or not drop_b) else np.arange(drop_b, N)
                r = np.random.default_rng(zlib.crc32(trial.encode()))
                score = 1 / (1 + np.exp(-(1.2 * (labels - 0.5) + r.normal(0, 1, N))))
                pd.DataFrame({"event_id": np.arange(N, dtype=np.int64)[keep], "label": labels[keep],
                              "score": score[keep]}).to_parquet(run / "predictions_test.parquet")
                rows.append({"trial_id": trial, "run_dir": f"runs/{trial}", "arch": arch, "seed": s,
                             "protocol": protocol, "delay_s": delay, "history_len": 50, "dataset_id": dataset,
                             "model.dim": 32, "data.name": name, "test_auc": _auc(arch, name, s),
                             "test_logloss": 0.5 - _auc(arch, name, s) / 10})
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    analysis = {"baseline": "wukong", "n_resamples": 999, "questions": comparisons or [
        {"name": "delay 0 s vs 60 s", "vary": {"delay_s": [0, 60]}},
        {"name": "exposure-60s vs author50", "a": {"protocol": "exposure", "delay_s": 60},
         "b": {"protocol": "author50"}}]}
    grid = {"arch": ARCHS, "seed": SEEDS, "data": [{"name": n, "protocol": p} for n, p, _, _ in ARMS]}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": root.name, "grid": grid, "analysis": analysis}))
    if facts:
        split = {"targets_a": N, "targets_b": N, "shared_targets": N, "only_a": 0, "only_b": 0,
                 "targets_history_differs": 80, "share_history_differs": 0.2, "mean_valid_length_a": 49.0,
                 "mean_valid_length_b": 48.0, "mean_common_events": 40.0}
        dropped = {**split, "targets_b": N - drop_b, "shared_targets": N - drop_b, "only_a": drop_b}
        pairs = [{"a": "d-0", "b": "d-60", "splits": {"test": split}},
                 {"a": "d-0", "b": "d-a50", "splits": {"test": dropped}},
                 {"a": "d-60", "b": "d-a50", "splits": {"test": dropped}}]
        (root / "datasets.json").write_text(json.dumps({"format": 1, "datasets": {}, "pairs": pairs}))
    return root


def _analyze(root):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze(root, progress=False, plots=False)


def test_data_comparisons_pair_by_seed_whatever_the_dataset(tmp_path):
    res = _analyze(make_arms(tmp_path / "sweep"))
    assert len(res.ablations) == 6  # two comparisons x three architectures
    for r in res.ablations:
        assert r.paired.error is None and r.metrics["auc"].stats.n == len(SEEDS)
        assert len([d for d in r.delong if d.result is not None]) == len(SEEDS)
        arch = r.paired.stratum["arch"]
        a, b = ("exposure-0s", "exposure-60s") if r.paired.comparison.startswith("delay") else ("exposure-60s",
                                                                                               "author50")
        expect = np.mean([_auc(arch, a, s) - _auc(arch, b, s) for s in SEEDS])
        assert r.metrics["auc"].stats.mean == pytest.approx(expect, abs=1e-12)
    report = (tmp_path / "sweep" / "report.md").read_text()
    assert report.index("## Does the data protocol change the conclusions?") < report.index("## Comparisons")
    assert "every compared pair of data arms scores the same 400 test targets" in report
    assert not any("no paired runs" in w for w in res.warnings)


@pytest.mark.fault
def test_a_comparison_without_pairs_is_an_error_not_a_silent_untestable(tmp_path):
    root = make_arms(tmp_path / "sweep", comparisons=[
        {"name": "delay 0 s vs 30 s", "vary": {"delay_s": [0, 30]}},
        {"name": "delay 0 s vs 60 s", "vary": {"delay_s": [0, 60]}, "where": {"arch": "whale"}}])
    res = _analyze(root)
    summary = json.loads((root / "analysis.json").read_text())
    errors = [w for w in summary["warnings"] if "found no paired runs" in w]
    assert len(errors) == 1 and "delay 0 s vs 30 s" in errors[0] and "side B" in errors[0]
    assert summary["ablations"][0]["error"] == errors[0]
    assert "**error: no paired runs**" in (root / "report.md").read_text()
    assert res.ablations[1].metrics["auc"].stats.n == len(SEEDS)


def test_difference_in_differences_equals_a_hand_computation(tmp_path):
    res = _analyze(make_arms(tmp_path / "sweep"))
    rc = res.ranks
    assert rc.arms == ["exposure-0s", "exposure-60s", "author50"]  # the sweep's own order
    assert rc.order("exposure-0s") == ["whale", "whale_meanpool", "wukong"]
    d = next(x for x in rc.did if (x.x, x.y, x.arm_p, x.arm_q) == ("whale", "whale_meanpool", "exposure-60s",
                                                                    "author50"))
    hand = np.array([(_auc("whale", "exposure-60s", s) - _auc("whale_meanpool", "exposure-60s", s))
                     - (_auc("whale", "author50", s) - _auc("whale_meanpool", "author50", s)) for s in SEEDS])
    assert d.deltas == pytest.approx(hand, abs=1e-12)
    assert d.mean == pytest.approx(hand.mean(), abs=1e-12)
    half = stats.t.ppf(0.975, 2) * hand.std(ddof=1) / np.sqrt(3)
    assert d.ci == pytest.approx((hand.mean() - half, hand.mean() + half), abs=1e-12)
    assert d.p_value == pytest.approx(stats.ttest_1samp(hand, 0).pvalue, rel=1e-9)
    assert hand.mean() == pytest.approx(-0.0045, abs=0.002)  # the planted 0.004 (+ the arm bump)
    assert len(rc.did) == 3 * 3  # three model pairs x three arm pairs
    summary = json.loads((tmp_path / "sweep" / "analysis.json").read_text())
    assert len(summary["protocol"]["ranks"]["did"]) == 9


def test_dropped_targets_are_compared_on_the_shared_ones(tmp_path):
    root = make_arms(tmp_path / "sweep", drop_b=50)
    res = _analyze(root)
    r = next(x for x in res.ablations if x.paired.comparison.startswith("exposure-60s")
             and x.paired.stratum["arch"] == "whale")
    hand = []
    for s in SEEDS:
        a = pd.read_parquet(root / f"runs/whale-seed{s}-exposure-60s/predictions_test.parquet")
        b = pd.read_parquet(root / f"runs/whale-seed{s}-author50/predictions_test.parquet")
        shared = a[a["event_id"].isin(b["event_id"])]
        hand.append(roc_auc_score(shared["label"], shared["score"]) - roc_auc_score(b["label"], b["score"]))
    assert r.metrics["auc"].stats.deltas == pytest.approx(tuple(hand), abs=1e-12)
    assert any("350 shared test targets" in n for n in r.metrics["auc"].stats.notes)
    assert res.arm_facts[res.ablations.index(r)].dropped == 50
    assert "held by one arm only" in (root / "report.md").read_text()


ARCH_ONLY = [{"name": "whale vs wukong", "a": {"arch": "whale"}, "b": {"arch": "wukong"}}]


@pytest.mark.parametrize("drop_b", [0, 50])
def test_targets_line_reads_datasets_json_when_no_comparison_varies_data(tmp_path, drop_b):
    # a sweep with data arms (hence a rank order across them) whose comparisons vary no data setting, as
    # results/reference/data_scaling: the target sharing comes from datasets.json's pairs of the arms
    root = make_arms(tmp_path / "sweep", comparisons=ARCH_ONLY, drop_b=drop_b)
    res = _analyze(root)
    assert res.arm_facts == {} and res.ranks is not None
    report = (root / "report.md").read_text()
    assert "no datasets.json" not in report
    if drop_b:
        assert (f"exposure-0s vs author50: {N - drop_b:,} shared, {drop_b:,} held by one arm only" in report
                and "do not all share them" in report)
    else:
        assert f"every compared pair of data arms scores the same {N:,} test targets" in report
    pairs = json.loads((root / "analysis.json").read_text())["protocol"]["arm_pairs"]
    assert sorted((p["arm_a"], p["arm_b"], p["shared"], p["dropped"]) for p in pairs) == sorted(
        [("exposure-0s", "exposure-60s", N, 0), ("exposure-0s", "author50", N - drop_b, drop_b),
         ("exposure-60s", "author50", N - drop_b, drop_b)])


def test_targets_line_says_unknown_only_without_datasets_json(tmp_path):
    root = make_arms(tmp_path / "sweep", comparisons=ARCH_ONLY, facts=False)
    res = _analyze(root)
    assert res.arm_pairs is None
    assert "- **Targets:** unknown (no datasets.json)" in (root / "report.md").read_text()
    assert json.loads((root / "analysis.json").read_text())["protocol"]["arm_pairs"] is None


def test_published_reference_reruns_delong_from_score_ranks(tmp_path):
    sweep = make_arms(tmp_path / "results" / "arms")
    original = _analyze(sweep)
    out = publish_reference(sweep, tmp_path / "reference" / "arms")
    assert sorted(p.name for p in out.iterdir()) == ["datasets.json", "runs.parquet", "score_ranks_test.parquet",
                                                     "sweep.yaml"]
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    again = _analyze(copy)
    for r0, r1 in zip(original.ablations, again.ablations):
        for d0, d1 in zip(r0.delong, r1.delong):
            assert d1.result == d0.result  # bit-identical: DeLong depends on the order of the scores only
    assert not any("DeLong skipped" in w for w in again.warnings)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_membership_difference_matches_python_sets(seed):
    rng = np.random.default_rng(seed)
    n, la, lb = 40, 6, 5
    a = np.where(rng.random((n, la)) < 0.8, rng.integers(0, 12, (n, la)) * 1000, -1)
    b = np.where(rng.random((n, lb)) < 0.8, rng.integers(0, 12, (n, lb)) * 1000, -1)
    sets_a = [set(r[r >= 0].tolist()) for r in a]
    sets_b = [set(r[r >= 0].tolist()) for r in b]
    got = membership_difference(a, b)
    assert got["targets_history_differs"] == sum(x != y for x, y in zip(sets_a, sets_b))
    assert got["mean_valid_length_a"] == pytest.approx(np.mean([len(x) for x in sets_a]))
    assert got["mean_valid_length_b"] == pytest.approx(np.mean([len(x) for x in sets_b]))
    assert got["mean_common_events"] == pytest.approx(np.mean([len(x & y) for x, y in zip(sets_a, sets_b)]))
