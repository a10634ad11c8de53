"""Per-user timeline of the exposure log and the feedback availability time a_r of each request (one segmented
sum over the sorted exposures; docs/protocols.md, "Legal history"). "Where do user u's events before t end?" is
a single `searchsorted` on a composite (user rank, time) key, which the legal-history search and the author-50
linker build on.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.errors import RecscaleError

from .log import ExposureLog

#: Bits reserved for the time offset inside the composite key (2^42 ms is about 139 years).
_TIME_BITS = 42


@dataclass
class UserTimeline:
    """Exposures sorted by (user, request_timestamp, request_id, event_id)."""

    order: np.ndarray  # int64 [N] log row of each sorted position
    key: np.ndarray  # int64 [N] composite (user rank << 42) | (t - t_min), non-decreasing
    t_min: int  # the smallest request_timestamp of the log (ms)
    users: np.ndarray  # int64 [U] sorted distinct user ids (the rank of a user is its index here)
    request_start: np.ndarray  # int64 [R_all] sorted position where each request's exposures begin
    request_playing: np.ndarray  # int64 [R_all] summed playing_time of each request
    availability: np.ndarray | None = None  # int64 [N] a_r of each sorted position's request; set by `with_delay`

    @classmethod
    def build(cls, log: ExposureLog) -> UserTimeline:
        user, ts, rid = log["user_id"], log["request_timestamp"], log["request_id"]
        if len(user) == 0:
            raise RecscaleError(f"{log.root}: the exposure log is empty")
        t_min = int(ts.min())
        span = int(ts.max()) - t_min
        users, user_rank = np.unique(user, return_inverse=True)
        if span >= 1 << _TIME_BITS or len(users) >= 1 << (63 - _TIME_BITS):
            raise RecscaleError(f"{log.root}: time span or user count too large for the timeline key")
        key = (user_rank.astype(np.int64) << _TIME_BITS) | (ts - t_min)
        del user_rank
        # lexsort is stable, and rows are in event_id order, so ties end up ordered by event_id.
        order = np.lexsort((rid, key))
        key = key[order]
        rid_sorted = rid[order]
        new_request = np.empty(len(order), dtype=bool)
        new_request[0] = True
        np.not_equal(key[1:], key[:-1], out=new_request[1:])
        new_request[1:] |= rid_sorted[1:] != rid_sorted[:-1]
        del rid_sorted
        request_start = np.flatnonzero(new_request)
        request_playing = np.add.reduceat(log["playing_time"][order], request_start)
        return cls(order, key, t_min, users, request_start, request_playing)

    def with_delay(self, delay_ms: int) -> UserTimeline:
        """Fill `availability` (a_r per sorted position) for the given extra delay."""
        if delay_ms < 0:
            raise RecscaleError(f"delay must be >= 0 ms, got {delay_ms}")
        t_request = (self.key[self.request_start] & ((1 << _TIME_BITS) - 1)) + self.t_min
        a_request = t_request + self.request_playing + delay_ms
        counts = np.diff(np.append(self.request_start, len(self.order)))
        self.availability = np.repeat(a_request, counts)
        return self

    def before(self, user_ids: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each (user, t): sorted positions [lo, hi) of the user's events with t_e < t."""
        rank = np.searchsorted(self.users, user_ids).astype(np.int64) << _TIME_BITS  # users all occur in the log
        lo = np.searchsorted(self.key, rank, side="left")
        offset = np.maximum(np.asarray(ts, dtype=np.int64) - self.t_min, 0)  # nothing precedes t_min
        hi = np.searchsorted(self.key, rank | offset, side="left")
        return lo, hi
