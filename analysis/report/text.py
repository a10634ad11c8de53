"""Number and table formatting shared by the report's sections (report.md is Markdown)."""
from __future__ import annotations

import numpy as np

from harness import metric_registry


def metric_label(metric: str) -> str:
    """The registered display label ("AUC", "LogLoss")."""
    return metric_registry.get(metric).label


def num(x: float | None, fmt: str = ".3g") -> str:
    """`x` in `fmt`, or an en dash for None / NaN / inf."""
    return "–" if x is None or not np.isfinite(x) else format(x, fmt)


def signed_delta(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:+.5f}"


def estimate_text(e, fmt: str = ".3g") -> str:
    """"value [lo, hi]" of anything with value, lo and hi (or an en dash for None)."""
    return "–" if e is None else f"{num(e.value, fmt)} [{num(e.lo, fmt)}, {num(e.hi, fmt)}]"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]
