"""`PreparedDataset`: read a prepared artifact (memory-mapped, checked by `protocols.integrity`) and assemble
batches of the batch schema (`protocols/schema.py`) by gathers, with no Python per sample; `prefetch_map` assembles
them ahead in threads (numpy gathers release the GIL). Order, ID masking, resuming, prefetch and narrow types:
docs/protocols.md, "Batch loader".
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from core import results_layout as layout
from core.errors import RecscaleError, one_line

from .integrity import check_files, read_manifest
from .schema import CAT_FIELDS, FEEDBACK_OFFSET, HIST_CAT_FIELDS, HIST_FB_FIELDS, MASKED_ID_FIELDS, UNK, FeatureSpec
from .split import SPLITS

#: Default ID-masking probability on the training split.
DEFAULT_ID_MASK_PROB = 0.05
_CAT_MASKED = np.array([CAT_FIELDS.index(f) for f in MASKED_ID_FIELDS])  # user, device, video, author
_HIST_MASKED = np.array([HIST_CAT_FIELDS.index(f) for f in MASKED_ID_FIELDS if f in HIST_CAT_FIELDS])
_HIST_SLICE = slice(int(_HIST_MASKED[0]), int(_HIST_MASKED[-1]) + 1)
assert list(range(len(HIST_CAT_FIELDS)))[_HIST_SLICE] == _HIST_MASKED.tolist()
_ORDER_STREAM, _MASK_STREAM = 1, 2
K = TypeVar("K")
T = TypeVar("T")


def load_array(path: Path) -> np.ndarray:
    """A prepared array as data only (memory-mapped, pickles off): an object array is refused naming the file."""
    try:  # a plain ndarray view of the memory map: indexing skips np.memmap's Python-level hooks
        return np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))
    except ValueError as e:  # numpy: "Python objects in dtype" / "Object arrays cannot be loaded ..."
        raise RecscaleError(f"{path}: refusing to load: not a plain array ({one_line(e)}); a prepared artifact "
                            "holds numbers only: delete the artifact and rerun recscale prepare") from None


class PreparedDataset:
    """A prepared artifact folder opened for reading (arrays are memory-mapped)."""

    def __init__(self, path: Path, manifest: dict) -> None:
        self.path = path
        self.manifest = manifest
        self.fingerprint: str = manifest["fingerprint"]
        self.spec = FeatureSpec(vocab_sizes=dict(manifest["vocab_sizes"]), history_len=int(manifest["history_len"]))
        self.is_synthetic: bool = bool(manifest["is_synthetic"])
        self._split_cache: dict[str, dict[str, np.ndarray]] = {}

    @classmethod
    def open(cls, path: str | Path, *, verify: bool = False, progress: bool = False) -> PreparedDataset:
        """Open `path`; `verify` checks every file's checksum (a bar on stderr for large artifacts
        when `progress`)."""
        path = Path(path)
        if not path.is_dir():
            raise RecscaleError(f"{path}: not a prepared dataset (no such folder); run `recscale prepare`")
        if not (path / layout.MANIFEST_FILE).exists():
            raise RecscaleError(f"{path}: not a prepared dataset (no {layout.MANIFEST_FILE}); run `recscale prepare`")
        manifest = read_manifest(path)
        check_files(path, manifest, checksums=verify, progress=progress)
        return cls(path, manifest)

    # ------------------------------------------------------------------ arrays
    def _load(self, name: str) -> np.ndarray:
        return load_array(self.path / name)

    @cached_property
    def _history(self) -> np.ndarray:
        return self._load(layout.HISTORY_FILE)

    @cached_property
    def _exposure(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (self._load(layout.EXPOSURE_ITEM_FILE), self._load(layout.EXPOSURE_FEEDBACK_FILE),
                self._load(layout.EXPOSURE_TS_FILE))

    def _split_arrays(self, split: str) -> dict[str, np.ndarray]:
        cache = self._split_cache
        if split not in cache:
            self._check_split(split)
            meta = pq.read_table(self.path / layout.targets_file(split),
                                 columns=["request_idx", "request_ts", "day", "label", "event_id"])
            cache[split] = {
                "cat": self._load(layout.cat_file(split)),
                "num": self._load(layout.num_file(split)),
                **{c: meta.column(c).to_numpy() for c in meta.column_names},
            }
        return cache[split]

    @staticmethod
    def _check_split(split: str) -> None:
        if split not in SPLITS:
            raise RecscaleError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")

    # ------------------------------------------------------------------ contract
    def num_targets(self, split: str) -> int:
        self._check_split(split)
        return int(self.manifest["num_targets"][split])

    def num_batches(self, split: str, batch_size: int) -> int:
        return math.ceil(self.num_targets(split) / batch_size)

    def targets(self, split: str) -> pa.Table:
        """Per-target metadata in evaluation (stored) order."""
        self._check_split(split)
        return pq.read_table(self.path / layout.targets_file(split))

    def task_labels(self, split: str, labels: tuple[str, ...]) -> np.ndarray:
        """float32 [n, T] labels of `split`'s targets (stored order), one column per label column of `labels`
        (`schema.TASK_LABELS`): the target's own feedback, read from the exposure feedback table at its row."""
        key = f"labels:{','.join(labels)}"
        arrays = self._split_arrays(split)
        if key not in arrays:
            unknown = [c for c in labels if c not in HIST_FB_FIELDS]
            if unknown:
                raise RecscaleError(f"label column(s) {unknown} unknown; valid: {', '.join(HIST_FB_FIELDS)}")
            rows = pq.read_table(self.path / layout.targets_file(split), columns=["row"]).column("row").to_numpy()
            feedback = np.take(self._exposure[1], rows, axis=0)  # [n, 2], encoded 2/3
            columns = [HIST_FB_FIELDS.index(c) for c in labels]
            arrays[key] = (feedback[:, columns] - FEEDBACK_OFFSET).astype(np.float32)
        return arrays[key]

    def history_rows(self, split: str) -> np.ndarray:
        """int32 [n, L] exposure rows of each target's history (-1 at PAD), stored order."""
        return np.asarray(self._history[self._split_arrays(split)["request_idx"]])

    def order(self, split: str, *, seed: int, epoch: int = 0) -> np.ndarray:
        """Target positions in visiting order: train by day, shuffled within a day; else stored order."""
        arrays = self._split_arrays(split)
        n = len(arrays["label"])
        if split != "train":
            return np.arange(n)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, _ORDER_STREAM])))
        return np.lexsort((rng.random(n), arrays["day"]))

    def batches(
        self,
        split: str,
        batch_size: int,
        *,
        seed: int,
        epoch: int = 0,
        start_batch: int = 0,
        id_mask_prob: float | None = None,
        prefetch: int = 0,
        workers: int = 1,
        narrow: bool = False,
        pin_memory: bool = False,
        labels: tuple[str, ...] = (),
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Batches of the batch schema (`protocols.schema.Batch`) from `start_batch` on; the options: docs/protocols.md,
        "Batch loader" (`protocols.schema.widen` restores `narrow` fields; `pin_memory` needs a CUDA build). `labels`
        (label columns, one per task) makes `label` [B, T] from `task_labels`; empty: the dataset's one label [B]."""
        if batch_size < 1:
            raise RecscaleError(f"batch_size must be >= 1, got {batch_size}")
        p = (DEFAULT_ID_MASK_PROB if id_mask_prob is None else float(id_mask_prob)) if split == "train" else 0.0
        if not 0.0 <= p <= 1.0:
            raise RecscaleError(f"id_mask_prob must be in [0, 1], got {id_mask_prob}")
        order = self.order(split, seed=seed, epoch=epoch)

        def make(b: int) -> dict[str, torch.Tensor]:
            positions = order[b * batch_size : (b + 1) * batch_size]
            batch = self.assemble(split, positions, narrow=narrow)
            if labels:
                batch["label"] = np.take(self.task_labels(split, labels), positions, axis=0)  # [B, T]
            if p > 0:
                _mask_ids(batch, p,
                          np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, b, _MASK_STREAM]))))
            tensors = {k: torch.from_numpy(v) for k, v in batch.items()}
            return {k: v.pin_memory() for k, v in tensors.items()} if pin_memory else tensors

        return prefetch_map(make, range(start_batch, self.num_batches(split, batch_size)), depth=prefetch,
                            workers=workers)

    @cached_property
    def narrow_dtypes(self) -> dict[str, np.dtype]:
        """Integer fields in the narrowest signed type that holds every value of this artifact
        (ids from the vocabulary sizes, request indices from the history table); others as in the schema."""
        vocab = self.spec.vocab_sizes
        return {
            "cat": _signed(max(vocab[f] for f in CAT_FIELDS) - 1),
            "hist_cat": _signed(max(vocab[f] for f in HIST_CAT_FIELDS) - 1),
            "hist_fb": np.dtype(np.int8),
            "request_idx": _signed(len(self._history)),
        }

    @cached_property
    def _feedback_pairs(self) -> np.ndarray | None:
        """The [N, 2] int8 feedback table viewed as one int16 per row (a 1-D gather is ~10x faster than
        gathering 2-byte rows); None when the stored table has another layout."""
        fb = self._exposure[1]
        if fb.dtype == np.int8 and fb.ndim == 2 and fb.shape[1] == 2 and fb.flags.c_contiguous:
            return fb.view(np.int16).reshape(-1)
        return None

    def assemble(self, split: str, positions: np.ndarray, *, narrow: bool = False) -> dict[str, np.ndarray]:
        """The unmasked batch (numpy) of the targets at `positions` of `split` (schema dtypes, or the
        `narrow_dtypes` with `narrow`). Gathers use np.take, which copies whole rows at once."""
        a = self._split_arrays(split)
        item, feedback, exposure_ts = self._exposure
        wide = np.dtype(np.int64)
        dt = self.narrow_dtypes if narrow else {}
        request_idx = np.take(a["request_idx"], positions)
        rows = np.take(self._history, request_idx, axis=0)  # [B, L]
        mask = rows >= 0
        pad_row = len(exposure_ts) - 1  # the all-zero row that PAD positions read
        safe = np.where(mask, rows, pad_row)
        hist_cat = np.take(item, safe, axis=0).astype(dt.get("hist_cat", wide), copy=False)  # [B, L, 5], PAD = 0
        pairs = self._feedback_pairs
        hist_fb = (np.take(pairs, safe).view(np.int8).reshape(*safe.shape, 2) if pairs is not None
                   else np.take(feedback, safe, axis=0))  # [B, L, 2], PAD = 0
        request_ts = np.take(a["request_ts"], positions).astype(np.int64, copy=False)
        hist_ts = np.take(exposure_ts, safe)  # [B, L], 0 at PAD
        age_s = np.maximum(request_ts[:, None] - hist_ts, 0) / 1000.0
        hist_age = np.where(mask, np.log1p(age_s), 0.0).astype(np.float32)
        return {
            "cat": np.take(a["cat"], positions, axis=0).astype(dt.get("cat", wide), copy=False),  # [B, 10]
            "num": np.take(a["num"], positions, axis=0).astype(np.float32, copy=False),  # [B, 8]
            "hist_cat": hist_cat,
            "hist_fb": hist_fb.astype(dt.get("hist_fb", wide), copy=False),
            "hist_ts": hist_ts,
            "hist_age": hist_age,
            "hist_mask": mask,
            "request_ts": request_ts,
            "request_idx": request_idx.astype(dt.get("request_idx", wide), copy=False),
            "label": np.take(a["label"], positions).astype(np.float32, copy=False),
            "event_id": np.take(a["event_id"], positions).astype(np.int64, copy=False),
        }


def _signed(largest: int) -> np.dtype:
    """The narrowest signed integer type holding 0 .. largest."""
    return next(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64) if largest <= np.iinfo(t).max)


def _mask_ids(batch: dict[str, np.ndarray], p: float, rng: np.random.Generator) -> None:
    """Replace known ids with UNK in place (candidate user/device/video/author, history video/author).

    The uniform draws (candidate fields first, then history) and the rule are the loader's contract:
    batch k of (seed, epoch) is masked identically by every version of this function."""
    cat = batch["cat"]
    sub = cat[:, _CAT_MASKED]
    hit = (rng.random(sub.shape) < p) & (sub > UNK)
    cat[:, _CAT_MASKED] = np.where(hit, UNK, sub)
    hist = batch["hist_cat"][:, :, _HIST_SLICE]  # a view: the masked history fields are adjacent
    hit = rng.random(hist.shape) < p
    hit &= hist > UNK
    hit &= batch["hist_mask"][..., None]
    np.copyto(hist, UNK, where=hit)


def prefetch_map(fn: Callable[[K], T], keys: Iterable[K], *, depth: int, workers: int = 1) -> Iterator[T]:
    """Yield fn(key) for each key in order, computed up to `depth` keys ahead by `workers` threads (at most
    depth + 1 results in flight; `depth` <= 0: no thread, each result is computed when asked for)."""
    if depth <= 0:
        yield from map(fn, keys)
        return
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="recscale-prefetch")
    window: deque[Future] = deque()
    try:
        for key in keys:
            window.append(pool.submit(fn, key))
            if len(window) > depth:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
