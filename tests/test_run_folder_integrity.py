"""Run folders read by `recscale metrics --recompute` and `recscale analyze`: a truncated or damaged
metrics.json or prediction file is refused with exit 2, naming the file and what is wrong.

metrics.json records the size and blake2b of each prediction file (protocols/integrity.py, the record the
prepared artifacts use); the expected values here come from hashlib and the file sizes, not from the code
under test. The advice the message gives (delete metrics.json, resume) is followed and must give back a
run whose recomputed metrics equal metrics.json.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from cli.main import main as cli_main
from harness import run_folder as RF
from harness.config import load_run_config
from harness.train import train_run
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)
from tests.test_analyze_cli import ANALYSIS, make_results


@pytest.fixture(scope="module")
def finished_run(tiny_artifact, tmp_path_factory) -> Path:  # noqa: F811
    cfg = load_run_config(None, {"model": {"dim": 8}, "train": {"num_threads": 1, "batch_size": 128}},
                          arch="wukong", data=str(tiny_artifact))
    out = tmp_path_factory.mktemp("runs") / "finished"
    train_run(cfg, out, progress=False)
    return out


def test_metrics_json_records_each_prediction_file(finished_run):
    record = json.loads((finished_run / "metrics.json").read_text())["integrity"]
    assert record["algorithm"] == "blake2b-128"
    for split in ("valid", "test"):
        data = (finished_run / f"predictions_{split}.parquet").read_bytes()
        assert record["files"][f"predictions_{split}.parquet"] == {
            "bytes": len(data), "blake2b": hashlib.blake2b(data, digest_size=16).hexdigest()}


def test_a_copied_run_is_whole_and_read_back_without_training(finished_run, tiny_artifact, tmp_path):  # noqa: F811
    """`run_folder.copy_run` (a grid run reusing its tuning stage's twin): every file but the trial record, byte for
    byte, the copy keeping its own record; `train_run(resume=True)` with the run's config reads it back untouched."""
    src, dst = tmp_path / "tuning-run", tmp_path / "grid-run"
    shutil.copytree(finished_run, src)
    (src / "sweep_trial.json").write_text('{"stage": "tuning"}')
    (dst / "curves").mkdir(parents=True)  # a start killed before its first checkpoint left its own curves
    (dst / "curves" / "events.out.tfevents.stale").write_bytes(b"stale")
    (dst / "sweep_trial.json").write_text('{"stage": "grid"}')
    RF.copy_run(src, dst)

    def files(folder: Path) -> dict[Path, bytes]:
        return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    assert files(dst) == {**files(src), Path("sweep_trial.json"): b'{"stage": "grid"}'}
    cfg = load_run_config(None, {"model": {"dim": 8}, "train": {"num_threads": 1, "batch_size": 128}},
                          arch="wukong", data=str(tiny_artifact))
    assert train_run(cfg, dst, resume=True, progress=False) == json.loads((src / "metrics.json").read_text())
    assert files(dst) == {**files(src), Path("sweep_trial.json"): b'{"stage": "grid"}'}  # nothing rewritten


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


DAMAGE = {
    "truncated metrics.json": ("metrics.json", _truncate, "not valid JSON"),
    "metrics.json not an object": ("metrics.json", lambda p: p.write_text("[1, 2]\n"), "not a JSON object"),
    "truncated predictions": ("predictions_test.parquet", _truncate, "bytes, metrics.json records"),
    "flipped byte in predictions": ("predictions_valid.parquet", _flip,
                                    "checksum differs from metrics.json's (content damaged)"),
}


@pytest.mark.fault
@pytest.mark.parametrize("case", DAMAGE, ids=list(DAMAGE))
def test_recompute_of_a_damaged_run_exits_2_naming_the_file(finished_run, tiny_artifact, tmp_path, capsys,
                                                            case):  # noqa: F811
    name, damage, what = DAMAGE[case]
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    damage(run / name)
    assert cli_main(["metrics", str(run), "--recompute"]) == 2
    err = capsys.readouterr().err
    assert f"{run / name}: " in err and what in err and "Traceback" not in err
    assert "--resume" in err  # says how to rebuild it
    # the advice works: delete metrics.json, resume (the final checkpoint is evaluated again)
    (run / "metrics.json").unlink()
    assert cli_main(["train", "--config", str(run / "config.yaml"), "--out", str(run), "--resume",
                     "--no-progress"]) == 0
    capsys.readouterr()
    assert cli_main(["metrics", str(run), "--recompute"]) == 0
    for split in ("valid", "test"):
        assert (run / f"predictions_{split}.parquet").read_bytes() == \
            (finished_run / f"predictions_{split}.parquet").read_bytes()


@pytest.mark.fault
def test_damaged_config_yaml_is_named(finished_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    (run / "config.yaml").write_text("arch: [unclosed\n")
    assert cli_main(["metrics", str(run), "--recompute"]) == 2
    assert f"{run / 'config.yaml'}: invalid YAML" in capsys.readouterr().err


@pytest.mark.fault
@pytest.mark.parametrize("case",
                         ["truncated predictions", "flipped byte in sealed predictions", "truncated metrics.json"])
def test_analyze_of_a_damaged_run_exits_2_naming_the_file(tmp_path, capsys, case):
    root = make_results(tmp_path / "sweep", analysis=ANALYSIS)
    run = root / "runs" / "whale_d64_s1_delay60"
    if case == "truncated predictions":  # a hand-made run has no record: the parquet reader finds it
        target, what = run / "predictions_test.parquet", "cannot be read as parquet"
        _truncate(target)
    elif case == "flipped byte in sealed predictions":
        RF.write_metrics(run, json.loads((run / "metrics.json").read_text()))  # record the predictions
        target, what = run / "predictions_test.parquet", "checksum differs from metrics.json's"
        _flip(target)
    else:
        target, what = run / "metrics.json", "not valid JSON"
        _truncate(target)
    assert main_analyze(root) == 2
    err = capsys.readouterr().err
    assert f"{target}: " in err and what in err and "Traceback" not in err
    assert not (root / "report.md").exists() and not (root / "analysis.json").exists()


def main_analyze(root: Path) -> int:
    return cli_main(["analyze", str(root), "--no-plots"])
