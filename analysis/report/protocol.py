"""The report's protocol answer and tables (shown when a sweep varies a data setting): target sharing, history
membership, rank orders per data arm and the difference-in-differences between arms."""
from __future__ import annotations

from typing import Any

import numpy as np

from core.results_layout import DATASETS_FILE, RUNS_FILE
from harness import runs_columns as C

from ..columns import show
from ..compare.protocol import METHOD as DID_METHOD
from ..compare.protocol import ArmFacts, RankComparison
from ..compare.questions import AblationResult
from ..result import AnalysisResult
from ..stats.paired import DECIDED
from .section import METHOD_POINTER, Section, as_json, markdown_table, metric_label, num, table_block


def _d(x: float, fmt: str = "+.4f") -> str:
    return num(x, fmt)


def _stratum(r: AblationResult) -> str:
    return ", ".join(show(v) if k == C.ARCH else f"{k}={show(v)}" for k, v in r.paired.stratum.items()) or "all"


def _delong(r: AblationResult, alpha: float) -> str:
    done = [d.result for d in r.delong if d.result is not None]
    if not done:
        return "DeLong not run"
    return f"DeLong p < {alpha:g} in {sum(x.p_value < alpha for x in done)}/{len(done)} seeds"


def _targets_line(res: AnalysisResult, split: str) -> str:
    """From the compared data arms' facts, else from those of every two data arms (the rank order's)."""
    facts = list(res.arm_facts.values()) or res.arm_pairs
    if facts is None:
        return f"- **Targets:** unknown (no {DATASETS_FILE}): the arms may score different {split} targets."
    if not facts:
        return (f"- **Targets:** unknown ({DATASETS_FILE} holds no {split} facts for the compared data arms): the "
                f"arms may score different {split} targets.")
    seen = {frozenset((f.dataset_a, f.dataset_b)): f for f in facts}
    if all(f.same_targets for f in seen.values()):
        n = sorted({f.shared for f in seen.values()})
        return (f"- **Targets:** every compared pair of data arms scores the same {'/'.join(f'{x:,}' for x in n)} "
                f"{split} targets (identical event_ids); no target was dropped.")
    parts = [f"{f.arm_a} vs {f.arm_b}: {f.shared:,} shared, {f.dropped:,} held by one arm only"
             for f in seen.values() if not f.same_targets]
    return (f"- **Targets:** the arms do not all score the same {split} targets ({'; '.join(parts)}); those "
            "comparisons use the shared targets.")


def _groups(res: AnalysisResult) -> dict[str, list[tuple[int, AblationResult]]]:
    """Comparisons that vary a data protocol setting (none where data.n_train is a compute axis)."""
    out: dict[str, list[tuple[int, AblationResult]]] = {}
    for i, r in enumerate(res.ablations if res.data_scaling is None else []):
        if r.paired.varies_data and len(r.paired.seeds):
            out.setdefault(r.paired.comparison, []).append((i, r))
    return out


def _membership(f: ArmFacts | None) -> str:
    if f is None:
        return "history change unknown"
    return (f"{f.share_history_differs:.2%} of {f.split} targets have a different history (mean valid length "
            f"{f.mean_valid_length_a:.2f} vs {f.mean_valid_length_b:.2f}, {f.mean_common_events:.1f} events in common)")


def _comparison_line(res: AnalysisResult, name: str, items: list[tuple[int, AblationResult]]) -> str:
    facts = [res.arm_facts.get(i) for i, _ in items]
    first = next((f for f in facts if f is not None), None)
    same = first is None or all(f is None or (f.dataset_a, f.dataset_b) == (first.dataset_a, first.dataset_b)
                                for f in facts)
    per = [f"{_stratum(r)} {_d(mc.stats.mean)} ({r.answer}; {_delong(r, res.results.config.alpha)})"
           for _, r in items if (mc := r.metrics.get("auc")) is not None]
    hits = sum(1 for _, r in items if "auc" in r.metrics and r.metrics["auc"].verdict == DECIDED)
    head = _membership(first) + ". " if same else ""
    return (f"- **{name}:** {head}{res.results.config.split} AUC difference A − B: {'; '.join(per)}. "
            f"{hits} of {len(items)} decided across seeds after Holm.")


def _noise_line(res: AnalysisResult) -> str | None:
    """DeLong (test-set noise of one trained pair) against the spread of the per-seed deltas (seed noise)."""
    alpha = res.results.config.alpha
    items = [r for group in _groups(res).values() for _, r in group]
    done = [(r, x) for r in items if (x := [d.result for d in r.delong if d.result is not None])]
    if not done:
        return None
    n_all = sum(len(x) for _, x in done)
    hits = sum(sum(d.p_value < alpha for d in x) for _, x in done)
    flips = sum(1 for _, x in done if len({np.sign(d.delta) for d in x if d.p_value < alpha}) > 1)
    se = float(np.median([d.se_delta for _, x in done for d in x]))
    sds = [r.metrics["auc"].stats.std for r,
           _ in done if "auc" in r.metrics and np.isfinite(r.metrics["auc"].stats.std)]
    sd = f"median sd of the per-seed AUC Δ over seeds {np.median(sds):.4f}" if sds else "no seed spread"
    return (f"- **Test-set vs seed noise:** DeLong finds p < {alpha:g} in {hits} of {n_all} (comparison, seed) "
            f"pairs; in {flips} of {len(done)} comparisons the significant seeds disagree in sign. Median DeLong "
            f"standard error of one seed's AUC Δ {se:.4f}, {sd}: a single trained pair's AUC gap on these targets "
            "is " + ("far " if sds and np.median(sds) > 3 * se else "") + "less certain than DeLong says; the "
            "seed-level verdicts are the ones to read.")


def _ranking_lines(rc: RankComparison) -> list[str]:
    orders = "; ".join(f"{a}: " + " > ".join(rc.order(a)) for a in rc.arms)
    taus = ", ".join(f"{p} vs {q} {tau:+.2f}" for p, q, tau, _ in rc.kendall)
    swaps = [d for d in rc.did if d.swaps]
    swap_text = ("no pair of models changes order between arms" if not swaps else
                 f"{len(swaps)} (pair, arm pair) order swaps, "
                 f"{sum(d.verdict == DECIDED for d in swaps)} of them decided")
    largest = max(rc.did, key=lambda d: abs(d.mean) if np.isfinite(d.mean) else -1.0, default=None)
    big = ("" if largest is None else f" Largest |DiD|: ({largest.x} − {largest.y}) under {largest.arm_p} minus under "
           f"{largest.arm_q} = {_d(largest.mean)} [{_d(largest.ci[0])}, {_d(largest.ci[1])}], Holm p "
           f"{_d(largest.p_holm, '.3g')}.")
    return [f"- **Ranking** (seed-mean {metric_label(rc.metric)}, best first): {orders}. "
            f"Kendall τ between arms: {taus}.",
            f"- **Between-arm differences of model pairs** (difference-in-differences over seeds): {swap_text}; "
            f"{sum(d.verdict == DECIDED for d in rc.did)} of {len(rc.did)} DiDs decided after Holm.{big}"]


def _so_line(res: AnalysisResult) -> str:
    changes, stays = [], []
    for name, items in _groups(res).items():
        sig = [_stratum(r) for _, r in items if "auc" in r.metrics and r.metrics["auc"].verdict == DECIDED]
        rest = [_stratum(r) for _, r in items if "auc" in r.metrics and r.metrics["auc"].verdict != DECIDED]
        if sig:
            changes.append(f"{name}: the AUC of {', '.join(sig)}")
        if rest:
            stays.append(f"{name}: the AUC of {', '.join(rest)} (not decided at these seeds)")
    rc = res.ranks
    if rc is not None:
        sig_did = [d for d in rc.did if d.verdict == DECIDED]
        changes += [f"the gap {d.x} − {d.y} ({_d(float(d.gap_p.mean()))} under {d.arm_p}, "
                    f"{_d(float(d.gap_q.mean()))} under {d.arm_q}; DiD {_d(d.mean)} [{_d(d.ci[0])}, {_d(d.ci[1])}])"
                    for d in sig_did]
        if not sig_did:
            stays.append("the comparison of every model pair (no DiD decided"
                         + (", although some orders swap)" if any(d.swaps for d in rc.did) else ")"))
    mdes = [r.metrics["auc"].mde for _, items in _groups(res).items() for _, r in items
            if "auc" in r.metrics and np.isfinite(r.metrics["auc"].mde)]
    power = (f" With these seeds the verdicts' tests detect (power {res.results.config.power:g}) AUC differences of "
             f"{min(mdes):.4f} to {max(mdes):.4f} (MDE per comparison): smaller effects are not ruled out."
             if mdes else "")
    return ("- **So:** changes with the protocol: " + ("; ".join(changes) or "nothing decided")
            + ". Does not change: " + ("; ".join(stays) or "–") + "." + power)


def answer_lines(res: AnalysisResult) -> list[str]:
    """The opening lines: the question, answered with the numbers of the tables below."""
    groups = _groups(res)
    if not groups and res.ranks is None:
        return []
    split = res.results.config.split
    out = ["## Does the data protocol change the conclusions?", "",
           f"Answer generated from the tables below ({split} split, {res.results.config.alpha:g} level, "
           "Holm-adjusted):", "", _targets_line(res, split)]
    out += [_comparison_line(res, name, items) for name, items in groups.items()]
    noise = _noise_line(res)
    out += [noise] if noise else []
    if res.ranks is not None:
        out += _ranking_lines(res.ranks)
        if any(not f.same_targets for f in list(res.arm_facts.values()) or res.arm_pairs or []):
            out.append(f"- _The rank orders and DiDs use {RUNS_FILE}'s metrics, i.e. each arm's own targets; "
                       "the arms above do not all share them._")
    out += [_so_line(res), ""]
    return out


def _facts_rows(res: AnalysisResult) -> list[list[str]]:
    rows = []
    shown = {i for items in _groups(res).values() for i, _ in items}
    for i, r in ((i, r) for i, r in enumerate(res.ablations) if i in shown):  # in the order of the comparisons
        f, mc = res.arm_facts.get(i), r.metrics.get("auc")
        facts = ["–"] * 5 if f is None else [
            f"{f.arm_a} / {f.arm_b}", f"{f.shared:,} / {f.dropped:,}", f"{f.share_history_differs:.2%}",
            f"{f.mean_valid_length_a:.2f} / {f.mean_valid_length_b:.2f}", f"{f.mean_common_events:.1f}"]
        auc = ["–"] * 3 if mc is None else [f"{_d(mc.stats.mean)} [{_d(mc.interval[0])}, {_d(mc.interval[1])}]",
                                             _d(mc.p_holm, ".3g"), r.answer]
        seeds = ", ".join(f"{d.seed}: {d.result.delta:+.4f} (p {d.result.p_value:.2g})" for d in r.delong
                          if d.result is not None) or "–"
        rows.append([r.label, *facts, *auc, _delong(r, res.results.config.alpha), seeds])
    return rows


def _rank_rows(rc: RankComparison) -> list[list[str]]:
    orders = {a: rc.order(a) for a in rc.arms}
    rows = []
    for k in range(len(rc.models)):
        row = [str(k + 1)]
        for a in rc.arms:
            m = orders[a][k] if k < len(orders[a]) else None
            row.append("–" if m is None or not np.isfinite(rc.means.at[m, a]) else
                       f"{m} {rc.means.at[m, a]:.4f} ({int(rc.n_seeds.at[m, a])})")
        rows.append(row)
    return rows


def _did_rows(rc: RankComparison) -> list[list[str]]:
    return [[f"{d.x} − {d.y}", f"{d.arm_p} vs {d.arm_q}", _d(float(d.gap_p.mean())), _d(float(d.gap_q.mean())),
             f"{_d(d.mean)} [{_d(d.ci[0])}, {_d(d.ci[1])}]", str(d.n), _d(d.p_value, ".3g"), _d(d.p_holm, ".3g"),
             d.verdict or "not testable", "swaps" if d.swaps else "same"] for d in rc.did]


def protocol_section(res: AnalysisResult) -> list[str]:
    """Tables behind the answer (empty when the sweep varies no data setting)."""
    split = res.results.config.split
    out = table_block("## Data comparisons: targets, history membership and AUC",
                      f"Per comparison stratum: target sharing and history membership (from {DATASETS_FILE}), the "
                      f"seed-level {split} AUC Δ = A − B and DeLong per seed ({METHOD_POINTER}, *Data protocols*).",
                      ["comparison", "arms A / B", "shared / dropped targets", "history differs",
                       "mean valid length A / B", "events in common", "AUC Δ [verdict interval]", "p Holm", "answer",
                       "DeLong", "per seed: Δ (p)"], _facts_rows(res))
    rc = res.ranks
    if rc is not None:
        label = metric_label(rc.metric)
        out += ["## Rank order of the models per data arm", "",
                f"Seed-mean {split} {label} per arm, best first (seeds in parentheses). Kendall τ of the seed means "
                "between arms: " + ", ".join(f"{p} vs {q} {t:+.2f} (p {pv:.2g})" for p, q, t, pv in rc.kendall) + ".",
                "", *markdown_table(["rank", *rc.arms], _rank_rows(rc)), "",
                "### Between-arm difference of each model pair (difference-in-differences)", "",
                f"DiD = (X − Y) under arm P minus (X − Y) under arm Q, per seed; {DID_METHOD}.", "",
                *markdown_table(["X − Y", "P vs Q", "gap under P", "gap under Q", "DiD [95% t CI]", "seeds", "p",
                                 "p Holm", "verdict", "order"], _did_rows(rc)), ""]
        out += [f"_{n}_" for n in rc.notes] + ([""] if rc.notes else [])
    return out


def _protocol_json(res: AnalysisResult) -> dict[str, Any]:
    """The protocol section's keys, only for a sweep that varies a data setting (other summaries unchanged)."""
    if not res.arm_facts and res.ranks is None:
        return {}
    rc = res.ranks
    ranks = None if rc is None else {
        "metric": rc.metric, "arms": rc.arms, "method": DID_METHOD, "notes": rc.notes,
        "order": {a: [{"model": m, "mean": float(rc.means.at[m, a]), "n_seeds": int(rc.n_seeds.at[m, a])}
                      for m in rc.order(a)] for a in rc.arms},
        "kendall": [{"a": p, "b": q, "tau": t, "p": pv} for p, q, t, pv in rc.kendall], "did": as_json(rc.did)}
    return {"protocol": {
        "arm_facts": {str(i): {"comparison": res.ablations[i].label, **as_json(f)}
                      for i, f in sorted(res.arm_facts.items())},
        "arm_pairs": None if res.arm_pairs is None else [{"arm_a": f.arm_a, "arm_b": f.arm_b, **as_json(f)}
                                                         for f in res.arm_pairs],
        "ranks": ranks}}


#: The answer opens the report (after its title); the tables behind it follow the comparisons.
ANSWER = Section("protocol answer", answer_lines)
PROTOCOL = Section("protocol", protocol_section, _protocol_json)
