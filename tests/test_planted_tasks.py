"""The planted two-task world (`two_timescales`, docs/data.md "Planted worlds"): long_view follows the session's
same-category history (reach 6 h: each further history token a model reads adds to what it can know), while
effective_view is drawn on its own and follows only the user's effective views of the last few minutes in any
category (reach 3 min: the last tokens hold all of it). So long_view gains more from retained history tokens,
and the analysis must find the slope of long_view's gain above effective_view's.

The slow test runs the real sweep and analysis on that world and checks the sign against the planted truth and
the analysis's estimate against an independent per-seed least-squares fit of the same points."""
from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import pandas as pd
import pytest
import yaml

from core.typed_config import ConfigError
from harness.sweep.schema import parse_sweep
from protocols.synthetic import WORLDS, build_log, scale_config
from protocols.synthetic.config import SignalConfig
from tests.sweep_files import RECSCALE, sweep_cmd, tiny_sweep, write_sweep


def test_the_default_world_is_the_documented_signal_and_unknown_worlds_are_refused():
    assert WORLDS["default"] == SignalConfig() and scale_config("tiny").signal == SignalConfig()
    with pytest.raises(ConfigError, match=r"unknown world 'x'; valid: default, two_timescales"):
        scale_config("tiny", world="x")


def test_two_timescales_draws_effective_view_on_its_own_at_the_stated_rates():
    """In the default world every long view is an effective view (the funnel); in the planted one the two
    labels are drawn apart, each calibrated to its base rate."""
    cfg = scale_config("small", world="two_timescales")
    cfg = type(cfg)(scale=type(cfg.scale)(users=300, exposures=120_000), signal=cfg.signal)
    log = build_log(cfg, seed=0)
    lv, ev = log.long_view.astype(bool), log.effective_view.astype(bool)
    assert abs(lv.mean() - cfg.signal.long_view_rate) < 0.02
    assert abs(ev.mean() - cfg.signal.effective_view_rate) < 0.02
    assert (lv & ~ev).mean() > 0.05  # not a funnel: many long views are not effective views
    default = build_log(type(cfg)(scale=cfg.scale), seed=0)
    assert not (default.long_view.astype(bool) & ~default.effective_view.astype(bool)).any()


def test_a_world_needs_a_generated_log_and_a_known_name(tmp_path):
    with pytest.raises(ConfigError, match=r"data\.world: unknown value 'x'"):
        parse_sweep(yaml.safe_dump(tiny_sweep("w", tmp_path, data={"world": "x"})))
    with pytest.raises(ConfigError, match=r"data\.world: only a generated synthetic log"):
        parse_sweep(yaml.safe_dump(tiny_sweep("w", tmp_path, data={"world": "two_timescales", "scale": None,
                                                                   "root": str(tmp_path)})))


def _per_seed_slopes(runs: pd.DataFrame, task_col: str) -> pd.Series:
    """Per seed: least-squares slope of ln(AUC gain over Wukong) on ln(forward FLOPs) across history lengths."""
    ref = runs[runs.arch == "wukong"].groupby("seed")[task_col].first()
    fam = runs[runs.arch == "hstu"]
    out = {}
    for seed, g in fam.groupby("seed"):
        gain = g[task_col].to_numpy() - ref[seed]
        ok = gain > 0
        out[seed] = np.polyfit(np.log(g.flops_per_target.to_numpy()[ok]), np.log(gain[ok]), 1)[0]
    return pd.Series(out)


@pytest.mark.slow
def test_the_analysis_recovers_that_the_planted_long_reach_task_scales_more_steeply(tmp_path):
    """HSTU at 2, 8 and 32 history tokens against Wukong, both tasks in one model, 3 seeds (about 3 minutes)."""
    raw = tiny_sweep(
        "planted", tmp_path / "cache",
        data={"scale": "small", "world": "two_timescales", "history_len": 8, "n_train": 30000, "n_valid": 4000,
              "n_test": 8000, "sample_seed": 42, "protocol": "exposure", "delay_s": 60},
        train={"batch_size": 256, "epochs": 1, "lr": 3.0e-3, "weight_decay": 1.0e-5, "eval_batch_size": 2048,
               "tasks": ["effective_view", "long_view"], "checkpoint_every_batches": 0},
        model={"dim": 8, "num_layers": 2, "hstu": {"num_heads": 2, "head_dim": 4}},
        grid={"arch": ["hstu", "wukong"], "history_len": [2, 8, 32], "seed": [0, 1, 2]},
        max_concurrent=2,
        analysis={"baseline": "wukong",
                  "scaling": {"reference": {"arch": "wukong", "history_len": 2}, "size_by": ["history_len"],
                              "families": ["hstu"]},
                  "questions": [{"kind": "slope_difference", "family": "hstu",
                                 "tasks": ["long_view", "effective_view"]}]})
    path = write_sweep(tmp_path, raw)
    subprocess.run([*sweep_cmd(path, tmp_path / "results")[:-2], "--num-cpus", "2"], check=True)
    subprocess.run([RECSCALE, "analyze", str(tmp_path / "results" / "planted")], check=True)
    answer = json.loads((tmp_path / "results" / "planted" / "analysis.json").read_text())["questions"][0]
    estimate = float(re.match(r"([+-]\d+\.\d+) \[", answer["answers"][0]["answer"]).group(1))
    runs = pd.read_parquet(tmp_path / "results" / "planted" / "runs.parquet")
    independent = (_per_seed_slopes(runs, "test_auc@long_view") - _per_seed_slopes(runs, "test_auc")).mean()
    assert estimate > 0 and independent > 0, (estimate, independent, answer)
