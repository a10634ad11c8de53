"""report.md's `## Run health` and `## Retried runs`, analysis.json's `run_health` and `retried_runs`
(analysis/run_health.py; docs/analysis.md, "Run health", and docs/sweeps.md, "Retry")."""
from __future__ import annotations

from harness import run_health as H

from ..result import AnalysisResult
from ..run_health import why_kept
from .section import Section, as_json, markdown_table


def _health(res: AnalysisResult) -> list[str]:
    health = res.health
    if health is None:
        return []
    c = health.counts
    out = ["## Run health", "",
           f"{health.total_runs} runs: " + ", ".join(f"{c[s]} {s}" for s in H.STATUSES) + ". Criteria "
           "(harness/run_health.py): " + "; ".join(f"{name}: {text}" for name, text in H.CRITERIA.items()) + ".", ""]
    out += [f"_{n}_" for n in health.notes()] + ([""] if health.notes() else [])
    if health.excluded:
        out += ["Unhealthy runs. Failed ones (collapsed, diverged) are left out of every mean, fit, comparison and "
                "expectation below, except where every run of the setting failed. Undertrained ones are used and "
                "marked: leaving out only the seeds that learned least would bias their setting's mean; the results "
                "then describe this recipe, which did not train those settings far enough.", "",
                *markdown_table(["run", "status", "reason", "in the analysis"],
                                [[e.trial, e.status, e.reasons + (" (derived)" if e.derived else ""),
                                  f"**{why_kept(e)}**" if e.kept else "left out"] for e in health.excluded]), ""]
    return out


def _health_json(res: AnalysisResult) -> dict:
    h = res.health
    if h is None:
        return {}
    return {"run_health": {"counts": h.counts, "derived_rows": h.derived_rows, "unchecked": h.unchecked,
                           "still_falling_unchecked": dict(h.falling_unchecked),
                           "still_falling_checked_here": h.falling_here, "excluded": as_json(h.excluded)}}


HEALTH = Section("run health", _health, _health_json)


def _retried(res: AnalysisResult) -> list[str]:
    if res.retried is None:
        return []
    head = ["## Retried runs", "",
            "The sweep's `retry:` policy trained an unhealthy run again from scratch (same seed and data) at a lower "
            "learning rate. Each run below is its final attempt everywhere in this report; its setting is the one "
            "planned. A run still unhealthy after its retries is listed under Run health like any other.", ""]
    if not res.retried:
        return head + ["No run needed a retry.", ""]
    rows = [[r.trial, r.setting, str(r.seed), r.path, r.status] for r in res.retried]
    return head + markdown_table(["run", "setting", "seed", "learning rate → status, per attempt", "final status"],
                                 rows) + [""]


RETRIED = Section("retried runs", _retried,
                  lambda res: {} if res.retried is None else {"retried_runs": as_json(res.retried)})
