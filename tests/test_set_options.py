"""`recscale train --set` and `recscale flops --set` share one parser (harness.config.parse_set): a model
field is `model.<field>=V` or `<field>=V` in both; a field the architecture lacks is refused with exit 2,
naming the key and the architecture, before anything is written."""
from __future__ import annotations

import json

import pytest

import architectures
from architectures.flops import count_flops
from cli.main import main as cli_main
from core.typed_config import ConfigError
from harness.config import load_run_config, parse_set
from protocols.schema import default_test_spec, random_batch
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401


def _flops_json(capsys, *sets: str) -> dict:
    assert cli_main(["flops", "--arch", "whale", "--json", *(a for s in sets for a in ("--set", s))]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("spelling", ["model.dim=32", "dim=32"])
def test_flops_takes_both_spellings_and_counts_the_configured_model(capsys, spelling):
    out = _flops_json(capsys, spelling, "model.history_len=8")
    assert out["config"]["dim"] == 32 and out["config"]["history_len"] == 8
    # independent count: the same config built directly
    cfg = architectures.make_config("whale", {"dim": 32, "history_len": 8})
    spec = default_test_spec(history_len=8)
    net = architectures.build("whale", spec, cfg)
    assert out["flops_per_target"] == count_flops(net, random_batch(spec, 2, min_len=8)).per_target


@pytest.mark.parametrize("spelling", ["model.dim=32", "dim=32"])
def test_train_takes_both_spellings(tiny_artifact, spelling):  # noqa: F811
    cfg = load_run_config(None, parse_set([spelling, "train.lr=0.01", "seed=3"]), arch="whale",
                          data=str(tiny_artifact))
    assert cfg.model == architectures.make_config("whale", {"dim": 32}) and cfg.train.lr == 0.01 and cfg.seed == 3


@pytest.mark.fault
@pytest.mark.parametrize("command", ["train", "flops"])
@pytest.mark.parametrize("spelling", ["model.num_heads=2", "num_heads=2"])
def test_a_field_the_architecture_lacks_exits_2_naming_key_and_architecture(tiny_artifact, tmp_path, capsys,  # noqa: F811
                                                                           command, spelling):
    argv = [command, "--arch", "wukong", "--set", spelling]
    if command == "train":
        argv += ["--data", str(tiny_artifact), "--out", str(tmp_path / "run")]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "model.num_heads: not a config field of wukong; valid: dim," in err
    assert not (tmp_path / "run").exists()


@pytest.mark.fault
def test_other_set_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"--set train.lr: this command takes only model.<field> keys"):
        parse_set(["train.lr=1"], sections=("model",))
    with pytest.raises(ConfigError,
                       match=r"--set lr: a key without a section is a model field; for training write train.lr"):
        parse_set(["lr=1"])
    with pytest.raises(ConfigError, match=r"--set model.dim: given twice"):
        parse_set(["dim=8", "model.dim=16"])
    with pytest.raises(ConfigError, match=r"model.dimm: not a config field of whale"):
        load_run_config(None, parse_set(["dimm=8"]), arch="whale", data="unused")
