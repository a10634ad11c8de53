"""A data protocol added as ONE file outside the repository (on RECSCALE_PROTOCOL_PATH) with a parameter no
built-in protocol has (`window_s`) is swept end to end through the real CLI: the sweep accepts the parameter
as a grid axis, every dataset's history follows the file's rule (checked target by target against a brute
force over the log), the parameter is a runs.parquet column, and `recscale analyze` treats it as a data
setting (the comparison over it pairs the two datasets by seed and reports their arm facts). The file also
declares `delay_s = 0.0`, and that default is the one used (it was 60 s when the default lived in prepare).

Discovery errors are unit-tested beside it: a broken file, a file named like a built-in module, a file that
keeps a built-in's registered name and a class that breaks the protocol contract are each skipped and named
by `recscale list` while the others still load; an unknown source is an error naming the registered ones."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

#: The whole protocol: one file, relative imports as if it were in `protocols/`.
RECENT_WINDOW = '''
"""`recent_window`: the exposure protocol's legal history, restricted to the last `window_s` seconds."""
from dataclasses import dataclass

import numpy as np

from . import register
from .availability import UserTimeline
from .history import HistoryIndex
from .legal_history import PAD_ROW, legal_history_rows


@register("recent_window")
@dataclass(frozen=True)
class RecentWindowProtocol:
    history_len: int = 16
    window_s: float = 3600.0
    delay_s: float = 0.0

    def build(self, log, request_rows, *, timeline=None, progress=False):
        timeline = (timeline or UserTimeline.build(log)).with_delay(int(round(self.delay_s * 1000)))
        t = log["request_timestamp"][request_rows]
        rows = legal_history_rows(timeline, log["user_id"][request_rows], t, self.history_len, progress=progress)
        ts = log["request_timestamp"][np.maximum(rows, 0)]
        keep = (rows != PAD_ROW) & (ts >= t[:, None] - int(round(self.window_s * 1000)))
        order = np.argsort(~keep, axis=1, kind="stable")  # kept entries first, in their ascending order
        return HistoryIndex(np.where(np.take_along_axis(keep, order, 1), np.take_along_axis(rows, order, 1), PAD_ROW))
'''
WINDOWS = [600, 86400]
SEEDS = [0, 1]


def _cli(args: list[str], path: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "RECSCALE_PROTOCOL_PATH": str(path), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, **kw)


def test_one_file_protocol_with_a_new_parameter_sweeps_end_to_end(tmp_path):
    from tiny_logs import reference_availability, reference_history

    from protocols.artifact import PreparedDataset
    from protocols.recflow import load_synthetic

    path = tmp_path / "my_protocols"
    path.mkdir()
    (path / "recent_window.py").write_text(RECENT_WINDOW)
    sweep = tmp_path / "window.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "window",
        "data": {"source": "synthetic", "scale": "tiny", "protocol": "recent_window", "n_train": 256,
                 "n_valid": 128, "n_test": 192, "cache": str(tmp_path / "cache")},
        "arch": "wukong",
        "train": {"batch_size": 64, "eval_batch_size": 256, "device": "cpu", "epochs": 1},
        "model": {"dim": 8, "num_layers": 1},
        "grid": {"seed": SEEDS, "window_s": WINDOWS},
        "resources": {"cpu": 1}, "max_concurrent": 2, "max_failures": 0,
        "analysis": {"baseline": "wukong", "n_resamples": 199,
                     "questions": [{"name": "window 10 min vs 1 day", "vary": {"window_s": WINDOWS}}]},
    }))
    ran = _cli(["sweep", str(sweep), "--results", str(tmp_path / "results"), "--num-cpus", "2"], path, timeout=900)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    root = tmp_path / "results" / "window"

    # runs.parquet: the new parameter is a column, the file's own delay default (0 s) is the one used
    runs = pd.read_parquet(root / "runs.parquet")
    assert len(runs) == len(SEEDS) * len(WINDOWS)
    assert set(runs["protocol"]) == {"recent_window"}
    assert sorted(runs["window_s"].unique()) == [float(w) for w in WINDOWS]
    assert set(runs["delay_s"]) == {0.0} and set(runs["history_len"]) == {16}
    assert runs.groupby("window_s")["dataset_id"].nunique().eq(1).all() and runs["dataset_id"].nunique() == 2

    # every test target's history follows the file's rule: brute-force legal history (delay 0), last window_s
    facts = json.loads((root / "datasets.json").read_text())["datasets"]
    log = load_synthetic(tmp_path / "cache" / "synthetic" / "tiny-seed0")
    avail = reference_availability(log, 0)
    row_of = {int(e): i for i, e in enumerate(log["event_id"])}
    ts_of = dict(zip(log["event_id"].tolist(), log["request_timestamp"].tolist()))
    lengths = {}
    for dataset_id, window in runs.groupby("dataset_id")["window_s"].first().items():
        ds = PreparedDataset.open(tmp_path / "cache" / "prepared" / facts[dataset_id]["artifact"])
        assert ds.manifest["parameters"]["protocol_params"] == {"history_len": 16, "window_s": window, "delay_s": 0.0}
        targets = ds.targets("test").to_pandas()
        rows = np.asarray(ds._history)[targets["request_idx"].to_numpy()]
        event_ids = np.load(ds.path / "exposure_event_id.npy")
        lengths[window] = float((rows >= 0).sum(axis=1).mean())
        for i in np.random.default_rng(0).choice(len(targets), 25, replace=False):
            eid = int(targets["event_id"].iloc[i])
            t = ts_of[eid]
            expected = [e for e in reference_history(log, row_of[eid], 0, 16, avail) if ts_of[e] >= t - window * 1000]
            assert [int(event_ids[r]) for r in rows[i] if r >= 0] == expected, (window, eid)
    assert lengths[600.0] < lengths[86400.0]  # the parameter took effect

    # analysis: window_s is a data setting, so the comparison pairs the two datasets by seed (not by dataset_id)
    analysed = _cli(["analyze", str(root), "--no-plots", "--json"], path, timeout=600)
    assert analysed.returncode == 0, analysed.stderr[-3000:]
    doc = json.loads((root / "analysis.json").read_text())
    (facts_of,) = doc["protocol"]["arm_facts"].values()
    assert {facts_of["dataset_a"], facts_of["dataset_b"]} == set(runs["dataset_id"])
    assert facts_of["shared"] == 192 and facts_of["share_history_differs"] > 0
    assert "## Does the data protocol change the conclusions?" in (root / "report.md").read_text()

    # the dry run lists the parameter with its resolved value
    dry = _cli(["sweep", str(sweep), "--dry-run", "--results", str(tmp_path / "results2")], path, timeout=300)
    assert dry.returncode == 0 and "window_s=600" in dry.stdout and "window_s=86400" in dry.stdout


def test_unusable_protocol_files_are_named_and_the_others_still_list(tmp_path):
    history = (REPO / "protocols" / "history.py").read_text()
    (tmp_path / "broken_protocol.py").write_text("import not_a_module_anywhere\n")
    (tmp_path / "history.py").write_text("")  # named like a built-in module: it would hide protocols/history.py
    (tmp_path / "exposure_copy.py").write_text(  # keeps the built-in's registered name
        "from dataclasses import dataclass\nfrom . import register\n\n\n@register('exposure')\n"
        "@dataclass(frozen=True)\nclass Copy:\n    history_len: int = 8\n\n    def build(self, log, rows, **kw):\n"
        "        raise NotImplementedError\n")
    (tmp_path / "no_default.py").write_text(
        "from dataclasses import dataclass\nfrom . import register\n\n\n@register('no_default')\n"
        "@dataclass(frozen=True)\nclass NoDefault:\n    width: float\n    history_len: int = 8\n\n"
        "    def build(self, log, rows, **kw):\n        raise NotImplementedError\n")
    (tmp_path / "recent_window.py").write_text(RECENT_WINDOW)
    assert "register(\"exposure\")" in history

    listed = _cli(["list", "--json"], tmp_path, timeout=300)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    out = json.loads(listed.stdout)
    assert out["protocols"]["exposure"] == {"history_len": 128, "delay_s": 60.0}  # the built-in still wins
    assert out["protocols"]["recent_window"] == {"history_len": 16, "window_s": 3600.0, "delay_s": 0.0}
    assert "no_default" not in out["protocols"] and {"recflow", "synthetic", "movielens100k"} <= set(out["sources"])
    by_file = {p.split(":")[0]: p for p in out["protocol_file_problems"]}
    assert len(by_file) == 4, out["protocol_file_problems"]
    assert "No module named 'not_a_module_anywhere'" in by_file[str(tmp_path / "broken_protocol.py")]
    assert str(REPO / "protocols" / "history.py") in by_file[str(tmp_path / "history.py")]
    copy = by_file[str(tmp_path / "exposure_copy.py")]
    assert "'exposure'" in copy and str(REPO / "protocols" / "history.py") in copy
    assert "'width' needs a default" in by_file[str(tmp_path / "no_default.py")]
    for p in out["protocol_file_problems"]:  # also on stderr, once each
        assert listed.stderr.count(p) == 1

    text = _cli(["list"], tmp_path, timeout=300)
    assert text.returncode == 0 and "protocol/source files not loaded:" in text.stdout
    assert "recent_window            history_len=16, window_s=3600.0, delay_s=0.0" in text.stdout


def test_the_protocol_dataclass_default_is_the_one_used(monkeypatch):
    """A protocol declaring `delay_s = 0.0` gets 0 s when the config leaves it unset (it got prepare's 60 s)."""
    import protocols
    from core.typed_config import ConfigError
    from protocols import check_protocol_class
    from protocols.prepare import PrepareConfig

    @dataclasses.dataclass(frozen=True)
    class ZeroDelay:
        history_len: int = 4
        delay_s: float = 0.0

        def build(self, log, request_rows, *, timeline=None, progress=False):
            raise NotImplementedError

    check_protocol_class("zero_delay", ZeroDelay)
    protocols.load_components()
    monkeypatch.setitem(protocols.PROTOCOLS._items, "zero_delay", ZeroDelay)
    assert PrepareConfig.of(protocol="zero_delay").protocol_config() == ZeroDelay(history_len=4, delay_s=0.0)
    assert PrepareConfig.of(protocol="zero_delay", delay_s=5).protocol_config().delay_s == 5.0
    assert PrepareConfig.of(protocol="exposure").protocol_config().delay_s == 60.0

    @dataclasses.dataclass(frozen=True)
    class Clash:
        history_len: int = 4
        sample_seed: int = 0  # named like a prepare setting: it could never be set

        def build(self, log, request_rows, *, timeline=None, progress=False):
            raise NotImplementedError

    monkeypatch.setitem(protocols.PROTOCOLS._items, "clash", Clash)
    with pytest.raises(ConfigError, match=r"^protocol: 'clash' .* named like the prepare setting 'sample_seed'"):
        PrepareConfig.of(protocol="clash")


@pytest.mark.parametrize("cls_text, why", [
    ("class P:\n    history_len: int = 4\n    def build(self): ...", "frozen dataclass"),
    ("@dataclass(frozen=True)\nclass P:\n    width: int = 4\n    def build(self): ...", "history_len: int"),
    ("@dataclass(frozen=True)\nclass P:\n    history_len: int = 4", "no build"),
    ("@dataclass(frozen=True)\nclass P:\n    history_len: int = 4\n    sizes: list = None\n    def build(self): ...",
     "parameter 'sizes' has type"),
])
def test_the_protocol_contract_is_checked_at_registration(cls_text, why):
    from protocols import check_protocol_class

    scope: dict = {"dataclass": dataclasses.dataclass}
    exec(cls_text, scope)  # noqa: S102 - a class defined from text, to test each contract breach alone
    with pytest.raises(TypeError, match=why):
        check_protocol_class("p", scope["P"])


def test_a_source_and_its_defaults_are_one_entry_and_an_unknown_source_is_an_error():
    import protocols
    from protocols.movielens import MOVIELENS_DEFAULTS
    from protocols.recflow import RECFLOW_DEFAULTS

    assert protocols.source("movielens100k").defaults is MOVIELENS_DEFAULTS
    assert protocols.source("recflow").defaults is RECFLOW_DEFAULTS
    assert protocols.source("synthetic").defaults is RECFLOW_DEFAULTS
    with pytest.raises(KeyError, match=r"unknown source 'recflw'; valid: movielens100k, recflow, synthetic"):
        protocols.source("recflw")  # no silent fallback to RecFlow's defaults
