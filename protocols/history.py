"""History protocols, registered in `protocols.PROTOCOLS`: `exposure` (its search: protocols/legal_history.py) and
`author50` (RecFlow's seq_effective_50 arrays linked back to exposure rows, here), each a frozen dataclass of its
parameters. A protocol turns target requests into an int32 [R, L] matrix of exposure-log rows (PAD_ROW = -1),
valid entries left-aligned in ascending time. The rules, and author50's linking, disambiguation and coverage
(reported in the manifest, never assumed): docs/protocols.md, "Legal history" and "`author50` protocol".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
from tqdm import tqdm

from core.errors import RecscaleError
from core.typed_config import ConfigError

from . import register
from .availability import UserTimeline
from .legal_history import PAD_ROW, legal_history_rows
from .log import ExposureLog
from .recflow import AUTHOR50_COLUMNS, AUTHOR50_LEN


@dataclass(frozen=True)
class HistoryIndex:
    """History index matrix of the target requests plus protocol diagnostics (go to the manifest)."""

    rows: np.ndarray  # int32 [R, L]
    diagnostics: dict[str, float] = field(default_factory=dict)


@register("exposure")
@dataclass(frozen=True)
class ExposureProtocol:
    """Legal history from the full exposure log with a feedback delay (seconds)."""

    history_len: int = 128
    delay_s: float = 60.0

    def __post_init__(self) -> None:
        _check_history_len(self.history_len)
        if self.delay_s < 0:
            raise ConfigError(f"delay_s: must be >= 0, got {self.delay_s}")

    def build(
        self, log: ExposureLog, request_rows: np.ndarray, *, timeline: UserTimeline | None = None,
              progress: bool = False
    ) -> HistoryIndex:
        """History of each target request, given one representative log row per request."""
        timeline = (timeline or UserTimeline.build(log)).with_delay(int(round(self.delay_s * 1000)))
        rows = legal_history_rows(
            timeline,
            log["user_id"][request_rows],
            log["request_timestamp"][request_rows],
            self.history_len,
            progress=progress,
        )
        return HistoryIndex(rows)


@register("author50")
@dataclass(frozen=True)
class Author50Protocol:
    """RecFlow's recent-50 effective-view arrays, linked to exposure rows (no delay parameter)."""

    #: Version of the linking rules, part of the artifact key: artifacts built under older rules (before
    #: duplicated (request_id, video_id) pairs were disambiguated, version 1) are never reused.
    RULES_VERSION: ClassVar[int] = 2

    history_len: int = AUTHOR50_LEN

    def __post_init__(self) -> None:
        _check_history_len(self.history_len, AUTHOR50_LEN)

    def ensure_inputs(self, source: str, root: Path, *, progress: bool = False) -> None:
        """A synthetic log is written without the author-50 pickles unless asked; add them now. Other
        sources' readers report missing pickles themselves."""
        if source == "synthetic":
            from .synthetic.pipeline import ensure_author50

            ensure_author50(Path(root), progress=progress)

    def build(
        self, log: ExposureLog, request_rows: np.ndarray, *, timeline: UserTimeline | None = None,
              progress: bool = False
    ) -> HistoryIndex:
        timeline = timeline or UserTimeline.build(log)
        rows, coverage = author50_history_rows(log, timeline, request_rows, self.history_len, progress=progress)
        return HistoryIndex(rows, {"link_coverage": coverage.as_dict()})  # type: ignore[dict-item]


def _check_history_len(history_len: int, most: int | None = None) -> None:
    if history_len < 1 or (most is not None and history_len > most):
        bound = f"in 1..{most}" if most is not None else ">= 1"
        raise ConfigError(f"history_len: must be {bound}, got {history_len}")


_COL_VIDEO, _COL_REQUEST_TS, _COL_REQUEST_ID = 0, 7, 9
#: Array columns (index, exposure column) compared when a (request_id, video_id) pair is ambiguous.
MATCH_COLUMNS: tuple[tuple[int, str], ...] = tuple(
    (i, c) for i, c in enumerate(AUTHOR50_COLUMNS) if c not in ("video_id", "request_id"))


@dataclass(frozen=True)
class LinkCoverage:
    """How much of the author arrays could be tied to exposure rows, and what was dropped."""

    target_requests: int
    requests_with_array: int
    rows_present: int
    rows_linked: int  # present rows whose (request_id, video_id) is an exposure
    duplicate_exposure_pairs: int  # exposures whose (request_id, video_id) is not unique in the log
    rows_disambiguated: int  # linked rows whose pair had several exposure candidates
    resolved_by_fields: int  # ... of which one candidate alone matched the array row best on its fields
    resolved_by_feedback: int  # ... of which the effective view was chosen among field-equal candidates
    still_tied: int  # ... of which several identical candidates remained (taken in log order)
    rows_not_effective: int  # linked rows dropped: the exposure is not an effective view
    rows_other_user: int  # linked rows dropped: the exposure belongs to another user
    rows_not_before_target: int  # linked rows dropped: request time not earlier than the target's
    rows_repeated: int  # linked rows dropped: the same exposure is already in the history
    rows_kept: int  # history entries (before truncation to history_len)

    def as_dict(self) -> dict[str, float]:
        """Every count, plus the two coverage ratios (requests with an array, present rows linked)."""
        return {**asdict(self), "request_key_coverage": self.requests_with_array / max(1, self.target_requests),
                "row_link_coverage": self.rows_linked / max(1, self.rows_present)}


class _ExposureLookup:
    """(request_id, video_id) -> the log rows holding that pair, vectorised."""

    def __init__(self, log: ExposureLog) -> None:
        self.rids, rid_rank = np.unique(log["request_id"], return_inverse=True)
        self.vids, vid_rank = np.unique(log["video_id"], return_inverse=True)
        key = rid_rank.astype(np.int64) * len(self.vids) + vid_rank
        self.order = np.argsort(key, kind="stable")  # candidates of one pair stay in log order
        self.keys = key[self.order]
        #: exposures sharing (request_id, video_id) with an earlier one: their links are ambiguous
        self.duplicate_pairs = int((self.keys[1:] == self.keys[:-1]).sum())

    def candidates(self, request_ids: np.ndarray, video_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(key, first position in `order`, candidate count) of each pair; count 0 = not an exposure."""
        ri = np.clip(np.searchsorted(self.rids, request_ids), 0, len(self.rids) - 1)
        vi = np.clip(np.searchsorted(self.vids, video_ids), 0, len(self.vids) - 1)
        known = (self.rids[ri] == request_ids) & (self.vids[vi] == video_ids)
        key = np.where(known, ri.astype(np.int64) * len(self.vids) + vi, -1)
        lo = np.searchsorted(self.keys, key, side="left")
        hi = np.searchsorted(self.keys, key, side="right")
        return key, lo, np.where(known, hi - lo, 0)


def _occurrence(target: np.ndarray, key: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """0-based rank of each entry among the entries with its (target, key), by `pos`."""
    order = np.lexsort((pos, key, target))
    t, k = target[order], key[order]
    start = np.ones(len(order), dtype=bool)
    start[1:] = (t[1:] != t[:-1]) | (k[1:] != k[:-1])
    first = np.maximum.accumulate(np.where(start, np.arange(len(order)), 0))
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.arange(len(order)) - first
    return out


def link_entries(log: ExposureLog, lookup: _ExposureLookup, target: np.ndarray, pos: np.ndarray,
                 entries: np.ndarray) -> tuple[np.ndarray, dict[str, int]]:
    """Log row of each present array entry (PAD_ROW when its pair is not an exposure) and the
    disambiguation counts. `target`, `pos`: [E] the entry's target request and slot; `entries`: [E, 10]."""
    key, lo, count = lookup.candidates(entries[:, _COL_REQUEST_ID], entries[:, _COL_VIDEO])
    linked = np.where(count > 0, lookup.order[np.minimum(lo, len(lookup.order) - 1)], PAD_ROW).astype(np.int64)
    amb = np.flatnonzero(count > 1)
    # expand each ambiguous entry into its candidates: entry index e, candidate row c
    n_cand = count[amb]
    e = np.repeat(amb, n_cand)
    within = np.arange(len(e)) - np.repeat(np.cumsum(n_cand) - n_cand, n_cand)
    c = lookup.order[lo[e] + within]
    matched = np.zeros(len(e), dtype=np.int64)
    for col, name in MATCH_COLUMNS:
        matched += log[name][c] == entries[e, col]
    effective = log["effective_view"][c] == 1
    score = matched * 2 + effective  # fields first, then feedback
    seg = np.repeat(np.arange(len(amb)), n_cand)
    start = np.cumsum(n_cand) - n_cand
    best = np.maximum.reduceat(score, start)
    is_best = score == best[seg]
    n_best = np.add.reduceat(is_best.astype(np.int64), start)
    best_fields = np.maximum.reduceat(matched, start)
    n_best_fields = np.add.reduceat((matched == best_fields[seg]).astype(np.int64), start)
    # k-th occurrence of a pair in one array takes the k-th tied candidate (in log order)
    k = _occurrence(target[amb], key[amb], pos[amb])
    cum = np.cumsum(is_best)
    rank_in_best = cum - np.concatenate([[0], cum])[start][seg] - 1
    pick = is_best & (rank_in_best == (k % n_best)[seg])
    linked[e[pick]] = c[pick]
    return linked, {
        "rows_disambiguated": int(len(amb)),
        "resolved_by_fields": int((n_best_fields == 1).sum()),
        "resolved_by_feedback": int(((n_best_fields > 1) & (n_best == 1)).sum()),
        "still_tied": int((n_best > 1).sum()),
    }


def author50_history_rows(
    log: ExposureLog,
    timeline: UserTimeline,
    request_rows: np.ndarray,
    history_len: int = AUTHOR50_LEN,
    *,
    progress: bool = False,
) -> tuple[np.ndarray, LinkCoverage]:
    """int32 [R, L] linked log rows per target request (PAD_ROW where empty) and the link coverage
    (`history_len` checked by `Author50Protocol`)."""
    if log.author50_loader is None:
        raise RecscaleError(f"{log.root}: this log has no seq_effective_50 arrays; the author50 protocol needs them")
    n = len(request_rows)
    arrays = np.zeros((n, AUTHOR50_LEN, len(AUTHOR50_COLUMNS)), dtype=np.int64)
    has_array = np.zeros(n, dtype=bool)
    file_of = log["file_index"][request_rows]
    rid_of = log["request_id"][request_rows]
    for fi in tqdm(np.unique(file_of), desc="author50 arrays", unit="file", disable=not progress):
        at = np.flatnonzero(file_of == fi)
        table = log.author50_loader(int(fi))
        # the on-disk format is a dict keyed by request id: one lookup per target request is inherent
        got = [table.get(int(r)) for r in rid_of[at]]
        present = np.array([g is not None for g in got], dtype=bool)
        if present.any():
            arrays[at[present]] = np.stack([np.asarray(g, dtype=np.int64) for g in got if g is not None])
        has_array[at] = present

    row_present = arrays[:, :, _COL_REQUEST_TS] > 0  # [R, 50]
    t_idx, pos = np.nonzero(row_present)  # [E] present entries
    lookup = _ExposureLookup(log)
    rows, stats = link_entries(log, lookup, t_idx, pos, arrays[t_idx, pos])
    is_linked = rows != PAD_ROW
    safe = np.where(is_linked, rows, 0)
    target = request_rows[t_idx]
    not_effective = is_linked & (log["effective_view"][safe] != 1)
    other_user = is_linked & ~not_effective & (log["user_id"][safe] != log["user_id"][target])
    not_before = is_linked & ~not_effective & ~other_user & (
        log["request_timestamp"][safe] >= log["request_timestamp"][target])
    keep = is_linked & ~(not_effective | other_user | not_before)
    # the same exposure twice in one history (only possible when the array repeats a unique pair)
    pair = t_idx.astype(np.int64) * (len(log) + 1) + safe
    first_seen = np.zeros(len(pair), dtype=bool)
    kept_at = np.flatnonzero(keep)
    _, first = np.unique(pair[kept_at], return_index=True)
    first_seen[kept_at[first]] = True
    repeated = keep & ~first_seen
    keep &= first_seen

    # order by timeline position = (request_timestamp, request_id, event_id) within the user
    sorted_pos = np.empty_like(timeline.order)  # the timeline position of each log row
    sorted_pos[timeline.order] = np.arange(len(timeline.order))
    big = np.iinfo(np.int64).max
    position = np.full((n, AUTHOR50_LEN), big, dtype=np.int64)
    position[t_idx[keep], pos[keep]] = sorted_pos[rows[keep]]
    position = np.sort(position, axis=1)
    valid = position != big
    from_right = np.cumsum(valid[:, ::-1], axis=1)[:, ::-1]
    last = valid & (from_right <= history_len)
    out = np.full((n, history_len), PAD_ROW, dtype=np.int32)
    r, c = np.nonzero(last)
    slot = np.cumsum(last, axis=1)[r, c] - 1
    out[r, slot] = timeline.order[position[r, c]]
    coverage = LinkCoverage(
        target_requests=n,
        requests_with_array=int(has_array.sum()),
        rows_present=int(row_present.sum()),
        rows_linked=int(is_linked.sum()),
        duplicate_exposure_pairs=lookup.duplicate_pairs,
        **stats,
        rows_not_effective=int(not_effective.sum()),
        rows_other_user=int(other_user.sum()),
        rows_not_before_target=int(not_before.sum()),
        rows_repeated=int(repeated.sum()),
        rows_kept=int(keep.sum()),
    )
    return out, coverage
