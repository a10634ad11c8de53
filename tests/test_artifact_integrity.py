"""Integrity of prepared artifacts: the manifest's size and checksum records, `recscale verify`, the size
check on every open, and `prepare` rebuilding (never reusing) a damaged or unverifiable artifact.

Each case damages one file of a copy of a tiny artifact. Checksums are recomputed here with hashlib and
sizes with os.stat, independently of `protocols.integrity`; a rebuilt artifact is compared byte for byte
with the pristine one.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from tiny_logs import random_log

from cli.main import main as cli_main
from core.errors import RecscaleError
from protocols import prepare as prepare_module
from protocols.artifact import PreparedDataset
from protocols.integrity import ArtifactDamagedError
from protocols.prepare import PrepareConfig, prepare_log

DAYS_37 = 37 * 86_400_000


def _log():
    return random_log(31, n_users=10, n_requests=600, span_ms=DAYS_37, grid_ms=60_000, with_truth=True)


def _cfg(out: Path) -> PrepareConfig:
    return PrepareConfig.of(source="synthetic", root="unused", n_train=300, n_valid=40, n_test=60, history_len=8,
                         out=str(out))


@pytest.fixture(scope="module")
def log():
    return _log()


@pytest.fixture(scope="module")
def pristine(log, tmp_path_factory) -> Path:
    return prepare_log(log, _cfg(tmp_path_factory.mktemp("pristine")))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def copy(pristine, tmp_path) -> Path:
    """A copy of the pristine artifact at the place `prepare` with `_cfg(tmp_path / 'artifacts')` looks."""
    dst = tmp_path / "artifacts" / pristine.name
    shutil.copytree(pristine, dst)
    return dst


def test_manifest_records_every_file_with_its_size_and_blake2b(pristine):
    manifest = json.loads((pristine / "manifest.json").read_text())
    record = manifest["integrity"]
    assert record["algorithm"] == "blake2b-128"
    on_disk = {k: v for k, v in _files(pristine).items() if k != "manifest.json"}
    assert set(record["files"]) == set(on_disk) and "vocab/video_id.npy" in on_disk and "history.npy" in on_disk
    for rel, data in on_disk.items():
        assert record["files"][rel] == {"bytes": len(data),
                                        "blake2b": hashlib.blake2b(data, digest_size=16).hexdigest()}
    body = {k: v for k, v in manifest.items() if k != "manifest_blake2b"}
    expected = hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=16).hexdigest()
    assert manifest["manifest_blake2b"] == expected


def test_verify_accepts_a_sound_artifact(pristine, capsys):
    assert cli_main(["verify", str(pristine)]) == 0
    assert "ok" in capsys.readouterr().out


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def _alter_manifest(path: Path) -> None:
    manifest = json.loads(path.read_text())
    manifest["vocab_sizes"]["video_id"] += 1  # still valid JSON, but not what was written
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True))


# (case id, file, damage, text the message must hold, whether a plain open already refuses it)
CASES = [
    ("truncated train_cat.npy", "train_cat.npy", _truncate, "truncated", True),
    ("truncated history.npy", "history.npy", _truncate, "truncated", True),
    ("truncated train_targets.parquet", "train_targets.parquet", _truncate, "truncated", True),
    ("truncated vocabulary", "vocab/video_id.npy", _truncate, "truncated", True),
    ("deleted test_num.npy", "test_num.npy", lambda p: p.unlink(), "missing", True),
    ("flipped byte in a vocabulary", "vocab/video_id.npy", _flip_last_byte, "checksum differs", False),
    ("flipped byte in train_cat.npy", "train_cat.npy", _flip_last_byte, "checksum differs", False),
    ("truncated manifest.json", "manifest.json", _truncate, "not valid JSON", True),
    ("altered manifest.json", "manifest.json", _alter_manifest, "differs from its recorded checksum", True),
]


@pytest.mark.fault
@pytest.mark.parametrize("name,rel,damage,text,open_refuses", CASES, ids=[c[0] for c in CASES])
def test_damaged_artifact_exit_2_names_the_file_and_prepare_rebuilds_it(
        name, rel, damage, text, open_refuses, copy, pristine, log, capsys):
    damage(copy / rel)
    # recscale verify: exit 2, message naming the file and what is wrong
    assert cli_main(["verify", str(copy)]) == 2
    err = capsys.readouterr().err
    assert str(copy / rel) in err and text in err, err
    # opening (every command that reads an artifact): sizes and the manifest are always checked
    if open_refuses:
        with pytest.raises(ArtifactDamagedError, match=text) as info:
            PreparedDataset.open(copy)
        assert str(copy / rel) in str(info.value)
        out = copy.parent.parent / "h.parquet"
        assert cli_main(["histories", str(copy), "--split", "train", "--out", str(out)]) == 2
        assert rel in capsys.readouterr().err and not out.exists()
    else:
        PreparedDataset.open(copy)  # same size: only a checksum finds it
    # prepare never hands back the damaged artifact: it rebuilds it in place, atomically
    again = prepare_log(log, _cfg(copy.parent))
    assert again == copy
    assert "rebuilding" in capsys.readouterr().err
    assert {k: v for k, v in _files(again).items() if k != "manifest.json"} == \
        {k: v for k, v in _files(pristine).items() if k != "manifest.json"}
    assert cli_main(["verify", str(again)]) == 0
    assert sorted(p.name for p in copy.parent.iterdir()) == [copy.name]  # no .tmp-/.damaged- folders left


@pytest.mark.fault
def test_deleted_manifest(copy, log, capsys):
    (copy / "manifest.json").unlink()
    with pytest.raises(RecscaleError, match="no manifest.json"):
        PreparedDataset.open(copy)
    assert cli_main(["verify", str(copy)]) == 2
    assert "manifest.json: missing" in capsys.readouterr().err
    assert prepare_log(log, _cfg(copy.parent)) == copy  # used to fail renaming onto the non-empty folder
    assert cli_main(["verify", str(copy)]) == 0


@pytest.mark.fault
def test_a_failed_rebuild_leaves_the_damaged_artifact_unverifiable_and_no_temporary_folder(
        copy, log, monkeypatch, capsys):
    _truncate(copy / "history.npy")

    def crash(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(prepare_module, "numeric_features", crash)
    with pytest.raises(RuntimeError, match="disk full"):
        prepare_log(log, _cfg(copy.parent))
    assert sorted(p.name for p in copy.parent.iterdir()) == [copy.name]
    with pytest.raises(ArtifactDamagedError, match="history.npy"):
        PreparedDataset.open(copy)  # still refused, never silently reused
    monkeypatch.undo()
    assert prepare_log(log, _cfg(copy.parent)) == copy
    assert cli_main(["verify", str(copy)]) == 0


@pytest.mark.fault
@pytest.mark.parametrize("removed", [("integrity", "manifest_blake2b"), ("manifest_blake2b",)])
def test_a_manifest_without_integrity_records_is_damaged_and_rebuilt_by_prepare(removed, copy, log, capsys):
    """No checksums (or no manifest checksum): the artifact does not open and verify refuses it (exit 2),
    naming the missing key; prepare rebuilds it under the same folder name instead of reusing it."""
    manifest = json.loads((copy / "manifest.json").read_text())
    for key in removed:
        del manifest[key]
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    with pytest.raises(ArtifactDamagedError, match=removed[0]):
        PreparedDataset.open(copy)
    assert cli_main(["verify", str(copy)]) == 2
    assert removed[0] in capsys.readouterr().err
    assert prepare_log(log, _cfg(copy.parent)) == copy
    assert "integrity" in json.loads((copy / "manifest.json").read_text())
    assert cli_main(["verify", str(copy)]) == 0


@pytest.mark.fault
def test_verify_of_a_missing_folder_exits_2(tmp_path, capsys):
    assert cli_main(["verify", str(tmp_path / "nope")]) == 2
    assert "no such folder" in capsys.readouterr().err


def _flip_middle_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _train_argv(art: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--arch", "wukong", "--data", str(art), "--set", "dim=8", "--set", "train.num_threads=1",
            "--out", str(out), "--no-progress", *extra]


@pytest.mark.fault
def test_train_refuses_an_artifact_with_one_flipped_byte_in_any_file(pristine, tmp_path, capsys):
    """Every file of the artifact (the manifest too), one at a time: `recscale train` exits 2 naming it and
    writes no run folder; the sizes are unchanged, so only the checksums can tell."""
    names = sorted(_files(pristine))
    assert len(names) > 20 and "history.npy" in names and "manifest.json" in names
    for rel in names:
        art = tmp_path / rel.replace("/", "_") / pristine.name
        shutil.copytree(pristine, art)
        size = (art / rel).stat().st_size
        _flip_middle_byte(art / rel)
        assert (art / rel).stat().st_size == size and (art / rel).read_bytes() != (pristine / rel).read_bytes()
        out = art.parent / "run"
        assert cli_main(_train_argv(art, out)) == 2, rel
        err = capsys.readouterr().err
        assert str(art / rel) in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists(), rel


@pytest.mark.fault
def test_train_subprocess_refuses_a_flipped_history_and_no_verify_skips_the_check(pristine, tmp_path):
    import os
    import subprocess
    import sys

    art = tmp_path / pristine.name
    shutil.copytree(pristine, art)
    _flip_middle_byte(art / "exposure_ts.npy")  # a timestamp's bits: training still runs on it
    cli = [sys.executable, "-m", "cli"]
    env = {**os.environ, "RECSCALE_MALLOC_REEXEC": "1"}
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([*cli, *_train_argv(art, tmp_path / "run")], capture_output=True, text=True, env=env,
                          cwd=repo, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"recscale train: error: {art / 'exposure_ts.npy'}: checksum differs from the manifest's (content damaged); "
        "rerun `recscale prepare` with the same settings to rebuild it"), proc.stderr
    assert not (tmp_path / "run").exists()
    proc = subprocess.run([*cli, *_train_argv(art, tmp_path / "run", "--no-verify")], capture_output=True,
                          text=True, env=env, cwd=repo, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "run" / "metrics.json").exists()


@pytest.mark.fault
def test_verifying_a_large_artifact_shows_progress(pristine, tmp_path, monkeypatch, capsys):
    from protocols import integrity

    total = sum(len(d) for rel, d in _files(pristine).items() if rel != "manifest.json")
    monkeypatch.setattr(integrity, "PROGRESS_MIN_BYTES", total)  # this artifact counts as large
    PreparedDataset.open(pristine, verify=True, progress=True)
    assert f"verifying {pristine.name}" in capsys.readouterr().err
    monkeypatch.setattr(integrity, "PROGRESS_MIN_BYTES", total + 1)
    PreparedDataset.open(pristine, verify=True, progress=True)
    assert "verifying" not in capsys.readouterr().err
