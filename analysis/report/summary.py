"""analysis.json: every number of the report (docs/analysis.md), as `summary_dict` builds it.

A dataclass is written by `as_json`: its fields in order, then its computed keys (COMPUTED), under the keys of
KEYS where they are not the field's name. What is not one dataclass's copy (the headline's mean ± sd pairs, the
words of a verdict, the settings a point was measured at) is built below, beside the entries that hold it."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from harness import metric_registry
from harness.sweep.tuning import SettingChoice

from ..compare.ablations import AblationResult, DeLongSeed, MetricComparison
from ..compare.expectations import ExpectationResult
from ..compare.protocol import METHOD as DID_METHOD
from ..compare.protocol import ArmFacts, DiD
from ..fits.data_scaling import FLOPS_PER_PARAM_TARGET, FORM, HUBER_DELTA, DataScaling, HeldOut
from ..fits.family_comparison import FamilyComparison, PairedContrast
from ..fits.form_check import FormCheck, FormResult, HeldOutError
from ..fits.marginal_returns import Step
from ..fits.powerlaw import PowerLawFit
from ..fits.reference import ReferenceSlope, slope_range
from ..fits.scaling import FamilyScaling
from ..headline import Headline
from ..result import AnalysisResult
from ..run_health import RunHealth
from ..stats.bootstrap import METHOD as BOOTSTRAP_METHOD
from ..stats.delong import DeLongResult
from ..stats.paired import PairedStats
from .scaling import contrast_words, lack_of_fit_words

#: analysis.json's key for a field where it is not the field's name: None leaves the field
#: out, "" writes a nested dataclass's keys into its parent's.
KEYS: dict[type, dict[str, str | None]] = {
    PairedContrast: {"estimate": "", "seeds_for_80": "seeds_for_80_power"},
    Step: {"seeds_for_80": "seeds_for_80_power"},
    FormCheck: {"metric": None},
    FormResult: {"largest": None, "lof_f": None, "lof_df": None, "lof_p": None, "lof_p_holm": None},
    PowerLawFit: {"slope_ci_per_point": "slope_ci_per_point_pseudo_replicated", "dropped": "dropped_points",
                  **dict.fromkeys(("band_x", "band_lo", "band_hi", "obs_x", "obs_y", "obs_seed", "band_method"))},
    ReferenceSlope: {"is_chosen": "chosen", "ci": "slope_ci"},
    FamilyComparison: {"convention": None, "log_linear_diff": "log_linear_slope_diff"},
    MetricComparison: {"metric": None, "stats": ""},
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
    HeldOutError: {"error": lambda h: h.error},
    HeldOut: {"error": lambda h: h.error},
    PairedStats: {"ci": lambda s: [s.ci_low, s.ci_high]},
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


def _family(f: FamilyScaling) -> dict[str, Any]:
    return {
        "family": f.family, "arch": f.arch, "metric": f.metric, "reference": f.reference,
        "reference_value": f.ref_value, "n_seeds": f.n_seeds, **f.convention.record(), "notes": f.notes,
        "points": [{"label": p.label, "setting": p.setting, "flops_per_target": p.flops, "x": p.x, "gain": p.gain,
                    "gain_per_seed": dict(zip(map(int, p.seeds), p.gain_per_seed.tolist())),
                    "value_per_seed": None if p.value_per_seed is None else
                    dict(zip(map(int, p.seeds), p.value_per_seed.tolist())),
                    "n_seeds": p.n_seeds, "oracle_gap_closed": p.oracle_gap_closed} for p in f.points],
        "not_learned": f.not_learned, "marginal_returns": as_json(f.marginal),
        "excluded_sizes": [p.label for p in f.excluded], "helix_ctr": as_json(f.helix),
        "fit": None if f.fit is None else as_json(f.fit, x_axis=f.convention.x_axis, x_unit=f.convention.x_unit),
        "reference_sensitivity": as_json(f.reference_slopes),
        "reference_slope_range": list(slope_range(f.reference_slopes)) if f.reference_slopes else None,
        "forms": None if f.forms is None else as_json(f.forms, forms=[
            as_json(r, lack_of_fit={"F": r.lof_f, "df": list(r.lof_df), "p": r.lof_p, "p_holm": r.lof_p_holm,
                                    "words": lack_of_fit_words(r, f.forms.seed_se)}) for r in f.forms.forms]),
        "compute_for_further_gain": as_json(f.extrapolations),
    }


def _comparison(c: FamilyComparison) -> dict[str, Any]:
    return as_json(c, **c.convention.record(),
                   words=[contrast_words(c.slope_diff, "power-law slope"),
                          contrast_words(c.log_linear_diff, "log-linear slope"), contrast_words(c.diff, "gain at x*")])


def _ablation(r: AblationResult) -> dict[str, Any]:
    return {"comparison": r.paired.comparison, "stratum": r.paired.stratum, "seeds": r.paired.seeds.tolist(),
            **({"error": r.paired.error} if r.paired.error else {}), "metrics": as_json(r.metrics),
            "delong": as_json(r.delong)}


def _headline(h: Headline | None) -> dict[str, Any] | None:
    if h is None:
        return None
    return {"reference": h.reference, "notes": h.notes, "rows": [
        {"label": r.label, "setting": r.setting, "n_seeds": r.n_seeds, "auc_mean": r.auc[0], "auc_sd": r.auc[1],
         "logloss_mean": r.logloss[0], "logloss_sd": r.logloss[1], "flops_per_target": r.flops_per_target,
         "params_non_embedding": r.params_non_embedding, "oracle_auc": r.oracle_auc,
         "share_oracle_gap": r.share_oracle_gap, "is_reference": r.is_reference,
         **({"health": r.health} if h.has_health else {})} for r in h.rows]}


def _protocol(res: AnalysisResult) -> dict[str, Any]:
    """The protocol section's keys, only for a sweep that varies a data setting (other summaries unchanged)."""
    if not res.arm_facts and res.ranks is None:
        return {}
    rc = res.ranks
    ranks = None
    if rc is not None:
        higher = metric_registry.get(rc.metric).higher_is_better
        ranks = {"metric": rc.metric, "arms": rc.arms, "method": DID_METHOD, "notes": rc.notes,
                 "order": {a: [{"model": m, "mean": float(rc.means.at[m, a]), "n_seeds": int(rc.n_seeds.at[m, a])}
                               for m in rc.order(a, higher_is_better=higher)] for a in rc.arms},
                 "kendall": [{"a": p, "b": q, "tau": t, "p": pv} for p, q, t, pv in rc.kendall],
                 "did": as_json(rc.did)}
    return {"protocol": {
        "arm_facts": {str(i): {"comparison": res.ablations[i].label, **as_json(f)}
                      for i, f in sorted(res.arm_facts.items())},
        "arm_pairs": None if res.arm_pairs is None else [{"arm_a": f.arm_a, "arm_b": f.arm_b, **as_json(f)}
                                                         for f in res.arm_pairs],
        "ranks": ranks}}


def _expectations(items: list[ExpectationResult]) -> list[dict[str, Any]]:
    return [{"claim": r.expectation.claim, "source": r.expectation.source, "metric": r.expectation.metric,
             "a": r.expectation.a, "b": r.expectation.b, "stratum": r.paired.stratum,
             "seeds": [int(s) for s in r.paired.seeds], "deltas": list(r.stats.deltas),
             "a_better": int(r.a_better.sum()), "mean": r.stats.mean, "std": r.stats.std, "p_t": r.stats.p_t,
             "p_holm": r.p_holm, "outcome": r.outcome, "notes": list(r.paired.notes)} for r in items]


def _data_scaling(ds: DataScaling) -> dict[str, Any]:
    s = ds.surface
    return {
        "form": FORM, "metric": ds.metric, "split": ds.split, "n_points": len(ds.points), "n_seeds": ds.n_seeds,
        "dropped": ds.dropped, "notes": ds.notes,
        "method": {"fit": f"Huber (delta {HUBER_DELTA:g}) on log residuals, grid of starts, L-BFGS-B",
                   "intervals": BOOTSTRAP_METHOD, "compute": f"C = {FLOPS_PER_PARAM_TARGET:g} N D"},
        "surface": None if s is None else {**s.params(), "identified": s.identified},
        "intervals": as_json(ds.intervals), "frontier": ds.frontier.to_dict(orient="records"),
        "measured_compute": list(ds.measured_c), "held_out": as_json(ds.held_out),
        "counted_training_flops_over_6nd": {str(int(n)): r for n, r in ds.counted_ratio.items()},
        "seed_sd_neighbouring_d": ds.seed_sd, "detectable_difference": ds.detectable,
    }


def _health(health: RunHealth) -> dict[str, Any]:
    return {"counts": health.counts, "derived_rows": health.derived_rows, "unchecked": health.unchecked,
            "still_falling_unchecked": dict(health.falling_unchecked),
            "still_falling_checked_here": health.falling_here, "excluded": as_json(health.excluded)}


def summary_dict(res: AnalysisResult) -> dict[str, Any]:
    """JSON-ready summary of every number in the report (analysis.json; `recscale analyze --json`)."""
    ref = res.reference
    return {"sweep": res.results.name, "runs": len(res.results.runs), "baseline": res.results.baseline,
            "reference": None if ref is None else {"selector": ref.selector, "arch": ref.arch,
                                                   "setting": ref.setting, "families": ref.families},
            "headline": _headline(res.headline),
            "scaling": [_family(f) for f in res.scaling], "scaling_notes": res.notes,
            "family_comparisons": [_comparison(c) for c in res.comparisons],
            "ablations": [_ablation(r) for r in res.ablations], **_protocol(res), "plots": res.plots,
            "warnings": res.warnings, **({"run_health": _health(res.health)} if res.health is not None else {}),
            **({"expectations": _expectations(res.expectations)} if res.expectations else {}),
            **({"data_scaling": _data_scaling(res.data_scaling)} if res.data_scaling is not None else {}),
            **({"tuning": as_json(res.tuning)} if res.tuning is not None else {}),
            **({"retried_runs": as_json(res.retried)} if res.retried is not None else {})}
