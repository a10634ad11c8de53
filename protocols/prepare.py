"""`prepare`: turn an exposure log into a content-addressed prepared dataset (artifact folder), and
`PrepareConfig`, every preparation setting. The target sampling and default sizes: docs/protocols.md, "Targets".
The pipeline (split, targets, histories, vocabularies, encoded arrays + manifest written aside and renamed into
place), the folder key, the integrity checks before reuse and the file layout (`ARTIFACT_FILES`):
docs/protocols.md, "Prepared dataset (artifact)".
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from core import results_layout as layout
from core.errors import RecscaleError
from core.registry import file_of
from core.typed_config import ConfigError, from_dict, to_dict

from . import PROTOCOLS, SOURCES, load_components, parameter_names, protocol_parameters
from .availability import UserTimeline
from .encoding import (
    USER_CONTEXT_FIELDS,
    encode,
    encode_feedback,
    fit_numeric_stats,
    fit_vocabulary,
    numeric_features,
    vocab_size,
)
from .integrity import ArtifactDamagedError, seal_manifest, verify_artifact
from .legal_history import PAD_ROW
from .log import ExposureLog
from .output_location import check_writable
from .schema import CAT_FIELDS, HIST_CAT_FIELDS, HIST_FB_FIELDS, TRUE_P_COLUMN, UNK
from .split import BOUNDARY_KEYS, SPLITS, SplitConfig, SplitSettings, format_ms, local_time_parts, split_rows

FORMAT_VERSION = 1
#: Rules for fitting categorical vocabularies (`PrepareConfig.vocabulary`).
VOCABULARY_RULES: tuple[str, ...] = ("train_inputs", "train_window")
DEFAULT_VOCABULARY = "train_inputs"
#: Target labels a dataset can be prepared for (binary feedback columns of the log), default first.
TASKS: tuple[str, ...] = ("long_view", "effective_view")
DEFAULT_TASK = TASKS[0]
#: Target counts of the reference protocol on the full RecFlow exposure log.
REFERENCE_SIZES: dict[str, int] = {"train": 3_000_000, "valid": 100_000, "test": 200_000}
REFERENCE_LOG_SIZE = 38_245_315

ARTIFACT_FILES: dict[str, str] = {
    layout.MANIFEST_FILE: "protocol, parameters, source fingerprint, vocab sizes, numeric and membership statistics;"
    " integrity: every other file's size and blake2b checksum; manifest_blake2b: the manifest's own checksum",
    layout.HISTORY_FILE: "int32 [R, L] exposure rows of each target request's history (left-aligned, ascending; "
    "-1 PAD)",
    layout.EXPOSURE_ITEM_FILE: "int32 [N+1, 5] encoded video, author, category_level_one, category_level_two, "
    "upload_type; row N is the all-zero PAD row",
    layout.EXPOSURE_FEEDBACK_FILE: "int8 [N+1, 2] effective_view, long_view encoded 2/3; row N is PAD",
    layout.EXPOSURE_TS_FILE: "int64 [N+1] request_timestamp (ms) of every exposure; row N is PAD (0)",
    layout.EXPOSURE_EVENT_ID_FILE: "int64 [N] event_id of every exposure (audit trail)",
    layout.cat_file("{split}"): "int32 [n, 10] encoded categorical inputs of each target (CAT_FIELDS order)",
    layout.num_file("{split}"): "float32 [n, 8] numeric inputs of each target (NUM_FEATURES order)",
    layout.targets_file("{split}"): "per-target metadata: event_id, row, request_idx, label, day, unseen flags, ...",
    f"{layout.VOCAB_DIR}/{layout.vocab_file('{field}')}":
    "int64 raw ids of the field's vocabulary; raw id vocab[i] encodes to i + 2",
}


@dataclass(frozen=True)
class PrepareConfig:
    """Every data-preparation setting and its default, defined once (`harness.sweep.schema.DataSection` extends
    this class); the keys, and the protocol parameters given by name (kept in `protocol_params`, typed by the
    protocol's dataclass): docs/protocols.md, "Settings: `PrepareConfig`". `split` also accepts a complete
    `SplitConfig`; `vocabulary: None` is `train_inputs` here (a sweep may resolve it, harness/sweep/schema.py)."""

    EXTRA_KEYS_FIELD: ClassVar[str] = "protocol_params"
    #: Former names of settings, refused naming the new one (core/typed_config.py).
    RENAMED_KEYS: ClassVar[dict[str, str]] = {"seed": "sample_seed"}

    source: str = "synthetic"
    root: str = ""
    protocol: str = "exposure"
    protocol_params: dict[str, Any] = field(default_factory=dict)
    n_train: int | Literal["all"] | None = None
    n_valid: int | Literal["all"] | None = None
    n_test: int | Literal["all"] | None = None
    sample_seed: int = 42
    task: str = DEFAULT_TASK
    split: SplitSettings = field(default_factory=SplitSettings)
    vocabulary: Literal["train_inputs", "train_window"] | None = None
    out: str = layout.PREPARED_DIR

    def __post_init__(self) -> None:
        load_components()
        if isinstance(self.split, SplitConfig):  # a complete split: every key given
            object.__setattr__(self, "split", SplitSettings.of(self.split))
        for s in SPLITS:
            n = getattr(self, f"n_{s}")
            if n is not None and n != "all" and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
                raise ConfigError(f"n_{s}: must be an integer >= 0 or 'all', got {n!r}")
        if self.source not in SOURCES:
            raise ConfigError(f"source: unknown {self.source!r}; valid: {', '.join(SOURCES.names())}")
        if self.protocol not in PROTOCOLS:
            raise ConfigError(f"protocol: unknown {self.protocol!r}; valid: {', '.join(PROTOCOLS.names())}")
        object.__setattr__(self, "protocol_params", self._checked_params())
        if self.task not in TASKS:
            raise ConfigError(f"task: {self.task!r} is not allowed (allowed: {', '.join(TASKS)})")
        if self.vocabulary is not None and self.vocabulary not in VOCABULARY_RULES:
            raise ConfigError(f"vocabulary: unknown rule {self.vocabulary!r}; valid: {', '.join(VOCABULARY_RULES)}")

    @property
    def vocabulary_rule(self) -> str:
        """The vocabulary rule in force: `vocabulary`, or `train_inputs` when left None."""
        return self.vocabulary or DEFAULT_VOCABULARY

    @classmethod
    def of(cls, **settings: Any) -> PrepareConfig:
        """The config of flat settings, protocol parameters by name (what a YAML mapping or --set gives):
        `PrepareConfig.of(root="log", delay_s=0)`."""
        if isinstance(settings.get("split"), SplitConfig):  # a complete split: every key given
            settings["split"] = SplitSettings.of(settings["split"])
        return from_dict(cls, settings)

    def _checked_params(self) -> dict[str, Any]:
        """The given parameters, None dropped; the protocol's own ones checked and typed by its dataclass."""
        given = {k: v for k, v in dict(self.protocol_params).items() if v is not None}
        own = protocol_parameters(self.protocol)
        known = set(parameter_names())
        settings = [f.name for f in fields(self) if f.name != self.EXTRA_KEYS_FIELD]
        clash = sorted(set(own) & set(settings))
        if clash:  # the setting would always win: the parameter could never be set
            raise ConfigError(f"protocol: {self.protocol!r} ({file_of(PROTOCOLS.get(self.protocol).__module__)}) "
                              f"has a parameter named like the prepare setting {clash[0]!r}; rename the parameter")
        for key in given:
            if key not in known:
                raise ConfigError(
                    f"{key}: not a prepare setting nor a parameter of protocol {self.protocol!r} (its parameters: "
                    f"{', '.join(own)}); prepare settings: {', '.join(settings)}; parameters of the registered "
                    f"protocols: {', '.join(sorted(known))}")
        typed = to_dict(from_dict(PROTOCOLS.get(self.protocol), {k: v for k, v in given.items() if k in own}))
        return {k: typed[k] if k in own else v for k, v in given.items()}

    def protocol_config(self) -> Any:
        """The protocol's own config: its registered dataclass with the parameters this config sets."""
        own = protocol_parameters(self.protocol)
        return from_dict(PROTOCOLS.get(self.protocol), {k: v for k, v in self.protocol_params.items() if k in own})


def prepare(cfg: PrepareConfig, *, progress: bool = True) -> Path:
    """Build (or find) the artifact for `cfg`; returns its folder."""
    if not cfg.root:
        raise ConfigError("root: the folder of the log is required")
    protocol = cfg.protocol_config()
    ensure_inputs = getattr(protocol, "ensure_inputs", None)
    if ensure_inputs is not None:  # input files the protocol needs beyond the log (protocols/__init__.py)
        ensure_inputs(cfg.source, Path(cfg.root), progress=progress)
    log = SOURCES.get(cfg.source)(Path(cfg.root))
    return prepare_log(log, cfg, progress=progress)


def default_size(split: str, log_size: int, available: int) -> int:
    """Reference size of `split` scaled to a log of `log_size` exposures, capped at `available`."""
    scaled = max(1, round(REFERENCE_SIZES[split] * log_size / REFERENCE_LOG_SIZE))
    return min(scaled, available)


def resolve_size(split: str, requested: int | Literal["all"] | None, log_size: int, available: int,
                 default: str = "scaled", where: str = "") -> int:
    """The number of targets to draw: `requested` (a count >= 0 or "all", as `PrepareConfig` checked it) or the
    source's `default` ("scaled" or "all"). `where` describes the split's interval in the error message."""
    if requested is None and default != "all":
        return default_size(split, log_size, available)
    if requested is None or requested == "all":
        return available
    if requested > available:
        raise RecscaleError(
            f"n_{split}: {requested:,} targets requested but the {split} split{where} holds only "
            f"{available:,} exposures; lower n_{split} (or set it to 'all')"
        )
    return requested


def sample_rows(rows: np.ndarray, n: int, *, seed: int, split: str) -> np.ndarray:
    """`n` of `rows` drawn uniformly without replacement, ascending: the prefix of one seeded
    permutation per (seed, split), so samples of one seed are nested."""
    if n > len(rows):
        raise RecscaleError(f"cannot draw {n:,} {split} targets from {len(rows):,} exposures")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, SPLITS.index(split)])))
    chosen = rng.permutation(len(rows))[:n]
    return np.sort(rows[chosen])


@dataclass
class TargetPlan:
    """Sampled target rows per split (ascending log rows), the split sizes they came from and the
    resolved split (the config's keys over the source's default)."""

    rows: dict[str, np.ndarray]
    available: dict[str, int]
    split: SplitConfig


def plan_targets(log: ExposureLog, cfg: PrepareConfig) -> TargetPlan:
    """The targets of `cfg` in `log`, drawn from the complete split: its given keys over the source's default."""
    given = cfg.split.given()
    if set(BOUNDARY_KEYS) <= set(given) and "timezone" in given:
        split = cfg.split.resolve(SplitConfig())
    else:
        split = cfg.split.resolve(SOURCES.get(cfg.source).defaults.split(log), cfg.source)
    by_split = split_rows(log["request_timestamp"], split)
    requested = {"train": cfg.n_train, "valid": cfg.n_valid, "test": cfg.n_test}
    default = SOURCES.get(cfg.source).defaults.sizes
    rows = {}
    for i, s in enumerate(SPLITS):
        start, end = split.interval_ms(s)
        where = f" [{format_ms(start, split.timezone)}, {format_ms(end, split.timezone)}) ({split.timezone})"
        if len(by_split[s]) == 0 and requested[s] != 0:
            ts = log["request_timestamp"]
            span = (f"the log runs from {format_ms(int(ts.min()), split.timezone)} to "
                    f"{format_ms(int(ts.max()), split.timezone)}" if len(ts) else "the log is empty")
            raise ConfigError(
                f"split.{BOUNDARY_KEYS[i]}, split.{BOUNDARY_KEYS[i + 1]}: the {s} split{where} holds no "
                f"exposures of {log.root}; {span} ({split.timezone}). Set split.{BOUNDARY_KEYS[i]} and "
                f"split.{BOUNDARY_KEYS[i + 1]} inside that range, or leave the split keys unset for the "
                f"{cfg.source} source's default")
        n = resolve_size(s, requested[s], len(log), len(by_split[s]), default, where)
        rows[s] = sample_rows(by_split[s], n, seed=cfg.sample_seed, split=s)
    return TargetPlan(rows, {s: len(by_split[s]) for s in SPLITS}, split)


def artifact_key(log: ExposureLog, cfg: PrepareConfig, plan: TargetPlan) -> tuple[str, dict]:
    """(hex digest, hashed parameters) that name the artifact folder."""
    protocol = cfg.protocol_config()
    params = {
        "format_version": FORMAT_VERSION,
        "source": log.source,
        "source_fingerprint": log.fingerprint,
        "protocol": cfg.protocol,
        "protocol_params": to_dict(protocol),
        "targets": {s: int(len(plan.rows[s])) for s in SPLITS},
        "seed": cfg.sample_seed,  # hashed under its first name: existing artifact folders keep their names
        "split": to_dict(plan.split),
    }
    rules_version = getattr(type(protocol), "RULES_VERSION", None)
    if rules_version is not None:  # only protocols whose rules changed carry one, so other keys stay as they were
        params["rules_version"] = rules_version
    if cfg.task != DEFAULT_TASK:  # the default task leaves the folder names of existing artifacts unchanged
        params["task"] = cfg.task
    if cfg.vocabulary_rule != DEFAULT_VOCABULARY:  # likewise the default vocabulary rule
        params["vocabulary"] = cfg.vocabulary_rule
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()
    return digest, params


def prepare_log(log: ExposureLog, cfg: PrepareConfig, *, progress: bool = False) -> Path:
    """Build (or find) the artifact of an already loaded log."""
    plan = plan_targets(log, cfg)
    digest, params = artifact_key(log, cfg, plan)
    out_root = Path(cfg.out)
    final = out_root / f"{log.source}-{cfg.protocol}-{digest[:16]}"
    former = Path(layout.PREPARED_DIR).parent / final.name  # the default folder before the one layout
    if cfg.out == layout.PREPARED_DIR and not final.exists() and (former / layout.MANIFEST_FILE).exists():
        print(f"recscale prepare: {former}: reusing it where an earlier version put it (new artifacts go under "
              f"{layout.PREPARED_DIR}/)", file=sys.stderr)
        final = former
    damaged = False
    if final.exists():
        try:
            verify_artifact(final)
            return final
        except ArtifactDamagedError as e:
            damaged = True
            print(f"recscale prepare: {e}\nrecscale prepare: rebuilding {final}", file=sys.stderr)
    check_writable(final, "the prepared artifact")
    out_root.mkdir(parents=True, exist_ok=True)
    tmp = out_root / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        _write_artifact(tmp, log, cfg, plan, params, digest, progress=progress)
        if damaged:
            _move_aside(final)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / layout.MANIFEST_FILE).exists():  # not a concurrent writer that finished first
                raise
            verify_artifact(final)  # the other writer's artifact must verify too
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _move_aside(folder: Path) -> None:
    """Rename a damaged artifact out of the way (readers holding its files keep them), then delete it."""
    aside = folder.parent / f".damaged-{folder.name}-{os.getpid()}"
    shutil.rmtree(aside, ignore_errors=True)
    try:
        os.rename(folder, aside)
    except FileNotFoundError:  # a concurrent prepare moved it already
        return
    shutil.rmtree(aside, ignore_errors=True)


def _write_artifact(
    folder: Path, log: ExposureLog, cfg: PrepareConfig, plan: TargetPlan, params: dict, digest: str, *, progress: bool
) -> None:
    started = time.time()
    steps = tqdm(total=5, desc="prepare", unit="step", disable=not progress)
    protocol = cfg.protocol_config()
    all_rows = np.concatenate([plan.rows[s] for s in SPLITS])
    split_of = np.repeat(np.arange(len(SPLITS)), [len(plan.rows[s]) for s in SPLITS])

    # 1. one history per unique target request, shared by its targets
    _, first, request_idx = np.unique(log["request_id"][all_rows], return_index=True, return_inverse=True)
    request_rows = all_rows[first]
    timeline = UserTimeline.build(log)
    history = protocol.build(log, request_rows, timeline=timeline, progress=progress)
    del timeline
    np.save(folder / layout.HISTORY_FILE, history.rows)
    request_len = (history.rows != PAD_ROW).sum(axis=1).astype(np.int32)
    steps.update()

    # 2. vocabularies (rule: PrepareConfig.vocabulary), from training-period inputs only
    train_rows = plan.rows["train"]
    if cfg.vocabulary_rule == "train_window":  # every exposure before the training split ends: no protocol in it
        user_rows = item_rows = np.flatnonzero(log["request_timestamp"] < plan.split.interval_ms("train")[1])
    else:  # the training targets and the events of their histories
        user_rows = train_rows
        train_requests = np.unique(request_idx[split_of == 0])
        item_rows = np.zeros(len(log), dtype=bool)
        item_rows[train_rows] = True
        for start in range(0, len(train_requests), 65_536):  # chunked: no full copy of the train histories
            hist = history.rows[train_requests[start : start + 65_536]]
            item_rows[hist[hist != PAD_ROW]] = True
    vocabs = {f: fit_vocabulary(log[f][user_rows]) for f in USER_CONTEXT_FIELDS}
    vocabs.update({f: fit_vocabulary(log[f][item_rows]) for f in HIST_CAT_FIELDS})
    del user_rows, item_rows
    (folder / layout.VOCAB_DIR).mkdir()
    for f, v in vocabs.items():
        np.save(folder / layout.VOCAB_DIR / layout.vocab_file(f), v)
    stats = fit_numeric_stats(log["duration"][train_rows], log["upload_timestamp"][train_rows],
                              log["request_timestamp"][train_rows])
    steps.update()

    # 3. the encoded exposure table every history reads from
    # one extra all-zero row at index N: PAD positions gather it, so batches need no masking pass
    n = len(log)
    item = np.zeros((n + 1, len(HIST_CAT_FIELDS)), dtype=np.int32)
    for j, f in enumerate(HIST_CAT_FIELDS):
        item[:n, j] = encode(log[f], vocabs[f])
    np.save(folder / layout.EXPOSURE_ITEM_FILE, item)
    del item
    feedback = np.zeros((n + 1, len(HIST_FB_FIELDS)), dtype=np.int8)
    for j, f in enumerate(HIST_FB_FIELDS):
        feedback[:n, j] = encode_feedback(log[f])
    np.save(folder / layout.EXPOSURE_FEEDBACK_FILE, feedback)
    del feedback
    np.save(folder / layout.EXPOSURE_TS_FILE, np.append(log["request_timestamp"], 0))
    np.save(folder / layout.EXPOSURE_EVENT_ID_FILE, log["event_id"])
    steps.update()

    # 4. targets of each split
    membership = {}
    for i, s in enumerate(SPLITS):
        rows, req = plan.rows[s], request_idx[split_of == i]
        cat = np.stack([encode(log[f][rows], vocabs[f]) for f in CAT_FIELDS], axis=1)
        np.save(folder / layout.cat_file(s), cat)
        np.save(folder / layout.num_file(s), numeric_features(
            log["duration"][rows], log["upload_timestamp"][rows], log["request_timestamp"][rows], stats,
            plan.split.timezone))
        lengths = request_len[req]
        table = _targets_table(log, rows, req, cat, lengths, plan.split, cfg.task)
        pq.write_table(table, folder / layout.targets_file(s))
        membership[s] = {
            "targets": int(len(lengths)),
            "mean_valid_length": float(lengths.mean()) if len(lengths) else 0.0,
            "full_length_targets": int((lengths == history.rows.shape[1]).sum()),
            "empty_history_targets": int((lengths == 0).sum()),
        }
    steps.update()

    # 5. manifest
    manifest = {
        "format_version": FORMAT_VERSION,
        "fingerprint": digest,
        "source": log.source,
        "source_root": str(log.root),
        "source_fingerprint": log.fingerprint,
        "protocol": cfg.protocol,
        "task": cfg.task,
        "parameters": params,
        "history_len": int(history.rows.shape[1]),
        "is_synthetic": bool(log.has_truth),
        "num_exposures": len(log),
        "num_target_requests": int(len(request_rows)),
        "split_exposures": plan.available,
        "num_targets": {s: int(len(plan.rows[s])) for s in SPLITS},
        "vocabulary": cfg.vocabulary_rule,
        "vocab_sizes": {f: vocab_size(v) for f, v in vocabs.items()},
        "numeric_stats": asdict(stats),
        "membership": membership,
        "protocol_diagnostics": history.diagnostics,
        "files": ARTIFACT_FILES,
        "prepare_wall_s": round(time.time() - started, 2),
    }
    manifest = seal_manifest(manifest, folder)  # every file's size and checksum, then the manifest's own
    (folder / layout.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    steps.update()
    steps.close()


def _targets_table(log: ExposureLog, rows, req, cat, lengths, split: SplitConfig, task: str) -> pa.Table:
    columns = {
        "event_id": log["event_id"][rows],
        "row": rows.astype(np.int64),
        "request_idx": req.astype(np.int64),
        "request_id": log["request_id"][rows],
        "request_ts": log["request_timestamp"][rows],
        "day": local_time_parts(log["request_timestamp"][rows], split.timezone).day,
        "label": log[task][rows].astype(np.float32),
        "user_id": log["user_id"][rows],
        "video_id": log["video_id"][rows],
        "author_id": log["author_id"][rows],
        "video_unseen": cat[:, CAT_FIELDS.index("video_id")] == UNK,
        "author_unseen": cat[:, CAT_FIELDS.index("author_id")] == UNK,
        "duration_ms": log["duration"][rows],
        "history_length": lengths,
    }
    if log.has_truth and task == DEFAULT_TASK:  # the generator's truth is P(long_view)
        columns[TRUE_P_COLUMN] = log[TRUE_P_COLUMN][rows]
    return pa.table(columns)

