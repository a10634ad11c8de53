"""The report's sections, registered in report order: report.md is their markdown joined, analysis.json their
entries merged (docs/analysis.md). A new analysis adds its Section (analysis/report/section.py) here."""
from __future__ import annotations

from typing import Any

from ..result import AnalysisResult
from .overview import ABLATIONS, CURVES, GROUPED, HEADLINE, HEALTH, QUESTIONS, RETRIED, TITLE, TUNING, WARNINGS
from .protocol import ANSWER, PROTOCOL
from .scaling import DATA_SCALING, FAMILY_COMPARISONS, SCALING
from .section import Section

SECTIONS: tuple[Section, ...] = (
    TITLE,
    QUESTIONS,  # the answers open the report
    ANSWER,  # then the protocol answer
    HEADLINE,
    HEALTH,
    RETRIED,
    TUNING,
    CURVES,
    ABLATIONS,
    PROTOCOL,
    SCALING,
    FAMILY_COMPARISONS,
    DATA_SCALING,
    GROUPED,
    WARNINGS,
)

#: analysis.json's keys in the order readers know; a key not listed follows them, in section order.
JSON_ORDER = ("sweep", "runs", "baseline", "reference", "questions", "best", "headline", "scaling", "scaling_notes",
              "family_comparisons", "ablations", "protocol", "plots", "warnings", "run_health", "data_scaling",
              "tuning", "retried_runs")


def render_report(res: AnalysisResult) -> str:
    """report.md."""
    return "\n".join(line for s in SECTIONS for line in s.markdown(res))


def summary_dict(res: AnalysisResult) -> dict[str, Any]:
    """JSON-ready summary of every number in the report (analysis.json; `recscale analyze --json`)."""
    entries = {k: v for s in SECTIONS for k, v in s.json(res).items()}
    rank = {k: i for i, k in enumerate(JSON_ORDER)}
    return {k: entries[k] for k in sorted(entries, key=lambda k: rank.get(k, len(rank)))}
