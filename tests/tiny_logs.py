"""Hand-made random tiny exposure logs and plain-Python reference implementations for data tests.

The logs are built to hit the hard cases of the legal-history rule: several requests of one user at
the same timestamp, availability times landing exactly on later request times (all times and
playing times are multiples of one grid step), recent requests with long playing times (pending
while older ones are legal), users with more events than L, and users whose first request has an
empty history. Rows are stored day by day in a shuffled order, so nothing may rely on the log
being time-sorted.
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from protocols import SourceEntry
from protocols.log import ExposureLog
from protocols.schema import make_event_id

SHANGHAI_OFFSET_MS = 8 * 3_600_000
DAY_MS = 86_400_000
#: 2024-01-13 00:00 Asia/Shanghai in epoch ms (the first day of the default split).
T_2024_01_13 = 1_705_075_200_000


def random_log(
    seed: int,
    *,
    n_users: int = 5,
    n_requests: int = 120,
    t0: int = T_2024_01_13,
    span_ms: int = 40 * 60_000,
    grid_ms: int = 10_000,
    max_exposures: int = 4,
    n_videos: int = 40,
    author50: bool = False,
    with_truth: bool = False,
    duplicate_share: float = 0.0,
) -> ExposureLog:
    """A random log; timestamps in [t0, t0 + span_ms) on a `grid_ms` grid.

    `duplicate_share` > 0 shows that share of exposures a second time in the same request (same
    video, so the (request_id, video_id) pair repeats): a third of the copies differ only in feedback,
    a third also in playing time, a third are exact copies (feedback included)."""
    rng = np.random.default_rng(seed)
    req_user = rng.integers(0, n_users, n_requests) * 7 + 100  # arbitrary, non-contiguous ids
    req_t = t0 + rng.integers(0, span_ms // grid_ms, n_requests) * grid_ms
    req_id = rng.permutation(n_requests) * 3 + 11  # unique, unrelated to time
    n_exp = rng.integers(1, max_exposures + 1, n_requests)
    # many zero playing times (a_r = t_r + delay exactly), some long ones (pending for a while)
    long = rng.random(n_requests) < 0.2
    req = np.repeat(np.arange(n_requests), n_exp)
    n = len(req)
    playing = np.where(
        rng.random(n) < 0.4, 0, rng.integers(0, 3, n) * grid_ms + np.where(long[req], 20 * grid_ms, 0)
    )
    # distinct videos inside a request, so (request_id, video_id) identifies an exposure
    position_in_request = np.arange(n) - np.repeat(np.cumsum(n_exp) - n_exp, n_exp)
    video = (np.repeat(rng.integers(0, n_videos, n_requests), n_exp) + position_in_request) % n_videos
    cols = {
        "request_id": req_id[req],
        "request_timestamp": req_t[req],
        "user_id": req_user[req],
        "device_id": req_user[req] * 2 + 1,
        "age": req_user[req] % 5,
        "gender": req_user[req] % 2,
        "province": req_user[req] % 3,
        "video_id": video,
        "author_id": video // 3 + 1000,
        "category_level_one": video % 4,
        "category_level_two": video % 9,
        "upload_type": video % 2,
        "upload_timestamp": np.where(rng.random(n) < 0.1, 0, (t0 // 1000) - rng.integers(0, 30 * 86_400, n)),
        "duration": np.where(rng.random(n) < 0.1, 0, rng.integers(5_000, 120_000, n)),
        "playing_time": playing,
        "effective_view": rng.integers(0, 2, n),
        "long_view": rng.integers(0, 2, n),
    }
    if duplicate_share > 0:  # own generator: the logs of other tests stay exactly as they were
        cols = _with_duplicates(cols, duplicate_share, grid_ms, np.random.default_rng([seed, 1]))
        n = len(cols["request_id"])
    local_day = (cols["request_timestamp"] + SHANGHAI_OFFSET_MS) // DAY_MS
    days_present = np.unique(local_day)
    file_index = np.searchsorted(days_present, local_day)
    order = np.lexsort((rng.random(n), file_index))  # day by day, shuffled inside a day
    cols = {k: np.asarray(v, dtype=np.int64)[order] for k, v in cols.items()}
    file_index = file_index[order].astype(np.int64)
    record_index = np.empty(n, dtype=np.int64)
    for f in np.unique(file_index):
        at = np.flatnonzero(file_index == f)
        record_index[at] = np.arange(1, len(at) + 1)
    cols["file_index"] = file_index
    cols["record_index"] = record_index
    cols["event_id"] = make_event_id(file_index, record_index)
    if with_truth:
        cols["true_p"] = rng.random(n)
    days = tuple(dt.date(1970, 1, 1) + dt.timedelta(days=int(d)) for d in days_present)
    log = ExposureLog(cols, days, "tiny", Path(f"/tiny/{seed}"), f"tiny-{seed}-{n_requests}-{span_ms}")
    if author50:
        log.author50_loader = _author50_tables(log, rng)
    return log


def _with_duplicates(cols: dict, share: float, grid_ms: int, rng: np.random.Generator) -> dict:
    n = len(cols["request_id"])
    src = np.flatnonzero(rng.random(n) < share)
    kind = rng.integers(0, 3, len(src))  # 0: other feedback, 1: other feedback and playing time, 2: exact copy
    copy = {k: np.asarray(v)[src].copy() for k, v in cols.items()}
    flip = kind < 2
    copy["effective_view"][flip] = 1 - copy["effective_view"][flip]
    copy["long_view"][flip] = 1 - copy["long_view"][flip]
    copy["playing_time"][kind == 1] += grid_ms
    return {k: np.concatenate([np.asarray(v), copy[k]]) for k, v in cols.items()}


def _author50_tables(log: ExposureLog, rng: np.random.Generator):
    """Author-style arrays: each request's user's 50 latest effective views strictly before it,
    right-aligned, with one in ten rows pointing at a (request, video) pair that is not an exposure."""
    tables: dict[int, dict[int, np.ndarray]] = {}
    sources: dict[int, list[int | None]] = {}  # request_id -> log row of each present array row (None: unlinkable)
    rows = sorted(range(len(log)),
                  key=lambda i: (log["request_timestamp"][i], log["request_id"][i], log["event_id"][i]))
    seen_requests = set()
    for i in rows:
        rid = int(log["request_id"][i])
        if rid in seen_requests:
            continue
        seen_requests.add(rid)
        u, t = log["user_id"][i], log["request_timestamp"][i]
        past = [j for j in rows
                if log["user_id"][j] == u and log["request_timestamp"][j] < t and log["effective_view"][j] == 1]
        past = past[-50:]
        arr = np.zeros((50, 10), dtype=np.int64)
        sources[rid] = []
        for k, j in enumerate(past):
            linkable = rng.random() > 0.1
            vid = log["video_id"][j] if linkable else 10_000 + j  # unlinkable video
            sources[rid].append(j if linkable else None)
            arr[50 - len(past) + k] = [
                vid, log["author_id"][j], log["category_level_two"][j], log["category_level_one"][j],
                log["upload_type"][j], log["upload_timestamp"][j], log["duration"][j],
                log["request_timestamp"][j], log["playing_time"][j], log["request_id"][j],
            ]
        tables.setdefault(int(log["file_index"][i]), {})[rid] = arr
    def loader(file_index: int) -> dict[int, np.ndarray]:
        return tables.get(file_index, {})

    loader.sources = sources  # type: ignore[attr-defined]
    return loader


def reference_availability(log: ExposureLog, delay_ms: int) -> dict[int, int]:
    """a_r per request id, by a plain loop."""
    t: dict[int, int] = {}
    played: dict[int, int] = {}
    for i in range(len(log)):
        r = int(log["request_id"][i])
        t[r] = int(log["request_timestamp"][i])
        played[r] = played.get(r, 0) + int(log["playing_time"][i])
    return {r: t[r] + played[r] + delay_ms for r in t}


def reference_history(
    log: ExposureLog, target_row: int, delay_ms: int, history_len: int, avail: dict[int, int] | None = None
) -> list[int]:
    """event_ids of the legal history of the target at `target_row`, ascending, by brute force:
    the four conditions checked one by one over every exposure, then the L most recent kept.
    `avail` may pass a precomputed `reference_availability(log, delay_ms)`."""
    avail = avail if avail is not None else reference_availability(log, delay_ms)
    u = int(log["user_id"][target_row])
    t = int(log["request_timestamp"][target_row])
    r = int(log["request_id"][target_row])
    users, rids, times, eids = (log[c].tolist() for c in ("user_id", "request_id", "request_timestamp", "event_id"))
    legal = []
    for e in range(len(log)):
        same_user = users[e] == u
        other_request = rids[e] != r
        earlier = times[e] < t
        available = avail[rids[e]] < t
        if same_user and other_request and earlier and available:
            legal.append((times[e], rids[e], eids[e]))
    legal.sort()
    return [eid for _, _, eid in legal[-history_len:]] if history_len > 0 else []


def tiny_source(log: ExposureLog, name: str = "tinytest") -> SourceEntry:
    """A source entry that reads `log` whatever the root, with RecFlow's defaults (register it with
    `monkeypatch.setitem(protocols.SOURCES._items, name, tiny_source(log))`)."""
    from protocols.recflow import RECFLOW_DEFAULTS

    return SourceEntry(name, lambda root, **kw: log, RECFLOW_DEFAULTS, __name__)
