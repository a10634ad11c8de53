"""Reference semantics: a reference inside a fitted family, or one matching several sizes, is refused by
`recscale analyze` and by `recscale sweep --dry-run` with the reference and the family named; families
default to every architecture but the reference's; new analysis keys are validated at load time."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.config import analysis_config
from cli.main import main
from core.typed_config import ConfigError


def _sweep_folder(root: Path, scaling: dict) -> Path:
    rows = []
    for seed in (0, 1, 2):
        for size, flops, gain in (("S", 3e7, 0.010), ("M", 7e7, 0.012), ("L", 17e7, 0.014)):
            rows.append({"arch": "helix", "seed": seed, "protocol": "exposure", "model.size": size,
                         "test_auc": 0.70 + gain,
                         "test_logloss": 0.49, "flops_per_target": flops})
        for dim, flops in ((32, 1e5), (64, 4e5)):
            rows.append({"arch": "wukong", "seed": seed, "protocol": "exposure", "model.dim": dim,
                         "test_auc": 0.69 + dim * 1e-5,
                         "test_logloss": 0.50, "flops_per_target": flops})
    root.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "runs.parquet")
    (root / "sweep.yaml").write_text(yaml.safe_dump({"name": "ref", "analysis": {"scaling": scaling}}))
    return root


def test_reference_inside_a_fitted_family_is_refused_by_analyze(tmp_path, capsys):
    root = _sweep_folder(tmp_path / "a", {"reference": {"arch": "helix", "model.size": "S"}, "families": ["helix"]})
    assert main(["analyze", str(root), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "analysis.scaling.reference {arch: helix, model.size: S}" in err
    assert "fitted family 'helix'" in err
    assert not (root / "report.md").exists()


def test_reference_matching_several_sizes_is_refused_with_the_settings_listed(tmp_path, capsys):
    root = _sweep_folder(tmp_path / "b", {"reference": {"arch": "wukong"}})
    assert main(["analyze", str(root), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "{arch: wukong}" in err and "2 model settings" in err
    assert "model.dim=32" in err and "model.dim=64" in err


def test_families_default_to_every_architecture_but_the_references(tmp_path, capsys):
    import json

    root = _sweep_folder(tmp_path / "c", {"reference": {"arch": "wukong", "model.dim": 64}})
    assert main(["analyze", str(root), "--no-plots", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert {f["family"] for f in summary["scaling"]} == {"helix"}
    assert summary["reference"]["families"] == ["helix"]
    auc = next(f for f in summary["scaling"] if f["metric"] == "auc")
    assert auc["reference"] == "wukong (dim=64)"
    assert [p["gain"] for p in auc["points"]] == pytest.approx([g + 0.70 - 0.69064 for g in (0.010, 0.012, 0.014)])


def test_reference_matching_several_architectures_or_none_is_refused(tmp_path, capsys):
    root = _sweep_folder(tmp_path / "d", {"reference": {"protocol": "exposure"}})
    assert main(["analyze", str(root), "--no-plots"]) == 2
    assert "several architectures (helix, wukong)" in capsys.readouterr().err
    root2 = _sweep_folder(tmp_path / "e", {"reference": {"arch": "whale"}})
    assert main(["analyze", str(root2), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "matches no run" in err and "{arch: whale}" in err


SWEEP = """
name: t
data: {source: synthetic, scale: tiny, history_len: 8, n_train: 100, n_valid: 50, n_test: 50}
model: {dim: 8}
grid:
  arch: [wukong, whale]
  model.dim: [8, 16]
  seed: [0]
"""


def _dry_run(tmp_path: Path, scaling: dict) -> tuple[int, Path]:
    raw = yaml.safe_load(SWEEP)
    raw["analysis"] = {"scaling": scaling}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return main(["sweep", str(path), "--dry-run", "--results", str(tmp_path / "res")]), path


def test_dry_run_refuses_a_reference_inside_a_fitted_family(tmp_path, capsys):
    rc, path = _dry_run(tmp_path, {"reference": {"arch": "whale", "model.dim": 8}, "families": ["whale"]})
    err = capsys.readouterr().err
    assert rc == 2 and "{arch: whale, model.dim: 8}" in err and "fitted family 'whale'" in err


def test_dry_run_refuses_a_reference_with_several_sizes_and_accepts_a_fixed_one(tmp_path, capsys):
    rc, _ = _dry_run(tmp_path, {"reference": {"arch": "wukong"}})
    err = capsys.readouterr().err
    assert rc == 2 and "model.dim=8" in err and "model.dim=16" in err
    rc, _ = _dry_run(tmp_path, {"reference": {"arch": "wukong", "model.dim": 8}})
    out = capsys.readouterr().out
    assert rc == 0 and "scaling reference wukong (dim=8); fitted against it: whale (2 sizes)" in out


@pytest.mark.parametrize("key, value, words", [
    ("x_axis", "backward", ["analysis.scaling.x_axis", "'forward'", "'training'"]),
    ("x_unit", "mflops", ["analysis.scaling.x_unit", "'flops'", "'gflops'"]),
    ("gain", "percent", ["analysis.scaling.gain", "'absolute'", "'relative'"]),
    ("compare", [["whale"]], ["analysis.scaling.compare[0]", "two different family names"]),
    ("compare", [["whale", "whale"]], ["analysis.scaling.compare[0]"]),
])
def test_new_scaling_keys_are_validated_at_load_time(key, value, words):
    with pytest.raises(ConfigError) as info:
        analysis_config({"scaling": {key: value}})
    for w in words:
        assert w in str(info.value)


def test_defaults_of_the_new_keys():
    s = analysis_config(None).scaling
    assert (s.x_axis, s.x_unit, s.gain, s.compare) == ("forward", "flops", "absolute", [])
