"""Holm's correction over each family of scaling tests the report puts words on.

Families (each corrected on its own, per metric where the tests are per metric):
- the lack-of-fit F tests of every (family, metric, form) of the report (analysis/form_check.py);
- per metric, the power-law slope differences of the family comparisons; the log-linear slope differences;
  the gain differences at matched compute (analysis/family_comparison.py).
The steps of one marginal-returns ladder are corrected where they are computed (analysis/marginal_returns.py).
"""
from __future__ import annotations

from dataclasses import replace

from .family_comparison import FamilyComparison
from .scaling import FamilyScaling
from .significance import holm

ALPHA = 0.05
CONTRASTS = ("slope_diff", "log_linear_diff", "diff")


def correct_scaling_tests(scaling: list[FamilyScaling], comparisons: list[FamilyComparison]) -> None:
    """Set `lof_p_holm` on every form result and `p_holm` on every comparison contrast, in place."""
    forms = [r for f in scaling if f.forms is not None for r in f.forms.forms]
    for r, p in zip(forms, holm([r.lof_p for r in forms])):
        r.lof_p_holm = float(p)
    for metric in {c.metric for c in comparisons}:
        mine = [c for c in comparisons if c.metric == metric]
        for name in CONTRASTS:
            present = [c for c in mine if getattr(c, name) is not None]
            for c, p in zip(present, holm([getattr(c, name).p_value for c in present])):
                setattr(c, name, replace(getattr(c, name), p_holm=float(p)))
