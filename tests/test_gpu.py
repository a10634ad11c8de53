"""CUDA checks (`make gpu-check`; every test skips on a machine without CUDA): CPU and GPU training give
the same AUC within a tolerance on a tiny log, bf16 autocast and fp32 logits agree within tolerance, the
fused attention equals the explicit one on the GPU, request reuse equals no reuse, and pinned narrow
batches reach the GPU unchanged."""
from __future__ import annotations

import pytest
import torch

import architectures
from architectures.blocks.masked_attention import set_attention_kernel
from harness.config import load_run_config
from harness.train import train_run
from protocols.schema import default_test_spec, random_batch
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

#: |AUC(cpu) - AUC(cuda)| allowed after one epoch on the tiny log: the same data order and initialisation,
#: different kernels (TF32, bf16 autocast, fused attention) and summation orders.
AUC_TOLERANCE = 0.02
L = 16
SPEC = default_test_spec(history_len=L)


def test_cpu_and_gpu_training_agree(tiny_artifact, tmp_path):  # noqa: F811
    aucs = {}
    for device in ("cpu", "cuda"):
        over = {"model": {"dim": 16}, "train": {"num_threads": 1, "device": device}}
        cfg = load_run_config(None, over, arch="whale", data=str(tiny_artifact))
        m = train_run(cfg, tmp_path / device, progress=False)
        aucs[device] = m["test_auc"]
        assert m["device"].startswith(device)
    assert abs(aucs["cpu"] - aucs["cuda"]) < AUC_TOLERANCE, aucs


@pytest.mark.parametrize("name", ["whale", "helix", "onetrans", "rankmixer_transformer", "hstu", "wukong"])
def test_bf16_and_fp32_logits_agree(name):
    torch.manual_seed(0)
    model = architectures.build(name, SPEC, {"history_len": L, "dim": 16}).cuda().eval()
    batch = {k: v.cuda() for k, v in random_batch(SPEC, 32, min_len=1).items()}
    with torch.no_grad():
        fp32 = model(batch)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            bf16 = model(batch).float()
    assert torch.allclose(bf16, fp32, rtol=0.05, atol=0.05), (bf16 - fp32).abs().max()


@pytest.mark.parametrize("name", ["whale", "helix", "onetrans", "rankmixer_transformer"])
def test_fused_attention_on_gpu_equals_explicit(name):
    torch.manual_seed(0)
    model = architectures.build(name, SPEC, {"history_len": L, "dim": 16}).cuda().eval()
    batch = {k: v.cuda() for k, v in random_batch(SPEC, 32, min_len=0).items()}
    with torch.no_grad():
        explicit = set_attention_kernel(model, "explicit")(batch)
        fused = set_attention_kernel(model, "auto")(batch)  # SDPA on CUDA
    assert torch.isfinite(fused).all() and torch.allclose(fused, explicit, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["whale", "whale_meanpool", "helix", "rankmixer_transformer"])
def test_request_reuse_equals_no_reuse_on_gpu(name):
    torch.manual_seed(0)
    reuse = architectures.build(name, SPEC, {"history_len": L, "dim": 16, "reuse_requests": True}).cuda().eval()
    plain = architectures.build(name, SPEC, {"history_len": L, "dim": 16, "reuse_requests": False}).cuda().eval()
    plain.load_state_dict(reuse.state_dict())
    batch = {k: v.cuda() for k, v in random_batch(SPEC, 24, min_len=0, requests=6).items()}
    with torch.no_grad():
        assert torch.allclose(reuse(batch), plain(batch), rtol=1e-4, atol=1e-5)
