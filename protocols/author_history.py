"""The `author50` history: RecFlow's seq_effective_50 arrays linked back to exposure rows.

Each target request r has (in the file of its day) an int64 [50, 10] array whose rows are
[video, author, cat2, cat1, upload_type, upload_ts, duration, request_ts, playing_time, request_id],
right-aligned with zero padding (a row is present when request_ts > 0). Every present row is linked
to the exposure with the same (request_id, video_id); linked rows are then encoded exactly like
exposure-protocol history (their fields come from the exposure table), ordered by
(request_timestamp, request_id, event_id) and left-aligned. Coverage is reported, never assumed:
requests without an array, and rows that do not link, are counted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from .availability import UserTimeline
from .errors import RecscaleError
from .legal_history import PAD_ROW
from .log import ExposureLog

AUTHOR50_WIDTH = 50
_COL_VIDEO, _COL_REQUEST_TS, _COL_REQUEST_ID = 0, 7, 9


@dataclass(frozen=True)
class LinkCoverage:
    """How much of the author arrays could be tied to exposure rows."""

    target_requests: int
    requests_with_array: int
    rows_present: int
    rows_linked: int
    rows_not_before_target: int  # linked rows whose request time is not earlier than the target's
    duplicate_exposure_pairs: int  # exposures whose (request_id, video_id) is not unique in the log

    def as_dict(self) -> dict[str, float]:
        return {
            "target_requests": self.target_requests,
            "requests_with_array": self.requests_with_array,
            "request_key_coverage": self.requests_with_array / max(1, self.target_requests),
            "rows_present": self.rows_present,
            "rows_linked": self.rows_linked,
            "row_link_coverage": self.rows_linked / max(1, self.rows_present),
            "rows_not_before_target": self.rows_not_before_target,
            "duplicate_exposure_pairs": self.duplicate_exposure_pairs,
        }


class _ExposureLookup:
    """(request_id, video_id) -> log row, vectorised (first row wins for duplicates)."""

    def __init__(self, log: ExposureLog) -> None:
        self.rids, rid_rank = np.unique(log["request_id"], return_inverse=True)
        self.vids, vid_rank = np.unique(log["video_id"], return_inverse=True)
        key = rid_rank.astype(np.int64) * len(self.vids) + vid_rank
        self.order = np.argsort(key, kind="stable")
        self.keys = key[self.order]
        #: exposures sharing (request_id, video_id) with an earlier one: their links are ambiguous
        self.duplicate_pairs = int((self.keys[1:] == self.keys[:-1]).sum())

    def rows(self, request_ids: np.ndarray, video_ids: np.ndarray) -> np.ndarray:
        """Log row of each pair, PAD_ROW where the pair is not an exposure."""
        ri = np.clip(np.searchsorted(self.rids, request_ids), 0, len(self.rids) - 1)
        vi = np.clip(np.searchsorted(self.vids, video_ids), 0, len(self.vids) - 1)
        known = (self.rids[ri] == request_ids) & (self.vids[vi] == video_ids)
        key = ri.astype(np.int64) * len(self.vids) + vi
        at = np.clip(np.searchsorted(self.keys, key), 0, len(self.keys) - 1)
        found = known & (self.keys[at] == key)
        return np.where(found, self.order[at], PAD_ROW)


def author50_history_rows(
    log: ExposureLog,
    timeline: UserTimeline,
    request_rows: np.ndarray,
    history_len: int = AUTHOR50_WIDTH,
    *,
    progress: bool = False,
) -> tuple[np.ndarray, LinkCoverage]:
    """int32 [R, L] linked log rows per target request (PAD_ROW where empty) and the link coverage."""
    if log.author50_loader is None:
        raise RecscaleError(f"{log.root}: this log has no seq_effective_50 arrays; the author50 protocol needs them")
    if not 1 <= history_len <= AUTHOR50_WIDTH:
        raise RecscaleError(f"author50 history_len must be in 1..{AUTHOR50_WIDTH}, got {history_len}")
    n = len(request_rows)
    arrays = np.zeros((n, AUTHOR50_WIDTH, 10), dtype=np.int64)
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
    lookup = _ExposureLookup(log)
    linked = lookup.rows(arrays[:, :, _COL_REQUEST_ID], arrays[:, :, _COL_VIDEO])
    linked = np.where(row_present, linked, PAD_ROW)  # [R, 50]
    is_linked = linked != PAD_ROW
    target_ts = log["request_timestamp"][request_rows]
    linked_ts = log["request_timestamp"][np.where(is_linked, linked, 0)]
    not_before = int((is_linked & (linked_ts >= target_ts[:, None])).sum())

    # order by timeline position = (request_timestamp, request_id, event_id) within the user
    sorted_pos = timeline.sorted_position()
    big = np.iinfo(np.int64).max
    position = np.sort(np.where(is_linked, sorted_pos[np.where(is_linked, linked, 0)], big), axis=1)
    valid = position != big
    from_right = np.cumsum(valid[:, ::-1], axis=1)[:, ::-1]
    keep = valid & (from_right <= history_len)
    out = np.full((n, history_len), PAD_ROW, dtype=np.int32)
    r, c = np.nonzero(keep)
    slot = np.cumsum(keep, axis=1)[r, c] - 1
    out[r, slot] = timeline.order[position[r, c]]
    coverage = LinkCoverage(
        target_requests=n,
        requests_with_array=int(has_array.sum()),
        rows_present=int(row_present.sum()),
        rows_linked=int(is_linked.sum()),
        rows_not_before_target=not_before,
        duplicate_exposure_pairs=lookup.duplicate_pairs,
    )
    return out, coverage
