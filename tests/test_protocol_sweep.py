"""A tiny three-arm protocol sweep on a real Ray (exposure 0 s, exposure 60 s, author50; two architectures,
two seeds, tiny synthetic log): every data comparison pairs n = seeds runs, the arms score the same test
targets (checked on the prepared artifacts and on every run's predictions), datasets.json's delay
membership share equals `compare-delay`'s computation from the log, and the difference-in-differences
equals a hand computation from runs.parquet."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from scipy import stats

from analysis.pipeline import analyze
from cli.commands.compare_delay import compare
from harness.sweep.launcher import run_sweep
from harness.sweep.plan import plan_sweep
from harness.sweep.schema import parse_sweep

SEEDS = [0, 1]
ARCHS = ["wukong", "whale"]


def _sweep(cache) -> str:
    return yaml.safe_dump({
        "name": "arms3",
        "data": {"source": "synthetic", "scale": "tiny", "history_len": 8, "n_train": 256, "n_valid": 128,
                 "n_test": 192, "cache": str(cache)},
        "train": {"batch_size": 64, "eval_batch_size": 256, "device": "cpu"},
        "model": {"dim": 8, "num_layers": 1},
        "grid": {"arch": ARCHS, "seed": SEEDS, "data": [
            {"name": "exposure-0s", "protocol": "exposure", "delay_s": 0},
            {"name": "exposure-60s", "protocol": "exposure", "delay_s": 60},
            {"name": "author50", "protocol": "author50"}]},
        "resources": {"cpu": 1}, "max_concurrent": 2, "max_failures": 1,
        "analysis": {"baseline": "wukong", "n_resamples": 999, "questions": [
            {"name": "delay 0 s vs 60 s", "vary": {"delay_s": [0, 60]}},
            {"name": "exposure-60s vs author50", "a": {"protocol": "exposure", "delay_s": 60},
             "b": {"protocol": "author50"}}]},
    })


def test_vocabulary_rules_differ_between_arms_only_when_fit_on_histories(tmp_path):
    """The control for the arms test: fit on each arm's own histories (train_inputs), the item vocabularies
    of the three arms differ; fit on the training window they are equal (and hold every training-window id)."""
    import protocols
    from core.typed_config import from_dict
    from protocols.prepare import PrepareConfig, prepare_log
    from protocols.schema import HIST_CAT_FIELDS
    from protocols.synthetic.pipeline import generate

    log_root = tmp_path / "log"
    generate("tiny", log_root, seed=0, author50=True)
    protocols.load_components()
    log = protocols.SOURCES.get("synthetic")(log_root)
    arms = [{"protocol": "exposure", "delay_s": 0}, {"protocol": "exposure", "delay_s": 60}, {"protocol": "author50"}]
    sizes = {}
    for rule in ("train_inputs", "train_window"):
        sizes[rule] = []
        for arm in arms:
            cfg = from_dict(PrepareConfig, {"source": "synthetic", "root": str(log_root), "history_len": 8,
                                            "n_train": 256, "n_valid": 128, "n_test": 192, "vocabulary": rule,
                                            "out": str(tmp_path / "prepared"), **arm})
            folder = prepare_log(log, cfg)
            sizes[rule].append({f: len(np.load(folder / "vocab" / f"{f}.npy")) for f in HIST_CAT_FIELDS})
    assert len({repr(s) for s in sizes["train_inputs"]}) > 1
    assert len({repr(s) for s in sizes["train_window"]}) == 1
    # train_window = the distinct ids of every exposure before the validation split starts, counted with pandas
    manifest = json.loads((folder / "manifest.json").read_text())
    start = pd.Timestamp(manifest["parameters"]["split"]["valid_start"],
                         tz=manifest["parameters"]["split"]["timezone"]).value // 10**6
    frame = pd.DataFrame({f: log[f] for f in (*HIST_CAT_FIELDS, "request_timestamp")})
    expected = frame[frame["request_timestamp"] < start][list(HIST_CAT_FIELDS)].nunique().to_dict()
    assert sizes["train_window"][0] == expected


def test_three_arm_sweep_pairs_every_comparison_on_shared_targets(tmp_path):
    sweep = parse_sweep(_sweep(tmp_path / "cache"))
    outcome = run_sweep(sweep, results_root=tmp_path / "results", num_cpus=2)
    assert outcome.complete and outcome.finished == len(ARCHS) * len(SEEDS) * 3
    root = outcome.sweep_dir
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = analyze(root, progress=False, plots=False)

    # every comparison, per architecture, pairs all seeds; nothing is unpaired
    assert len(res.ablations) == 2 * len(ARCHS)
    assert all(r.paired.error is None and r.metrics["auc"].stats.n == len(SEEDS) for r in res.ablations)
    assert all(sum(d.result is not None for d in r.delong) == len(SEEDS) for r in res.ablations)

    # the arms share their targets: same event_ids in every split of every artifact, and in every prediction file
    facts = json.loads((root / "datasets.json").read_text())
    assert len(facts["datasets"]) == 3
    plan = plan_sweep(sweep)
    from harness.sweep.launcher import prepare_datasets
    paths = prepare_datasets(sweep, plan.datasets)  # already prepared: returns the paths
    for split in ("train", "valid", "test"):
        ids = [np.sort(pq.read_table(f"{p}/{split}_targets.parquet", columns=["event_id"])
                       .column("event_id").to_numpy()) for p in paths.values()]
        assert all(np.array_equal(ids[0], x) for x in ids[1:])
        assert all(p["splits"][split]["shared_targets"] == len(ids[0]) and p["splits"][split]["only_a"] == 0
                   for p in facts["pairs"])
    runs = pd.read_parquet(root / "runs.parquet")
    test_ids = {tuple(np.sort(pd.read_parquet(root / d / "predictions_test.parquet")["event_id"].to_numpy()))
                for d in runs["run_dir"]}
    assert len(test_ids) == 1
    assert all(f.same_targets and f.shared == 192 for f in res.arm_facts.values())

    # the arms differ only in their histories: every artifact has the same vocabularies (fit on the training
    # window, the rule such sweeps resolve to), and Wukong, which reads no history, is bit-identical across arms
    manifests = [json.loads(open(f"{p}/manifest.json").read()) for p in paths.values()]
    assert all(m["vocabulary"] == "train_window" and m["vocab_sizes"] == manifests[0]["vocab_sizes"]
               for m in manifests)
    for seed in SEEDS:
        wukong = runs[(runs["arch"] == "wukong") & (runs["seed"] == seed)]
        assert len(wukong) == 3
        scores = [pd.read_parquet(root / d / "predictions_test.parquet").sort_values("event_id")["score"].to_numpy()
                  for d in wukong["run_dir"]]
        assert all(np.array_equal(scores[0], x) for x in scores[1:])
        assert wukong["test_auc"].nunique() == 1 and wukong["test_logloss"].nunique() == 1
    whale = runs[runs["arch"] == "whale"].groupby("seed")["test_auc"].nunique()
    assert (whale > 1).all()  # the history models do see different arms

    # the 0 s vs 60 s membership share equals compare-delay's, computed from the log by another code path
    import protocols
    from core.typed_config import from_dict
    from protocols.prepare import PrepareConfig

    by_name = {r["data.name"]: r["dataset_id"] for _, r in runs.iterrows()}
    prep = next(d.prepare for d in plan.datasets if d.dataset_id == by_name["exposure-0s"])
    log_root = tmp_path / "cache" / "synthetic" / "tiny-seed0"
    cfg = from_dict(PrepareConfig, {**prep, "root": str(log_root), "out": str(tmp_path / "unused")})
    expected = compare(protocols.SOURCES.get("synthetic")(log_root), cfg, "test", (0.0, 60.0))
    pair = next(p for p in facts["pairs"] if {p["a"], p["b"]} == {by_name["exposure-0s"], by_name["exposure-60s"]})
    assert pair["splits"]["test"]["targets_history_differs"] == expected["targets_differing"]

    # difference-in-differences of WHALE - Wukong between exposure-60s and author50, by hand from runs.parquet
    auc = runs.set_index(["arch", "data.name", "seed"])["test_auc"]
    hand = np.array([(auc["whale", "exposure-60s", s] - auc["wukong", "exposure-60s", s])
                     - (auc["whale", "author50", s] - auc["wukong", "author50", s]) for s in SEEDS])
    d = next(x for x in res.ranks.did if {x.x, x.y} == {"whale", "wukong"}
             and (x.arm_p, x.arm_q) == ("exposure-60s", "author50"))
    sign = 1.0 if d.x == "whale" else -1.0
    assert sign * d.deltas == pytest.approx(hand, abs=1e-12)
    half = stats.t.ppf(0.975, len(SEEDS) - 1) * hand.std(ddof=1) / np.sqrt(len(SEEDS))
    assert sorted(sign * np.array(d.ci)) == pytest.approx([hand.mean() - half, hand.mean() + half], abs=1e-12)
    assert "## Does the data protocol change the conclusions?" in (root / "report.md").read_text()
