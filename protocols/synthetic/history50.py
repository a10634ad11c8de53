"""RecFlow's `seq_effective_50_dict` arrays for the synthetic log.

For every request r of user u at time t: the (up to) 50 most recent exposures of u with
effective_view = 1 and request_timestamp strictly before t, oldest first, right-aligned in a [50, 10]
int64 array whose leading unused rows are zero. Columns: `recflow_format.AUTHOR50_COLUMNS`.
Vectorised: one searchsorted on (user, time) keys gives each request's window end.
"""
from __future__ import annotations

import numpy as np

from ..recflow_format import AUTHOR50_COLUMNS, AUTHOR50_LEN

_USER_SHIFT = 42


class EffectiveViewIndex:
    """Effective-view events of the whole log, sorted by (user, request_timestamp, request_id, position)."""

    def __init__(self, columns: dict[str, np.ndarray], effective: np.ndarray):
        """`columns`: canonical columns of log rows in file order; only rows with `effective` == 1 are kept."""
        sel = np.flatnonzero(effective == 1)
        user, ts = columns["user_id"][sel].astype(np.int64), columns["request_timestamp"][sel]
        self.t0 = int(ts.min()) - 1 if len(ts) else 0
        keys = (user << _USER_SHIFT) + (ts - self.t0)
        order = np.argsort(keys, kind="stable")  # input is already in (time, request, position) order
        self.keys = keys[order]
        self.rows = np.stack([columns[c][sel[order]].astype(np.int64) for c in AUTHOR50_COLUMNS], axis=1)  # [E, 10]

    def arrays(self, user: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """[n, 50, 10] int64 histories of requests given by their user and timestamp."""
        user = np.asarray(user, dtype=np.int64)
        end = np.searchsorted(self.keys, (user << _USER_SHIFT) + (ts - self.t0), side="left")
        begin = np.searchsorted(self.keys, user << _USER_SHIFT, side="left")
        idx = end[:, None] - AUTHOR50_LEN + np.arange(AUTHOR50_LEN)[None, :]  # [n, 50]
        valid = idx >= begin[:, None]
        out = (self.rows[np.where(valid, idx, 0)] if len(self.rows)
               else np.zeros((len(user), AUTHOR50_LEN, len(AUTHOR50_COLUMNS)), np.int64))
        out[~valid] = 0
        return out
