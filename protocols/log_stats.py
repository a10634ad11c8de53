"""Statistics a user checks first on an exposure log (what `recscale inspect` prints; docs/data.md), all
vectorised over the whole log. The delay-sensitive share (targets whose legal history differs between extra
delays A < B) is exact interval stabbing on (user, time) keys: the sets differ iff some earlier request r of
the same user has a_r + A < t <= a_r + B (ignoring the truncation to the most recent L events).
"""
from __future__ import annotations

import numpy as np

from .log import ExposureLog
from .split import SplitConfig

_USER_SHIFT = 42


def request_table(log: ExposureLog) -> dict[str, np.ndarray]:
    """One row per request_id (sorted by id): user, timestamp, exposures, summed playing_time, `inverse` per row."""
    rid = log["request_id"]
    ids, first, inverse, counts = np.unique(rid, return_index=True, return_inverse=True, return_counts=True)
    play = np.bincount(inverse, weights=log["playing_time"].astype(np.float64), minlength=len(ids))
    return {
        "request_id": ids,
        "user_id": log["user_id"][first],
        "request_timestamp": log["request_timestamp"][first],
        "exposures": counts,
        "playing_time_sum": play.astype(np.int64),
        "inverse": inverse,
    }


def delay_sensitive_requests(req: dict[str, np.ndarray], delay_a_ms: int = 0, delay_b_ms: int = 60_000) -> np.ndarray:
    """Bool per request: its legal history differs between extra delays A and B (A < B)."""
    user, t = req["user_id"], req["request_timestamp"]
    t0 = int(t.min()) - 1
    keys = (user << _USER_SHIFT) + (t - t0)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    avail = t + req["playing_time_sum"] - t0  # a_r relative to t0
    lo = np.searchsorted(sorted_keys, (user << _USER_SHIFT) + avail + delay_a_ms, side="right")
    hi = np.searchsorted(sorted_keys, (user << _USER_SHIFT) + avail + delay_b_ms, side="right")
    marks = np.bincount(lo, minlength=len(t) + 1) - np.bincount(hi, minlength=len(t) + 1)
    hit_sorted = np.cumsum(marks[:-1]) > 0
    out = np.empty(len(t), dtype=bool)
    out[order] = hit_sorted
    return out


def summarize(log: ExposureLog) -> dict:
    """Everything `recscale inspect` prints, as a JSON-ready dict; training ends and testing starts where the
    default split (`SplitConfig`, the RecFlow seed's dates) puts them."""
    req = request_table(log)
    per_request = req["exposures"]
    file_index = log["file_index"]
    day_rows = np.bincount(file_index, minlength=len(log.days))
    video = log["video_id"]
    _, v_first, v_inverse = np.unique(video, return_index=True, return_inverse=True)
    first_day_of_row = file_index[v_first][v_inverse]
    unseen_by_day = np.bincount(file_index, weights=(first_day_of_row == file_index).astype(np.float64),
                                minlength=len(log.days))
    lv, ev = log["long_view"], log["effective_view"]
    out = {
        "source": log.source,
        "root": str(log.root),
        "fingerprint": log.fingerprint,
        "days": len(log.days),
        "first_day": log.days[0].isoformat(),
        "last_day": log.days[-1].isoformat(),
        "rows": len(log),
        "requests": int(len(req["request_id"])),
        "users": int(len(np.unique(log["user_id"]))),
        "videos": int(len(v_first)),
        "authors": int(len(np.unique(log["author_id"]))),
        "exposures_per_request": {
            "min": int(per_request.min()),
            "median": float(np.median(per_request)),
            "mean": float(per_request.mean()),
            "p95": float(np.percentile(per_request, 95)),
            "max": int(per_request.max()),
        },
        "long_view_rate": float(lv.mean()),
        "effective_view_rate": float(ev.mean()),
        "long_view_without_effective_view": int(((lv == 1) & (ev == 0)).sum()),
        "per_day": [
            {"day": d.isoformat(), "rows": int(day_rows[i]),
             "unseen_video_share": float(unseen_by_day[i] / max(day_rows[i], 1))}
            for i, d in enumerate(log.days)
        ],
    }
    ts = log["request_timestamp"]
    _, train_end_ms, test_start_ms, _ = SplitConfig().boundaries_ms()
    train, test = ts < train_end_ms, ts >= test_start_ms
    if train.any() and test.any():
        in_train = np.isin(video[test], video[train])
        out["test_unseen_vs_train"] = float(1.0 - in_train.mean())
        sensitive = delay_sensitive_requests(req)[req["inverse"]]
        out["test_delay_sensitive_share_0s_60s"] = float(sensitive[test].mean())
    if log.has_truth:
        out["mean_true_p"] = float(log["true_p"].mean())
    return out


def format_summary(s: dict) -> str:
    """Human-readable text of `summarize`'s dict."""
    e = s["exposures_per_request"]
    lines = [
        f"source      {s['source']}  ({s['root']})",
        f"fingerprint {s['fingerprint'][:16]}",
        f"days        {s['days']}  ({s['first_day']} .. {s['last_day']})",
        f"rows        {s['rows']:,}",
        f"requests    {s['requests']:,}",
        f"users       {s['users']:,}",
        f"videos      {s['videos']:,}",
        f"authors     {s['authors']:,}",
        f"exposures/request  min {e['min']}  median {e['median']:g}  mean {e['mean']:.2f}  p95 {e['p95']:g}  "
        f"max {e['max']}",
        f"long_view rate       {s['long_view_rate']:.4f}",
        f"effective_view rate  {s['effective_view_rate']:.4f}",
    ]
    if "test_unseen_vs_train" in s:
        lines.append(f"test exposures with a video unseen in training  {s['test_unseen_vs_train']:.4f}")
        lines.append(f"test exposures whose history differs 0 s vs 60 s {s['test_delay_sensitive_share_0s_60s']:.4f}")
    if "mean_true_p" in s:
        lines.append(f"mean true_p           {s['mean_true_p']:.4f}")
    lines.append("day         rows        unseen-video share")
    for d in s["per_day"]:
        lines.append(f"{d['day']}  {d['rows']:>10,}  {d['unseen_video_share']:.4f}")
    return "\n".join(lines)
