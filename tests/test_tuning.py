"""The tuning stage without Ray: its section's validation, its grid and trials, and the choice.

- the chosen value is the argmax (or argmin, by the metric's direction) of the mean validation metric over
  tuning seeds among values whose tuning runs were all healthy (among all values when none was), checked
  against a brute-force loop over random hand-built tables with ties, missing values and unhealthy runs;
- the edge warning fires exactly when the choice is the grid's lowest or highest value;
- bad `tuning:` sections are refused at load with the key named;
- the plan: settings x seeds x values tuning trials with the budget applied, and measurement trials
  identical to the same sweep's without `tuning:`;
- a tuned key is no setting column in the analysis; the dry-run estimate counts the tuning trials.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis.collect import config_columns
from analysis.report.overview import tuning_section, tuning_warnings
from core.typed_config import ConfigError
from harness.sweep.dry_run import format_plan
from harness.sweep.plan import plan_sweep, settings, trial_id_for, tuning_plan, tuning_twin
from harness.sweep.schema import log_grid, parse_sweep
from harness.sweep.tuning import choose, choose_values, edge_of, read_choice, write_choice

BASE = {
    "name": "t",
    "data": {"source": "synthetic", "scale": "tiny", "history_len": 8, "n_train": 100, "n_valid": 50, "n_test": 50},
    "model": {"dim": 8},
    "grid": {"arch": ["wukong", "deepfm"], "seed": [0, 1], "model.dim": [4, 8]},
    "tuning": {"param": "train.lr", "grid": {"log_min": 1.0e-4, "log_max": 1.0e-2, "points": 5}, "run_seeds": [0, 1],
               "metric": "valid_auc"},
}


def _sweep(**changes):
    raw = yaml.safe_load(yaml.safe_dump(BASE))
    for key, value in changes.items():
        if value is None:
            raw.pop(key)
        else:
            raw[key] = value
    return parse_sweep(yaml.safe_dump(raw))


def _brute_force(values, seeds, table, higher_is_better, unhealthy=()):
    """The reference choice, written out: the mean over seeds per value (None if any seed is missing), then the
    first value whose mean no other beats, first among values with no unhealthy run, else among all."""
    means = []
    for v in values:
        got = [table.get((v, s)) for s in seeds]
        ok = all(g is not None and math.isfinite(g) for g in got)
        means.append(sum(got) / len(got) if ok else None)
    healthy = [all((v, s) not in unhealthy for s in seeds) for v in values]

    def best_of(allowed):
        best = None
        for i, m in enumerate(means):
            if m is None or not allowed[i]:
                continue
            if best is None or (m > means[best] if higher_is_better else m < means[best]):
                best = i
        return best

    best = best_of(healthy)
    return (best_of([True] * len(values)) if best is None else best), means, healthy


@pytest.mark.parametrize("mode", ["max", "min"])
def test_choice_is_the_best_mean_over_seeds(mode):
    rng = np.random.default_rng(7)
    values = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
    for trial in range(300):
        seeds = list(range(int(rng.integers(1, 4))))
        # few distinct levels, so that ties between values happen often
        table = {(v, s): float(rng.integers(0, 4)) / 4 for v in values for s in seeds}
        for _ in range(int(rng.integers(0, 4))):  # some diverged runs: no finite metric
            v, s = values[int(rng.integers(len(values)))], seeds[int(rng.integers(len(seeds)))]
            table[(v, s)] = [None, float("nan")][int(rng.integers(2))]
        unhealthy = {(values[int(rng.integers(len(values)))], seeds[int(rng.integers(len(seeds)))])
                     for _ in range(int(rng.integers(0, 6)))}  # runs that ended collapsed or undertrained
        expected, expected_means, expected_healthy = _brute_force(values, seeds, table, mode == "max", unhealthy)
        if expected is None:
            with pytest.raises(ValueError):
                choose_values(values, seeds, table, mode, unhealthy)
            continue
        best, means, healthy = choose_values(values, seeds, table, mode, unhealthy)
        assert best == expected, (trial, table, unhealthy)
        assert means == pytest.approx(expected_means)
        assert healthy == expected_healthy


def test_choice_per_setting_from_the_tuning_rows_and_edges():
    """`choose` reads the tuning trials' rows, groups them by setting, and marks edges; a hand-built table where
    each setting's best value is known, one per position of the grid."""
    sweep = _sweep(grid={"arch": ["wukong"], "seed": [0, 1], "model.dim": [2, 4, 8, 16, 32]})
    values = sweep.tuning_values
    assert len(values) == 5
    ids = list(settings(sweep))
    best_at = dict(zip(ids, range(5)))  # setting k peaks at grid value k
    rows = []
    for tp in tuning_plan(sweep):
        i = values.index(tp.value)
        auc = 0.7 - 0.01 * abs(i - best_at[tp.setting]) + 0.001 * tp.seed
        rows.append({"trial_id": trial_id_for(sweep, tp.point), "seed": tp.seed, "train.lr": tp.value,
                     "valid_auc": auc})
    choice = choose(sweep, rows)
    assert [s.setting for s in choice.settings] == ids
    for s in choice.settings:
        assert s.chosen == values[best_at[s.setting]]
        assert s.edge == {0: "low", 4: "high"}.get(best_at[s.setting])
    warned = tuning_warnings(choice)
    assert len(warned) == 2
    assert ids[0] in warned[0] and "lowest" in warned[0] and ids[4] in warned[1] and "highest" in warned[1]
    section = "\n".join(tuning_section(choice))
    assert section.count("lowest value") == 1 and section.count("highest value") == 1
    # LogLoss is minimised: the same table negated chooses the same values
    rows_min = [{**r, "valid_logloss": -r["valid_auc"]} for r in rows]
    sweep_min = _sweep(grid={"arch": ["wukong"], "seed": [0, 1], "model.dim": [2, 4, 8, 16, 32]},
                       tuning={**BASE["tuning"], "metric": "valid_logloss"})
    assert [s.chosen for s in choose(sweep_min, rows_min).settings] == [s.chosen for s in choice.settings]


def test_a_value_with_an_unhealthy_tuning_run_is_not_chosen():
    """The best mean loses to the next best when one of its tuning runs ended undertrained; a setting where every
    value has such a run falls back to the best mean, and the report warns about it."""
    sweep = _sweep(grid={"arch": ["wukong"], "seed": [0, 1], "model.dim": [4, 8]})
    values = sweep.tuning_values
    ids = list(settings(sweep))
    rows = []
    for tp in tuning_plan(sweep):
        i = values.index(tp.value)
        auc = 0.6 + 0.01 * i  # the highest value has the best mean in both settings
        if tp.setting == ids[0]:
            bad = i == len(values) - 1 and tp.seed == 1  # setting 0: only the best value's seed 1 is unhealthy
        else:
            bad = tp.seed == 0  # setting 1: every value has an unhealthy run
        rows.append({"trial_id": trial_id_for(sweep, tp.point), "seed": tp.seed, "train.lr": tp.value,
                     "valid_auc": auc, "health_status": "undertrained" if bad else "ok"})
    first, second = choose(sweep, rows).settings
    assert first.chosen == values[-2] and not first.fallback
    assert first.healthy == [True] * (len(values) - 1) + [False]
    assert second.chosen == values[-1] and second.fallback and second.healthy == [False] * len(values)
    warned = tuning_warnings(choose(sweep, rows))
    assert sum("had a tuning run that was not ok" in w for w in warned) == 1
    assert "(not ok)" in "\n".join(tuning_section(choose(sweep, rows)))


def test_a_value_whose_run_was_only_still_falling_can_be_chosen():
    """Undertrained only because the loss was still falling at the end: the run learned, so its value stays
    choosable; undertrained for its NE as well, it does not."""
    sweep = _sweep(grid={"arch": ["wukong"], "seed": [0, 1], "model.dim": [4]})
    values = sweep.tuning_values
    falling = "still_falling: train/loss falling 3.0% per tenth of the run over steps 70-100 (...)"

    def rows(reasons):
        return [{"trial_id": trial_id_for(sweep, tp.point), "seed": tp.seed, "train.lr": tp.value,
                 "valid_auc": 0.6 + 0.01 * values.index(tp.value),
                 **({"health_status": "undertrained", "health_reasons": reasons}
                    if tp.value == values[-1] and tp.seed == 1 else {"health_status": "ok", "health_reasons": ""})}
                for tp in tuning_plan(sweep)]

    assert choose(sweep, rows(falling)).settings[0].chosen == values[-1]
    assert choose(sweep, rows(f"ne_threshold: valid NE 0.995 >= 0.99; {falling}")).settings[0].chosen == values[-2]


def test_edge_of_fires_only_at_the_ends():
    for n in (3, 4, 7):
        assert [edge_of(i, n) for i in range(n)] == ["low", *[None] * (n - 2), "high"]


def test_tuning_json_round_trip(tmp_path):
    sweep = _sweep()
    rows = [{"trial_id": trial_id_for(sweep, tp.point), "seed": tp.seed, "valid_auc": float(tp.value)}
            for tp in tuning_plan(sweep)]
    choice = choose(sweep, rows)
    write_choice(tmp_path, choice)
    assert read_choice(tmp_path) == choice
    assert not list(tmp_path.glob(".*tmp*"))  # nothing left of the atomic write


def test_log_grid_is_log_spaced_and_rounded():
    assert log_grid(1e-4, 1e-2, 5) == [1e-4, 3.16e-4, 1e-3, 3.16e-3, 1e-2]
    got = np.array(log_grid(2e-5, 5e-3, 7))
    exact = np.logspace(np.log10(2e-5), np.log10(5e-3), 7)
    assert np.all(np.abs(got / exact - 1) < 5e-3)  # 3 significant digits
    assert _sweep().tuning_values == [1e-4, 3.16e-4, 1e-3, 3.16e-3, 1e-2]
    listed = _sweep(tuning={**BASE["tuning"], "grid": {"values": [0.01, "1e-3", 1.0e-4]}})
    assert listed.tuning_values == [1e-4, 1e-3, 1e-2]  # sorted; "1e-3" (YAML reads it as text) is a number


@pytest.mark.parametrize("tuning, message", [
    ({"param": "train.batch_size"},
     "tuning.param: unknown value 'train.batch_size'; valid: train.lr, train.weight_decay"),
    ({"grid": {"log_min": 1e-4, "log_max": 1e-2}}, "tuning.grid.points: missing"),
    ({"grid": {"log_min": 0, "log_max": 1e-2, "points": 5}}, "tuning.grid.log_min: must be a finite number > 0"),
    ({"grid": {"log_min": 1e-2, "log_max": 1e-3, "points": 5}}, "tuning.grid.log_max: must be > log_min"),
    ({"grid": {"log_min": 1e-4, "log_max": 1e-2, "points": 2}}, "tuning.grid.points: at least 3 values"),
    ({"grid": {"values": [1e-3, 1e-2]}}, "tuning.grid.values: at least 3 values"),
    ({"grid": {"values": [1e-3, 1e-2, 1e-3]}}, "tuning.grid.values: repeated values"),
    ({"grid": {"values": [1e-3, 1e-2, 1e-1], "points": 3}}, "tuning.grid: give either `values`"),
    ({"grid": {"log_min": 1e-4, "log_max": 1e-2, "points": 5, "step": 2}}, "tuning.grid.step"),
    ({"run_seeds": []}, "tuning.run_seeds: empty"),
    ({"seeds": [0]}, "tuning.seeds: renamed; write tuning.run_seeds"),
    ({"metric": "test_auc"}, "tuning.metric: unknown value 'test_auc'; valid: valid_auc"),
    ({"budget": {"epochs": 0}}, "tuning.budget.epochs: must be >= 1"),
    ({"budget": {"n_train_fraction": 1.5}}, "tuning.budget.n_train_fraction: must be in (0, 1]"),
    ({"trials": 3}, "tuning.trials"),
])
def test_bad_tuning_sections_name_the_key(tuning, message):
    with pytest.raises(ConfigError) as info:
        _sweep(tuning={**BASE["tuning"], **tuning})
    assert message in str(info.value)


def test_tuning_against_the_rest_of_the_sweep():
    with pytest.raises(ConfigError, match=r"tuning.param: train.lr is also set by grid.train.lr"):
        _sweep(grid={**BASE["grid"], "train.lr": [1e-3, 1e-2]})
    with pytest.raises(ConfigError, match=r"tuning: a sweep has either `tuning:`"):
        _sweep(search={"space": {"model.dim": {"choice": [4, 8]}}})
    with pytest.raises(ConfigError, match=r"tuning.budget.n_train_fraction: needs a count .* found None"):
        raw = {**BASE["data"]}
        raw.pop("n_train")
        _sweep(data=raw, tuning={**BASE["tuning"], "budget": {"n_train_fraction": 0.5}})
    with pytest.raises(ConfigError, match=r"tuning.grid.values: every value must be a finite number > 0"):
        _sweep(tuning={**BASE["tuning"], "param": "train.weight_decay", "grid": {"values": [-1e-3, 1e-3, 1e-2]}})


def test_plan_has_tuning_trials_and_unchanged_measurement_trials():
    sweep = _sweep(tuning={**BASE["tuning"], "budget": {"epochs": 2, "n_train_fraction": 0.5}})
    plan = plan_sweep(sweep)
    plain = plan_sweep(_sweep(tuning=None))
    assert [(t.trial_id, t.record(), dict(t.train), dict(t.model)) for t in plan.trials] == \
        [(t.trial_id, t.record(), dict(t.train), dict(t.model)) for t in plain.trials]
    assert plain.tuning_trials == [] and "tuned" not in plain.trials[0].record()
    # 2 archs x 2 widths = 4 settings, x 2 tuning seeds x 5 values
    assert len(plan.tuning_trials) == 4 * 2 * 5 == len({t.trial_id for t in plan.tuning_trials})
    assert {(t.arch, t.seed, t.model["dim"], t.train["lr"]) for t in plan.tuning_trials} == {
        (a, s, d, v) for a in ("wukong", "deepfm") for s in (0, 1) for d in (4, 8) for v in sweep.tuning_values}
    assert all(t.stage == "tuning" and t.train["epochs"] == 2 and t.dataset.prepare["n_train"] == 50
               for t in plan.tuning_trials)
    assert plan.tuning_trials[0].trial_id == "wukong-seed0-dim4-lr0.0001-epochs2-n_train50"
    assert len(plan.datasets) == 2  # the tuning trials' half-size training set is prepared too
    assert "tuning first: 40 trials = 4 setting(s) x 5 values" in format_plan(plan, {}, Path("r"))


def test_grid_runs_of_tuning_seeds_have_a_tuning_twin():
    """A grid trial whose seed is a tuning seed, in a sweep without a tuning budget, is the tuning trial of its
    setting and seed at the chosen value: the same run (the trainable copies it instead of training it again)."""
    sweep = _sweep()  # tuning seeds [0, 1] = the grid's seeds
    plan = plan_sweep(sweep)
    tuning_ids = {t.trial_id for t in plan.tuning_trials}
    for trial in plan.trials:
        for value in sweep.tuning_values:
            twin = tuning_twin(sweep, trial, value)
            assert twin is not None and twin.trial_id in tuning_ids
            assert twin.trial_id == f"{trial.arch}-seed{trial.seed}-dim{trial.model['dim']}-lr{value:g}"
            assert (twin.arch, twin.seed, dict(twin.model), twin.dataset) == (
                trial.arch, trial.seed, dict(trial.model), trial.dataset)
            assert dict(twin.train) == {**trial.train, "lr": value}
    assert "(8 grid runs of tuning seeds copy the tuning run at that value" in format_plan(plan, {}, Path("r"))
    one_seed = _sweep(tuning={**BASE["tuning"], "run_seeds": [1]})  # seed 0 was not tuned: trained
    assert [tuning_twin(one_seed, t, 1e-3) is not None for t in plan_sweep(one_seed).trials] == [
        t.seed == 1 for t in plan_sweep(one_seed).trials]
    for budget in ({"epochs": 2}, {"n_train_fraction": 0.5}):  # shorter tuning runs are other runs
        shorter = _sweep(tuning={**BASE["tuning"], "budget": budget})
        assert not any(tuning_twin(shorter, t, v) for t in plan_sweep(shorter).trials for v in shorter.tuning_values)
        assert "copy the tuning run" not in format_plan(plan_sweep(shorter), {}, Path("r"))


def test_tuned_key_is_no_setting_column():
    runs = pd.DataFrame({"arch": ["a", "b"], "seed": [0, 0], "model.dim": [4, 4], "train.lr": [1e-3, 1e-2],
                         "tuned": ["train.lr", "train.lr"]})
    assert config_columns(runs) == ["arch", "model.dim"]
    assert config_columns(runs.drop(columns="tuned")) == ["arch", "model.dim", "train.lr"]


def test_estimate_counts_tuning_trials_before_the_grid():
    from harness.sweep.dry_run import _makespan, estimate_sweep

    sweep = _sweep(tuning={**BASE["tuning"], "grid": {"values": [1e-4, 1e-3, 1e-2]}, "run_seeds": [0]})
    plan = plan_sweep(sweep)
    est = estimate_sweep(plan, num_cpus=2)
    assert set(est.trials) == {t.trial_id for t in [*plan.tuning_trials, *plan.trials]}
    for t in plan.trials:  # the grid runs of tuning seed 0 are copies of tuning runs: no training, no evaluation
        assert (est.trials[t.trial_id].train_s == 0 == est.trials[t.trial_id].eval_s) is (t.seed == 0)
    if est.wall_s is not None:  # the two stages one after the other
        stage = [[est.trials[t.trial_id].total_s for t in s] for s in (plan.tuning_trials, plan.trials)]
        assert est.wall_s > _makespan(stage[0], est.slots) + _makespan(stage[1], est.slots) - 1e-9
