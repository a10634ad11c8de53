"""FLOP and parameter accounting: the WHALE seed write-up's published counts (quoted in docs/architectures.md),
analytic formulas and the request-reuse saving. A second counter (torch's FlopCounterMode) is compared for
every registered model in tests/test_model_conformance.py."""
from __future__ import annotations

import json

import pytest
import torch

import architectures
from architectures.flops import count_flops, count_params
from cli.main import main as cli_main
from protocols.schema import default_test_spec, random_batch


def _measure(name: str, overrides: dict | None = None, history_len: int = 128, B: int = 1):
    spec = default_test_spec(history_len)
    torch.manual_seed(0)
    model = architectures.build(name, spec, overrides)
    return model, random_batch(spec, B, min_len=history_len)


# the seed write-up's forward matrix FLOPs per target (d = 64, 2 layers, L = 128, 4 heads x 16)
SEED_FLOPS = {"wukong": 401_536, "shallow_hybrid": 36_097_792, "whale_meanpool": 39_231_616, "hstu": 74_049_280}
SEED_NON_EMBEDDING = {"whale": 374_607, "hstu": 253_125}


@pytest.mark.parametrize("name", sorted(SEED_FLOPS))
def test_seed_flops_per_target(name):
    model, batch = _measure(name)
    assert count_flops(model, batch).per_target == SEED_FLOPS[name]


@pytest.mark.parametrize("name", sorted(SEED_NON_EMBEDDING))
def test_seed_non_embedding_parameters(name):
    model, _ = _measure(name)
    assert count_params(model)["non_embedding"] == SEED_NON_EMBEDDING[name]


def test_embedding_parameters_are_the_embedding_tables():
    spec = default_test_spec(16)
    for name in ("wukong", "whale"):
        model = architectures.build(name, spec, {"dim": 8})
        want = 8 * (sum(spec.vocab_sizes.values()) + 2 * spec.feedback_vocab)
        params = count_params(model)
        assert params["embedding"] == want
        assert params["embedding"] + params["non_embedding"] == sum(p.numel() for p in model.parameters())


def _wukong_macs(n: int, D: int, layers: int, hidden: int, k: int = 4) -> int:
    """Multiply-adds of Wukong layers written from the layer's formula (blocks/wukong.py; k FMB + k LCB tokens)."""
    total = 0
    for _ in range(layers):
        total += n * n * D + n * n * hidden + hidden * k * D + k * n * D + (2 * k * n * D if n != 2 * k else 0)
        n = 2 * k
    return total


def _numeric_macs(D: int) -> int:
    return sum(w * D + D * D for w in (2, 4, 2))


def test_wukong_flops_follow_the_formula_off_the_seed_config():
    D, layers = 24, 3
    model, batch = _measure("wukong", {"dim": D, "num_layers": layers, "fmb_hidden": 40, "head_hidden": 30})
    want = _numeric_macs(D) + _wukong_macs(13, D, layers, 40) + 8 * D * 30 + 30
    assert count_flops(model, batch).per_target == 2 * want


def test_shallow_hybrid_flops_follow_the_formula_off_the_seed_config():
    D, L, H, d, layers = 32, 40, 2, 8, 1
    model, batch = _measure("shallow_hybrid", {"dim": D, "history_len": L, "num_heads": H, "head_dim": d,
                                               "num_layers": layers}, history_len=L, B=2)
    events = L * ((7 * D + 1) * 2 * D + 2 * D * D)
    hstu = layers * (L * D * 4 * H * d + 2 * H * L * L * d + L * H * d * D)
    want = _numeric_macs(D) + events + hstu + _wukong_macs(14, D, layers, 2 * D) + 8 * D * 2 * D + 2 * D
    assert count_flops(model, batch).per_target == 2 * want


def test_whale_attention_terms_on_top_of_meanpool():
    """WHALE = MeanPool + per layer Q (8 x D x D), K (L x D x D), scores and values (2 x 8 x L x D)."""
    D, L, layers = 64, 128, 2
    whale = count_flops(*_measure("whale")).per_target
    extra = layers * (8 * D * D + L * D * D + 2 * 8 * L * D)
    assert whale == SEED_FLOPS["whale_meanpool"] + 2 * extra == 41_984_128


def test_request_reuse_lowers_counted_flops_per_target():
    spec = default_test_spec(16)
    model = architectures.build("whale", spec, {"history_len": 16, "reuse_requests": True})
    alone = count_flops(model, random_batch(spec, 4, min_len=16)).per_target
    shared = count_flops(model, random_batch(spec, 4, min_len=16, requests=1)).per_target
    assert shared < alone


def test_flops_command_json(capsys):
    assert cli_main(["flops", "--arch", "wukong", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flops_per_target"] == SEED_FLOPS["wukong"]
    assert out["params_non_embedding"] == count_params(_measure("wukong")[0])["non_embedding"]
    assert cli_main(["flops", "--arch", "no_such_model"]) == 2
    assert "unknown architecture" in capsys.readouterr().err
