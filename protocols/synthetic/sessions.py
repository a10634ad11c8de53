"""Requests of the synthetic log: users open sessions, a session is a burst of requests (docs/data.md,
"Generative model": Requests).

Sessions per (user, day) ~ Poisson(activity_u * traffic_d * base); a session starts at a time of day drawn
from a two-peak diurnal profile (lunch, evening). Request times do not depend on labels; the availability
rule then decides, per target, whether the previous requests of a session are already legal history.
Requests falling after the last day are dropped; an empty day gets one (docs/data.md, "The synthetic log").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..recflow import MS_PER_DAY
from .config import SyntheticConfig
from .world import Users


@dataclass
class Requests:
    """One row per request, sorted by (user, timestamp)."""

    user: np.ndarray  # [R] internal user index
    timestamp_ms: np.ndarray  # [R] int64
    day: np.ndarray  # [R] file index (0-based day)
    num_exposures: np.ndarray  # [R] int64 in 1..20
    device: np.ndarray  # [R] device id used
    request_id: np.ndarray  # [R] int64, rank in global time order


def _diurnal_ms(n: int, rng: np.random.Generator) -> np.ndarray:
    """Time of day (ms since local midnight) with a lunch peak and a larger evening peak."""
    kind = rng.choice(3, size=n, p=[0.3, 0.5, 0.2])
    hour = np.where(kind == 0, rng.normal(12.5, 1.5, n),
                    np.where(kind == 1, rng.normal(21.0, 2.0, n), rng.uniform(0, 24, n)))
    return ((hour % 24.0) * 3_600_000).astype(np.int64)


def _fill_empty_days(
    user: np.ndarray, ts: np.ndarray, users: Users, day_starts_ms: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(user, ts) plus one request on every day without any; no random draw when no day is empty."""
    day = np.searchsorted(day_starts_ms, ts, side="right") - 1
    empty = np.setdiff1d(np.arange(len(day_starts_ms)), day)
    if len(empty) == 0:
        return user, ts
    p = users.activity / users.activity.sum()
    extra_user = rng.choice(len(p), size=len(empty), p=p).astype(user.dtype)
    extra_ts = day_starts_ms[empty].astype(np.int64) + _diurnal_ms(len(empty), rng)
    return np.concatenate([user, extra_user]), np.concatenate([ts, extra_ts.astype(ts.dtype)])


def make_requests(
    cfg: SyntheticConfig, users: Users, day_starts_ms: np.ndarray, day_weights: np.ndarray, rng: np.random.Generator
) -> Requests:
    s = cfg.sessions
    probs = np.asarray(s.exposures_per_request_probs, dtype=np.float64)
    probs /= probs.sum()
    mean_exposures = float((np.arange(1, len(probs) + 1) * probs).sum())
    n_days = len(day_starts_ms)
    target_sessions = cfg.scale.exposures / mean_exposures / s.requests_per_session_mean
    traffic = day_weights / day_weights.mean()  # [D], mean 1
    rate = users.activity[:, None] * traffic[None, :] * (target_sessions / (len(users.activity) * n_days))  # [U, D]
    sessions_ud = rng.poisson(rate)  # [U, D]

    flat = np.repeat(np.arange(sessions_ud.size), sessions_ud.ravel())
    s_user, s_day = np.divmod(flat, n_days)
    s_start = day_starts_ms[s_day] + _diurnal_ms(len(flat), rng)
    s_len = rng.geometric(1.0 / s.requests_per_session_mean, size=len(flat))

    # requests: session start + cumulative lognormal gaps (first request at the session start)
    r_session = np.repeat(np.arange(len(flat)), s_len)
    first = np.repeat(np.cumsum(s_len) - s_len, s_len)
    gaps = rng.lognormal(np.log(s.request_gap_median_s * 1000), s.request_gap_log_sd,
                         size=len(r_session)).astype(np.int64)
    gaps[first == np.arange(len(r_session))] = 0
    csum = np.cumsum(gaps)
    offset = csum - csum[first]
    ts = s_start[r_session] + offset
    keep = ts < day_starts_ms[-1] + MS_PER_DAY
    user, ts = _fill_empty_days(s_user[r_session][keep], ts[keep], users, day_starts_ms, rng)
    order = np.lexsort((ts, user))
    user, ts = user[order], ts[order]
    day = np.searchsorted(day_starts_ms, ts, side="right") - 1

    n = len(user)
    num_exposures = rng.choice(len(probs), size=n, p=probs) + 1
    use_second = (users.second_device[user] >= 0) & (rng.random(n) < 0.3)
    device = np.where(use_second, users.second_device[user], users.device[user])
    request_id = np.empty(n, dtype=np.int64)
    request_id[np.lexsort((user, ts))] = np.arange(n)
    return Requests(
        user=user.astype(np.int64),
        timestamp_ms=ts.astype(np.int64),
        day=day.astype(np.int64),
        num_exposures=num_exposures.astype(np.int64),
        device=device.astype(np.int64),
        request_id=request_id,
    )
