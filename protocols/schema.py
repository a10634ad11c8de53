"""The contract between data and models: canonical exposure columns, the batch schema and FeatureSpec.

Everything a model may know about the data is in this module. `architectures` imports only this
module (and `core.registry`) from `protocols`.

Batch schema (B = batch size, L = history length), all values torch tensors; the typed form is `Batch`
(`ModelInputs` = the keys a model may read):

| key           | dtype, shape        | meaning                                                            |
| ------------- | ------------------- | ------------------------------------------------------------------ |
| `cat`         | int64 [B, 10]       | CAT_FIELDS, encoded (PAD=0, UNK=1, known ids from 2)                |
| `num`         | float32 [B, 8]      | NUM_FEATURES (three groups, see NUM_GROUPS)                         |
| `hist_cat`    | int64 [B, L, 5]     | HIST_CAT_FIELDS of each history event (same vocabularies as `cat`)  |
| `hist_fb`     | int64 [B, L, 2]     | effective_view, long_view of each history event, encoded 2/3, PAD 0 |
| `hist_ts`     | int64 [B, L]        | request_timestamp (ms) of each history event, 0 at PAD              |
| `hist_age`    | float32 [B, L]      | rho = log(1 + (t - t_e) / 1000), 0 at PAD                           |
| `hist_mask`   | bool [B, L]         | valid positions; valid events left-aligned, ascending time          |
| `request_ts`  | int64 [B]           | target request time (ms)                                            |
| `request_idx` | int64 [B]           | index of the target's request (candidates of one request share it)  |
| `label`       | float32 [B] or [B, T] | the target's label, or one per task of `train.tasks` (never an input) |
| `event_id`    | int64 [B]           | (file_index << 32) + record_index of the target exposure            |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import torch

# ---------------------------------------------------------------------------------------------
# Canonical exposure table (what every source yields; see protocols.log.ExposureLog)
# ---------------------------------------------------------------------------------------------
#: Integer columns of the canonical exposure table, all int64, in RecFlow's units
#: (request_timestamp and duration in ms, upload_timestamp in s, playing_time in ms).
EXPOSURE_COLUMNS: tuple[str, ...] = (
    "request_id",
    "request_timestamp",
    "user_id",
    "device_id",
    "age",
    "gender",
    "province",
    "video_id",
    "author_id",
    "category_level_one",
    "category_level_two",
    "upload_type",
    "upload_timestamp",
    "duration",
    "playing_time",
    "effective_view",
    "long_view",
)
#: Columns every ExposureLog adds: global identity of a row.
IDENTITY_COLUMNS: tuple[str, ...] = ("event_id", "file_index", "record_index")
#: Optional float64 column present only for synthetic logs: the true P(long_view = 1).
TRUE_P_COLUMN = "true_p"


def make_event_id(file_index, record_index):
    """event_id = (file_index << 32) + record_index (file_index from 0, record_index from 1)."""
    return (file_index << 32) + record_index


def split_event_id(event_id):
    """Inverse of make_event_id: returns (file_index, record_index)."""
    return event_id >> 32, event_id & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Model inputs
# ---------------------------------------------------------------------------------------------
CAT_FIELDS: tuple[str, ...] = (
    "user_id",
    "device_id",
    "age",
    "gender",
    "province",
    "video_id",
    "author_id",
    "category_level_one",
    "category_level_two",
    "upload_type",
)
#: Item-side fields of a history event; they share vocabularies (and embedding tables) with `cat`.
HIST_CAT_FIELDS: tuple[str, ...] = (
    "video_id",
    "author_id",
    "category_level_one",
    "category_level_two",
    "upload_type",
)
HIST_FB_FIELDS: tuple[str, ...] = ("effective_view", "long_view")
#: The label columns a task may predict (`train.tasks`, docs/tasks.md): the target's own feedback fields.
TASK_LABELS: tuple[str, ...] = HIST_FB_FIELDS
#: Item-side fields of the candidate (indices into `cat`).
ITEM_FIELD_INDEX: tuple[int, ...] = tuple(CAT_FIELDS.index(f) for f in HIST_CAT_FIELDS)
#: IDs that training masks to UNK with a small probability (candidate and valid history positions).
MASKED_ID_FIELDS: tuple[str, ...] = ("user_id", "device_id", "video_id", "author_id")

NUM_FEATURES: tuple[str, ...] = (
    "log_duration",
    "duration_missing",
    "hour_sin",
    "hour_cos",
    "weekday_sin",
    "weekday_cos",
    "log_video_age",
    "age_missing",
)
#: The three numeric groups, each turned into one token by its own MLP: (name, start, stop).
NUM_GROUPS: tuple[tuple[str, int, int], ...] = (
    ("duration", 0, 2),
    ("time", 2, 6),
    ("video_age", 6, 8),
)

PAD = 0
UNK = 1
#: Feedback 0/1 is encoded 2/3 so a negative feedback still has a learned vector; PAD stays 0.
FEEDBACK_OFFSET = 2
FEEDBACK_VOCAB = 4

#: The torch dtype of every batch key in the schema (the table of this module), in schema order (BATCH_KEYS).
SCHEMA_DTYPES: dict[str, torch.dtype] = {
    "cat": torch.int64,
    "num": torch.float32,
    "hist_cat": torch.int64,
    "hist_fb": torch.int64,
    "hist_ts": torch.int64,
    "hist_age": torch.float32,
    "hist_mask": torch.bool,
    "request_ts": torch.int64,
    "request_idx": torch.int64,
    "label": torch.float32,
    "event_id": torch.int64,
}
BATCH_KEYS: tuple[str, ...] = tuple(SCHEMA_DTYPES)


def widen(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The batch with every tensor in its schema dtype (a loader may ship integer fields in narrower
    types to save copy bandwidth; values are unchanged, the conversion runs where the tensors are)."""
    return {k: v if v.dtype == SCHEMA_DTYPES.get(k, v.dtype) else v.to(SCHEMA_DTYPES[k]) for k, v in batch.items()}


class ModelInputs(TypedDict):
    """The batch keys a model may read; dtypes and shapes are the batch-schema table of this module."""

    cat: torch.Tensor
    num: torch.Tensor
    hist_cat: torch.Tensor
    hist_fb: torch.Tensor
    hist_ts: torch.Tensor
    hist_age: torch.Tensor
    hist_mask: torch.Tensor
    request_ts: torch.Tensor
    request_idx: torch.Tensor


class Batch(ModelInputs, total=False):
    """One batch of the schema (the table of this module): the model inputs plus `label` and `event_id`,
    which the loader always yields and a model never reads. Every model's `forward` takes a `Batch`."""

    label: torch.Tensor
    event_id: torch.Tensor


@dataclass(frozen=True)
class FeatureSpec:
    """What a model needs to size its inputs: vocabulary sizes per field and the history length.

    `vocab_sizes[f]` counts PAD and UNK, so valid encoded ids of field f are 0 .. vocab_sizes[f] - 1.
    """

    vocab_sizes: dict[str, int]
    history_len: int = 128
    cat_fields: tuple[str, ...] = CAT_FIELDS
    hist_cat_fields: tuple[str, ...] = HIST_CAT_FIELDS
    num_features: tuple[str, ...] = NUM_FEATURES
    num_groups: tuple[tuple[str, int, int], ...] = NUM_GROUPS
    feedback_vocab: int = FEEDBACK_VOCAB
    num_tasks: int = 1  # logits per target: [B] for one task, [B, T] for T (architectures/blocks/mlp.py)

    def __post_init__(self) -> None:
        missing = [f for f in self.cat_fields if f not in self.vocab_sizes]
        if missing:
            raise ValueError(f"FeatureSpec.vocab_sizes lacks fields {missing}")
        small = {f: v for f, v in self.vocab_sizes.items() if v < 2}
        if small:
            raise ValueError(f"vocabulary sizes must count PAD and UNK (>= 2): {small}")
        if self.history_len < 1:
            raise ValueError(f"history_len must be >= 1, got {self.history_len}")
        if self.num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {self.num_tasks}")


def random_batch(
    spec: FeatureSpec,
    batch_size: int = 8,
    *,
    generator: torch.Generator | None = None,
    min_len: int = 0,
    requests: int | None = None,
) -> dict[str, torch.Tensor]:
    """A schema-valid random batch for model tests (left-aligned, ascending-time histories).

    Candidates are grouped into `requests` requests (default: one per candidate); candidates of one
    request share user fields, request time and history, as real batches do.
    """
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    B, L = batch_size, spec.history_len
    R = requests or B
    req_of = torch.arange(B) % R

    cat = torch.stack(
        [torch.randint(0, spec.vocab_sizes[f], (B,), generator=g) for f in spec.cat_fields], dim=1
    )  # [B, 10]
    cat[:, 0] = cat[req_of, 0]  # a request belongs to one user
    num = torch.randn(B, len(spec.num_features), generator=g)  # [B, 8]

    lengths_r = torch.randint(min_len, L + 1, (R,), generator=g)  # [R]
    mask_r = torch.arange(L)[None, :] < lengths_r[:, None]  # [R, L]
    hist_cat_r = torch.stack(
        [torch.randint(2, spec.vocab_sizes[f], (R, L), generator=g) for f in spec.hist_cat_fields], dim=2
    )  # [R, L, 5]
    hist_fb_r = torch.randint(FEEDBACK_OFFSET, FEEDBACK_OFFSET + 2, (R, L, 2), generator=g)
    request_ts_r = torch.full((R,), 1_706_000_000_000, dtype=torch.int64) + torch.randint(0, 10**9, (R,), generator=g)
    gaps = torch.randint(1, 3_600_000, (R, L), generator=g)
    hist_ts_r = request_ts_r[:, None] - torch.flip(torch.cumsum(gaps, dim=1), dims=[1])  # ascending
    # shift so that valid events (left-aligned) are the most recent ones
    shift = (L - lengths_r)[:, None]
    idx = (torch.arange(L)[None, :] + shift).clamp(max=L - 1)
    hist_ts_r = torch.gather(hist_ts_r, 1, idx)
    hist_age_r = torch.log1p((request_ts_r[:, None] - hist_ts_r).clamp(min=0).float() / 1000.0)

    m3 = mask_r[..., None]
    hist_cat_r = torch.where(m3, hist_cat_r, torch.zeros_like(hist_cat_r))
    hist_fb_r = torch.where(m3, hist_fb_r, torch.zeros_like(hist_fb_r))
    hist_ts_r = torch.where(mask_r, hist_ts_r, torch.zeros_like(hist_ts_r))
    hist_age_r = torch.where(mask_r, hist_age_r, torch.zeros_like(hist_age_r))

    return {
        "cat": cat,
        "num": num,
        "hist_cat": hist_cat_r[req_of],
        "hist_fb": hist_fb_r[req_of],
        "hist_ts": hist_ts_r[req_of],
        "hist_age": hist_age_r[req_of],
        "hist_mask": mask_r[req_of],
        "request_ts": request_ts_r[req_of],
        "request_idx": req_of.clone(),
        "label": torch.randint(0, 2, (B,), generator=g).float(),
        "event_id": torch.arange(B, dtype=torch.int64) + (1 << 32),
    }


def default_test_spec(history_len: int = 16) -> FeatureSpec:
    """A small FeatureSpec for unit tests of models."""
    sizes = {
        "user_id": 50,
        "device_id": 50,
        "age": 10,
        "gender": 5,
        "province": 20,
        "video_id": 200,
        "author_id": 80,
        "category_level_one": 20,
        "category_level_two": 40,
        "upload_type": 8,
    }
    return FeatureSpec(vocab_sizes=sizes, history_len=history_len)
