"""The committed reference studies are what the code produces today: analysing a copy of each
`results/reference/<sweep>/` (its sweep.yaml, runs.parquet and, where present, datasets.json and score
ranks) gives its committed analysis.json and report.md, and each holds the files a reference may hold and
nothing else (never run folders, checkpoints or predictions).

The committed files were computed on another machine, so they are compared as `analysis.output_diff`
says a reproduction is judged: strings and integers exactly, floats within a relative 1e-9, report
numbers within their last printed digit. Two tests show that this tolerance is right both ways: the same
reference re-analysed under two OpenBLAS kernels (forced with OPENBLAS_CORETYPE in subprocesses;
threadpoolctl names the kernel that ran) is "same", and a runs.parquet with one AUC moved by 1e-6 is
"different"."""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

from analysis.output_diff import json_differences, text_differences
from analysis.pipeline import analyze
from analysis.reference import OPTIONAL_INPUTS, REFERENCE_INPUTS

REFERENCE_ROOT = Path(__file__).resolve().parents[1] / "results" / "reference"
REFERENCES = sorted(p for p in REFERENCE_ROOT.glob("*") if p.is_dir()) if REFERENCE_ROOT.is_dir() else []
ALLOWED = {*REFERENCE_INPUTS, *OPTIONAL_INPUTS, "analysis.json", "report.md", "plots"}


def test_the_studies_the_readme_promises_are_committed():
    assert {p.name for p in REFERENCES} >= {"demo", "scaling_cpu", "helix_retained_tokens", "delay_protocol"}


@pytest.mark.parametrize("folder", REFERENCES, ids=[p.name for p in REFERENCES])
def test_reference_holds_only_shareable_files(folder):
    assert {p.name for p in folder.iterdir()} <= ALLOWED
    assert all(p.suffix == ".png" for p in (folder / "plots").iterdir())


def _copy_inputs(folder: Path, copy: Path) -> Path:
    """Copy a reference's inputs (sweep.yaml, runs.parquet, optional datasets.json / score ranks) into `copy`."""
    copy.mkdir()
    for name in (*REFERENCE_INPUTS, *OPTIONAL_INPUTS):
        if (folder / name).exists():
            shutil.copy2(folder / name, copy / name)
    return copy


def _analysed_copy(folder: Path, copy: Path) -> Path:
    """A copy of the reference's inputs, analysed there, plots included."""
    _copy_inputs(folder, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyze(copy, progress=False, plots=True)
    return copy


@pytest.mark.parametrize("folder", REFERENCES, ids=[p.name for p in REFERENCES])
def test_analysing_a_copy_reproduces_the_committed_analysis(folder, tmp_path):
    copy = _analysed_copy(folder, tmp_path / "copy-of-reference")
    assert json_differences(_json(copy), _json(folder)) == []
    assert text_differences((copy / "report.md").read_text(), (folder / "report.md").read_text()) == []
    assert sorted(p.name for p in (copy / "plots").iterdir()) == sorted(p.name for p in (folder / "plots").iterdir())


def _json(folder: Path) -> dict:
    return json.loads((folder / "analysis.json").read_text())


#: Re-analyse the folder argv[1] (plots included) and print the BLAS kernel numpy and scipy ran with.
_ANALYSE_AND_NAME_KERNEL = """
import sys, warnings
from pathlib import Path
from threadpoolctl import threadpool_info
from analysis.pipeline import analyze
warnings.simplefilter("ignore")
analyze(Path(sys.argv[1]), progress=False, plots=True)
print(sorted({lib.get("architecture") for lib in threadpool_info() if lib["user_api"] == "blas"}))
"""


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="OpenBLAS x86 kernels")
def test_reanalysis_under_two_blas_kernels_is_the_same_within_tolerance(tmp_path):
    """The demo reference (the one whose DeLong and family-comparison floats move with the kernel) re-analysed
    with OpenBLAS forced to its Haswell (AVX2) and to its Sandybridge (AVX) kernels: threadpoolctl reports
    the two kernels, and both re-analyses equal the committed one within the tolerance."""
    folder = REFERENCE_ROOT / "demo"
    kernels = {}
    for coretype in ("Haswell", "Sandybridge"):
        copy = _copy_inputs(folder, tmp_path / coretype)
        env = {**os.environ, "OPENBLAS_CORETYPE": coretype}
        proc = subprocess.run([sys.executable, "-c", _ANALYSE_AND_NAME_KERNEL, str(copy)], env=env,
                              capture_output=True, text=True, timeout=300, cwd=REFERENCE_ROOT.parents[1])
        assert proc.returncode == 0, proc.stderr[-3000:]
        kernels[coretype] = proc.stdout.strip().splitlines()[-1]
        assert json_differences(_json(copy), _json(folder)) == [], coretype
        assert text_differences((copy / "report.md").read_text(), (folder / "report.md").read_text()) == []
    assert kernels == {"Haswell": "['Haswell']", "Sandybridge": "['Sandybridge']"}


def test_a_changed_input_is_different(tmp_path):
    """One run's test AUC moved by 1e-6 (far below any seed noise) changes the analysis beyond the tolerance."""
    folder = REFERENCE_ROOT / "demo"
    copy = _copy_inputs(folder, tmp_path / "changed")
    runs = pd.read_parquet(copy / "runs.parquet")
    runs.loc[0, "test_auc"] += 1e-6
    runs.to_parquet(copy / "runs.parquet", index=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyze(copy, progress=False, plots=False)
    differences = json_differences(_json(copy), _json(folder))
    assert any("/headline" in d or "/scaling" in d for d in differences), differences[:5]


def test_plots_are_the_same_bytes_every_time(tmp_path):
    """Figures with jittered seed dots are drawn deterministically, so a regenerated reference changes its
    plots only when its numbers change."""
    folder = REFERENCE_ROOT / "delay_protocol"  # seed strips and the settings strip plot
    drawn = []
    for i in range(2):
        copy = _analysed_copy(folder, tmp_path / f"copy{i}")
        drawn.append({p.name: p.read_bytes() for p in (copy / "plots").iterdir()})
    assert {"seed_strip.png", "settings.png"} <= drawn[0].keys() and drawn[0] == drawn[1]
