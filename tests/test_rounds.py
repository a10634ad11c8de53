"""Seeds in rounds (`rounds:` in a sweep file; docs/sweeps.md, "Seeds in rounds"):

- the round planner (`analysis.pipeline.open_runs`: which cells the next round runs) against a brute-force closed
  test, every intersection of the comparisons tested by its Bonferroni-weighted group-sequential test (Maurer &
  Bretz's Holm shortcut is exactly this closed test), over planted worlds;
- the schema: the seed axis the rounds make, each trial's round, and the keys refused;
- a real sequential sweep on Ray (slow): a planted large effect is decided at round 1 and its cell gets no more
  seeds while the open question's cells get round 2; the report says when; an interruption after round 1 resumes
  at round 2 with the same runs, and a finished sweep launched again runs nothing.
"""
from __future__ import annotations

import itertools
import re
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from analysis.pipeline import analyze, open_runs
from analysis.stats.sequential import SequentialDesign
from core.typed_config import ConfigError
from harness.sweep.plan import plan_sweep
from harness.sweep.schema import parse_sweep

LOOKS = (3, 5, 8)
ARCHS = ("whale", "hstu", "shallow_hybrid")  # each against wukong at both widths: six strata
DIMS = (8, 16)


def _world(root, rng, effects: dict[str, float], spending: str) -> list[tuple[str, int]]:
    """A finished sequential sweep folder (runs.parquet, sweep.yaml) with planted mean AUC gains over wukong;
    returns the strata as (arch, dim)."""
    rows = []
    for s, d in itertools.product(range(LOOKS[-1]), DIMS):
        base = 0.70 + rng.normal(0, 3e-3)
        for arch, gain in {"wukong": 0.0, **effects}.items():
            auc = base + gain + (rng.normal(0, 2e-3) if arch != "wukong" else 0.0)
            rows.append({"trial_id": f"{arch}-seed{s}-dim{d}", "arch": arch, "seed": s, "round": 1 + sum(
                s >= n for n in LOOKS), "protocol": "exposure", "history_len": 32, "model.dim": d, "test_auc": auc,
                "test_logloss": 0.6 - 0.5 * (auc - 0.7), "flops_per_target": 1e5})
    root.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    questions = [{"name": f"{a} vs wukong", "a": {"arch": a}, "b": {"arch": "wukong"}} for a in effects]
    (root / "sweep.yaml").write_text(yaml.safe_dump({
        "name": root.name, "rounds": {"seeds": list(LOOKS), "spending": spending},
        "analysis": {"baseline": "wukong", "delong": False, "questions": questions}}))
    return [(a, d) for a in effects for d in DIMS]


def _closed_test_cells(runs: pd.DataFrame, strata: list[tuple[str, int]], design: SequentialDesign, k: int
                       ) -> set[str]:
    """Brute force: stratum i is decided by look k when every intersection S holding it is rejected by look k
    (some j in S crosses its alpha / |S| boundary at some look <= k); the cells of the others continue."""
    p = np.ones((len(strata), k))
    for i, (arch, d) in enumerate(strata):
        a = runs[(runs.arch == arch) & (runs["model.dim"] == d)].sort_values("seed").test_auc.to_numpy()
        b = runs[(runs.arch == "wukong") & (runs["model.dim"] == d)].sort_values("seed").test_auc.to_numpy()
        for look in range(k):
            n = LOOKS[look]
            p[i, look] = stats.ttest_rel(a[:n], b[:n]).pvalue
    m = len(strata)
    levels = {size: design.nominal_levels(design.alpha / size)[:k] for size in range(1, m + 1)}
    rejected = {S for size in range(1, m + 1) for S in itertools.combinations(range(m), size)
                if any((p[j] <= levels[size]).any() for j in S)}
    open_ = [i for i in range(m) if not all(S in rejected for size in range(1, m + 1)
                                            for S in itertools.combinations(range(m), size) if i in S)]
    return {f"{arch}-dim{d}" for i in open_ for arch, d in [strata[i], ("wukong", strata[i][1])]}


@pytest.mark.parametrize("spending", ["pocock", "obrien_fleming"])
def test_next_round_cells_equal_a_brute_force_closed_test(tmp_path, spending):
    rng = np.random.default_rng(7)
    worlds = [dict(zip(ARCHS, gains)) for gains in
              [(0.05, 0.004, 0.0), (0.01, 0.006, 0.003), (0.0, 0.0, 0.0), (0.08, 0.08, 0.002)]]
    design = SequentialDesign(LOOKS, 0.05, spending)
    seen = set()
    for w, effects in enumerate(worlds):
        root = tmp_path / f"world{w}"
        strata = _world(root, rng, effects, spending)
        runs = pd.read_parquet(root / "runs.parquet")
        for k in (1, 2, 3):
            trials = open_runs(root, k)
            got = {re.sub(r"-seed\d+", "", t) for t in trials}
            assert got == _closed_test_cells(runs, strata, design, k), (spending, effects, k)
            assert all(int(re.search(r"seed(\d+)", t)[1]) < LOOKS[k - 1] for t in trials)  # only rounds <= k read
            seen.add(len(got))
    assert len(seen) >= 3  # the worlds reach several outcomes: all open, some decided, none open


def _rounds_sweep(**rounds) -> str:
    return yaml.safe_dump({"name": "r", "data": {"source": "synthetic", "scale": "tiny"}, "model": {"dim": 8},
                           "grid": {"arch": ["wukong", "whale"]}, **({"rounds": rounds} if rounds else {})})


def test_rounds_make_the_seed_axis_and_each_trial_records_its_round():
    plan = plan_sweep(parse_sweep(_rounds_sweep(seeds=[2, 3, 5], cap_trial_hours=0.5)))
    assert [(t.arch, t.seed, t.record()["round"]) for t in plan.trials if t.arch == "whale"] == [
        ("whale", 0, 1), ("whale", 1, 1), ("whale", 2, 2), ("whale", 3, 3), ("whale", 4, 3)]
    assert "round" not in plan_sweep(parse_sweep(_rounds_sweep())).trials[0].record()
    for bad, key in (({"seeds": [3, 3]}, "rounds.seeds"), ({"seeds": [1, 3]}, "rounds.seeds"),
                     ({"seeds": [3, 5], "cap_trial_hours": 0}, "rounds.cap_trial_hours"),
                     ({"seeds": [3, 5], "spending": "linear"}, "rounds.spending")):
        with pytest.raises(ConfigError, match=key):
            parse_sweep(_rounds_sweep(**bad))
    with pytest.raises(ConfigError, match="grid.seed"):
        parse_sweep(_rounds_sweep(seeds=[3, 5]).replace("- whale\n", "- whale\n  seed: [0, 1]\n"))


def _sequential_sweep(cache) -> dict:
    """Two questions on tiny runs: a large effect (a trained model against one whose weight decay of 30 squashes it
    to near-constant predictions, on test LogLoss: about 10 sd) and a small one (WHALE against Wukong, about 1 sd),
    in rounds of 3 then 4 seeds."""
    return {
        "name": "seq", "data": {"source": "synthetic", "scale": "tiny", "history_len": 8, "n_train": 2048,
                                "n_valid": 256, "n_test": 1024, "cache": str(cache)},
        "train": {"batch_size": 64, "eval_batch_size": 256, "device": "cpu", "lr": 0.01},
        "model": {"dim": 8, "num_layers": 1},
        "grid": {"arch": ["wukong", "whale"], "train.weight_decay": [1.0e-5, 30.0]},
        "rounds": {"seeds": [3, 4], "spending": "pocock"},
        "resources": {"cpu": 1}, "max_concurrent": 2,
        "analysis": {"baseline": "wukong", "delong": False, "questions": [
            {"name": "trained vs squashed", "vary": {"train.weight_decay": [1.0e-5, 30.0]},
             "where": {"arch": "wukong"}, "metric": "logloss"},
            {"name": "WHALE vs Wukong", "a": {"arch": "whale"}, "b": {"arch": "wukong"},
             "where": {"train.weight_decay": 1.0e-5}}]},
    }


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*collapsed")  # the squashed runs, used since every run of theirs is
def test_sequential_sweep_stops_a_decided_question_and_resumes_at_its_round(tmp_path):
    from harness.sweep.launcher import run_sweep
    from harness.sweep.trainable import read_events

    sweep = parse_sweep(yaml.safe_dump(_sequential_sweep(tmp_path / "cache")))
    outcome = run_sweep(sweep, results_root=tmp_path, num_cpus=2, open_runs=open_runs)
    sweep_dir = tmp_path / "seq"
    runs = pd.read_parquet(sweep_dir / "runs.parquet")
    per_cell = runs.groupby(["arch", "train.weight_decay"]).seed.apply(sorted).to_dict()
    assert per_cell == {("wukong", 1e-5): [0, 1, 2, 3], ("whale", 1e-5): [0, 1, 2, 3],  # the open question's cells
                        ("wukong", 30.0): [0, 1, 2], ("whale", 30.0): [0, 1, 2]}  # decided, and in no question
    assert outcome.complete and outcome.planned == outcome.finished == 14
    assert (runs["round"] == 1 + (runs["seed"] >= 3)).all()
    assert outcome.summary["rounds_stopped"] == "last round"
    assert [r["trials"] for r in outcome.summary["rounds"]] == [12, 2]

    res = analyze(sweep_dir, plots=False, progress=False)
    (trained,) = res.questions[0].strata
    (small,) = res.questions[1].strata
    assert trained.round == 1 and trained.metrics["logloss"].decided and "at round 1" in trained.answer
    assert small.round == 2 and not small.settled and small.answer.startswith("open at the cap (round 2, 4 seeds")
    assert "seeds in rounds (3, 4 seeds)" in (sweep_dir / "report.md").read_text()

    # interrupted after round 1: round 2's runs and Ray state gone; --resume runs round 2 for the same cells only
    first = runs.set_index("trial_id").test_logloss
    second_round = [t for t in runs.trial_id if "seed3" in t]
    for t in second_round:
        shutil.rmtree(sweep_dir / "runs" / t)
    shutil.rmtree(sweep_dir / "ray" / "grid-round2")
    (sweep_dir / "sweep_summary.json").unlink()
    before = len(read_events(sweep_dir))
    again = run_sweep(sweep, results_root=tmp_path, num_cpus=2, resume=True, open_runs=open_runs)
    trained_again = [e["trial"] for e in read_events(sweep_dir)[before:] if e["event"] == "end" and not e["reused"]]
    assert again.complete and sorted(trained_again) == sorted(second_round)
    assert pd.read_parquet(sweep_dir / "runs.parquet").set_index("trial_id").test_logloss.equals(first)

    # a finished sequential sweep launched again runs nothing
    events = len(read_events(sweep_dir))
    assert run_sweep(sweep, results_root=tmp_path, open_runs=open_runs).complete
    assert len(read_events(sweep_dir)) == events


def test_only_the_cap_may_change_between_launches():
    from harness.sweep.launcher import _comparable

    base = parse_sweep(_rounds_sweep(seeds=[2, 3, 5], cap_trial_hours=0.5))
    assert _comparable(parse_sweep(_rounds_sweep(seeds=[2, 3, 5], cap_trial_hours=2.0))) == _comparable(base)
    assert _comparable(parse_sweep(_rounds_sweep(seeds=[2, 3, 6], cap_trial_hours=0.5))) != _comparable(base)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*collapsed")
def test_a_raised_cap_runs_the_next_round_on_resume(tmp_path):
    """Round 2 would pass a tiny cap, so the sweep stops after round 1; the same sweep with the cap raised,
    launched with --resume, runs round 2 for the open question's cells only; launched again, nothing."""
    from harness.sweep.launcher import CAP_KEY, SweepError, run_sweep
    from harness.sweep.trainable import read_events

    doc = _sequential_sweep(tmp_path / "cache")
    doc["rounds"]["cap_trial_hours"] = 1e-6
    first = run_sweep(parse_sweep(yaml.safe_dump(doc)), results_root=tmp_path, num_cpus=2, open_runs=open_runs)
    assert "would pass cap_trial_hours" in first.summary["rounds_stopped"] and first.summary[CAP_KEY] == 1e-6
    assert [r["trials"] for r in first.summary["rounds"]] == [12]
    doc["rounds"]["cap_trial_hours"] = 10.0
    raised = parse_sweep(yaml.safe_dump(doc))
    with pytest.raises(SweepError, match="--resume"):
        run_sweep(raised, results_root=tmp_path, num_cpus=2, open_runs=open_runs)
    before = len(read_events(tmp_path / "seq"))
    again = run_sweep(raised, results_root=tmp_path, num_cpus=2, resume=True, open_runs=open_runs)
    trained = [e["trial"] for e in read_events(tmp_path / "seq")[before:] if e["event"] == "end" and not e["reused"]]
    assert again.summary["rounds_stopped"] == "last round" and len(trained) == 2 and all("seed3" in t for t in trained)
    events = len(read_events(tmp_path / "seq"))
    assert run_sweep(raised, results_root=tmp_path, open_runs=open_runs).complete
    assert len(read_events(tmp_path / "seq")) == events
