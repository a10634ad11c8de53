"""Each source's default split and target counts, `n_<split>: all`, and the errors of a split that
holds nothing, a size larger than its split and an unknown split key (exit 2, nothing written)."""
from __future__ import annotations

import datetime as dt
import json

import pandas as pd
import pytest
import yaml
from tiny_logs import random_log, tiny_source

import protocols
from cli.main import main as cli_main
from core.typed_config import ConfigError
from protocols.artifact import PreparedDataset
from protocols.prepare import PrepareConfig, default_size, plan_targets, prepare, prepare_log
from protocols.split import SplitConfig, SplitSettings

DAY_MS = 86_400_000


def _long_log(seed: int = 3, days: int = 90):
    return random_log(seed, n_users=8, n_requests=900, span_ms=days * DAY_MS, grid_ms=60_000)


def _utc_date(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).date()


def test_recflow_and_synthetic_keep_the_seed_split_and_scaled_sizes():
    log = random_log(1, span_ms=37 * DAY_MS, n_requests=600, grid_ms=60_000)
    for source in ("recflow", "synthetic"):
        d = protocols.source(source).defaults
        assert d.split(log) == SplitConfig() and d.sizes == "scaled"
    plan = plan_targets(log, PrepareConfig.of(source="synthetic", root="x"))
    assert plan.split == SplitConfig()
    for s in ("train", "valid", "test"):  # the scaled reference size, capped by the split
        assert len(plan.rows[s]) == default_size(s, len(log), plan.available[s])


def test_movielens_default_is_the_last_weeks_and_every_exposure(tmp_path):
    """On any log, the movielens100k defaults: test = last 21 UTC days, valid = 21 before, all targets."""
    log = _long_log()
    ts = log["request_timestamp"]
    end = _utc_date(int(ts.max())) + dt.timedelta(days=1)
    expected = SplitConfig(_utc_date(int(ts.min())).isoformat(), (end - dt.timedelta(days=42)).isoformat(),
                           (end - dt.timedelta(days=21)).isoformat(), end.isoformat(), "UTC")
    plan = plan_targets(log, PrepareConfig.of(source="movielens100k", root="x"))
    assert plan.split == expected
    edges = [int(pd.Timestamp(v, tz="UTC").value // 10**6) for v in
             (expected.train_start, expected.valid_start, expected.test_start, expected.test_end)]
    counts = [int(((ts >= a) & (ts < b)).sum()) for a, b in zip(edges, edges[1:])]
    assert [len(plan.rows[s]) for s in ("train", "valid", "test")] == counts and sum(counts) == len(log)
    # a key given overrides only itself
    later = (end - dt.timedelta(days=7)).isoformat()
    plan2 = plan_targets(log, PrepareConfig.of(source="movielens100k", root="x", split=SplitSettings(test_start=later)))
    assert plan2.split.test_start == later and plan2.split.valid_start == expected.valid_start


def test_all_is_accepted_everywhere_a_size_is(tmp_path):
    log = random_log(2, span_ms=37 * DAY_MS, n_requests=600, grid_ms=60_000)
    cfg = PrepareConfig.of(source="synthetic", root="x", n_train="all", n_valid=5, n_test="all", history_len=4,
                        out=str(tmp_path))
    plan = plan_targets(log, cfg)
    assert len(plan.rows["train"]) == plan.available["train"] and len(plan.rows["test"]) == plan.available["test"]
    assert len(plan.rows["valid"]) == 5
    ds = PreparedDataset.open(prepare_log(log, cfg))
    assert ds.manifest["num_targets"]["train"] == plan.available["train"]
    with pytest.raises(ConfigError, match=r"^n_test: .*'none'"):
        PrepareConfig.of(n_test="none")
    from harness.sweep.schema import parse_sweep

    raw = {"name": "s", "arch": "wukong", "data": {"source": "synthetic", "scale": "tiny", "n_train": "all"},
           "grid": {"data.n_test": [100, "all"]}}
    assert parse_sweep(yaml.safe_dump(raw)).config.data.n_train == "all"


@pytest.fixture
def tinytest(monkeypatch, tmp_path):
    """A registered source `tinytest` whose log spans 2024-01-13 to 2024-02-18 (RecFlow's dates)."""
    log = random_log(26, n_users=10, n_requests=800, span_ms=37 * DAY_MS, grid_ms=60_000)
    protocols.load_components()
    monkeypatch.setitem(protocols.SOURCES._items, "tinytest", tiny_source(log))
    return log


def _prepare_argv(tmp_path, *extra):
    return ["prepare", "--source", "tinytest", "--root", str(tmp_path), "--history-len", "4",
            "--out", str(tmp_path / "out"), "--no-progress", *extra]


@pytest.mark.fault
def test_empty_split_names_the_keys_and_shows_dates(tinytest, tmp_path, capsys):
    argv = _prepare_argv(tmp_path, "--train-start", "2023-01-01", "--valid-start", "2023-02-01")
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    first = dt.datetime.fromtimestamp(tinytest["request_timestamp"].min() / 1000, tz=dt.timezone(dt.timedelta(hours=8)))
    last = dt.datetime.fromtimestamp(tinytest["request_timestamp"].max() / 1000, tz=dt.timezone(dt.timedelta(hours=8)))
    for part in ("split.train_start", "split.valid_start", "[2023-01-01, 2023-02-01)", "Asia/Shanghai",
                 first.strftime("%Y-%m-%d"), last.strftime("%Y-%m-%d"), "holds no exposures"):
        assert part in err, (part, err)
    assert "(ms)" not in err and not (tmp_path / "out").exists()
    # an empty test split is refused the same way
    assert cli_main(_prepare_argv(tmp_path, "--test-start", "2024-02-19", "--test-end", "2024-03-01")) == 2
    assert "split.test_start, split.test_end" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.fault
def test_size_larger_than_the_split_names_the_key(tinytest, tmp_path, capsys):
    available = plan_targets(tinytest, PrepareConfig.of(source="tinytest", root="x")).available["valid"]
    assert cli_main(_prepare_argv(tmp_path, "--valid", str(available + 1))) == 2
    err = capsys.readouterr().err
    assert err.count("n_valid") >= 1 and f"holds only {available:,}" in err and "2024-02-08" in err
    assert not (tmp_path / "out").exists()
    assert cli_main(_prepare_argv(tmp_path, "--valid", str(available), "--train", "all", "--test", "all")) == 0


@pytest.mark.fault
def test_unknown_split_key_names_it(tinytest, tmp_path, capsys):
    assert cli_main(_prepare_argv(tmp_path, "--set", "split.test_begin=2024-02-12")) == 2
    err = capsys.readouterr().err
    assert "split.test_begin" in err and "test_start" in err and not (tmp_path / "out").exists()
    assert cli_main(_prepare_argv(tmp_path, "--valid-start", "2024-02-08T25:00")) == 2
    assert "valid_start" in capsys.readouterr().err
    # given keys that do not increase once merged with the source's default split
    assert cli_main(_prepare_argv(tmp_path, "--valid-start", "2024-02-15")) == 2
    err = capsys.readouterr().err
    assert "must increase strictly" in err and "valid_start=2024-02-15" in err and "default split" in err
    assert not (tmp_path / "out").exists()


def _sweep_file(tmp_path, data: dict) -> str:
    path = tmp_path / "s.yaml"
    (tmp_path / "log").mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump({"name": "s", "arch": "wukong",
                                    "data": {"source": "tinytest", "root": str(tmp_path / "log"), **data}}))
    return str(path)


@pytest.mark.fault
def test_sweep_split_errors_exit_2_and_write_nothing(tinytest, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the sweep's default cache (artifacts/) is relative to the working directory
    res = tmp_path / "results"
    assert cli_main(["sweep", _sweep_file(tmp_path, {"split": {"test_begin": "2024-02-12"}}),
                     "--results", str(res)]) == 2
    assert "data.split.test_begin" in capsys.readouterr().err and not res.exists()
    assert cli_main(["sweep",
                     _sweep_file(tmp_path, {"split": {"valid_start": "2024-02-12", "test_start": "2024-02-10"}}),
                     "--results", str(res)]) == 2
    assert "data.split.test_start" in capsys.readouterr().err and not res.exists()
    for data, keys in (({"split": {"train_start": "2023-01-01", "valid_start": "2023-02-01"}},
                        "data.split.train_start, data.split.valid_start"),
                       ({"n_test": 10**6}, "data.n_test")):
        assert cli_main(["sweep", _sweep_file(tmp_path, {"history_len": 4, **data}), "--results", str(res)]) == 2
        err = capsys.readouterr().err
        assert keys in err, err
        assert not (res / "s").exists() and not (tmp_path / "artifacts" / "prepared").exists()


def test_movielens_prepare_with_no_other_flag(ml100k_dir, tmp_path, capsys):
    """`prepare --source movielens100k --root <ml-100k>` alone: every rating is a target, split by date."""
    argv = ["prepare", "--source", "movielens100k", "--root", str(ml100k_dir), "--out", str(tmp_path),
            "--no-progress", "--json"]
    assert cli_main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    raw = pd.read_csv(ml100k_dir / "u.data", sep="\t", names=["user", "item", "rating", "ts"])
    when = pd.to_datetime(raw["ts"], unit="s", utc=True)
    end = when.max().normalize() + pd.Timedelta(days=1)
    valid_start, test_start = end - pd.Timedelta(days=42), end - pd.Timedelta(days=21)
    expected = {"train": int((when < valid_start).sum()),
                "valid": int(((when >= valid_start) & (when < test_start)).sum()),
                "test": int((when >= test_start).sum())}
    assert summary["num_targets"] == expected and sum(expected.values()) == 100_000
    manifest = PreparedDataset.open(summary["path"]).manifest
    assert manifest["parameters"]["split"] == {"train_start": "1997-09-20", "valid_start": "1998-03-12",
                                               "test_start": "1998-04-02", "test_end": "1998-04-23", "timezone": "UTC"}
    labels = PreparedDataset.open(summary["path"]).targets("test").column("label").to_numpy()
    assert labels.sum() == (raw["rating"][when >= test_start] >= 4).sum()
    # the same through the Python API, run twice: content-addressed, nothing rebuilt
    cfg = PrepareConfig.of(source="movielens100k", root=str(ml100k_dir), out=str(tmp_path))
    assert str(prepare(cfg, progress=False)) == summary["path"]


@pytest.mark.slow
def test_movielens_sweep_naming_only_source_and_root_runs(ml100k_dir, tmp_path, monkeypatch):
    """A sweep whose data section names only the source and the root runs end to end (Wukong: the cheapest)."""
    import pandas as pd

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "ml.yaml"
    path.write_text(yaml.safe_dump({"name": "ml", "arch": "wukong",
                                    "data": {"source": "movielens100k", "root": str(ml100k_dir)}}))
    assert cli_main(["sweep", str(path), "--results", str(tmp_path / "results")]) == 0
    runs = pd.read_parquet(tmp_path / "results" / "ml" / "runs.parquet")
    assert len(runs) == 1 and runs["test_n"].iloc[0] == 7_572 and runs["train_targets"].iloc[0] == 81_245
    assert 0.5 < runs["test_auc"].iloc[0] < 1.0
