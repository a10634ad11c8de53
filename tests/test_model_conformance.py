"""The model contract (architectures/contract.py) checked for EVERY registered architecture.

The architectures come from the registry at collection time, so a new model file is covered with no
edit here; each is built with its default config and `history_len` set to the small test history
(every config has that field). Checks: config contract and forward signature, padding invariance (and
sensitivity to valid history events), the label never an input, an empty history, FLOPs and
parameters countable (in-process and through `recscale flops`), one training step, request reuse
identical to no reuse where the model supports it, and a two-task model (one shared body, one head per task).
The last test is the discovery check: a model file copied under a new name outside the package is listed,
counted and covered by this suite.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from model_checks import (
    assert_empty_history_runs,
    assert_flops_countable,
    assert_label_not_input,
    assert_pad_invariant,
    assert_reuse_exact,
    assert_trains,
    batch_for,
    with_related_history,
)
from torch.utils.flop_counter import FlopCounterMode

import architectures
from architectures.blocks.history import HISTORY_KEYS
from architectures.blocks.mlp import PredictionHead
from architectures.contract import REUSE_SWITCH, ModelConfig, RequestReuseConfig, check_config_class
from architectures.flops import count_flops
from cli.main import main as cli_main
from core.typed_config import ConfigError
from protocols.schema import BATCH_KEYS, CAT_FIELDS, UNK, Batch, ModelInputs, default_test_spec, random_batch

pytestmark = pytest.mark.usefixtures("one_thread")  # small models, shared cores

REPO = Path(__file__).resolve().parents[1]
L = 16
SPEC = default_test_spec(history_len=L)
ARCHS = architectures.names()
REUSE_ARCHS = [n for n in ARCHS if architectures.entry(n).supports_request_reuse]


def related_batch(n: int, requests: int) -> dict[str, torch.Tensor]:
    """n candidates of `requests` requests, every history with >= 2 valid events (some PAD), candidates
    related to their history (model_checks.with_related_history)."""
    return with_related_history(batch_for(SPEC, n, requests=requests, min_len=2))


def build(name: str, seed: int = 0, **over) -> torch.nn.Module:
    torch.manual_seed(seed)
    return architectures.build(name, SPEC, {"history_len": L, **over})


def test_the_registry_holds_every_model_file():
    # one entry per model module at least (whale.py registers two), and the reuse-capable ones exist
    assert set(architectures.model_modules()) >= {"wukong", "whale", "helix", "deepfm"}
    assert len(ARCHS) >= len(architectures.model_modules())
    assert {"whale", "whale_meanpool", "helix", "rankmixer_transformer"} <= set(REUSE_ARCHS)


@pytest.mark.parametrize("name", ARCHS)
def test_config_and_forward_follow_the_contract(name):
    cls = architectures.entry(name).config_cls
    check_config_class(name, cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert fields["history_len"].type in (int, "int")
    assert not any(n.startswith("reuse") and n != REUSE_SWITCH for n in fields)
    cfg = architectures.make_config(name, {"history_len": 7})
    assert cfg.history_len == 7 and isinstance(cfg, ModelConfig)
    assert isinstance(cfg, RequestReuseConfig) == (name in REUSE_ARCHS)
    with pytest.raises(ConfigError, match=r"model\.history_len: 0 is not allowed \(allowed: integers >= 1\)"):
        architectures.make_config(name, {"history_len": 0})
    model = build(name)
    assert list(inspect.signature(model.forward).parameters) == ["batch"]
    y = model.eval()(batch_for(SPEC, 5))
    assert y.shape == (5,) and y.dtype == torch.float32 and torch.isfinite(y).all()


@pytest.mark.parametrize("name", ARCHS)
def test_padding_invariance(name):
    assert_pad_invariant(build(name), related_batch(8, requests=3), SPEC)


@pytest.mark.parametrize("name", ARCHS)
def test_a_longer_history_is_cut_to_the_most_recent_history_len_events(name):
    """A batch prepared with 2L events gives the logits of the same batch cut by hand to the L most recent."""
    model = build(name).eval()
    batch = batch_for(default_test_spec(2 * L), 6, min_len=L - 3, seed=4)
    n = batch["hist_mask"].sum(1)  # [B], some rows shorter than L, most longer
    idx = (n[:, None] - L).clamp(min=0) + torch.arange(L)  # [B, L]: the L most recent, then PAD
    rows = torch.arange(6)[:, None]
    cut = dict(batch, **{k: batch[k][rows, idx] for k in HISTORY_KEYS})
    cut["hist_mask"] = cut["hist_mask"] & (torch.arange(L) < n[:, None])
    for k in ("hist_cat", "hist_fb", "hist_ts", "hist_age"):  # PAD holds zeros, as the schema says
        m = cut["hist_mask"].view(cut["hist_mask"].shape + (1,) * (cut[k].dim() - 2))
        cut[k] = torch.where(m, cut[k], torch.zeros_like(cut[k]))
    with torch.no_grad():
        torch.testing.assert_close(model(batch), model(cut), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ARCHS)
def test_label_is_never_an_input(name):
    assert_label_not_input(build(name), related_batch(8, requests=3))


@pytest.mark.parametrize("name", ARCHS)
def test_empty_history(name):
    assert_empty_history_runs(build(name), batch_for(SPEC, 6, requests=3))


@pytest.mark.parametrize("name", ARCHS)
def test_flops_are_countable(name, capsys):
    model = build(name)
    batch = random_batch(SPEC, 2, min_len=L)
    assert_flops_countable(model, batch)
    # `recscale flops` sizes its batch from the config's history_len, whatever the model
    assert cli_main(["flops", "--arch", name, "--set", f"history_len={L}", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["history_len"] == L
    assert out["flops_per_target"] == count_flops(model, batch).per_target
    # a second, independent counter agrees (fvcore's generic einsum rule may differ by a FLOP or two)
    model.eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(batch)
    assert out["flops_per_target"] == pytest.approx(counter.get_total_flops() / 2, abs=2.0)


@pytest.mark.parametrize("name", ARCHS)
def test_trains_one_step(name):
    assert_trains(build(name), related_batch(8, requests=3))


@pytest.mark.parametrize("name", ARCHS)
def test_unknown_ids_are_learned(name):
    """Candidates with an unknown (UNK) video or author send gradient to the UNK rows of the video and
    author tables (every table of that vocabulary size: DeepFM's first-order tables too)."""
    model = build(name)
    batch = related_batch(6, requests=6)
    batch["cat"][:, CAT_FIELDS.index("video_id")] = UNK
    batch["cat"][:2, CAT_FIELDS.index("author_id")] = UNK
    model(batch).sum().backward()
    for field in ("video_id", "author_id"):
        size = SPEC.vocab_sizes[field]
        tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.num_embeddings == size]
        assert tables, field
        for t in tables:
            assert t.weight.grad is not None and t.weight.grad[UNK].abs().sum() > 0, field


@pytest.mark.parametrize("name", ARCHS)
def test_two_tasks_share_one_body_with_one_head_each(name):
    """`spec.num_tasks = 2` gives logits [B, 2] from the model's one shared head block: task 0's head is the
    one-task model's (same seed, same logits: its body and first head are built alike), task 1's logit reaches
    only its own head; both train, padding invariance holds for both."""
    two = dataclasses.replace(SPEC, num_tasks=2)
    torch.manual_seed(0)
    model = architectures.build(name, two, {"history_len": L}).eval()
    batch = related_batch(8, requests=3)
    with torch.no_grad():
        logits = model(batch)
        assert logits.shape == (8, 2) and torch.isfinite(logits).all()
        torch.testing.assert_close(logits[:, 0], build(name).eval()(batch), rtol=0, atol=0)
    heads = [m for m in model.modules() if isinstance(m, PredictionHead)]
    assert len(heads) == 1 and len(heads[0].task_mlps) == 1, "one shared head block, one head per task"
    model(batch)[:, 1].sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in heads[0].mlp.parameters())
    assert all(p.grad is not None and p.grad.any() for p in heads[0].task_mlps[0].parameters())
    model.zero_grad()
    assert_pad_invariant(model, batch, two)
    assert_trains(model, dict(batch, label=torch.stack([batch["label"], 1 - batch["label"]], dim=1)))


@pytest.mark.parametrize("name", REUSE_ARCHS)
def test_request_reuse_is_identical_to_no_reuse(name):
    batch = related_batch(9, requests=3)
    assert_reuse_exact(lambda reuse: build(name, seed=5, **{REUSE_SWITCH: reuse}), batch)


def test_the_batch_type_is_the_schema():
    """`Batch` / `ModelInputs` name exactly the schema keys, and the schema table's dtypes and shapes
    (parsed from protocols/schema.py's docstring) are those of a random batch."""
    import protocols.schema as schema

    assert tuple(Batch.__annotations__) == BATCH_KEYS
    assert Batch.__optional_keys__ == {"label", "event_id"}
    assert Batch.__required_keys__ == set(ModelInputs.__annotations__)
    rows = re.findall(r"^\| `(\w+)`\s*\| (\w+) \[([^\]]*)\]", schema.__doc__, flags=re.M)
    assert [r[0] for r in rows] == list(BATCH_KEYS)
    B, sizes = 5, {"B": 5, "L": L}
    batch = random_batch(SPEC, B)
    for key, dtype, shape in rows:
        want = tuple(sizes[d] if d in sizes else int(d) for d in shape.split(", "))
        assert batch[key].dtype == getattr(torch, dtype) and tuple(batch[key].shape) == want, key


def _per_arch_tests(arch: str) -> set[str]:
    """Names of the tests of this module that run for `arch` (from their parametrize marks)."""
    names = set()
    for fname, fn in globals().items():
        marks = getattr(fn, "pytestmark", []) if fname.startswith("test_") else []
        if any(m.name == "parametrize" and m.args[0] == "name" and arch in m.args[1] for m in marks):
            names.add(fname)
    return names


def test_a_copied_model_file_is_listed_counted_and_conformance_checked(tmp_path):
    """Done-when of the one-file rule: deepfm.py copied under a new registered name into a directory on
    RECSCALE_MODEL_PATH, with no other edit, appears in `recscale list`, is counted by `recscale flops`
    (the same numbers as deepfm) and passes this whole suite."""
    source = (REPO / "architectures" / "deepfm.py").read_text()
    copied, n = re.subn(r'@register\("deepfm"', '@register("deepfm_copy"', source)
    assert n == 1
    (tmp_path / "deepfm_copy.py").write_text(copied)
    env = dict(os.environ, RECSCALE_MODEL_PATH=str(tmp_path), OMP_NUM_THREADS="1")

    script = (
        "import contextlib, io, json\n"
        "from cli.main import main\n"
        "out = {}\n"
        "for key, argv in (('list', ['list', '--json']),\n"
        "                  ('copy', ['flops', '--arch', 'deepfm_copy', '--set', 'history_len=16', '--json']),\n"
        "                  ('orig', ['flops', '--arch', 'deepfm', '--set', 'history_len=16', '--json'])):\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        assert main(argv) == 0, key\n"
        "    out[key] = json.loads(buf.getvalue())\n"
        "print(json.dumps(out))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    listed = out["list"]["architectures"]
    assert "deepfm_copy" in listed and listed["deepfm_copy"] == listed["deepfm"]
    for key in ("flops_per_target", "params_embedding", "params_non_embedding", "flops_by_module"):
        assert out["copy"][key] == out["orig"][key], key
    assert out["copy"]["flops_per_target"] > 0

    expected = _per_arch_tests("deepfm")
    assert len(expected) >= 6
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", str(Path(__file__)), "-q", "-rA", "-k", "deepfm_copy", "-p", "no:randomly"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-2000:]
    passed = set(re.findall(r"^PASSED \S+::(\w+)\[deepfm_copy\]", suite.stdout, flags=re.M))
    assert passed == expected, suite.stdout[-3000:]
