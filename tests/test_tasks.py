"""Tasks: the target label is chosen when a dataset is prepared (`task`: long_view, the default, or
effective_view); the label column is the log's column of that name, the oracle is kept only for long_view,
default-task artifacts and sweep datasets keep their names, and the analysis fits each task separately.
A run trains several tasks at once with `train.tasks` (docs/tasks.md): one head per task, the weighted loss,
per-task metrics (checked against scikit-learn), predictions, curves and health."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml
from sklearn.metrics import log_loss, roc_auc_score

from analysis.collect import SweepResults, rows_per_task
from analysis.config import analysis_config
from analysis.pipeline import analyze
from analysis.stats.paired import t_interval
from cli.main import main as cli_main
from core.typed_config import ConfigError
from harness.config import load_run_config, parse_set
from harness.run_folder import read_curves
from harness.sweep.plan import plan_sweep
from harness.sweep.schema import parse_sweep
from harness.train import train_run
from protocols import SOURCES
from protocols.prepare import PrepareConfig, prepare
from tests.fixtures_data import TINY_SPLITS, tiny_artifact, tiny_log  # noqa: F401  (pytest fixture)


def _prepare(log: Path, out: Path, **task) -> Path:
    cfg = PrepareConfig.of(source="synthetic", root=str(log), protocol="exposure", history_len=16, out=str(out),
                        **TINY_SPLITS, **task)
    return prepare(cfg, progress=False)


def test_effective_view_task_labels_targets_with_the_logs_column_and_drops_the_oracle(tiny_log, tmp_path):  # noqa: F811
    default = _prepare(tiny_log, tmp_path / "a")
    explicit = _prepare(tiny_log, tmp_path / "b", task="long_view")
    effective = _prepare(tiny_log, tmp_path / "c", task="effective_view")
    assert default.name == explicit.name != effective.name  # the default task leaves folder names as before
    assert "task" not in json.loads((default / "manifest.json").read_text())["parameters"]
    assert json.loads((effective / "manifest.json").read_text())["task"] == "effective_view"
    log = SOURCES.get("synthetic")(tiny_log)
    for split in ("train", "valid", "test"):
        lv = pq.read_table(default / f"{split}_targets.parquet").to_pandas()
        ev = pq.read_table(effective / f"{split}_targets.parquet").to_pandas()
        assert lv["event_id"].tolist() == ev["event_id"].tolist()  # same targets, another label
        assert np.array_equal(ev["label"].to_numpy(), log["effective_view"][ev["row"].to_numpy()].astype(np.float32))
        assert np.array_equal(lv["label"].to_numpy(), log["long_view"][lv["row"].to_numpy()].astype(np.float32))
        assert "true_p" in lv.columns and "true_p" not in ev.columns
    assert not np.array_equal(lv["label"].to_numpy(), ev["label"].to_numpy())
    cfg = load_run_config(None, {"model": {"dim": 16}, "train": {"num_threads": 1}}, arch="wukong", data=str(effective))
    metrics = train_run(cfg, tmp_path / "run", progress=False)
    pred = pq.read_table(tmp_path / "run" / "predictions_test.parquet").to_pandas()
    assert metrics["test_auc"] == pytest.approx(roc_auc_score(pred["label"], pred["score"]), abs=1e-9)
    assert not any(k.startswith("oracle_") for k in metrics)
    with pytest.raises(ConfigError, match=r"task: 'click' is not allowed \(allowed: long_view, effective_view\)"):
        PrepareConfig.of(task="click")


SWEEP = {
    "name": "tasks",
    "data": {"source": "synthetic", "scale": "tiny", "history_len": 16, "n_train": 100, "n_valid": 50, "n_test": 50},
    "arch": "wukong",
    "grid": {"task": ["long_view", "effective_view"], "seed": [0]},
}


def _plan(sweep: dict):
    return plan_sweep(parse_sweep(yaml.safe_dump(sweep)))


def test_a_task_axis_makes_one_dataset_per_task_and_a_task_column():
    plan = _plan(SWEEP)
    assert len(plan.datasets) == 2
    assert sorted(t.record()["task"] for t in plan.trials) == ["effective_view", "long_view"]
    one = _plan({**SWEEP, "grid": {"seed": [0]}})
    explicit = _plan({**SWEEP, "grid": {"seed": [0]}, "data": {**SWEEP["data"], "task": "long_view"}})
    assert one.datasets[0].dataset_id == explicit.datasets[0].dataset_id  # the default task is not hashed
    assert one.datasets[0].dataset_id in {d.dataset_id for d in plan.datasets}
    assert "task" not in one.datasets[0].prepare


def test_analysis_fits_each_tasks_scaling_separately(tmp_path):
    """WHALE's dAUC over Wukong follows slope 0.2 on long_view and 0.4 on effective_view (no noise)."""
    rows = []
    flops = {32: 2e6, 64: 8e6, 128: 32e6, 256: 128e6}
    for task, slope, base in (("long_view", 0.2, 0.72), ("effective_view", 0.4, 0.65)):
        for seed in range(3):
            b = base + 1e-4 * seed
            rows.append({"trial_id": f"wukong-{task}-{seed}", "arch": "wukong", "seed": seed, "task": task,
                         "protocol": "exposure", "delay_s": 60, "history_len": 32, "model.dim": 64,
                         "test_auc": b, "flops_per_target": 0.4e6})
            for dim, f in flops.items():
                rows.append({"trial_id": f"whale-{task}-{dim}-{seed}", "arch": "whale", "seed": seed, "task": task,
                             "protocol": "exposure", "delay_s": 60, "history_len": 32, "model.dim": dim,
                             "test_auc": b + np.exp(-4.7) * (f / 1e6) ** slope, "flops_per_target": f})
    root = tmp_path / "tasks"
    root.mkdir()
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    analysis = {"baseline": "wukong", "metrics": ["auc"], "n_resamples": 999,
                "scaling": {"reference": {"arch": "wukong"}, "families": ["whale"]}}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "tasks", "analysis": analysis}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyze(root, progress=False, plots=False)
    fits = {f["family"]: f["fit"]["slope"] for f in json.loads((root / "analysis.json").read_text())["scaling"]
            if f["metric"] == "auc" and f.get("fit")}
    assert fits == {"whale, task=effective_view": pytest.approx(0.4, abs=1e-6),
                    "whale, task=long_view": pytest.approx(0.2, abs=1e-6)}


def _per_user_aucs(y: np.ndarray, s: np.ndarray, users: np.ndarray) -> tuple[list[float], list[int]]:
    """scikit-learn's AUC of every user with both labels, and that user's number of targets."""
    aucs, sizes = [], []
    for u in np.unique(users):
        m = users == u
        if 0 < y[m].sum() < m.sum():
            aucs.append(roc_auc_score(y[m], s[m]))
            sizes.append(int(m.sum()))
    return aucs, sizes


def test_two_tasks_train_both_heads_and_write_metrics_predictions_curves_and_health_per_task(
        tiny_log, tiny_artifact, tmp_path):  # noqa: F811
    out = tmp_path / "run"
    assert cli_main(["train", "--arch", "helix", "--data", str(tiny_artifact), "--out", str(out), "--no-progress",
                     "--set", "train.tasks=[effective_view,long_view]", "--set", "dim=16",
                     "--set", "train.num_threads=1", "--set", "train.log_every_steps=1"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    log = SOURCES.get("synthetic")(tiny_log)
    targets = pq.read_table(tiny_artifact / "test_targets.parquet").to_pandas()
    pred = pq.read_table(out / "predictions_test.parquet").to_pandas()
    assert pred.columns.tolist() == ["event_id", "label", "score", "label@long_view", "score@long_view"]
    assert pred["event_id"].tolist() == targets["event_id"].tolist()
    users = targets["user_id"].to_numpy()
    for suffix, column in (("", "effective_view"), ("@long_view", "long_view")):
        y, s = pred["label" + suffix].to_numpy(), pred["score" + suffix].to_numpy()
        assert np.array_equal(y, log[column][targets["row"].to_numpy()].astype(np.float32))  # the task's label
        assert metrics["test_auc" + suffix] == pytest.approx(roc_auc_score(y, s), abs=1e-12)
        assert metrics["test_logloss" + suffix] == pytest.approx(log_loss(y, s), abs=1e-9)
        rate = y.astype(np.float64).mean()
        assert metrics["test_ne" + suffix] == pytest.approx(
            log_loss(y, s) / -(rate * np.log(rate) + (1 - rate) * np.log(1 - rate)), abs=1e-9)
        aucs, sizes = _per_user_aucs(y, s, users)
        assert metrics["test_gauc" + suffix] == pytest.approx(np.average(aucs, weights=sizes), abs=1e-9)
        assert metrics["test_uauc" + suffix] == pytest.approx(np.mean(aucs), abs=1e-12)
        assert metrics["health_status" + suffix] in ("ok", "collapsed", "undertrained")
        assert "valid_pred_std" + suffix in metrics and "valid_auc" + suffix in metrics
    assert metrics["test_auc"] != metrics["test_auc@long_view"]
    assert "oracle_test_auc@long_view" in metrics and "oracle_test_auc" not in metrics  # the truth is P(long_view)
    curves = read_curves(out)
    assert {"train/loss", "train/loss@effective_view", "train/loss@long_view", "valid/auc",
            "valid/auc@long_view"} <= set(curves)
    steps = len(curves["train/loss"])
    total = [a + b for (_, a), (_, b) in zip(curves["train/loss@effective_view"], curves["train/loss@long_view"])]
    assert np.allclose(total, [v for _, v in curves["train/loss"]][:steps], rtol=1e-6)  # weights 1 and 1
    sweep = SweepResults(root=tmp_path, name="tasks", runs=pd.DataFrame(), config=analysis_config(None),
                         config_columns=[], baseline="helix")  # the analysis reads task 1's row's predictions
    frame = sweep.predictions("run@long_view")
    assert frame is not None and frame.columns.tolist() == ["event_id", "label", "score"]
    assert frame["score"].tolist() == pred["score@long_view"].tolist()
    assert sweep.predictions("run")["score"].tolist() == pred["score"].tolist()
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["train"]["tasks"] == [{"name": "effective_view", "label": "effective_view", "weight": 1.0},
                                        {"name": "long_view", "label": "long_view", "weight": 1.0}]


def test_tasks_config_spelling_and_errors():
    short = load_run_config(None, parse_set(["train.tasks=[effective_view,long_view]"]), arch="wukong", data="x")
    long = load_run_config(None, {"train": {"tasks": [{"name": "effective_view"},
                                                      {"name": "long_view", "label": "long_view", "weight": 1}]}},
                           arch="wukong", data="x")
    assert short.train.tasks == long.train.tasks
    assert load_run_config(None, None, arch="wukong", data="x").train.tasks == []
    with pytest.raises(ConfigError, match=r"train\.tasks\[1\]\.label: 'click' is not a label column \(allowed: "
                                          r"effective_view, long_view\)"):
        load_run_config(None, parse_set(["train.tasks=[long_view,click]"]), arch="wukong", data="x")
    with pytest.raises(ConfigError, match=r"train\.tasks\[0\]\.weight: must be a finite number >= 0"):
        load_run_config(None, {"train": {"tasks": [{"name": "a", "label": "long_view", "weight": -1}]}},
                        arch="wukong", data="x")
    with pytest.raises(ConfigError, match="task names must differ"):
        load_run_config(None, parse_set(["train.tasks=[long_view,long_view]"]), arch="wukong", data="x")
    with pytest.raises(ConfigError, match=r"train\.early_stopping_metric: 'ctr' is not a task after the first of "
                                          r"train\.tasks \(long_view;"):
        load_run_config(None, parse_set(["train.tasks=[effective_view,long_view]",
                                         "train.early_stopping_metric=valid_auc@ctr"]), arch="wukong", data="x")
    with pytest.raises(ConfigError, match=r"train\.early_stopping_metric: unknown value 'valid_auc@'"):
        load_run_config(None, parse_set(["train.early_stopping_metric=valid_auc@"]), arch="wukong", data="x")
    with pytest.raises(ConfigError, match=r"tuning\.metric: train\.early_stopping_metric: 'ctr' is not a task"):
        parse_sweep(yaml.safe_dump({**SWEEP, "train": {"tasks": ["effective_view", "long_view"]},
                                    "tuning": {"grid": {"values": [1e-3, 3e-3, 1e-2]}, "metric": "valid_auc@ctr"}}))


def test_early_stopping_can_follow_a_later_tasks_metric(tiny_artifact, tmp_path):  # noqa: F811
    """`train.early_stopping_metric: valid_auc@long_view` keeps the epoch whose long_view validation AUC is best,
    whatever task 0's says (the per-epoch values: the run's learning curves)."""
    out = tmp_path / "run"
    assert cli_main(["train", "--arch", "wukong", "--data", str(tiny_artifact), "--out", str(out), "--no-progress",
                     "--set", "train.tasks=[effective_view,long_view]", "--set", "dim=8", "--set", "train.epochs=4",
                     "--set", "train.num_threads=1", "--set", "train.lr=0.01",
                     "--set", "train.early_stopping_metric=valid_auc@long_view"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    per_epoch = [v for _, v in read_curves(out)["valid/auc@long_view"]]
    assert len(per_epoch) == 4
    assert metrics["selected_epoch"] == int(np.argmax(per_epoch))
    assert metrics["valid_auc@long_view"] == pytest.approx(max(per_epoch), abs=1e-6)  # curves hold float32
    task0 = [v for _, v in read_curves(out)["valid/auc"]]
    assert np.argmax(task0) != np.argmax(per_epoch)  # this setting tells the two rules apart


def test_a_multi_task_run_is_one_row_per_task_for_the_analysis():
    runs = pd.DataFrame([{"trial_id": "t0", "run_dir": "runs/t0", "arch": "whale", "seed": 0, "task": "effective_view",
                          "train.tasks": "effective_view,long_view", "test_auc": 0.7, "test_auc@long_view": 0.8,
                          "oracle_test_auc@long_view": 0.9},
                         {"trial_id": "t1", "run_dir": "runs/t1", "arch": "wukong", "seed": 0, "task": "long_view",
                          "train.tasks": None, "test_auc": 0.6, "test_auc@long_view": None,
                          "oracle_test_auc@long_view": None}])
    out = rows_per_task(runs)
    assert out[["trial_id", "run_dir", "task", "test_auc"]].to_numpy().tolist() == [
        ["t0", "runs/t0", "effective_view", 0.7], ["t1", "runs/t1", "long_view", 0.6],
        ["t0@long_view", "runs/t0@long_view", "long_view", 0.8]]
    assert out["oracle_test_auc"].isna().tolist() == [True, True, False]
    assert not any("@" in c for c in out.columns)
    one = runs.drop(columns=["test_auc@long_view", "oracle_test_auc@long_view"])
    assert rows_per_task(one) is one
    first = pd.DataFrame([{"trial_id": "t0", "run_dir": "runs/t0", "task": "long_view", "test_auc": 0.8,
                           "oracle_test_auc": 0.9, "test_auc@effective_view": 0.7}])  # long_view first: its oracle
    assert rows_per_task(first)["oracle_test_auc"].isna().tolist() == [False, True]  # not effective_view's
    two = {**SWEEP, "grid": {"seed": [0]}, "train": {"tasks": ["effective_view", "long_view"]}}
    row = _plan(two).trials[0].record()
    assert (row["task"], row["train.tasks"]) == ("effective_view", "effective_view,long_view")


def test_a_multi_task_sweep_fits_each_task_and_answers_the_task_slope_difference(tmp_path):
    """Multi-task runs (task 0 effective_view, task 1 long_view in `@long_view` columns): WHALE's dAUC over Wukong
    follows slope 0.4 + noise on long_view and 0.25 + noise on effective_view, per seed; the analysis fits each
    task and the slope_difference question gives long_view - effective_view with the seed-unit interval."""
    rng = np.random.default_rng(0)
    flops = {32: 2e6, 64: 8e6, 128: 32e6, 256: 128e6}
    slopes = {s: {"long_view": 0.4 + rng.normal(0, 0.02), "effective_view": 0.25 + rng.normal(0, 0.02)}
              for s in range(4)}
    rows = []
    for seed in range(4):
        common = {"seed": seed, "task": "effective_view", "train.tasks": "effective_view,long_view",
                  "protocol": "exposure", "delay_s": 60, "history_len": 32}
        rows.append({**common, "trial_id": f"wukong-{seed}", "arch": "wukong", "model.dim": 64,
                     "flops_per_target": 0.4e6, "test_auc": 0.65, "test_auc@long_view": 0.72})
        for dim, f in flops.items():
            gain = {t: np.exp(-4.7) * (f / 1e6) ** slopes[seed][t] for t in ("long_view", "effective_view")}
            rows.append({**common, "trial_id": f"whale-{dim}-{seed}", "arch": "whale", "model.dim": dim,
                         "flops_per_target": f, "test_auc": 0.65 + gain["effective_view"],
                         "test_auc@long_view": 0.72 + gain["long_view"]})
    root = tmp_path / "two_tasks"
    root.mkdir()
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    question = {"kind": "slope_difference", "family": "whale", "tasks": ["long_view", "effective_view"]}
    analysis = {"baseline": "wukong", "metrics": ["auc"], "n_resamples": 999, "questions": [question],
                "scaling": {"reference": {"arch": "wukong"}, "families": ["whale"]}}
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "two_tasks", "analysis": analysis}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyze(root, progress=False, plots=False)
    result = json.loads((root / "analysis.json").read_text())
    fits = {f["family"]: f["fit"]["slope"] for f in result["scaling"] if f["metric"] == "auc" and f.get("fit")}
    true = {t: np.mean([slopes[s][t] for s in range(4)]) for t in ("long_view", "effective_view")}
    assert fits == {"whale, task=effective_view": pytest.approx(true["effective_view"], abs=1e-6),
                    "whale, task=long_view": pytest.approx(true["long_view"], abs=1e-6)}
    (answer,) = result["questions"]
    assert answer["question"] == "slope of whale: long_view - effective_view" and answer["settled"]
    diffs = [slopes[s]["long_view"] - slopes[s]["effective_view"] for s in range(4)]
    lo, hi = t_interval(np.mean(diffs), np.std(diffs, ddof=1), 4, 0.05)
    assert answer["answers"][0]["answer"] == f"{np.mean(diffs):+.3f} [{lo:+.3f}, {hi:+.3f}] at 4 seeds"


@pytest.mark.slow  # about 10 s of CPU: prepare and train on the real data
def test_movielens_trains_its_two_tasks_rating_3_and_rating_4(ml100k_dir, tmp_path):
    """MovieLens-100k's two tasks (docs/tasks.md): effective_view = rating >= 3 (dense) and long_view = rating >= 4
    (sparser); a two-task run predicts both, each with its own labels and base rate."""
    artifact = prepare(PrepareConfig.of(source="movielens100k", root=str(ml100k_dir), protocol="exposure",
                                        history_len=16, n_train=2000, n_valid=500, n_test=500, out=str(tmp_path)),
                       progress=False)
    cfg = load_run_config(None, {"model": {"dim": 8}, "train": {"num_threads": 1, "tasks": ["effective_view",
                                                                                             "long_view"]}},
                          arch="wukong", data=str(artifact))
    metrics = train_run(cfg, tmp_path / "run", progress=False)
    raw = pd.read_csv(ml100k_dir / "u.data", sep="\t", names=["user", "item", "rating", "ts"])
    log = SOURCES.get("movielens100k")(ml100k_dir)
    pred = pq.read_table(tmp_path / "run" / "predictions_test.parquet").to_pandas()
    rows = pq.read_table(artifact / "test_targets.parquet").column("row").to_numpy()
    assert np.array_equal(pred["label"], log["effective_view"][rows]) and np.array_equal(
        pred["label@long_view"], log["long_view"][rows])
    assert pred["label"].mean() > pred["label@long_view"].mean() > 0  # two base rates
    assert (raw["rating"] >= 3).mean() > (raw["rating"] >= 4).mean()
    assert np.isfinite([metrics["test_auc"], metrics["test_auc@long_view"]]).all()
