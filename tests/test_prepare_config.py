"""One data config: PrepareConfig's fields reach the protocol's own config, and `recscale prepare`
takes every key through `--set` (its flags are aliases of the same keys)."""
from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from cli.commands import prepare as prepare_cmd
from cli.main import main as cli_main
from core.typed_config import ConfigError, from_dict
from protocols.history import Author50Protocol, ExposureProtocol
from protocols.prepare import PrepareConfig, protocol_parameters
from tests.tiny_logs import random_log, tiny_source

DAYS_37 = 37 * 86_400_000


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    prepare_cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_protocol_config_takes_the_fields_the_protocol_has():
    assert PrepareConfig().protocol_config() == ExposureProtocol()  # defaults live on the protocol
    assert PrepareConfig.of(delay_s=0, history_len=16).protocol_config() == ExposureProtocol(history_len=16,
                                                                                             delay_s=0.0)
    assert PrepareConfig.of(protocol="author50", delay_s=0).protocol_config() == Author50Protocol()  # no delay there
    assert protocol_parameters("author50") == {"history_len": Author50Protocol.history_len}
    assert not any(f.name in ("delay_s", "history_len") for f in dataclasses.fields(PrepareConfig))  # defined once
    # given by name, held typed by the protocol's dataclass; None is the protocol's default
    assert PrepareConfig.of(delay_s=0, history_len=None).protocol_params == {"delay_s": 0.0}


@pytest.mark.fault
def test_prepare_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"^protocol: unknown 'exposures'; valid: author50, exposure$"):
        PrepareConfig.of(protocol="exposures")
    with pytest.raises(ConfigError, match=r"^source: unknown 'recflw'; valid: .*recflow"):
        PrepareConfig.of(source="recflw")
    with pytest.raises(ConfigError, match=r"^delay_s: must be >= 0"):
        PrepareConfig.of(delay_s=-1)
    with pytest.raises(ConfigError, match=r"^history_len: must be in 1\.\.50, got 51"):
        PrepareConfig.of(protocol="author50", history_len=51)
    with pytest.raises(ConfigError, match=r"^data\.window_s: not a prepare setting nor a parameter of protocol "
                                          r"'exposure' \(its parameters: history_len, delay_s\)"):
        from_dict(PrepareConfig, {"window_s": 60}, prefix="data.")
    with pytest.raises(ConfigError, match=r"^delay_s: given twice"):
        from_dict(PrepareConfig, {"delay_s": 0, "protocol_params": {"delay_s": 60}})


def test_flags_are_aliases_of_set_keys():
    flags = _args("--source", "synthetic", "--root", "LOG", "--delay-s", "0", "--history-len", "16", "--train",
                  "100", "--valid", "10", "--test", "20", "--seed", "7", "--valid-start", "2024-02-09")
    keys = _args("--set", "source=synthetic", "--set", "root=LOG", "--set", "delay_s=0", "--set", "history_len=16",
                 "--set", "n_train=100", "--set", "n_valid=10", "--set", "n_test=20", "--set", "sample_seed=7",
                 "--set", "split.valid_start=2024-02-09")
    cfg = prepare_cmd.config_from_args(flags)
    assert cfg == prepare_cmd.config_from_args(keys)
    assert (cfg.protocol_params, cfg.n_train, cfg.sample_seed, cfg.split.valid_start) == (
        {"delay_s": 0.0, "history_len": 16}, 100, 7, "2024-02-09")
    # nothing given: every default is PrepareConfig's
    assert prepare_cmd.config_from_args(_args("--source", "synthetic", "--root", "LOG")) == PrepareConfig.of(root="LOG")


@pytest.mark.fault
def test_prepare_cli_refuses_bad_keys_with_the_key_named():
    with pytest.raises(ConfigError, match=r"delay_s: given twice"):
        prepare_cmd.config_from_args(_args("--source", "synthetic", "--root", "x", "--delay-s", "0",
                                           "--set", "delay_s=60"))
    with pytest.raises(ConfigError, match=r"^delay: not a prepare setting .*its parameters: history_len, delay_s"):
        prepare_cmd.config_from_args(_args("--source", "synthetic", "--root", "x", "--set", "delay=0"))
    with pytest.raises(ConfigError, match=r"^root: missing"):
        prepare_cmd.config_from_args(_args("--source", "synthetic"))
    with pytest.raises(ConfigError, match=r"^history_len: expected an integer, got 'long'"):
        prepare_cmd.config_from_args(_args("--source", "synthetic", "--root", "x", "--history-len", "long"))


def test_set_and_flags_build_the_same_artifact(tmp_path, capsys, monkeypatch):
    import protocols

    log = random_log(26, n_users=10, n_requests=800, span_ms=DAYS_37, grid_ms=60_000, with_truth=True)
    protocols.load_components()
    monkeypatch.setitem(protocols.SOURCES._items, "tinytest", tiny_source(log))
    out = str(tmp_path / "a")
    flags = ["prepare", "--source", "tinytest", "--root", str(tmp_path), "--train", "100", "--valid", "10",
             "--test", "10", "--history-len", "4", "--delay-s", "0", "--out", out, "--no-progress", "--json"]
    assert cli_main(flags) == 0
    first = json.loads(capsys.readouterr().out)
    sets = ["prepare", "--no-progress", "--json"] + [
        x for kv in ("source=tinytest", f"root={tmp_path}", "n_train=100", "n_valid=10", "n_test=10",
                     "history_len=4", "delay_s=0", f"out={out}") for x in ("--set", kv)]
    assert cli_main(sets) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["path"] == first["path"] and second["history_len"] == 4
    manifest = json.loads((tmp_path / "a" / first["path"].split("/")[-1] / "manifest.json").read_text())
    assert manifest["parameters"]["protocol_params"] == {"history_len": 4, "delay_s": 0.0}
    # another sampling seed is another artifact
    assert cli_main(sets + ["--set", "sample_seed=3"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] != first["path"]


def test_author50_artifacts_of_older_linking_rules_are_never_reused(tmp_path, monkeypatch):
    """The author50 linking rules' version is part of the artifact key: an artifact built under other
    rules lives in another folder and is not handed back; exposure artifacts do not depend on it."""
    from protocols.prepare import prepare_log

    log = random_log(27, author50=True, n_users=10, n_requests=400, span_ms=DAYS_37, grid_ms=60_000)

    def build(protocol: str):
        cfg = PrepareConfig.of(source="synthetic", root=str(tmp_path), protocol=protocol, n_train=60, n_valid=10,
                            n_test=10, history_len=8, out=str(tmp_path / "out"))
        path = prepare_log(log, cfg)
        return path, json.loads((path / "manifest.json").read_text())["parameters"]

    a50, params = build("author50")
    exposure, exposure_params = build("exposure")
    assert params["rules_version"] == Author50Protocol.RULES_VERSION and "rules_version" not in exposure_params
    monkeypatch.setattr(Author50Protocol, "RULES_VERSION", Author50Protocol.RULES_VERSION - 1)
    older, older_params = build("author50")
    assert older != a50 and older_params["rules_version"] == Author50Protocol.RULES_VERSION
    assert build("exposure")[0] == exposure
