"""The committed reference studies are what the code produces today: analysing a copy of each
`results/reference/<sweep>/` (its sweep.yaml, runs.parquet and, where present, datasets.json and score ranks) gives its committed analysis.json, and each
holds the files a reference may hold and nothing else (never run folders, checkpoints or predictions)."""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest

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


def _analysed_copy(folder: Path, copy: Path) -> Path:
    """Copy a reference's inputs (sweep.yaml, runs.parquet, optional datasets.json / score ranks) into `copy`
    and analyse it there, plots included."""
    copy.mkdir()
    for name in (*REFERENCE_INPUTS, *OPTIONAL_INPUTS):
        if (folder / name).exists():
            shutil.copy2(folder / name, copy / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyze(copy, progress=False, plots=True)
    return copy


@pytest.mark.parametrize("folder", REFERENCES, ids=[p.name for p in REFERENCES])
def test_analysing_a_copy_reproduces_the_committed_analysis(folder, tmp_path):
    copy = _analysed_copy(folder, tmp_path / "copy-of-reference")
    assert json.loads((copy / "analysis.json").read_text()) == json.loads((folder / "analysis.json").read_text())
    assert (copy / "report.md").read_text() == (folder / "report.md").read_text()
    assert sorted(p.name for p in (copy / "plots").iterdir()) == sorted(p.name for p in (folder / "plots").iterdir())


def test_plots_are_the_same_bytes_every_time(tmp_path):
    """Figures with jittered seed dots are drawn deterministically, so a regenerated reference changes its
    plots only when its numbers change."""
    folder = REFERENCE_ROOT / "delay_protocol"  # seed strips and the settings strip plot
    drawn = []
    for i in range(2):
        copy = _analysed_copy(folder, tmp_path / f"copy{i}")
        drawn.append({p.name: p.read_bytes() for p in (copy / "plots").iterdir()})
    assert {"seed_strip.png", "settings.png"} <= drawn[0].keys() and drawn[0] == drawn[1]
