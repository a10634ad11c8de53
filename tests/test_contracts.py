"""The shared contracts: typed configs, registries, event ids and the random schema batch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest
import torch

from protocols.registry import Registry
from protocols.schema import BATCH_KEYS, default_test_spec, make_event_id, random_batch, split_event_id
from protocols.typed_config import ConfigError, apply_overrides, from_dict, parse_set_options


@dataclass
class _Inner:
    lr: float = 1e-3
    steps: int = 10


@dataclass
class _Cfg:
    name: str = "a"
    mode: Literal["x", "y"] = "x"
    widths: tuple[int, ...] = (1, 2)
    inner: _Inner = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.inner is None:
            self.inner = _Inner()


def test_from_dict_validates_keys_and_types():
    cfg = from_dict(_Cfg, {"mode": "y", "widths": [3, 4], "inner": {"lr": "0.5"}})
    assert cfg.mode == "y" and cfg.widths == (3, 4) and cfg.inner.lr == 0.5
    with pytest.raises(ConfigError, match="unknown key.*bogus.*valid keys"):
        from_dict(_Cfg, {"bogus": 1})
    with pytest.raises(ConfigError, match="mode"):
        from_dict(_Cfg, {"mode": "z"})
    with pytest.raises(ConfigError, match=r"inner\.steps"):
        from_dict(_Cfg, {"inner": {"steps": "ten"}})


def test_set_options_and_overrides():
    over = parse_set_options(["inner.steps=20", "mode=y"])
    assert over == {"inner": {"steps": 20}, "mode": "y"}
    cfg = apply_overrides(_Cfg(), over)
    assert cfg.inner.steps == 20 and cfg.inner.lr == 1e-3 and cfg.mode == "y"


def test_registry_names_valid_choices():
    r: Registry = Registry("thing")
    r.register("b")(1)
    r.register("a")(2)
    assert r.names() == ["a", "b"]
    with pytest.raises(KeyError, match="unknown thing 'c'; valid: a, b"):
        r.get("c")


def test_event_id_round_trip():
    fi = torch.tensor([0, 1, 36, 36])
    ri = torch.tensor([1, 7, 963_523, 2**31])
    eid = make_event_id(fi, ri)
    assert eid.tolist() == [1, (1 << 32) + 7, (36 << 32) + 963_523, (36 << 32) + 2**31]
    f2, r2 = split_event_id(eid)
    assert f2.tolist() == fi.tolist() and r2.tolist() == ri.tolist()


def test_random_batch_follows_schema():
    spec = default_test_spec(history_len=12)
    b = random_batch(spec, 10, requests=4)
    assert set(b) == set(BATCH_KEYS)
    assert b["cat"].shape == (10, 10) and b["hist_cat"].shape == (10, 12, 5)
    m = b["hist_mask"]
    # left-aligned valid positions, ascending time, zeros at PAD
    assert torch.all(m[:, :-1] | ~m[:, 1:])
    ts = b["hist_ts"].float()
    assert torch.all((ts[:, 1:] >= ts[:, :-1]) | ~m[:, 1:])
    assert torch.all(b["hist_cat"][~m] == 0)
    # candidates of one request share user and history
    same = b["request_idx"][:, None] == b["request_idx"][None, :]
    assert torch.all(b["cat"][:, 0][:, None].eq(b["cat"][:, 0][None, :]) | ~same)
