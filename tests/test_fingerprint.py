"""Where a run ran, and what a change of kernels does to it.

- The fingerprint names the kernels that were forced: torch's CPU capability under ATEN_CPU_CAPABILITY
  and OpenBLAS's kernel under OPENBLAS_CORETYPE (read back from torch and threadpoolctl in a fresh
  process), and a real training run records it in metrics.json.
- The thread policy a run trained under: OMP_WAIT_POLICY and the CPUs it may use with any OpenMP binding,
  set in a fresh process and read back.
- A cross-ISA difference, shown on any machine: three seeds of a tiny WHALE trained in a subprocess with
  torch's native kernels and in one forced to its plain C++ kernels (ATEN_CPU_CAPABILITY=default). The
  reproduction check then finds the two fingerprints differing in `torch_cpu_capability` and judges the
  differences against the seeds' spread: within tolerance (bit-exact where the native kernels are the
  plain ones, as on a CPU without vector units torch uses).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.reference import compare_with_reference
from harness.fingerprint import fingerprint_differences, machine_fingerprint
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)

REPO = Path(__file__).resolve().parents[1]


def _fingerprint_in(env: dict[str, str]) -> dict:
    code = "import json; from harness.fingerprint import machine_fingerprint; print(json.dumps(machine_fingerprint()))"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, cwd=REPO, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return json.loads(out)


def test_forced_kernels_are_recorded():
    native = machine_fingerprint()
    assert native["env_torch_cpu_capability"] and native["env_torch"] and native["env_threads"] >= 1
    forced = _fingerprint_in({"ATEN_CPU_CAPABILITY": "default", "OPENBLAS_CORETYPE": "Sandybridge"})
    assert forced["env_torch_cpu_capability"] == "DEFAULT"
    assert "ATEN_CPU_CAPABILITY=default" in forced["env_overrides"]
    if native["env_numpy_blas"].startswith("openblas") and os.uname().machine == "x86_64":
        assert forced["env_numpy_blas"].endswith(" Sandybridge")
    keys = {k for k, _, _ in fingerprint_differences(forced, native)}
    assert "overrides" in keys and ("torch_cpu_capability" in keys) == (native["env_torch_cpu_capability"] != "DEFAULT")


def _expand(ranges: str) -> set[int]:
    """`0-2,5` -> {0, 1, 2, 5}."""
    out: set[int] = set()
    for part in ranges.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def test_thread_policy_is_recorded():
    plain = machine_fingerprint()
    assert plain["env_omp_wait_policy"] == os.environ.get("OMP_WAIT_POLICY", "")
    set_ = _fingerprint_in({"OMP_WAIT_POLICY": "PASSIVE", "OMP_PROC_BIND": "close"})
    assert set_["env_omp_wait_policy"] == "PASSIVE"
    cpus, *binding = set_["env_cpu_affinity"].split(" ")
    assert _expand(plain["env_cpu_affinity"]) == os.sched_getaffinity(0)
    # binding pins the process's first thread once OpenMP starts: a non-empty part of the CPUs it had
    assert _expand(cpus) and _expand(cpus) <= os.sched_getaffinity(0) and binding == ["OMP_PROC_BIND=close"]
    assert {k for k, _, _ in fingerprint_differences(set_, plain)} >= {"omp_wait_policy", "cpu_affinity"}


#: Train three seeds of a tiny WHALE on the artifact argv[1] and write their runs table to argv[2].
_TRAIN_THREE_SEEDS = """
import sys
from pathlib import Path
import pandas as pd
import torch
from harness.config import load_run_config
from harness.train import train_run
torch.set_num_threads(1)
rows = []
for seed in (0, 1, 2):
    cfg = load_run_config(None, {"model": {"dim": 8, "num_layers": 1, "history_len": 16},
                                 "train": {"batch_size": 64, "num_threads": 1, "device": "cpu"}, "seed": seed},
                          arch="whale", data=sys.argv[1])
    m = train_run(cfg, Path(sys.argv[2]) / f"run{seed}", progress=False)
    rows.append({"trial_id": f"whale-seed{seed}", "arch": "whale", "seed": seed,
                 **{k: v for k, v in m.items() if k in ("test_auc", "test_logloss") or k.startswith("env_")}})
pd.DataFrame(rows).to_parquet(Path(sys.argv[2]) / "runs.parquet", index=False)
"""


def test_a_cross_isa_difference_is_judged_against_seed_noise(tiny_artifact, tmp_path):  # noqa: F811
    for name, env in (("native", {}), ("plain", {"ATEN_CPU_CAPABILITY": "default"})):
        (tmp_path / name).mkdir()
        run = subprocess.run([sys.executable, "-c", _TRAIN_THREE_SEEDS, str(tiny_artifact), str(tmp_path / name)],
                             env={**os.environ, **env}, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
    check = compare_with_reference(tmp_path / "plain", tmp_path / "native")
    native = pd.read_parquet(tmp_path / "native" / "runs.parquet")
    changed = {k for k, _, _ in check.fingerprint_differences}
    if native["env_torch_cpu_capability"].iloc[0] == "DEFAULT":
        pytest.skip("torch's native kernels here are its plain ones: nothing to force")
    assert "torch_cpu_capability" in changed
    assert check.matched == 3 and check.verdict in ("within tolerance", "bit-exact"), check
    sd = native["test_auc"].std(ddof=1)
    assert check.metrics["test_auc"].worst_tolerance == pytest.approx(2 * sd)
