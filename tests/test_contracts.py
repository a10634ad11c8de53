"""The shared contracts: typed configs, registries, event ids and the random schema batch."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest
import torch

from core.registry import Registry
from core.typed_config import ConfigError, apply_overrides, from_dict, parse_set_options
from protocols.schema import BATCH_KEYS, default_test_spec, make_event_id, random_batch, split_event_id


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


@dataclass
class _Leaf:
    n: int = 1

    def __post_init__(self):
        if self.n < 0:
            raise ConfigError(f"n: must be >= 0, got {self.n}")


@dataclass
class _Root:
    leaf: _Leaf | None = None


def test_post_init_errors_get_the_section_path():
    with pytest.raises(ConfigError, match=r"^leaf\.n: must be >= 0, got -1$"):
        from_dict(_Root, {"leaf": {"n": -1}})


def test_yaml_dates_are_accepted_as_text():
    import yaml

    @dataclass
    class Split:
        start: str = ""

    assert from_dict(Split, yaml.safe_load("start: 2024-02-08")).start == "2024-02-08"


def _top_level_imports(root) -> set[str]:
    import ast

    names: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    return names


def test_declared_runtime_dependencies_are_exactly_the_imported_ones():
    """Every dependency in pyproject.toml is imported by the package code, and every third-party
    module the package imports is declared."""
    import re
    import sys
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")
    repo = Path(__file__).resolve().parents[1]
    declared = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
    packages = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in declared}
    #: distribution name -> the module the code imports (optuna is reached through Ray's OptunaSearch)
    module_of = {"pyyaml": "yaml", "ray": "ray", "optuna": "ray.tune.search.optuna"}
    ours = {"core", "protocols", "architectures", "harness", "analysis", "cli"}
    imports = set().union(*(_top_level_imports(repo / p) for p in ours))
    for package in packages:
        module = module_of.get(package, package)
        assert any(i == module or i.startswith(module + ".") for i in imports), \
            f"{package} is declared but not imported"
    # optional imports: the peer benchmark's `peer` extra (fbgemm-gpu-cpu -> fbgemm_gpu, triton) and a
    # generative-recommenders checkout named by RECSCALE_GR_CHECKOUT (not a package on the index); the sweep's
    # `tracking` extra (mlflow-skinny -> mlflow)
    optional_deps = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extras = optional_deps["peer"] + optional_deps["tracking"]
    optional = {{"fbgemm-gpu-cpu": "fbgemm_gpu", "mlflow-skinny": "mlflow"}.get(n, n) for n in
                (re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in extras)} | {"generative_recommenders"}
    # _typeshed: the type checker's standard-library stubs, imported only under TYPE_CHECKING
    third_party = ({i.split(".")[0] for i in imports} - ours - set(sys.stdlib_module_names)
                   - {"__future__", "_typeshed"} - optional)
    provided = {module_of.get(p, p).split(".")[0] for p in packages}
    assert third_party <= provided, f"imported but not declared: {sorted(third_party - provided)}"
