"""A sweep on a two-node Ray cluster, both nodes started on this machine with `ray start` (a head and a
second node joining it with `--address`), each declaring one CPU and a custom resource the trials ask for.

- Trials run on both nodes (runs.parquet's `ray_node` column names two nodes) and every result is
  collected. The driver is a real `recscale sweep --address` process whose environment alone holds
  RECSCALE_MODEL_PATH, the folder of an out-of-tree model (wukong.py copied under a new name): neither
  node was started with it, so the copied model's trials train only if the variable reaches the remote
  workers through the job's runtime_env.
- A second node that cannot read the prepared data (started in a mount namespace of its own, with an
  empty tmpfs over the data folder) fails its trial with one line naming the artifact path and the node,
  where the driver prepared it and the head could read it. This is the shared-storage assumption
  (docs/sweeps.md): every node must see the driver's artifact and results folders at the same path.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.ray_cluster import VENV_BIN, ray_node

REPO = Path(__file__).resolve().parents[1]


def _sweep_file(tmp_path: Path, cache: Path, archs: list[str], custom: dict[str, float]) -> Path:
    path = tmp_path / "two_nodes.yaml"
    path.write_text(yaml.safe_dump({
        "name": "two_nodes",
        "data": {"source": "synthetic", "scale": "tiny", "history_len": 8, "n_train": 256, "n_valid": 128,
                 "n_test": 128, "cache": str(cache)},
        "train": {"batch_size": 64, "eval_batch_size": 256, "device": "cpu"},
        "model": {"dim": 8, "num_layers": 1},
        "grid": {"arch": archs, "seed": [0, 1]},
        "resources": {"cpu": 1, "custom": custom},
        "max_concurrent": 2,
        "max_failures": 0,
    }))
    return path


def _model_path(tmp_path: Path) -> Path:
    """A folder holding wukong.py registered as `wukong_remote` (the one-file rule for new models)."""
    folder = tmp_path / "models"
    folder.mkdir()
    source, n = re.subn(r'@register\("wukong"', '@register("wukong_remote"',
                        (REPO / "architectures" / "wukong.py").read_text())
    assert n == 1
    (folder / "wukong_remote.py").write_text(source)
    return folder


def _sweep(sweep_file: Path, results: Path, address: str, env: dict[str, str],
           nodes: list[tuple[subprocess.Popen, Path]]) -> subprocess.CompletedProcess:
    """`recscale sweep --address` once both nodes have joined (retried while the cluster starts)."""
    deadline = time.time() + 120
    while True:
        for proc, log in nodes:
            assert proc.poll() is None, f"a Ray node exited early:\n{log.read_text()[-3000:]}"
        run = subprocess.run([str(VENV_BIN / "recscale"), "sweep", str(sweep_file), "--results", str(results),
                              "--address", address], env=env, capture_output=True, text=True, timeout=600)
        starting = ("cannot join", "no Ray cluster answers", "is not a Ray cluster", "the Ray cluster has 0")
        if run.returncode == 0 or not any(m in run.stderr for m in starting) or time.time() > deadline:
            return run
        shutil.rmtree(results, ignore_errors=True)
        time.sleep(2)


def _node_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("RECSCALE_")}


def test_trials_run_on_both_nodes_and_remote_workers_get_the_model_path(tmp_path):
    env = {**_node_env(), "RAY_AUTH_MODE": "token"}
    slot = '--resources={"rs_slot": 1}'
    with ray_node(tmp_path / "head.log", "--num-cpus=1", slot, env=env) as (address, head, head_log), \
            ray_node(tmp_path / "second.log", "--num-cpus=1", slot, head_address=address, env=env) as (_, second, log):
        sweep = _sweep_file(tmp_path, tmp_path / "cache", ["wukong", "wukong_remote"], {"rs_slot": 1})
        driver_env = {**env, "RECSCALE_MODEL_PATH": str(_model_path(tmp_path))}
        run = _sweep(sweep, tmp_path / "results", address, driver_env, [(head, head_log), (second, log)])
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    table = pd.read_parquet(tmp_path / "results" / "two_nodes" / "runs.parquet")
    assert sorted(zip(table["arch"], table["seed"])) == [("wukong", 0), ("wukong", 1), ("wukong_remote", 0),
                                                         ("wukong_remote", 1)]
    assert table["test_auc"].notna().all()
    assert table["ray_node"].nunique() == 2, table[["trial_id", "ray_node"]]


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare (util-linux)")
def test_a_node_that_cannot_read_the_artifact_fails_naming_the_path_and_the_node(tmp_path):
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            f"mount -t tmpfs tmpfs {tmp_path}"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.strip()}")
    env = {**_node_env(), "RAY_AUTH_MODE": "token"}
    cache = tmp_path / "cache"
    cache.mkdir()
    hide = f"mount -t tmpfs tmpfs {cache} && exec \"$0\" \"$@\""  # this node sees an empty folder at `cache`
    with ray_node(tmp_path / "head.log", "--num-cpus=1", env=env) as (address, head, head_log), \
            ray_node(tmp_path / "second.log", "--num-cpus=1", '--resources={"rs_second": 1}', head_address=address,
                     prefix=["unshare", "--mount", "--propagation", "private", "sh", "-c", hide], env=env) \
            as (_, second, log):
        sweep = _sweep_file(tmp_path, cache, ["wukong"], {"rs_second": 1})  # trials run on the second node only
        run = _sweep(sweep, tmp_path / "results", address, env, [(head, head_log), (second, log)])
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-3000:]
    artifacts = sorted(p for p in (cache / "prepared").iterdir() if p.is_dir())
    assert len(artifacts) == 1  # the driver prepared it; the second node cannot see it
    failures = [line for line in run.stderr.splitlines() if "cannot be read on Ray node" in line]
    assert failures, run.stderr[-3000:]
    assert str(artifacts[0]) in failures[0] and "shared storage" in failures[0]
    assert re.search(r"cannot be read on Ray node [0-9a-f]{12} ", failures[0]), failures[0]
