"""The power plan of `recscale sweep --dry-run --pilot` (analysis/power_plan.py) on a hand-made pilot: seed sd by
hand, MDE and seeds needed against the noncentral t computed here, the normal
closed form as a bound, and the cost of one more seed from the planned trials' estimates."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from analysis.config import analysis_config
from analysis.power_plan import format_power_plan, load_pilot, power_plan
from cli.main import main as cli_main

SEEDS = [0, 1, 2, 3]
FULL = np.array([0.750, 0.752, 0.748, 0.751])
DELTA = {"off": np.array([0.004, 0.006, 0.003, 0.005]), "other": np.array([0.001, -0.002, 0.003, 0.000])}
CONFIG = {"questions": [{"name": "full vs off", "vary": {"model.variant": ["full", "off"]}},
                        {"name": "full vs other", "vary": {"model.variant": ["full", "other"]},
                         "smallest_effect": 0.01}]}


@pytest.fixture
def pilot_dir(tmp_path):
    rows = [{"trial_id": f"{v}-{s}", "arch": "helix", "seed": s, "model.variant": v,
             "test_auc": FULL[i] - (DELTA[v][i] if v != "full" else 0.0)}
            for v in ("full", "off", "other") for i, s in enumerate(SEEDS)]
    pd.DataFrame(rows).to_parquet(tmp_path / "runs.parquet")
    return tmp_path


def _planned(seconds_by_variant: dict[str, float], seeds: int) -> tuple[list[dict], dict[str, float]]:
    trials: list[dict] = [{"trial_id": f"{v}-{s}", "arch": "helix", "seed": s, "model.variant": v}
              for v in seconds_by_variant for s in range(seeds)]
    return trials, {t["trial_id"]: seconds_by_variant[t["model.variant"]] for t in trials}


def _t_power(effect: float, sd: float, n: int, level: float) -> float:
    df, lam = n - 1, effect * np.sqrt(n) / sd
    crit = stats.t.isf(level / 2, df)
    return stats.nct.sf(crit, df, lam) + np.nan_to_num(stats.nct.cdf(-crit, df, lam))  # far tail: ~0, NaN-prone


def test_plan_rows_against_the_noncentral_t_by_hand(pilot_dir):
    pilot = load_pilot(pilot_dir, analysis_config(CONFIG))
    trials, seconds = _planned({"full": 10.0, "off": 20.0, "other": 40.0}, seeds=3)
    rows = power_plan(pilot, 3, trials, seconds)
    assert [r.label for r in rows] == ["full vs off", "full vs other"] and {r.metric for r in rows} == {"auc"}
    for row, variant, target, seed_s in zip(rows, ("off", "other"), (abs(DELTA["off"].mean()), 0.01), (30.0, 50.0)):
        sd = DELTA[variant].std(ddof=1)
        assert row.pilot_seeds == 4 and row.sd == pytest.approx(sd) and row.mean == pytest.approx(DELTA[variant].mean())
        assert row.level == pytest.approx(0.05 / 2)  # Holm's first step over the two comparisons
        assert _t_power(row.mde, sd, 3, row.level) == pytest.approx(0.8, abs=1e-6)  # the MDE at the planned 3 seeds
        assert row.target == pytest.approx(target)  # the question's smallest_effect, else the pilot's |mean delta|
        n = int(row.seeds_needed)  # the smallest seed count whose t-test reaches 80% power
        assert _t_power(row.target, sd, n, row.level) >= 0.8 > _t_power(row.target, sd, n - 1, row.level)
        z = (stats.norm.isf(row.level / 2) + stats.norm.isf(0.2)) * sd / row.target
        assert z**2 <= n <= z**2 + 4  # the normal closed form is a lower bound, close with a few seeds
        assert row.seed_s == pytest.approx(seed_s)  # one seed of both sides' trials


def test_a_parquet_path_reads_the_same_and_an_unplanned_side_has_no_time(pilot_dir):
    pilot = load_pilot(pilot_dir / "runs.parquet", analysis_config(CONFIG))
    trials, seconds = _planned({"full": 10.0, "off": 20.0}, seeds=2)
    off, other = power_plan(pilot, 5, trials, seconds)
    assert off.sd == pytest.approx(DELTA["off"].std(ddof=1))
    assert other.seed_s is None  # a side the planned sweep does not run has no estimate
    text = format_power_plan([off, other], pilot_dir, 5, slots=2, power=0.8)
    hours = off.seeds_needed * 30.0 / 2 / 3600
    assert "| full vs off | auc | 4 |" in text and f"{hours:.2g} h" in text and text.splitlines()[-1].endswith("| ? |")


def test_pilot_without_dry_run_is_refused(pilot_dir, capsys):
    assert cli_main(["sweep", "sweeps/demo.yaml", "--pilot", str(pilot_dir)]) == 2
    assert "--dry-run" in capsys.readouterr().err
