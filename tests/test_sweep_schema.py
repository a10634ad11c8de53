"""Sweep YAML validation: bad files get errors naming the key and listing the valid values; good
files (every sweep under sweeps/) load; the grid plan is the full cartesian product."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from cli.main import main as cli_main
from core.typed_config import ConfigError
from harness.sweep.plan import grid_points, plan_sweep
from harness.sweep.schema import config_fields, load_sweep, parse_sweep

REPO = Path(__file__).resolve().parents[1]

BASE = """
name: t
data: {source: synthetic, scale: tiny, history_len: 8, n_train: 100, n_valid: 50, n_test: 50}
model: {dim: 8}
grid:
  arch: [wukong, whale]
  seed: [0, 1]
"""


def _with(**sections) -> str:
    raw = yaml.safe_load(BASE)
    for key, value in sections.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return yaml.safe_dump(raw)


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_sweep(text)
    return str(info.value)


def test_valid_base_loads_and_plans_full_product():
    sweep = parse_sweep(BASE)
    plan = plan_sweep(sweep)
    expected = set(itertools.product(["wukong", "whale"], [0, 1]))
    assert {(t.arch, t.seed) for t in plan.trials} == expected
    assert len(plan.trials) == 4 and len(plan.datasets) == 1  # one shared dataset for every arm
    whale = next(t for t in plan.trials if t.arch == "whale")
    assert whale.model == {"dim": 8, "history_len": 8}  # model follows the data's history length
    for t in plan.trials:  # every config that has the field gets it (whatever architectures declare)
        assert t.model == {"dim": 8, **({"history_len": 8} if "history_len" in config_fields(t.arch) else {})}


@pytest.mark.fault
def test_unknown_architecture_lists_valid_ones():
    msg = _error(_with(grid={"arch": ["wukong", "whael"], "seed": [0]}))
    assert "grid.arch" in msg and "'whael'" in msg and "whale_meanpool" in msg and "wukong" in msg


@pytest.mark.fault
def test_unknown_protocol_and_source_list_valid_ones():
    msg = _error(_with(data={"source": "synthetic", "scale": "tiny", "protocol": "exposures"}))
    assert "data.protocol" in msg and "author50, exposure" in msg
    msg = _error(_with(grid={"arch": ["whale"], "protocol": ["exposure", "author5"]}))
    assert "grid.protocol" in msg and "author50" in msg
    msg = _error(_with(data={"source": "recflw", "root": "/tmp"}))
    assert "data.source" in msg and "recflow" in msg and "synthetic" in msg


@pytest.mark.fault
def test_wrong_types_name_the_key():
    msg = _error(_with(max_concurrent="two"))
    assert msg.startswith("max_concurrent: expected an integer, got 'two'") and "null" in msg
    assert "max_failures: expected an integer" in _error(_with(max_failures=1.5))
    msg = _error(_with(grid={"arch": ["whale"], "model.dim": [8, "wide"]}))
    assert "model.dim" in msg and "'wide'" in msg
    assert "resources.gpu: expected a number" in _error(_with(resources={"cpu": 1, "gpu": "half"}))
    assert "train.lr" in _error(_with(train={"lr": "fast"}))
    assert "grid.seed: expected a non-empty list" in _error(_with(grid={"arch": ["whale"], "seed": 3}))


@pytest.mark.fault
def test_missing_data_paths():
    msg = _error(_with(data={"source": "recflow", "root": "/nonexistent/recflow"}))
    assert "data.root" in msg and "/nonexistent/recflow" in msg and "does not exist" in msg
    msg = _error(_with(data={"source": "recflow", "root": "${RECSCALE_TEST_UNSET_VAR}/x"}))
    assert "data.root" in msg and "RECSCALE_TEST_UNSET_VAR is not set" in msg
    msg = _error(_with(data={"source": "recflow"}))
    assert "data.root: missing" in msg
    msg = _error(_with(data={"source": "synthetic", "scale": "huge"}))
    assert "data.scale" in msg and "tiny" in msg and "small" in msg


@pytest.mark.fault
def test_unknown_keys_and_axes_list_valid_ones():
    msg = _error(_with(resoures={"cpu": 1}))
    assert "resoures" in msg and "resources" in msg and "valid keys" in msg
    msg = _error(_with(grid={"arch": ["whale"], "width": [8, 16]}))
    assert "grid.width" in msg and "model.<field>" in msg and "history_len" in msg
    msg = _error(_with(model={"dimm": 8}))
    assert "model.dimm" in msg and "dim" in msg and "num_layers" in msg
    msg = _error(_with(grid={"arch": ["wukong"], "model.num_heads": [1, 2]}))  # wukong has no heads
    assert "grid.model.num_heads" in msg and "fmb_tokens" in msg


@pytest.mark.fault
def test_search_section_checks():
    search = {"space": {"train.lr": {"loguniform": [1e-4, 1e-2]}}, "metric": "test_auc", "mode": "max"}
    msg = _error(_with(search=search))
    assert "search.metric" in msg and "valid_auc" in msg
    search = {"space": {"train.lr": {"loguniform": [1e-4, 1e-2]}}, "metric": "valid_logloss", "mode": "max"}
    assert "search.mode" in _error(_with(search=search))
    search = {"space": {"data.delay_s": {"choice": [0, 60]}}}
    assert "search.space.data.delay_s" in _error(_with(search=search))
    search = {"space": {"train.lr": {"normal": [0, 1]}}}
    msg = _error(_with(search=search))
    assert "unknown distribution 'normal'" in msg and "loguniform" in msg
    search = {"space": {"model.dim": {"choice": [8, 16]}}, "num_samples": 3}
    sweep = parse_sweep(_with(search=search))
    assert sweep.space["model.dim"].values == [8, 16]


def test_every_sweep_file_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("RECFLOW_ROOT", str(tmp_path))  # seed_reproduction points at a real RecFlow folder
    monkeypatch.setenv("RECSCALE_ML100K", str(tmp_path))  # ml100k points at a MovieLens-100k folder
    files = sorted((REPO / "sweeps").glob("*.yaml"))
    assert any(f.name == "demo.yaml" for f in files)
    for f in files:
        sweep = load_sweep(f)
        raw = yaml.safe_load(f.read_text())
        grid = raw.get("grid", {})
        archs = grid.get("arch", [raw.get("arch")])
        expected = 0
        for arch in archs:  # axes of model fields the architecture lacks do not multiply its trials
            count = 1
            for axis, values in grid.items():
                if axis != "arch" and not _sets_no_field_of(axis, values, arch):
                    count *= len(values)
            expected += count
        if "rounds" in raw:  # the seed axis is the rounds' last (largest) seed count
            expected *= max(raw["rounds"]["seeds"])
        assert len(grid_points(sweep)) == expected, f.name


def _sets_no_field_of(axis, values, arch):
    """A grid axis scoped to other architectures (model.<other>.<field>, or bundle entries that only hold
    other architectures' mappings); shared keys are fields of every architecture (checked at load)."""
    import architectures

    if axis.startswith("model."):
        scope = axis.split(".")
        return len(scope) == 3 and scope[1] != arch
    if axis == "model":
        return all(k in architectures.names() and k != arch for v in values for k in v if k != "name")
    return False


def test_model_axis_scoped_to_one_architecture_runs_the_others_once():
    """A Wukong reference beside a HELIX-only axis runs once per seed, not once per HELIX value."""
    sweep = parse_sweep(_with(model=None, grid={"arch": ["helix", "wukong"], "seed": [0, 1],
                                                "model.helix.retained_tokens": [[4, 2], [8, 4], [16, 8]]}))
    plan = plan_sweep(sweep)
    by_arch = {a: sorted(t.trial_id for t in plan.trials if t.arch == a) for a in ("helix", "wukong")}
    assert by_arch["helix"] == sorted(f"helix-seed{s}-retained_tokens{r}"
                                      for s in (0, 1) for r in ("4x2", "8x4", "16x8"))
    assert by_arch["wukong"] == ["wukong-seed0", "wukong-seed1"]
    helix = next(t for t in plan.trials if t.trial_id == "helix-seed1-retained_tokens8x4")
    assert helix.model["retained_tokens"] == [8, 4] and helix.record()["model.retained_tokens"] == [8, 4]
    assert all("retained_tokens" not in t.model for t in plan.trials if t.arch == "wukong")


@pytest.mark.fault
@pytest.mark.parametrize("section, spelled", [
    ({"model": {"dim": 8, "kv_cache": "last_layer"}}, "model.kv_cache"),
    ({"model": {"size": "XS"}}, "model.size"),
    ({"grid": {"arch": ["whale", "helix"], "model.size": ["XS", "S"]}}, "grid.model.size"),
    ({"grid": {"arch": ["whale", "helix"], "model": [{"name": "a", "dim": 8, "mix_tokens": 4}]}},
     "grid.model[0].mix_tokens"),
    ({"search": {"space": {"model.mix_tokens": {"choice": [2, 4]}}}}, "search.space.model.mix_tokens"),
])
def test_a_key_one_architecture_lacks_is_refused_naming_key_and_architecture(section, spelled):
    """`arch: [whale, helix]` with a key only HELIX has used to validate, and WHALE trials dropped it."""
    raw = {"grid": {"arch": ["whale", "helix"], "seed": [0]}, **section}
    msg = _error(_with(**raw))
    assert msg.startswith(f"{spelled}: architecture whale has no config field"), msg
    field = spelled.rsplit(".", 1)[1]
    assert f"model: {{helix: {{{field}: ...}}}}" in msg and f"model.helix.{field}" in msg  # says how to scope it


def test_per_architecture_settings_apply_to_that_architecture_only():
    sweep = parse_sweep(_with(
        model={"dim": 8, "helix": {"mix_tokens": 2, "dim": 4}, "whale": {"num_heads": 2}},
        grid={"arch": ["whale", "helix", "wukong"], "seed": [0],
              "model": [{"name": "s", "num_layers": 1, "helix": {"size": "XS"}},
                        {"name": "l", "num_layers": 2, "whale": {"head_dim": 4}}]}))
    models = {t.trial_id: {k: v for k, v in t.model.items() if k != "history_len"} for t in plan_sweep(sweep).trials}
    assert models == {
        "whale-seed0-s": {"dim": 8, "num_heads": 2, "num_layers": 1},
        "whale-seed0-l": {"dim": 8, "num_heads": 2, "num_layers": 2, "head_dim": 4},
        "helix-seed0-s": {"dim": 4, "mix_tokens": 2, "num_layers": 1, "size": "XS"},  # its own dim wins
        "helix-seed0-l": {"dim": 4, "mix_tokens": 2, "num_layers": 2},
        "wukong-seed0-s": {"dim": 8, "num_layers": 1},
        "wukong-seed0-l": {"dim": 8, "num_layers": 2},
    }


@pytest.mark.fault
def test_per_architecture_key_errors():
    grid = {"arch": ["whale", "helix"], "seed": [0]}
    msg = _error(_with(model={"hstu": {"num_heads": 2}}, grid=grid))
    assert msg.startswith("model.hstu.num_heads: hstu is not an architecture of this sweep (whale, helix)")
    msg = _error(_with(model={"whale": {"mix_tokens": 2}}, grid=grid))
    assert msg.startswith("model.whale.mix_tokens: not a config field of whale; valid:") and "head_dim" in msg
    msg = _error(_with(grid={**grid, "model.whale.mix_tokens": [2]}))
    assert msg.startswith("grid.model.whale.mix_tokens: not a config field of whale")
    assert _error(_with(model={"helix": 4}, grid=grid)).startswith("model.helix: expected a mapping of helix's")
    msg = _error(_with(grid={**grid, "model.dim": [8, 16], "model.helix.dim": [4]}))
    assert "grid.model.helix.dim: sets model.dim for helix, which grid.model.dim also sets" in msg
    msg = _error(_with(grid={**grid, "model.whale.dim": [8, "wide"]}))
    assert msg.startswith("grid.model.whale.dim: model.dim") and "'wide'" in msg and "(architecture whale)" in msg


def test_demo_is_five_models_at_three_widths_times_three_seeds():
    sweep = load_sweep(REPO / "sweeps" / "demo.yaml")
    plan = plan_sweep(sweep)
    assert sorted({t.arch for t in plan.trials}) == ["hstu", "shallow_hybrid", "whale", "whale_meanpool", "wukong"]
    assert len(plan.trials) == 45 and len(plan.datasets) == 1
    for arch in {t.arch for t in plan.trials}:
        points = sorted((t.model["dim"], t.seed) for t in plan.trials if t.arch == arch)
        assert points == [(d, s) for d in (4, 8, 16) for s in (0, 1, 2)]  # >= 3 sizes: every family is fitted


@pytest.mark.fault
def test_cli_prints_named_error_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(_with(grid={"arch": ["transformer9000"]}))
    assert cli_main(["sweep", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "transformer9000" in err and "whale" in err


def test_cli_dry_run_prints_trial_table(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(BASE)
    assert cli_main(["sweep", str(good), "--dry-run", "--results", str(tmp_path / "res")]) == 0
    out = capsys.readouterr().out
    for trial in ("wukong-seed0", "wukong-seed1", "whale-seed0", "whale-seed1"):
        assert trial in out
    assert "estimated compute" in out and not (tmp_path / "res").exists()  # a dry run writes nothing


@pytest.mark.fault
def test_unfinished_sweep_folder_needs_resume(tmp_path):
    from harness.sweep.launcher import SweepError, prepare_sweep_dir

    sweep = parse_sweep(BASE)
    plan = plan_sweep(sweep)
    sweep_dir, resume = prepare_sweep_dir(sweep, plan, tmp_path, resume=False)
    assert not resume and (sweep_dir / "sweep.yaml").read_text() == BASE
    (sweep_dir / "runs" / plan.trials[0].trial_id).mkdir(parents=True)  # a trial started (a folder with
    # only sweep.yaml, where none did, starts again: test_output_locations.py)
    with pytest.raises(SweepError, match="--resume"):
        prepare_sweep_dir(sweep, plan, tmp_path, resume=False)
    assert prepare_sweep_dir(sweep, plan, tmp_path, resume=True) == (sweep_dir, True)


@pytest.mark.fault
def test_seeds_added_to_grid_seed_extend_the_sweep_and_keep_its_runs(tmp_path):
    from harness.sweep.launcher import SweepError, added_seeds, prepare_sweep_dir

    sweep = parse_sweep(BASE)
    sweep_dir, _ = prepare_sweep_dir(sweep, plan_sweep(sweep), tmp_path, resume=False)
    started = sweep_dir / "runs" / plan_sweep(sweep).trials[0].trial_id
    started.mkdir(parents=True)
    (sweep_dir / "ray" / "grid").mkdir(parents=True)  # Tune's saved grid: the old points only

    more_text = _with(grid={"arch": ["wukong", "whale"], "seed": [0, 1, 5, 2]},
                      analysis={"baseline": "wukong"})  # the analysis section may change too
    more = parse_sweep(more_text)
    assert added_seeds(sweep, more) == [5, 2]
    assert prepare_sweep_dir(more, plan_sweep(more), tmp_path, resume=False) == (sweep_dir, True)
    assert started.is_dir() and not (sweep_dir / "ray" / "grid").exists()
    assert (sweep_dir / "sweep.yaml").read_text() == more_text
    assert json.loads((sweep_dir / "seeds_added.json").read_text()) == [{"seeds": [5, 2], "after": [0, 1]}]
    assert prepare_sweep_dir(more, plan_sweep(more), tmp_path, resume=True) == (sweep_dir, True)  # stored now

    others = [_with(grid={"arch": ["wukong", "whale"], "seed": [0, 1]}),  # seeds dropped
              _with(grid={"arch": ["wukong", "whale"], "seed": [0, 1, 5, 2, 3]}, model={"dim": 4}),  # and a change
              _with(grid={"arch": ["wukong"], "seed": [0, 1, 5, 2, 3]})]  # and an architecture dropped
    for text in others:
        assert added_seeds(more, parse_sweep(text)) == []
        with pytest.raises(SweepError, match="other than seeds added to grid.seed"):
            prepare_sweep_dir(parse_sweep(text), plan_sweep(parse_sweep(text)), tmp_path, resume=True)


@pytest.mark.fault
def test_optional_section_errors_keep_their_reason():
    """A bad key inside an optional section (`search: X | None`) is reported with its own reason."""
    msg = _error(_with(search={"space": {"model.dim": {"choice": [8]}}, "metrik": "valid_auc"}))
    assert "search.metrik" in msg and "valid keys" in msg and "metric" in msg


def test_union_errors_list_every_member_reason():
    from dataclasses import dataclass

    from core.typed_config import from_dict

    @dataclass
    class C:
        x: int | list[int] = 0

    with pytest.raises(ConfigError) as info:
        from_dict(C, {"x": {"a": 1}})
    msg = str(info.value)
    assert msg.startswith("x: {'a': 1} matches none of int | list[int]")
    assert "as int: expected an integer" in msg and "as list[int]: expected a list" in msg


def test_data_section_is_prepare_config_plus_sweep_fields():
    import dataclasses

    from harness.sweep.schema import DATA_AXIS_FIELDS, DataSection, data_axis_fields
    from protocols.prepare import PrepareConfig

    prepare_fields = {f.name: f for f in dataclasses.fields(PrepareConfig)}
    section_fields = {f.name: f for f in dataclasses.fields(DataSection)}
    assert set(prepare_fields) <= set(section_fields)
    assert set(section_fields) - set(prepare_fields) == {"scale", "world", "log_seed", "cache", "prepare"}
    for name in set(prepare_fields) - {"root", "out"}:  # the sweep finds the log and output itself
        assert getattr(DataSection(), name) == getattr(PrepareConfig(), name), name
    assert set(DATA_AXIS_FIELDS) == set(prepare_fields) - {"source", "root", "out", "protocol_params"}
    assert {"delay_s", "history_len"} <= set(data_axis_fields())  # protocol parameters, from the registry


def _datasets(grid: dict, data: dict | None = None) -> list:
    raw = yaml.safe_load(BASE)
    raw["data"].update(data or {})
    raw["grid"] = {"arch": ["whale"], **grid}
    return plan_sweep(parse_sweep(yaml.safe_dump(raw))).datasets


def test_every_prepare_field_is_a_data_axis():
    datasets = _datasets({"data.sample_seed": [1, 2], "data.n_train": [60, 80]})
    assert sorted((d.prepare["sample_seed"], d.prepare["n_train"]) for d in datasets) == [(1, 60), (1, 80), (2, 60),
                                                                                          (2, 80)]
    split = {"train_start": "2024-01-13", "valid_start": "2024-02-09", "test_start": "2024-02-12",
             "test_end": "2024-02-19", "timezone": "Asia/Shanghai"}
    (d,) = _datasets({}, {"split": split})
    assert d.prepare["split"]["valid_start"] == "2024-02-09"
    (old_spelling,) = _datasets({}, {"prepare": {"split": split}})
    assert old_spelling.prepare["split"] == d.prepare["split"]
    (partial,) = _datasets({}, {"split": {"test_start": "2024-02-13"}})  # only the keys given
    assert partial.prepare["split"] == {"test_start": "2024-02-13"}


def test_protocol_parameters_resolve_to_what_the_protocol_uses():
    from protocols.history import Author50Protocol, ExposureProtocol

    (default,) = _datasets({}, {"history_len": None})
    assert default.prepare["history_len"] == ExposureProtocol.history_len
    assert default.prepare["delay_s"] == ExposureProtocol.delay_s
    (explicit,) = _datasets({}, {"history_len": ExposureProtocol.history_len, "delay_s": 60})
    assert explicit.dataset_id == default.dataset_id  # 60 and the default 60.0 are one dataset
    author = _datasets({"protocol": ["author50"], "delay_s": [0, 60]}, {"history_len": None})
    assert len(author) == 1 and author[0].prepare["history_len"] == Author50Protocol.history_len


@pytest.mark.fault
def test_data_value_errors_name_the_grid_key():
    assert _error(_with(grid={"arch": ["whale"], "delay_s": [0, -5]})).startswith("grid.delay_s: must be >= 0")
    assert _error(_with(grid={"arch": ["whale"], "history_len": [0]})).startswith("grid.history_len: must be >= 1")
    msg = _error(_with(grid={"arch": ["whale"], "data": [{"protocol": "exposure", "delay_s": "soon"}]}))
    assert msg.startswith("grid.data[0].delay_s: expected a number")
    msg = _error(_with(data={"source": "synthetic", "scale": "tiny", "prepare": {"delay": 1}}))
    assert "data.prepare.delay" in msg and "delay_s" in msg
    msg = _error(_with(data={"source": "synthetic", "scale": "tiny", "split": {"timezone": "Mars/Olympus"}}))
    assert msg.startswith("data.split.timezone: unknown time zone")


@pytest.mark.fault
def test_bundle_fields_are_checked_together():
    """A width of 4 is legal for HELIX only with mix_tokens dividing it: the bundle sets both at once."""
    ok = _with(model=None, grid={"arch": ["helix"], "seed": [0],
                                 "model": [{"name": "w4", "dim": 4, "mix_tokens": 4, "num_heads": 2}]})
    assert len(plan_sweep(parse_sweep(ok)).trials) == 1
    msg = _error(_with(model=None, grid={"arch": ["helix"], "seed": [0],
                                         "model": [{"name": "w4", "dim": 4, "num_heads": 2}]}))
    assert "model.dim" in msg and "mix_tokens" in msg


@pytest.mark.parametrize("name", ["demo", "scaling_cpu", "helix_retained_tokens", "delay_protocol"])
def test_rewritten_sweeps_plan_the_runs_of_their_committed_reference(name):
    """The committed references were run from the older spelling (keys applied where an architecture had
    them); the per-architecture spelling plans exactly their trial ids, datasets and config columns."""
    import math

    import pandas as pd

    folder = REPO / "results" / "reference" / name
    assert (folder / "sweep.yaml").read_text() == (REPO / "sweeps" / f"{name}.yaml").read_text()
    runs = pd.read_parquet(folder / "runs.parquet")
    trials = plan_sweep(load_sweep(folder / "sweep.yaml")).trials
    assert sorted(t.trial_id for t in trials) == sorted(runs["trial_id"])
    tuned = set(runs["tuned"].dropna()) if "tuned" in runs.columns else set()  # chosen per setting at run time
    config = [c for c in runs.columns if (c.startswith(("model.", "train.")) or c in ("arch", "seed", "dataset_id"))
              and c not in tuned]
    from core.typed_config import flat_keys

    for t in trials:
        row = runs.loc[runs["trial_id"] == t.trial_id].iloc[0]
        record = flat_keys(t.record())
        for col in config:
            value = row[col]
            missing = value is None or (isinstance(value, float) and math.isnan(value))
            if missing:
                assert col not in record, (t.trial_id, col)
            else:
                got = record[col]
                assert (list(got) if isinstance(got, (list, tuple)) else got) == (
                    list(value) if hasattr(value,
                                           "__len__") and not isinstance(value, str) else value), (t.trial_id, col)


def test_sweep_summary_line_never_shows_nan():
    from cli.commands.sweep import timings_text

    assert timings_text({"total_s": 12.5, "prepare_s": 1.0}) == \
        "total 12 s, prepare 1 s; no trial trained to the end in this launch"
    full = timings_text({"total_s": 60, "prepare_s": 2, "mean_train_loop_s": 3.0, "mean_eval_s": 1.0,
                         "overhead_per_trial_s": 2.5, "overhead_in_trial_s": 1.5})
    assert "nan" not in full and "training 3.0 s, evaluation 1.0 s, overhead 2.5 s, of which 1.5 s" in full


def test_model_dim_is_validated_once_between_the_yaml_and_the_model(monkeypatch):
    """Every model validation goes through architectures.make_config with a mapping: the sweep load makes each
    distinct config once (not once per seed), and the driver's plan, the trial's own resolution (in a worker,
    from the pickled sweep) and the run config read them back without validating again."""
    import pickle

    import architectures
    from harness.config import RunConfig, run_config_dict
    from harness.sweep.plan import resolve_trial

    validated = []
    make = architectures.make_config

    def counting(name, cfg=None):
        if isinstance(cfg, dict):
            validated.append((name, cfg["dim"], cfg["num_layers"]))
        return make(name, cfg)

    monkeypatch.setattr(architectures, "make_config", counting)
    sweep = parse_sweep(_with(model={"num_layers": 1}, grid={"arch": ["wukong", "whale"], "seed": [0, 1, 2],
                                                             "model.dim": [4, 8]}))
    assert sorted(validated) == [("whale", 4, 1), ("whale", 8, 1), ("wukong", 4, 1), ("wukong", 8, 1)]
    validated.clear()
    plan = plan_sweep(sweep)
    in_worker = pickle.loads(pickle.dumps(sweep))  # what a trial receives in its TrialContext
    for planned in plan.trials:
        trial = resolve_trial(in_worker, planned.point)
        cfg = RunConfig(arch=trial.arch, data="unused", model=trial.model_config, seed=trial.seed)
        assert cfg.model.dim == run_config_dict(cfg)["model"]["dim"] == planned.model["dim"]
    assert len(plan.trials) == 12 and validated == []
    # a value met for the first time (a search's sample) is validated where it arrives, once
    for _ in range(2):
        trial = resolve_trial(in_worker, plan.trials[0].point, fixed={"model.num_layers": 2})
        assert trial.model_config.num_layers == 2
    assert validated == [("wukong", 4, 2)]


@pytest.mark.parametrize("section, old, new", [
    ("data", "seed", "sample_seed"), ("data", "synth_seed", "log_seed"), ("tuning", "seeds", "run_seeds"),
    ("search", "seed", "sampler_seed"), ("analysis", "seed", "bootstrap_seed"),
])
def test_a_renamed_seed_key_names_the_new_key(tmp_path, section, old, new):
    """The five seeds have distinct names: the grid's `seed` (the unit of replication) and these; an old key is
    refused with one error naming the file and the new key."""
    raw = yaml.safe_load(BASE)
    raw.setdefault(section, {})[old] = [0] if old == "seeds" else 1
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(raw))
    if section == "analysis":
        from analysis.config import AnalysisConfig
        from core.typed_config import from_dict

        with pytest.raises(ConfigError, match=rf"^analysis\.{old}: renamed; write analysis\.{new}$"):
            from_dict(AnalysisConfig, raw["analysis"], prefix="analysis.")
        return
    with pytest.raises(ConfigError, match=rf"^{path}: {section}\.{old}: renamed; write {section}\.{new}$"):
        load_sweep(path)


def test_a_renamed_data_key_is_named_as_a_grid_axis_and_a_prepare_entry():
    assert _error(_with(grid={"arch": ["whale"], "data.seed": [1, 2]})) == \
        "grid.data.seed: renamed; write grid.data.sample_seed"
    assert _error(_with(grid={"arch": ["whale"], "data": [{"seed": 1}, {"seed": 2}]})) == \
        "grid.data[0].seed: renamed; write grid.data[0].sample_seed"
