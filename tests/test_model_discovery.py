"""Model files from outside the repository that cannot be used are skipped and named, never fatal: a file on
RECSCALE_MODEL_PATH that fails to import, one named like a built-in (deepfm.py), and one that keeps a
built-in's registered name. `recscale list` (a real subprocess) still lists every other model, names each
file with why, and prints no traceback; a model still builds and counts its FLOPs beside them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run(args: list[str], model_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RECSCALE_MODEL_PATH": str(model_path), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def test_unusable_model_files_are_named_and_the_others_still_list_and_run(tmp_path):
    deepfm = (REPO / "architectures" / "deepfm.py").read_text()
    assert deepfm.count('@register("deepfm"') == 1
    (tmp_path / "broken_model.py").write_text("import not_a_module_anywhere\n")
    (tmp_path / "deepfm.py").write_text(deepfm.replace('@register("deepfm"', '@register("deepfm_shadow"'))
    (tmp_path / "deepfm_keeps_name.py").write_text(deepfm)
    (tmp_path / "fine_copy.py").write_text(deepfm.replace('@register("deepfm"', '@register("deepfm_fine"'))

    listed = _run(["list", "--json"], tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    out = json.loads(listed.stdout)
    assert {"deepfm", "whale", "wukong", "hstu", "deepfm_fine"} <= set(out["architectures"])
    assert "deepfm_shadow" not in out["architectures"]  # the built-in deepfm.py wins; the copy is named
    problems = out["model_file_problems"]
    assert len(problems) == 3, problems
    by_file = {p.split(":")[0]: p for p in problems}
    assert "No module named 'not_a_module_anywhere'" in by_file[str(tmp_path / "broken_model.py")]
    assert str(REPO / "architectures" / "deepfm.py") in by_file[str(tmp_path / "deepfm.py")]
    keeps = by_file[str(tmp_path / "deepfm_keeps_name.py")]
    assert "'deepfm'" in keeps and str(REPO / "architectures" / "deepfm.py") in keeps
    for p in problems:  # also on stderr, once each
        assert listed.stderr.count(p) == 1

    text = _run(["list"], tmp_path)
    assert text.returncode == 0 and "model files not loaded:" in text.stdout and "broken_model.py" in text.stdout

    flops = _run(["flops", "--arch", "deepfm_fine", "--set", "history_len=16", "--json"], tmp_path)
    assert flops.returncode == 0, flops.stderr
    assert json.loads(flops.stdout)["flops_per_target"] > 0
