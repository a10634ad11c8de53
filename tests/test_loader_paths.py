"""The batch loader's fast paths (np.take gathers, background prefetch, narrow integer types, pinned
buffers) against the loader as it was (tests/loader_reference.py: row fancy indexing, int64
everywhere, no thread): identical batches, order, masking and resume, and identical training."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch

from harness.config import load_run_config
from harness.evaluate import move_batch
from harness.train import train_run
from protocols.artifact import PreparedDataset, prefetch_map
from protocols.schema import BATCH_KEYS, SCHEMA_DTYPES, widen
from tests.fixtures_data import tiny_artifact, tiny_log  # noqa: F401  (pytest fixtures)
from tests.loader_reference import reference_batches


def _same(a: dict, b: dict) -> bool:
    return set(a) == set(b) == set(BATCH_KEYS) and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("prefetch,workers", [(0, 1), (3, 1), (2, 2)])
@pytest.mark.parametrize("split,kw", [("train", {"seed": 4, "epoch": 1, "id_mask_prob": 0.3}),
                                      ("train", {"seed": 0}), ("valid", {"seed": 0}), ("test", {"seed": 0})])
def test_batches_equal_the_reference_loader(tiny_artifact, split, kw, prefetch, workers):  # noqa: F811
    ds = PreparedDataset.open(tiny_artifact)
    new = list(ds.batches(split, 48, prefetch=prefetch, workers=workers, **kw))
    ref = list(reference_batches(ds, split, 48, **kw))
    assert len(new) == len(ref) == ds.num_batches(split, 48)
    assert all(_same(a, b) for a, b in zip(new, ref))
    assert all(b[k].dtype == SCHEMA_DTYPES[k] for b in new for k in b)


def test_resume_with_prefetch_reproduces_the_remaining_batches(tiny_artifact):  # noqa: F811
    ds = PreparedDataset.open(tiny_artifact)
    ref = list(reference_batches(ds, "train", 32, seed=2, epoch=3, id_mask_prob=0.2))
    resumed = list(ds.batches("train", 32, seed=2, epoch=3, start_batch=2, id_mask_prob=0.2, prefetch=2, workers=2))
    assert len(resumed) == len(ref) - 2 and all(_same(a, b) for a, b in zip(resumed, ref[2:]))


def test_narrow_types_hold_the_same_values_in_fewer_bytes(tiny_artifact):  # noqa: F811
    ds = PreparedDataset.open(tiny_artifact)
    narrow = list(ds.batches("train", 64, seed=1, id_mask_prob=0.3, narrow=True, prefetch=2))
    ref = list(reference_batches(ds, "train", 64, seed=1, id_mask_prob=0.3))
    for n, r in zip(narrow, ref):
        assert sum(v.nbytes for v in n.values()) < sum(v.nbytes for v in r.values())
        for key, dtype in ds.narrow_dtypes.items():
            assert n[key].dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
            assert n[key].dtype.itemsize <= 4  # ids, feedback and request indices of a small log
        assert _same(widen(n), r)
        assert _same(move_batch(n, torch.device("cpu")), r)
    # the narrow types are the narrowest holding every id: the largest vocabulary fixes them
    vocab = ds.spec.vocab_sizes
    assert np.iinfo(ds.narrow_dtypes["hist_cat"]).max >= max(vocab[f] for f in ("video_id", "author_id")) - 1
    if ds.narrow_dtypes["cat"] != np.int8:
        smaller = {np.dtype(np.int16): np.int8, np.dtype(np.int32): np.int16, np.dtype(np.int64): np.int32}
        assert np.iinfo(smaller[ds.narrow_dtypes["cat"]]).max < max(vocab.values()) - 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned host memory needs CUDA")
def test_pinned_batches_copy_to_cuda_unchanged(tiny_artifact):  # noqa: F811
    ds = PreparedDataset.open(tiny_artifact)
    device = torch.device("cuda")
    for n, r in zip(ds.batches("train", 64, seed=1, narrow=True, pin_memory=True, prefetch=2),
                    reference_batches(ds, "train", 64, seed=1)):
        assert all(v.is_pinned() for v in n.values())
        on_gpu = move_batch(n, device)
        torch.cuda.synchronize()
        assert _same({k: v.cpu() for k, v in on_gpu.items()}, r)


def test_prefetch_map_keeps_order_raises_in_place_and_stops_early():
    def slow_square(k: int) -> int:
        time.sleep(0.002 * (k % 3))  # later keys may finish first
        return k * k

    assert list(prefetch_map(slow_square, range(40), depth=4, workers=3)) == [k * k for k in range(40)]

    def fails_at_5(k: int) -> int:
        if k == 5:
            raise ValueError("bad batch 5")
        return k

    got = []
    with pytest.raises(ValueError, match="bad batch 5"):
        for v in prefetch_map(fails_at_5, range(10), depth=3, workers=2):
            got.append(v)
    assert got == [0, 1, 2, 3, 4]

    calls = []
    lock = threading.Lock()

    def record(k: int) -> int:
        with lock:
            calls.append(k)
        return k

    it = prefetch_map(record, range(1000), depth=3, workers=2)
    assert [next(it) for _ in range(5)] == [0, 1, 2, 3, 4]
    it.close()  # the consumer goes away: pending work is cancelled, the workers are joined
    assert len(calls) <= 5 + 3 + 1
    assert not any(t.name.startswith("recscale-prefetch") and t.is_alive() for t in threading.enumerate())


def test_training_is_identical_with_the_reference_loader(tiny_artifact, tmp_path, monkeypatch):  # noqa: F811
    """Same predictions, metrics and loss whether the run reads batches through the reference loader (in
    the training thread) or through the current one (prefetch threads)."""
    over = {"model": {"dim": 16}, "train": {"num_threads": 1, "epochs": 2, "prefetch_batches": 3,
                                            "loader_workers": 2}}
    cfg = load_run_config(None, over, arch="whale", data=str(tiny_artifact))
    fast = train_run(cfg, tmp_path / "fast", progress=False)

    def old_batches(self, split, batch_size, *, seed, epoch=0, start_batch=0, id_mask_prob=None, **_):
        return reference_batches(self, split, batch_size, seed=seed, epoch=epoch, start_batch=start_batch,
                                 id_mask_prob=id_mask_prob)

    monkeypatch.setattr(PreparedDataset, "batches", old_batches)
    old = train_run(cfg, tmp_path / "old", progress=False)
    keys = [k for k in fast if k.startswith(("valid_", "test_")) or k in ("train_loss", "epoch_history")]
    assert {k: fast[k] for k in keys} == {k: old[k] for k in keys}
    for split in ("valid", "test"):
        a = (tmp_path / "fast" / f"predictions_{split}.parquet").read_bytes()
        b = (tmp_path / "old" / f"predictions_{split}.parquet").read_bytes()
        assert a == b
    assert json.loads((tmp_path / "fast" / "metrics.json").read_text())["test_auc"] == old["test_auc"]
