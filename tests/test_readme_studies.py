"""Issue 40's "one answer everywhere" for the README: each row of its committed-studies table states only verdicts
its reference's analysis.json gives (decided counts, seed counts, MDE range, best, slope questions, healthy runs),
every expected value derived from that file."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _rows() -> dict[str, str]:
    """Study name -> the README table row that links its report."""
    readme = (ROOT / "README.md").read_text()
    links = dict(re.findall(r"^\[(\w+)\]: results/reference/(\w+)/report\.md$", readme, flags=re.M))
    rows = {m[1]: m[0] for m in re.finditer(r"^\| \[(\w+)\] \|.*$", readme, flags=re.M)}
    assert rows and set(rows) <= set(links)
    return {links[name]: row for name, row in rows.items()}


def _strata(summary: dict) -> list[tuple[dict, int]]:
    """(the question metric's statistics, paired seeds) of every comparison stratum."""
    metric = {q["question"]: q["metric"] for q in summary["questions"] if q["kind"] == "comparison"}
    return [(a["metrics"][metric[a["comparison"]]], len(a["seeds"])) for a in summary["ablations"]
            if a["comparison"] in metric and metric[a["comparison"]] in a["metrics"]]


@pytest.mark.parametrize("study, row", sorted(_rows().items()))
def test_each_readme_study_row_gives_its_reference_verdicts(study, row):
    summary = json.loads((ROOT / "results" / "reference" / study / "analysis.json").read_text())
    strata = _strata(summary)
    decided = sum(mc["verdict"] == "decided" for mc, _ in strata)
    if m := re.search(r"none of the (\d+) comparisons decided", row):
        assert (decided, len(strata)) == (0, int(m[1]))
    says_none = re.search(r"\bno\b[^;(]* decided|none of|not decided for either", row) is not None
    assert says_none == (bool(strata) and decided == 0), "the row says nothing is decided exactly when so"
    if "beats" in row or "(decided" in row:
        assert decided > 0
    for m in re.finditer(r"decided at (\d+)(?: to (\d+))? seeds", row):
        open_seeds = {n for mc, n in strata if mc["verdict"] != "decided"}
        assert open_seeds and (min(open_seeds), max(open_seeds)) == (int(m[1]), int(m[2] or m[1]))
    if m := re.search(r"MDE ([\d.]+) to ([\d.]+)", row):
        mdes = [mc["mde"] for mc, _ in strata if mc["mde"] is not None]
        assert (f"{min(mdes):.2g}", f"{max(mdes):.2g}") == (m[1], m[2])
    best = summary.get("best", "")
    if "no best named" in row:
        assert best.startswith("best: not decided among ")
    elif best and not best.startswith("best: not decided"):
        assert "no best" not in row
    if m := re.search(r"\b(both|one|no) slope differences? open", row):
        slopes = [q["settled"] for q in summary["questions"] if q["kind"] == "slope_difference"]
        assert slopes.count(False) == {"both": 2, "one": 1, "no": 0}[m[1]] and (m[1] != "both" or len(slopes) == 2)
    metric = {q["question"]: q["metric"] for q in summary["questions"]}
    for m in re.finditer(r"decided at round (\d+)", row):  # a sequential study (`rounds:`)
        assert int(m[1]) in {a.get("round") for a in summary["ablations"]
                             if a["metrics"][metric[a["comparison"]]]["verdict"] == "decided"}
    if m := re.search(r"(\d+) of the (\d+) trials run", row):  # of the cap: every cell at the last round's seeds
        cells = len(summary["headline"]["rows"])
        assert (summary["runs"], summary["rounds"]["seeds"][-1] * cells) == (int(m[1]), int(m[2]))
    if m := re.search(r"all (\d+) runs healthy", row):
        assert summary["runs"] == summary["run_health"]["counts"]["ok"] == int(m[1])


def _open_answers(summary: dict) -> list[str]:
    """The answers still open: an undecided comparison stratum's (on its question's metric) and an open slope
    question's."""
    metric = {q["question"]: q["metric"] for q in summary["questions"] if q["kind"] == "comparison"}
    texts = [a["answer"] for a in summary["ablations"] if a["comparison"] in metric
             and a["metrics"].get(metric[a["comparison"]], {"verdict": "decided"})["verdict"] != "decided"]
    return texts + [q["answers"][0]["answer"] for q in summary["questions"]
                    if q["kind"] != "comparison" and not q["settled"]]


@pytest.mark.parametrize("study, row", sorted(_rows().items()))
def test_each_open_answer_is_stated_with_the_seeds_that_would_decide_it(study, row):
    """Issue 43: a row gives the answer, or "not determined; about N seeds (T h here) would decide it", the
    counts and hours read from the report's own answers."""
    summary = json.loads((ROOT / "results" / "reference" / study / "analysis.json").read_text())
    answers = _open_answers(summary)
    more = [int(m[1]) for a in answers if (m := re.search(r"about (\d+) more seeds? for", a))]
    hours = [float(m[1]) for a in answers if (m := re.search(r"about ([\d.e-]+) h of trials", a))]
    over = sum(bool(re.search(r"> \d+ seeds for", a)) for a in answers)
    stated = re.search(r"not determined; about (\d+)(?: to (\d+))? more seeds? \(up to ([\d.]+) h here\)", row)
    assert (stated is not None) == bool(more), "a row states the seeds exactly when some open answer counts them"
    if stated:
        assert (int(stated[1]), int(stated[2] or stated[1])) == (min(more), max(more))
        assert float(stated[3]) == pytest.approx(max(hours), rel=0.05)
    m = re.search(r"(\d+) (?:need|needs) over 1000", row)
    assert (int(m[1]) if m else 0) == over
