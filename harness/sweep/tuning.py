"""The tuning stage's choice: per setting, the value of the tuned key with the best mean validation metric, and
tuning.json, written once the whole stage finished (the rules, ties, unhealthy runs, `fallback`, `edge`, what
tuning.json holds and how `--resume` reads it back: docs/sweeps.md, "Tuning").
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np

from core.atomic_write import write_text
from core.errors import RecscaleError
from core.results_layout import TUNING_FILE
from harness import run_health as H
from harness.run_folder import json_safe

from .plan import setting_id, settings, trial_id_for, tuning_plan
from .schema import Sweep, TuningSection, metric_spec


class TuningError(RecscaleError):
    """The tuning stage's results cannot give a choice (a setting with no usable value, a damaged tuning.json)."""


@dataclass(frozen=True)
class SettingChoice:
    """One setting's tuning result."""

    setting: str  # plan.setting_id
    point: dict[str, Any]  # the grid point without its seed
    chosen: float
    edge: str | None  # "low", "high" or None
    means: list[float | None]  # per grid value (ascending); None where some seed gave no finite metric
    rows: list[dict[str, Any]]  # {"value", "seed", "metric", "health"} per tuning trial
    healthy: list[bool] = field(default_factory=list)  # per grid value: every tuning run learned (or unrecorded)
    fallback: bool = False  # no healthy value had a finite mean; the best finite mean was chosen anyway


@dataclass(frozen=True)
class TuningChoice:
    """The whole stage's choice, as stored in tuning.json."""

    param: str
    metric: str
    mode: str  # "max" or "min"
    grid: list[float]
    seeds: list[int]
    settings: list[SettingChoice] = field(default_factory=list)

    def fixed_for(self, sweep: Sweep, point: Mapping[str, Any]) -> dict[str, Any]:
        """The chosen `{param: value}` of the setting of grid point `point`."""
        sid = setting_id(sweep, point)
        for s in self.settings:
            if s.setting == sid:
                return {self.param: s.chosen}
        raise TuningError(f"{TUNING_FILE}: no choice for setting {sid!r}")


def choose_values(values: Sequence[float], seeds: Sequence[int], table: Mapping[tuple[float, int], float | None],
                  mode: str, unhealthy: Set[tuple[float, int]] = frozenset(),
                  ) -> tuple[int, list[float | None], list[bool]]:
    """(index of the chosen value, mean metric per value, whether every seed's run of the value was healthy) from
    `table`: (value, seed) -> metric (None or NaN: no finite metric), and `unhealthy`: the (value, seed) runs that did
    not learn. The best finite mean among healthy values wins; where no healthy value has a finite mean, the best finite
    mean among all (the caller marks that choice). Raises ValueError when no value has a finite mean."""
    grid = np.array([[np.nan if (m := table.get((v, s))) is None else float(m) for s in seeds] for v in values])
    means = grid.mean(axis=1)  # NaN where any seed is missing or non-finite
    finite = np.isfinite(means)
    if not finite.any():
        raise ValueError("no grid value has a finite metric in every tuning seed")
    healthy = np.array([all((v, s) not in unhealthy for s in seeds) for v in values])
    eligible = finite & healthy if (finite & healthy).any() else finite
    score = np.where(eligible, means if mode == "max" else -means, -np.inf)
    best = int(np.argmax(score))  # the first (smallest) value among equal bests
    return best, [float(m) if math.isfinite(m) else None for m in means], [bool(h) for h in healthy]


def edge_of(index: int, n_values: int) -> str | None:
    """'low' / 'high' when `index` is the grid's first / last value, else None."""
    return "low" if index == 0 else "high" if index == n_values - 1 else None


def choose(sweep: Sweep, rows: Sequence[Mapping[str, Any]]) -> TuningChoice:
    """The choice per setting from the finished tuning trials' runs.parquet rows (`collect.finished_rows` of the
    tuning folder: `trial_id`, `seed`, the tuned key's `train.<field>` column and the metric)."""
    t = cast(TuningSection, sweep.config.tuning)  # only a sweep with a tuning section has tuning trials
    mode = metric_spec(t).mode
    values, seeds = list(sweep.tuning_values), list(t.run_seeds)
    where = {trial_id_for(sweep, tp.point): (tp.setting, tp.value, tp.seed) for tp in tuning_plan(sweep)}
    tables: dict[str, dict[tuple[float, int], float | None]] = {}
    health: dict[str, dict[tuple[float, int], str | None]] = {}
    failed: dict[str, set[tuple[float, int]]] = {}  # runs that did not learn (`run_health.learned`)
    for row in rows:
        if row["trial_id"] in where:
            sid, value, seed = where[row["trial_id"]]
            metric = row.get(t.metric)
            tables.setdefault(sid, {})[(value, seed)] = None if metric is None or not math.isfinite(metric) else metric
            status = row.get(H.STATUS_KEY)
            health.setdefault(sid, {})[(value, seed)] = status if isinstance(status, str) else None
            reasons = row.get(H.REASONS_KEY)
            if isinstance(status, str) and not H.learned(status, reasons if isinstance(reasons, str) else ""):
                failed.setdefault(sid, set()).add((value, seed))
    out = []
    for sid, point in settings(sweep).items():
        table, status = tables.get(sid, {}), health.get(sid, {})
        try:
            best, means, healthy = choose_values(values, seeds, table, mode, failed.get(sid, set()))
        except ValueError:
            raise TuningError(f"tuning: setting {sid}: no value of {t.param} has a finite {t.metric} in every tuning "
                              f"seed ({len(table)} of {len(values) * len(seeds)} trials reported one)") from None
        out.append(SettingChoice(
            setting=sid, point=point, chosen=values[best], edge=edge_of(best, len(values)), means=means,
            rows=[{"value": v, "seed": s, "metric": table.get((v, s)), "health": status.get((v, s))}
                  for v in values for s in seeds],
            healthy=healthy, fallback=not any(h and m is not None for h, m in zip(healthy, means, strict=True))))
    return TuningChoice(param=t.param, metric=t.metric, mode=mode, grid=values, seeds=seeds, settings=out)


def write_choice(sweep_dir: Path, choice: TuningChoice) -> None:
    """Write tuning.json atomically."""
    write_text(Path(sweep_dir) / TUNING_FILE, json.dumps(json_safe(asdict(choice)), indent=1) + "\n")


def read_choice(sweep_dir: Path) -> TuningChoice | None:
    """tuning.json read back (None when the stage has not finished); a damaged file is a TuningError."""
    path = Path(sweep_dir) / TUNING_FILE
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
        return TuningChoice(**{**doc, "settings": [SettingChoice(**s) for s in doc["settings"]]})
    except (ValueError, TypeError, KeyError) as e:
        raise TuningError(f"{path}: not a tuning result ({e}); remove it to run the tuning stage's choice again "
                          "(its finished trials are kept)") from None


def check_matches(choice: TuningChoice, sweep: Sweep) -> None:
    """Refuse a stored choice made for another tuning section or other settings."""
    t = cast(TuningSection, sweep.config.tuning)  # only a sweep with a tuning section has a stored choice
    same = (choice.param == t.param and choice.metric == t.metric and choice.grid == list(sweep.tuning_values)
            and choice.seeds == list(t.run_seeds) and [s.setting for s in choice.settings] == list(settings(sweep)))
    if not same:
        raise TuningError(f"{TUNING_FILE}: made for another tuning section or grid than {sweep.name!r}'s; remove it "
                          "(or the sweep folder) to tune again")
