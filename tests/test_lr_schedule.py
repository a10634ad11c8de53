"""The learning-rate schedule (harness.train.factor, harness.config.ScheduleConfig): the factor against hand-computed
values, the config rules of `recipe`, and a run with a schedule that is interrupted and resumed ending bit-identical
to an uninterrupted one."""
from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest
import torch

from core.typed_config import ConfigError
from harness.config import ScheduleConfig, TrainConfig, load_run_config, run_config_dict
from harness.train import LRSchedule, factor, train_run
from tests.faults import Interrupted, interrupt_training_after
from tests.fixtures_data import TINY_SPLITS, tiny_artifact, tiny_log  # noqa: F401


def test_factor_by_hand():
    cos = ScheduleConfig(kind="cosine", warmup_steps=2, floor=0.1)
    # total 12: warm-up steps 0, 1 (0.5, 1.0); decay from step 2 (p=0) to step 11 (p=1)
    assert [factor(cos, t, 12) for t in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert factor(cos, 11, 12) == pytest.approx(0.1)
    assert factor(cos, 2 + 4.5, 12) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway: cos(pi/2) = 0
    lin = ScheduleConfig(kind="linear", warmup_fraction=0.25, floor=0.0)
    assert [factor(lin, t, 8) for t in range(8)] == pytest.approx([0.5, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.0])
    assert all(factor(ScheduleConfig(), t, 5) == 1.0 for t in range(5))


def test_schedule_sets_each_group_from_its_own_base_rate():
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([{"params": [w]}, {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": 0.5}], lr=1.0)
    s = LRSchedule(ScheduleConfig(kind="linear", floor=0.0), [opt], steps_per_epoch=3, epochs=2)
    s.apply(1, 1)  # global step 4 of 6: p = 0.8
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.2, 0.1])
    const = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    LRSchedule(ScheduleConfig(), [const], steps_per_epoch=3, epochs=1).apply(0, 2)
    assert const.param_groups[0]["lr"] == 1e-3


def test_recipe_seed_refuses_a_schedule_and_keeps_config_yaml_as_before():
    with pytest.raises(ConfigError, match=r"train.schedule.kind: recipe seed"):
        TrainConfig(schedule=ScheduleConfig(kind="cosine"))
    with pytest.raises(ConfigError, match=r"train.schedule.warmup_fraction: give warmup_steps or"):
        ScheduleConfig(warmup_steps=3, warmup_fraction=0.1)
    seed = run_config_dict(load_run_config(None, {}, arch="whale", data="x"))
    assert "recipe" not in seed["train"] and "schedule" not in seed["train"]
    custom = run_config_dict(load_run_config(None, {"train": {"recipe": "custom", "schedule": {"kind": "linear"}}},
                                             arch="whale", data="x"))
    assert custom["train"]["schedule"]["kind"] == "linear"


SCHEDULED = {"recipe": "custom", "schedule": {"kind": "cosine", "warmup_fraction": 0.3, "floor": 0.1},
             "epochs": 2, "checkpoint_every_batches": 2, "num_threads": 1, "device": "cpu", "lr": 3e-3}


def _cfg(data, **train):
    return load_run_config(None, {"model": {"dim": 16}, "train": train}, arch="whale", data=str(data))


def _quality(m):
    return {k: v for k, v in m.items() if k.startswith(("valid_", "test_"))}


def test_scheduled_run_interrupted_and_resumed_is_bit_identical(tiny_artifact, tmp_path):
    full = train_run(_cfg(tiny_artifact, **SCHEDULED), tmp_path / "full", progress=False)
    constant = train_run(_cfg(tiny_artifact, **{**SCHEDULED, "recipe": "seed", "schedule": {}}), tmp_path / "const",
                         progress=False)
    assert _quality(full) != _quality(constant)  # the schedule is applied
    steps_per_epoch = math.ceil(TINY_SPLITS["n_train"] / 256)
    with interrupt_training_after(steps_per_epoch + 3), pytest.raises(Interrupted):  # mid second epoch
        train_run(_cfg(tiny_artifact, **SCHEDULED), tmp_path / "killed", progress=False)
    torch.manual_seed(999)
    resumed = train_run(_cfg(tiny_artifact, **SCHEDULED), tmp_path / "killed", resume=True, progress=False)
    assert _quality(resumed) == _quality(full)
    assert resumed["train_loss"] == full["train_loss"]
    for split in ("valid", "test"):
        assert pq.read_table(tmp_path / "full" / f"predictions_{split}.parquet").equals(
            pq.read_table(tmp_path / "killed" / f"predictions_{split}.parquet"))
