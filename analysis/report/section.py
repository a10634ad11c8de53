"""The report's one section type (docs/analysis.md, *Python*), the text formatting sections share, and `as_json`, the
one way a result's dataclass becomes analysis.json: its fields, then its computed keys (COMPUTED), renamed by KEYS."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness import metric_registry
from harness.sweep.tuning import SettingChoice

from ..compare.delong_seeds import DeLongResult, DeLongSeed
from ..compare.protocol import ArmFacts, DiD
from ..compare.questions import MetricComparison
from ..fits.axes import Convention
from ..fits.data_scaling import UNDETERMINED, HeldOut
from ..fits.family_comparison import FamilyComparison, PairedContrast
from ..fits.forms import FormCheck, FormResult, HeldOutError
from ..fits.marginal_returns import Step
from ..fits.powerlaw import PowerLawFit
from ..fits.reference import Reference, ReferenceSlope
from ..headline import Headline, HeadlineRow
from ..result import AnalysisResult
from ..stats.paired import PairedStats, SeedInterval

#: Where a section's method is stated once: the report points there instead of repeating it.
METHOD_POINTER = "method: docs/analysis.md"


@dataclass(frozen=True)
class Section:
    """One part of the report: its report.md lines and its analysis.json entries (docs/analysis.md, *Python*)."""
    name: str
    markdown: Callable[[AnalysisResult], list[str]]
    json: Callable[[AnalysisResult], dict[str, Any]] = lambda res: {}


# ----------------------------------------------------------------------------------------------
# text


def metric_label(metric: str) -> str:
    """The registered display label ("AUC", "LogLoss")."""
    return metric_registry.get(metric).label


def num(x: float | None, fmt: str = ".3g") -> str:
    """`x` in `fmt`, or an en dash for None / NaN / inf."""
    return "–" if x is None or not np.isfinite(x) else format(x, fmt)


def mean_sd(pair: tuple[float, float], fmt: str = ".4f") -> str:
    """"mean ± sd" of a (mean, sd) pair, or an en dash for a non-finite mean."""
    mean, sd = pair
    return "–" if not np.isfinite(mean) else f"{mean:{fmt}} ± {num(sd, fmt)}"


def signed_delta(x: float) -> str:
    return "–" if not np.isfinite(x) else f"{x:+.5f}"


def bound_text(x: float, fmt: str = ".3g") -> str:
    """An interval end; one at a bootstrap's clip (draws where the fit was not determined) reads "undetermined"."""
    return "undetermined" if np.isfinite(x) and abs(x) >= UNDETERMINED else num(x, fmt)


def estimate_text(e, fmt: str = ".3g") -> str:
    """"value [lo, hi]" of anything with value, lo and hi (or an en dash for None)."""
    return "–" if e is None else f"{num(e.value, fmt)} [{bound_text(e.lo, fmt)}, {bound_text(e.hi, fmt)}]"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def table_block(heading: str, intro: str, header: list[str], rows: list[list[str]], *after: str) -> list[str]:
    """A heading, its paragraph, its table and the lines `after` it; none of them where there are no rows."""
    return [heading, "", intro, "", *markdown_table(header, rows), "", *after] if rows else []


def figures(res: AnalysisResult, *names: str) -> list[str]:
    """The links to those of the named figures that were drawn, each followed by a blank line."""
    return [line for n in names if n in res.plots for line in (f"![{n}]({res.plots[n]})", "")]


# ----------------------------------------------------------------------------------------------
# analysis.json

#: analysis.json's key for a field where it is not the field's name: None leaves the field out, "" writes a
#: nested dataclass's keys into its parent's, a tuple of keys writes a tuple field's items under them.
KEYS: dict[type, dict[str, str | tuple[str, ...] | None]] = {
    Headline: dict.fromkeys(("rows", "has_params", "has_oracle", "has_health")),
    HeadlineRow: {"auc": ("auc_mean", "auc_sd"), "logloss": ("logloss_mean", "logloss_sd"), "health": None},
    PairedContrast: {"estimate": "", "seeds_for_80": "seeds_for_80_power"},
    Step: {"seeds_for_80": "seeds_for_80_power"},
    FormCheck: {"metric": None},
    FormResult: {"largest": None, "lof_f": None, "lof_df": None, "lof_p": None, "lof_p_holm": None},
    PowerLawFit: {"slope_ci_per_point": "slope_ci_per_point_pseudo_replicated", "dropped": "dropped_points",
                  **dict.fromkeys(("band_x", "band_lo", "band_hi", "obs_x", "band_method"))},
    Reference: dict.fromkeys(("mask", "fixed", "notes", "size_keys")),
    ReferenceSlope: {"is_chosen": "chosen", "ci": "slope_ci"},
    FamilyComparison: {"convention": None, "log_linear_diff": "log_linear_slope_diff"},
    MetricComparison: {"metric": None, "stats": "", "seeds": None},
    PairedStats: {"ci_low": None, "ci_high": None},
    DeLongSeed: {"result": ""},
    DeLongResult: {"p_value": "p", **dict.fromkeys(("var_a", "var_b", "cov_ab", "n_pos", "n_neg"))},
    ArmFacts: {"arm_a": None, "arm_b": None},
    DiD: {"p_value": "p"},
    SettingChoice: {"rows": None},
}
#: Keys computed from a dataclass (its properties), written after its fields.
COMPUTED: dict[type, dict[str, Callable[[Any], Any]]] = {
    Step: {"n_seeds": lambda s: s.n, "doublings": lambda s: s.doublings, "per_doubling": lambda s: s.per_doubling,
           "per_doubling_ci": lambda s: s.per_doubling_ci},
    FormResult: {"rmse": lambda r: r.rmse, "largest": lambda r: None if r.largest is None else
                 {"label": r.largest.label, "error": r.largest.error}},
    PowerLawFit: {"n_seeds": lambda f: f.n_seeds},
    Convention: {"x_label": lambda c: c.x_label},
    SeedInterval: {"unbounded_below": lambda i: i.lo == -np.inf, "unbounded_above": lambda i: i.hi == np.inf},
    HeldOutError: {"error": lambda h: h.error},
    HeldOut: {"error": lambda h: h.error},
    PairedStats: {"ci": lambda s: [s.ci_low, s.ci_high]},  # BCa
    ArmFacts: {"dropped": lambda f: f.dropped},
    DiD: {"deltas": lambda d: d.deltas, "swaps": lambda d: d.swaps},
}


def as_json(x: Any, **given: Any) -> Any:
    """`x` as analysis.json writes it: a dataclass as a dict of its fields and computed keys (KEYS, COMPUTED; a
    key in `given` takes that value instead, or is added), lists, tuples and arrays as lists, numpy scalars as
    Python numbers, dicts with their values converted."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        keys = KEYS.get(type(x), {})
        out: dict[str, Any] = {}
        for f in dataclasses.fields(x):
            key = keys.get(f.name, f.name)
            if key == "":
                out.update(as_json(getattr(x, f.name)) or {})
            elif isinstance(key, tuple):
                out.update(zip(key, as_json(getattr(x, f.name))))
            elif key is not None:
                out[key] = given.pop(key) if key in given else as_json(getattr(x, f.name))
        for key, compute in COMPUTED.get(type(x), {}).items():
            out[key] = given.pop(key) if key in given else as_json(compute(x))
        return {**out, **given}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [as_json(v) for v in x]
    if isinstance(x, dict):
        return {int(k) if isinstance(k, np.integer) else k: as_json(v) for k, v in x.items()}
    return x.item() if isinstance(x, np.generic) else x
