"""report.md's `## Tuning` section, analysis.json's `tuning` and the edge warnings, from the sweep's tuning.json
(the choice per setting: harness/sweep/tuning.py; what the table and warnings say: docs/sweeps.md, "Tuning")."""
from __future__ import annotations

from core.results_layout import RUNS_FILE
from harness.runs_columns import TUNED
from harness.sweep.tuning import TuningChoice

from .section import Section, as_json, markdown_table, num


def tuning_warnings(choice: TuningChoice | None) -> list[str]:
    """One warning per setting whose chosen value is the grid's lowest or highest, and one per setting where
    every grid value had an unhealthy tuning run."""
    if choice is None:
        return []
    out = []
    for s in choice.settings:
        if s.fallback:
            out.append(f"tuning: {s.setting}: every value of {choice.param} had a tuning run that was not ok; "
                       f"{num(s.chosen, 'g')} was chosen on its mean anyway: its measurement runs may not learn")
        if s.edge is not None:
            word = "lowest" if s.edge == "low" else "highest"
            out.append(f"tuning: {s.setting}: the chosen {choice.param} {num(s.chosen, 'g')} is the grid's {word} "
                       f"value (grid {num(choice.grid[0], 'g')} to {num(choice.grid[-1], 'g')}); its best value may "
                       "lie outside the grid: widen it")
    return out


def tuning_section(choice: TuningChoice | None) -> list[str]:
    """report.md's `## Tuning`: per setting the chosen value (bold in its row), the mean validation metric at
    every grid value, and whether the choice is at the grid's edge."""
    if choice is None:
        return []
    header = ["setting", f"chosen {choice.param}", "at the edge",
              *(f"{num(v, 'g')}" for v in choice.grid)]
    rows = []
    for s in choice.settings:
        means = [num(m, ".4f") + ("" if ok else " (not ok)")
                 for m, ok in zip(s.means, s.healthy or [True] * len(s.means), strict=True)]
        i = choice.grid.index(s.chosen)
        means[i] = f"**{means[i]}**"
        edge = {"low": "lowest value", "high": "highest value"}.get(s.edge or "", "")
        rows.append([s.setting, num(s.chosen, "g"), edge, *means])
    better = "highest" if choice.mode == "max" else "lowest"
    return ["## Tuning", "",
            f"Before measuring, each setting's {choice.param} was chosen on {choice.metric} ({better} mean over "
            f"tuning seeds {choice.seeds}) among the grid values in the last columns, which give that mean per value "
            "('–': some seed had no finite value; 'not ok': some tuning run of that value did not learn (collapsed, "
            "diverged, or undertrained other than still falling), and the value could not be chosen). Every "
            f"measurement run of a setting trained at its chosen value ({RUNS_FILE}'s `{TUNED}` column names the "
            "key). A choice at the grid's edge is listed under Warnings.",
            "", *markdown_table(header, rows), ""]


TUNING = Section("tuning", lambda res: tuning_section(res.tuning),
                 lambda res: {} if res.tuning is None else {"tuning": as_json(res.tuning)})
