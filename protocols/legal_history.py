"""Vectorised legal exposure history (the `exposure` protocol's core): the rule and the windowed search are in
docs/protocols.md, "Legal history". The search is bounded to t_e < t as well, and memory stays about
chunk * W * 30 bytes.
"""
from __future__ import annotations

from typing import cast

import numpy as np
from tqdm import tqdm

from .availability import UserTimeline

PAD_ROW = -1


def legal_history_rows(
    timeline: UserTimeline,
    user_ids: np.ndarray,
    request_ts: np.ndarray,
    history_len: int,
    *,
    chunk: int = 32_768,
    slack: int = 64,
    progress: bool = False,
) -> np.ndarray:
    """int32 [R, L]: log rows of each target request's legal history, PAD_ROW where empty.

    Valid entries are left-aligned in ascending (request_timestamp, request_id, event_id) order.
    `timeline.availability` must be filled (`UserTimeline.with_delay`).
    """
    if timeline.availability is None:
        raise ValueError("timeline.availability is not set; call with_delay() first")
    n = len(user_ids)
    out = np.full((n, history_len), PAD_ROW, dtype=np.int32)
    lo, hi = timeline.before(user_ids, request_ts)
    ts = np.asarray(request_ts, dtype=np.int64)
    bar = tqdm(total=n, desc="legal history", unit="req", disable=not progress)
    for start in range(0, n, chunk):
        rows = np.arange(start, min(start + chunk, n))
        width = history_len + slack
        while len(rows):
            incomplete = _fill_window(timeline, out, rows, lo[rows], hi[rows], ts[rows], width)
            rows = rows[incomplete]
            width *= 4
        bar.update(min(chunk, n - start))
    bar.close()
    return out


def _fill_window(
    timeline: UserTimeline,
    out: np.ndarray,
    rows: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    ts: np.ndarray,
    width: int,
) -> np.ndarray:
    """Search positions [hi - width, hi) for each row; write finished rows into `out`.

    Returns a boolean mask over `rows` of those that need a wider window.
    """
    L = out.shape[1]
    width = int(min(width, max(1, int((hi - lo).max(initial=1)))))
    pos = hi[:, None] - width + np.arange(width)[None, :]  # [C, W] sorted positions
    in_past = pos >= lo[:, None]  # same user and t_e < t
    pos = np.where(in_past, pos, 0)
    legal = in_past & (cast(np.ndarray, timeline.availability)[pos] < ts[:, None])  # [C, W]; checked by the caller
    # keep the L most recent legal positions: those whose running legal count exceeds n_legal - L
    running = np.cumsum(legal, axis=1, dtype=np.int32)  # [C, W]
    n_legal = running[:, -1]
    skip = np.maximum(n_legal - L, 0)  # legal positions older than the kept ones
    window_covers_past = (hi - width) <= lo
    done = (n_legal >= L) | window_covers_past
    keep = legal & (running > skip[:, None]) & done[:, None]
    r, c = np.nonzero(keep)
    slot = running[r, c] - skip[r] - 1  # left-aligned, ascending
    out[rows[r], slot] = timeline.order[pos[r, c]]
    return ~done


def delay_membership_difference(
    timeline: UserTimeline,
    user_ids: np.ndarray,
    request_ts: np.ndarray,
    history_len: int,
    delays_ms: tuple[int, int],
    *,
    progress: bool = False,
) -> np.ndarray:
    """bool [R]: whether each target request's history membership differs between two delays.

    Both histories are sorted by the same key, so equal rows means equal membership.
    """
    first = legal_history_rows(timeline.with_delay(delays_ms[0]), user_ids, request_ts, history_len, progress=progress)
    second = legal_history_rows(timeline.with_delay(delays_ms[1]), user_ids, request_ts, history_len, progress=progress)
    return np.any(first != second, axis=1)
