"""Evidence beside each comparison that varies a data setting: do the two arms score the same targets, and
how much did their histories actually change?

Read from the sweep folder's `datasets.json` (written by `recscale sweep` from the prepared artifacts;
`harness.sweep.dataset_facts`), for the analysed split: targets of each arm, targets both share (same
event_id) and the ones dropped by one side, the share of shared targets whose history membership differs,
the mean valid history length of each arm and the mean number of history events both hold. An AUC effect is
read against these: a delay that changes 17% of histories and one that changes all of them are different
interventions.

When the arms do not share every target and per-target scores are available, the seed-level AUC statistics
of that comparison are recomputed on the shared targets only (the per-seed AUCs DeLong computes on them), so
the comparison is not confounded by a different test set.

The same facts for every two data arms of the sweep (`arm_pairs`; the rank order compares each arm with every
other) give the report's target line when no comparison varies a data setting.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.results_layout import DATASETS_FILE
from harness import runs_columns as C
from protocols.errors import DataValidationError

from .ablations import AblationResult
from .collect import SweepResults
from .data_settings import arm_columns, arm_label
from .stats.paired import holm, paired_stats, verdict


@dataclass
class ArmFacts:
    """Target sharing and history membership of the two datasets of one data comparison stratum."""

    dataset_a: str
    dataset_b: str
    arm_a: str  # the arm's name (data.name when the sweep names its data bundles, else the dataset id)
    arm_b: str
    split: str
    targets_a: int
    targets_b: int
    shared: int
    share_history_differs: float
    targets_history_differs: int
    mean_valid_length_a: float
    mean_valid_length_b: float
    mean_common_events: float
    notes: list[str] = field(default_factory=list)

    @property
    def dropped(self) -> int:
        return self.targets_a + self.targets_b - 2 * self.shared

    @property
    def same_targets(self) -> bool:
        return self.dropped == 0


def read_facts(results: SweepResults) -> dict[str, Any] | None:
    path = results.root / DATASETS_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataValidationError(str(path), "(file)", f"not valid JSON: {e}") from None
    for key in ("datasets", "pairs"):
        if key not in doc:
            raise DataValidationError(str(path), key, "required key missing")
    return doc


def _pair(doc: dict[str, Any], a: str, b: str, split: str) -> dict[str, Any] | None:
    for p in doc["pairs"]:
        if {p["a"], p["b"]} == {a, b} and split in p["splits"]:
            s = dict(p["splits"][split])
            if p["a"] != a:  # stored the other way round: swap the per-side fields
                for x, y in (("targets_a", "targets_b"), ("only_a", "only_b"),
                             ("mean_valid_length_a", "mean_valid_length_b")):
                    s[x], s[y] = s[y], s[x]
            return s
    return None


def arm_facts(results: SweepResults, doc: dict[str, Any] | None, r: AblationResult) -> ArmFacts | None:
    """Facts of the datasets compared by `r` (None when `r` varies no data setting or nothing is known)."""
    runs = results.runs
    if not r.paired.varies_data or doc is None or C.DATASET_ID not in runs.columns or not len(r.paired.seeds):
        return None
    pairs = sorted({(str(runs.at[ra, C.DATASET_ID]), str(runs.at[rb, C.DATASET_ID]))
                    for ra, rb in zip(r.paired.rows_a, r.paired.rows_b)})
    a, b = pairs[0]
    names = {str(runs.at[x, C.DATASET_ID]): str(runs.at[x, C.DATA_NAME]) if C.DATA_NAME in runs.columns
             and isinstance(runs.at[x, C.DATA_NAME], str) else str(runs.at[x, C.DATASET_ID])
             for x in (*r.paired.rows_a, *r.paired.rows_b)}
    notes = [f"{len(pairs)} dataset pairs among the paired runs; facts of the first"] if len(pairs) > 1 else []
    if a == b:
        return None
    s = _pair(doc, a, b, results.config.split)
    if s is None:
        return None
    return _facts(a, b, names[a], names[b], results.config.split, s, notes)


def _facts(a: str, b: str, name_a: str, name_b: str, split: str, s: dict[str, Any], notes: list[str]) -> ArmFacts:
    return ArmFacts(a, b, name_a, name_b, split, int(s["targets_a"]), int(s["targets_b"]), int(s["shared_targets"]),
                    float(s["share_history_differs"]), int(s["targets_history_differs"]),
                    float(s["mean_valid_length_a"]), float(s["mean_valid_length_b"]),
                    float(s["mean_common_events"]), notes)


def arm_pairs(results: SweepResults, doc: dict[str, Any] | None) -> tuple[list[ArmFacts] | None, list[str]]:
    """Facts of every two datasets the analysed runs use (the data arms the rank order compares), in the
    analysed split, each named by its arm label; and warnings. None without datasets.json."""
    runs = results.runs
    if doc is None:
        return None, []
    cols = arm_columns(runs, results.config_columns)
    if not cols or C.DATASET_ID not in runs.columns:
        return [], []
    names = {str(row[C.DATASET_ID]): arm_label(row, cols) for _, row in runs.drop_duplicates(C.DATASET_ID).iterrows()}
    split = results.config.split
    out, missing = [], []
    for a, b in itertools.combinations(sorted(names), 2):
        s = _pair(doc, a, b, split)
        if s is None:
            missing.append(f"{names[a]} / {names[b]}")
        else:
            out.append(_facts(a, b, names[a], names[b], split, s, []))
    warnings = [f"{DATASETS_FILE} holds no {split} facts for {len(missing)} pair(s) of the analysed datasets "
                f"({'; '.join(missing)}): their target sharing is unknown"] if missing else []
    return out, warnings


def protocol_evidence(results: SweepResults, ablations: list[AblationResult]
                      ) -> tuple[dict[int, ArmFacts], list[ArmFacts] | None, list[str]]:
    """Facts per ablation index, facts of every two data arms (`arm_pairs`), and warnings. Where the arms of a
    comparison do not share every target, replaces the AUC statistics of that comparison by ones on the shared
    targets (from the per-seed DeLong AUCs)."""
    doc = read_facts(results)
    data = [i for i, r in enumerate(ablations) if r.paired.varies_data and len(r.paired.seeds)]
    pairs, warnings = arm_pairs(results, doc)
    if data and doc is None:
        warnings.append(f"no {DATASETS_FILE} in the results folder (written by `recscale sweep`): the target "
                        "sharing and history membership of the compared data arms are unknown")
    facts: dict[int, ArmFacts] = {}
    for i in data:
        f = arm_facts(results, doc, ablations[i])
        if f is not None:
            facts[i] = f
    recomputed = False
    cfg = results.config
    for i, f in facts.items():
        r = ablations[i]
        if f.same_targets or "auc" not in r.metrics:
            continue
        done = [d.result for d in r.delong if d.result is not None]
        if len(done) != len(r.delong) or not done:
            warnings.append(f"{r.label}: the arms share {f.shared} of {f.targets_a} / {f.targets_b} {f.split} "
                            "targets and per-target scores are missing: its seed-level AUC compares different "
                            "target sets")
            continue
        a = np.array([d.auc_a for d in done])
        b = np.array([d.auc_b for d in done])
        st = paired_stats(a, b, alpha=cfg.alpha, power=cfg.power, n_resamples=cfg.n_resamples, seed=cfg.seed)
        st = type(st)(**{**st.__dict__, "notes": (*st.notes, f"AUC on the {f.shared} shared {f.split} targets "
                                                               f"({f.dropped} held by one arm only left out)")})
        r.metrics["auc"].stats = st
        recomputed = True
    if recomputed:  # Holm again over the AUC p-values, as ablation_analysis does
        ps = holm([r.metrics["auc"].stats.p_t for r in ablations if "auc" in r.metrics])
        for r, p in zip([r for r in ablations if "auc" in r.metrics], ps):
            r.metrics["auc"].p_holm, r.metrics["auc"].verdict = float(p), verdict(p, cfg.alpha)
    return facts, pairs, warnings
