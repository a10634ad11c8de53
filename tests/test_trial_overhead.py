"""Per-trial overhead savings change nothing a run reports: the FLOP count reused from the process cache
equals a fresh fvcore count, a run without the final checkpoint has the same metrics and predictions,
and the phase timings add up to the run's wall time."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import architectures
from architectures.flops import count_flops
from harness import train as T
from harness.config import load_run_config
from protocols.artifact import PreparedDataset
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)

OVER = {"model": {"dim": 8}, "train": {"num_threads": 1}}


def test_cached_cost_equals_a_fresh_count_and_no_final_checkpoint_changes_nothing(tiny_artifact, tmp_path):  # noqa: F811
    cfg = load_run_config(None, OVER, arch="whale", data=str(tiny_artifact))
    T._COST_CACHE.clear()
    full = T.train_run(cfg, tmp_path / "full", progress=False)
    assert (tmp_path / "full" / "checkpoint.pt").exists()
    lean = T.train_run(cfg, tmp_path / "lean", progress=False, final_checkpoint=False)  # cost from the cache
    assert not (tmp_path / "lean" / "checkpoint.pt").exists()
    quality = [k for k in full if k.startswith(("valid_", "test_", "oracle_"))] + ["train_loss", "flops_per_target",
                                                                                    "params_non_embedding"]
    assert {k: full[k] for k in quality} == {k: lean[k] for k in quality}
    for split in ("valid", "test"):
        assert (tmp_path / "full" / f"predictions_{split}.parquet").read_bytes() == \
            (tmp_path / "lean" / f"predictions_{split}.parquet").read_bytes()
    # independent count: fvcore on a validation batch of the same model
    ds = PreparedDataset.open(tiny_artifact)
    model = architectures.build("whale", ds.spec, cfg.model).eval()
    batch = next(ds.batches("valid", 64, seed=0))
    with torch.no_grad():
        assert lean["flops_per_target"] == count_flops(model, batch).per_target
    # a resumed finished run without a checkpoint returns its metrics
    again = T.train_run(cfg, tmp_path / "lean", resume=True, progress=False, final_checkpoint=False)
    assert again["test_auc"] == lean["test_auc"]
    for m in (full, lean):
        parts = m["train_seconds"] + m["eval_seconds"] + m["setup_seconds"]
        assert 0 < m["eval_seconds"] and parts <= m["wall_s"] + 1e-6
        assert np.isfinite(m["utilisation"])


def test_bf16_auto_is_off_on_cpu_and_explicit_values_are_kept():
    from core.typed_config import ConfigError, from_dict
    from harness.config import TrainConfig

    cpu = torch.device("cpu")
    assert TrainConfig().bf16 == "auto" and TrainConfig().use_bf16(cpu) is False  # CPU runs stay fp32
    assert from_dict(TrainConfig, {"bf16": True}).use_bf16(cpu) is True
    assert from_dict(TrainConfig, {"bf16": "false"}).use_bf16(cpu) is False
    with pytest.raises(ConfigError, match="bf16"):
        from_dict(TrainConfig, {"bf16": "sometimes"}, prefix="train.")
