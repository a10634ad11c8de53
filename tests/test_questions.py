"""`analysis.questions`: every comparison of a report is one Holm family (against scipy's paired t-test and a plain
Holm computed here), verdict words that follow the test, ablation sets, slope questions, the best architecture named
only when decided, and the terminal summary and report.md's first screen written from the same result object."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from analysis.compare.questions import question_deltas
from analysis.config import QuestionConfig
from analysis.pipeline import analyze
from analysis.report.sections import render_report
from analysis.report.terminal import terminal_summary
from analysis.stats.paired import DECIDED, minimum_detectable_effect, seeds_for_power
from cli.main import main
from core.typed_config import ConfigError

SEEDS = [0, 1, 2, 3, 4]
QUESTIONS = [
    {"name": "WHALE vs MeanPool", "a": {"arch": "whale"}, "b": {"arch": "whale_meanpool"}, "expect": "a",
     "source": "synthetic demo"},
    {"name": "Wukong vs WHALE", "a": {"arch": "wukong"}, "b": {"arch": "whale"}, "expect": "a", "source": "made up"},
    {"name": "Shallow-hybrid vs Wukong", "a": {"arch": "shallow_hybrid"}, "b": {"arch": "wukong"}},
    {"name": "WHALE vs Wukong on LogLoss", "a": {"arch": "whale"}, "b": {"arch": "wukong"}, "metric": "logloss"},
]


def _results(root, questions=QUESTIONS, seeds=SEEDS, **analysis):
    rng = np.random.default_rng(4)
    rows = []
    for s in seeds:
        base = 0.70 + rng.normal(0, 3e-3)
        auc = {"wukong": base, "whale": base + 0.02 + rng.normal(0, 5e-4),
               "whale_meanpool": base + 0.016 + rng.normal(0, 5e-4), "shallow_hybrid": base + rng.normal(0, 2e-3)}
        for arch, a in auc.items():
            rows.append({"trial_id": f"{arch}-seed{s}", "arch": arch, "seed": s, "protocol": "exposure",
                         "history_len": 32, "model.dim": 16, "test_auc": a, "test_logloss": 0.6 - 0.5 * (a - 0.7),
                         "flops_per_target": 1e5})
    root.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    section = {"baseline": "wukong", "delong": False, "questions": questions, **analysis}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": root.name, "analysis": section}, sort_keys=False))
    return root, pd.DataFrame(rows)


def _holm(p):
    order = np.argsort(p)
    out, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def test_questions_are_one_holm_family_with_words_that_follow_the_test(tmp_path, capsys):
    root, runs = _results(tmp_path / "sweep")
    assert main(["analyze", str(root), "--no-plots"]) == 0
    got = json.loads((root / "analysis.json").read_text())
    p_t, deltas = [], []
    for q in QUESTIONS:
        col = f"test_{q.get('metric', 'auc')}"
        a = runs[runs.arch == q["a"]["arch"]].sort_values("seed")[col].to_numpy()
        b = runs[runs.arch == q["b"]["arch"]].sort_values("seed")[col].to_numpy()
        p_t.append(stats.ttest_rel(a, b).pvalue)
        deltas.append(a - b)
    p_holm = _holm(np.array(p_t))
    for g, q, p, ph, d in zip(got["ablations"], QUESTIONS, p_t, p_holm, deltas):
        mc = g["metrics"][q.get("metric", "auc")]
        assert mc["p_t"] == pytest.approx(p) and mc["p_holm"] == pytest.approx(ph)
        np.testing.assert_allclose(mc["deltas"], d)
        assert g["seeds"] == SEEDS
    answers = [g["answers"][0]["answer"] for g in got["questions"]]
    assert answers[0].startswith("whale better: delta +") and answers[0].endswith("(as expected)")
    assert answers[1].startswith("whale better") and answers[1].endswith("(against the expected direction)")
    mc = got["ablations"][2]["metrics"]["auc"]
    assert mc["mde"] == pytest.approx(minimum_detectable_effect(np.std(deltas[2], ddof=1), 5, alpha=0.05 / 4))
    n = seeds_for_power(np.std(deltas[2], ddof=1), abs(deltas[2].mean()), alpha=0.05 / 4)  # the power plan's count
    assert mc["seeds_needed"] == n and 5 < n < 1000
    assert answers[2] == (f"not decided at 5 seeds (MDE {mc['mde']:.2g}); about {n - 5:.0f} more seeds for the "
                          f"observed delta {deltas[2].mean():+.2g}")  # signed; no wall_s column: no hours
    assert answers[3].startswith("whale better: delta -")  # LogLoss: lower is better
    assert [g["settled"] for g in got["questions"]] == [True, True, False, True]
    report = (root / "report.md").read_text()
    assert "| WHALE vs MeanPool | test AUC | whale better; synthetic demo | whale better: delta +" in report
    assert "within seed noise" not in report and "not decided at 5 seeds (MDE" in capsys.readouterr().out


def test_terminal_and_report_first_screen_come_from_the_same_result_object(tmp_path):
    """Every answer and the best line of the result object open both outputs; a verdict changed in the object (and
    nowhere else) changes both."""
    root, _ = _results(tmp_path / "sweep")
    res = analyze(root, progress=False, plots=False)

    def shown(res):
        return terminal_summary(res, "r"), "\n".join(render_report(res).splitlines()[:25])

    terminal, report = shown(res)
    for q in res.questions:
        for _, answer in q.answers:
            assert answer in terminal and answer in report
    assert res.questions and "\nbest: " in terminal and "\nbest: " in report
    for q in res.questions:  # the per-question deltas a power plan or a sequential rule reads
        ((paired, deltas),) = question_deltas(res.results, q.question)
        assert tuple(deltas) == q.strata[0].metrics[q.question.metric].stats.deltas and list(paired.seeds) == SEEDS
    mc = res.questions[2].strata[0].metrics["auc"]
    mc.verdict, mc.interval = DECIDED, (0.001, 0.002)
    answer = res.questions[2].strata[0].answer
    assert answer.startswith("shallow_hybrid better") and all(answer in text for text in shown(res))


def test_best_is_named_only_when_decided_against_every_rival(tmp_path):
    every = [{"a": {"arch": "whale"}, "b": {"arch": x}} for x in ("whale_meanpool", "shallow_hybrid", "wukong")]
    res = analyze(_results(tmp_path / "all", questions=every)[0], progress=False, plots=False)
    assert "\nbest: whale (highest mean test AUC: whale" in terminal_summary(res, "r")
    res = analyze(_results(tmp_path / "some", questions=every[:2])[0], progress=False, plots=False)
    assert "best: not decided among whale, wukong (" in terminal_summary(res, "r")


def test_two_seeds_warn_wherever_the_verdict_is_shown(tmp_path, capsys):
    root, _ = _results(tmp_path / "sweep", questions=QUESTIONS[:1], seeds=[0, 1])
    assert main(["analyze", str(root), "--no-plots"]) == 0
    warning = "2 seeds: the t-test has 1 df and the sign-flip / Wilcoxon p-values cannot go below 0.5"
    assert warning in capsys.readouterr().out
    report = (root / "report.md").read_text()
    assert warning in "\n".join(report.splitlines()[:25]) and report.count(warning) >= 2  # answers and comparisons


def test_an_ablation_set_compares_each_switch_with_the_full_model(tmp_path):
    ablations = {"name": "switches", "kind": "ablation_set", "switch": "arch", "full": "whale",
                 "names": {"wukong": "no history", "whale_meanpool": "mean pooling"}}
    res = analyze(_results(tmp_path / "sweep", questions=[ablations])[0], progress=False, plots=False)
    assert [(q.question.name, q.group, q.question.a, q.question.b) for q in res.questions] == [
        ("no history", "switches", {"arch": "whale"}, {"arch": "wukong"}),
        ("mean pooling", "switches", {"arch": "whale"}, {"arch": "whale_meanpool"})]
    every = {k: v for k, v in ablations.items() if k != "names"}
    res = analyze(_results(tmp_path / "every", questions=[every])[0], progress=False, plots=False)
    assert [q.question.name for q in res.questions] == [f"whale vs {x}" for x in
                                                       ("shallow_hybrid", "whale_meanpool", "wukong")]


@pytest.mark.filterwarnings("ignore:.*power law")
def test_a_slope_question_reads_the_fit_interval_against_its_target(tmp_path):
    from tests.test_analyze_cli import make_results

    questions = [{"kind": "slope", "family": "whale", "target_half_width": 10.0},
                 {"kind": "slope", "family": "whale", "target_half_width": 1e-6, "name": "tight"},
                 {"kind": "slope", "family": "nope"}]
    res = analyze(make_results(tmp_path / "study", analysis={"baseline": "wukong", "questions": questions}),
                  progress=False, plots=False)
    fit = next(f.fit for f in res.scaling if f.family == "whale" and f.metric == "auc")
    lo, hi = fit.slope_ci
    assert res.questions[0].slope_answer == (f"{fit.slope:+.3f} [{lo:+.3f}, {hi:+.3f}] at {fit.n_seeds} seeds; "
                                             f"half-width {(hi - lo) / 2:.3g} within the target 10: decided")
    assert res.questions[0].settled and not res.questions[1].settled
    assert "above the target 1e-06: open" in res.questions[1].slope_answer
    assert res.questions[2].slope_answer.startswith("no power-law fit of family 'nope'")


@pytest.mark.parametrize("analysis,key", [
    ({"questions": [{"a": {"arch": "whale"}, "b": {"arch": "wukong"}, "metric": "acc"}]},
     "analysis.questions[0].metric"),
    ({"questions": [{"a": {"arch": "whale"}}]}, "analysis.questions[0].b"),
    ({"questions": [{"a": {"arch": "whale"}, "b": {"arch": "wukong"}, "claimed": "x"}]},
     "analysis.questions[0].claimed"),
    ({"questions": [{"kind": "ablation_set", "switch": "arch"}]}, "analysis.questions[0].full"),
    ({"comparisons": []}, "analysis.comparisons: renamed; write analysis.questions"),
    ({"expectations": []}, "analysis.expectations: renamed; write analysis.questions"),
])
def test_bad_questions_name_the_key(tmp_path, capsys, analysis, key):
    root, _ = _results(tmp_path / "sweep", **analysis)
    assert main(["analyze", str(root), "--no-plots"]) == 2
    assert key in capsys.readouterr().err
    assert not (root / "report.md").exists()


def test_every_committed_report_states_its_answers_in_its_first_25_lines():
    """Issue 39's done-when: each committed reference's report.md opens with every question's answer (and the best
    line), as its analysis.json records them."""
    from pathlib import Path

    folders = sorted(p for p in (Path(__file__).resolve().parents[1] / "results" / "reference").glob("*") if p.is_dir())
    for folder in folders:
        summary = json.loads((folder / "analysis.json").read_text())
        head = "\n".join((folder / "report.md").read_text().splitlines()[:25])
        shown = [a["answer"] for q in summary["questions"] for a in q["answers"]] + [summary["best"]]
        assert [a for a in shown if a not in head] == [], folder.name


def test_an_open_answer_names_the_seeds_the_power_plan_gives_on_a_reference():
    """Issue 39's "open: about N more seeds (about T h)": each undecided stratum of the demo reference states the
    seeds `recscale sweep --dry-run --pilot` plans for it (capped alike), and T = N x its runs' wall seconds."""
    import dataclasses
    import re
    from pathlib import Path

    from analysis.collect import load_results
    from analysis.compare.questions import evaluate_questions
    from analysis.power_plan import load_pilot, power_plan

    folder = Path(__file__).resolve().parents[1] / "results" / "reference" / "demo"
    results = load_results(folder)
    results.config = dataclasses.replace(results.config, delong=False)
    strata = [s for q in evaluate_questions(results, [], [], progress=False) for s in q.strata]
    rows = power_plan(load_pilot(folder, results.config), 3, results.runs.to_dict("records"), {})
    assert [s.paired.label for s in strata] == [r.label for r in rows]
    capped = 0
    for s, row in zip(strata, rows):
        if s.metrics["auc"].decided:  # a decided answer names the better side, no seeds
            assert " better: delta " in s.answer and "seeds for" not in s.answer
            continue
        assert s.answer.startswith("not decided at 3 seeds (MDE ")
        if np.isinf(row.seeds_needed):
            capped += 1
            assert s.answer.endswith(f"; > 1000 seeds for the observed delta {s.metrics['auc'].stats.mean:+.2g}")
            continue
        more = re.search(r"; about (\d+) more seeds? for the observed delta ([+-][\d.e-]+) \(about ([\d.e-]+) h of",
                         s.answer)
        assert more is not None, s.answer
        assert int(more[1]) == row.seeds_needed - row.pilot_seeds and more[2] == f"{s.metrics['auc'].stats.mean:+.2g}"
        assert abs(float(more[2])) == pytest.approx(float(f"{row.target:.2g}"), rel=0.05)  # the plan's |delta|
        runs = results.runs.wall_s
        hours = int(more[1]) * (runs.loc[s.paired.rows_a].mean() + runs.loc[s.paired.rows_b].mean()) / 3600
        assert more[3] == f"{hours:.2g}"
    assert 0 < capped < len(rows)


def test_a_question_on_several_metrics_is_one_question_per_metric_in_the_one_holm_family(tmp_path):
    """`metrics: [auc, logloss]` asks the comparison on each (the others' names add the label), Holm over all of
    them (scipy's paired t, Holm by hand), and the report's Answers table gives them one row."""
    questions = [{"name": "WHALE vs Wukong", "a": {"arch": "whale"}, "b": {"arch": "wukong"},
                  "metrics": ["auc", "logloss"]},
                 {"name": "Shallow vs Wukong", "a": {"arch": "shallow_hybrid"}, "b": {"arch": "wukong"}}]
    root, runs = _results(tmp_path / "sweep", questions=questions)
    assert main(["analyze", str(root), "--no-plots"]) == 0
    got = json.loads((root / "analysis.json").read_text())
    assert [(q["question"], q["metric"]) for q in got["questions"]] == [
        ("WHALE vs Wukong", "auc"), ("WHALE vs Wukong (LogLoss)", "logloss"), ("Shallow vs Wukong", "auc")]
    side = {a: runs[runs.arch == a].sort_values("seed") for a in ("whale", "wukong", "shallow_hybrid")}
    p = [stats.ttest_rel(side[a][f"test_{m}"], side["wukong"][f"test_{m}"]).pvalue
         for a, m in (("whale", "auc"), ("whale", "logloss"), ("shallow_hybrid", "auc"))]
    held = [g["metrics"][q["metric"]]["p_holm"] for g, q in zip(got["ablations"], got["questions"])]
    np.testing.assert_allclose(held, _holm(np.array(p)))
    report = (root / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| WHALE vs Wukong |"))
    assert "test AUC / LogLoss" in row and "AUC: whale better" in row and "<br>LogLoss: whale better" in row
    assert not any(line.startswith("| WHALE vs Wukong (LogLoss) |") for line in report.splitlines()[:20])
    with pytest.raises(ConfigError, match="metrics: question 'x'"):
        QuestionConfig(name="x", kind="slope", family="whale", metrics=["auc"])
