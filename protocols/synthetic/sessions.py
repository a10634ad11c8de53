"""Requests of the synthetic log (users open sessions, a session is a burst of requests) and the noisy
recommender that picks the videos each request shows (docs/data.md, "Generative model": Requests, Exposures;
every strength a field of `config.SessionConfig`, whose comments give the recommender's draws).

Sessions per (user, day) ~ Poisson(activity_u * traffic_d * base); a session starts at a time of day drawn
from a two-peak diurnal profile (lunch, evening). Request times do not depend on labels; the availability
rule then decides, per target, whether the previous requests of a session are already legal history.
Requests falling after the last day are dropped; an empty day gets one (docs/data.md, "The synthetic log").

The recommender's affinity softmax is softmax(<theta_u, phi_c> / T + log popularity_c). When a category has no
upload in the age window, its latest upload before the request is shown, so videos are always uploaded before
the request. All steps are vectorised searchsorted look-ups over the (category, upload time)-sorted catalogue.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..recflow import MS_PER_DAY
from .config import SyntheticConfig
from .world import Users, World


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


_CAT_SHIFT = 40  # key = category << 40 | (upload_ms - origin); 2**40 ms is ~35 years


@dataclass
class Exposures:
    """One row per exposure, grouped by request (requests in the order of `Requests`)."""

    request: np.ndarray  # [N] index into Requests
    video: np.ndarray  # [N] internal video index (into World.videos)
    position: np.ndarray  # [N] 0-based slot within the request


def _lean_categories(world: World, temperature: float, user: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Category drawn from each exposure's user's CDF, processing users in blocks to bound memory."""
    out = np.empty(len(user), dtype=np.int64)
    n_users = len(world.users.activity)
    block = 4096
    order = np.argsort(user, kind="stable")
    bounds = np.searchsorted(user[order], np.arange(0, n_users + block, block))
    for b0 in range(0, n_users, block):
        rows = np.arange(b0, min(b0 + block, n_users))
        sel = order[bounds[b0 // block] : bounds[b0 // block + 1]]
        if len(sel) == 0:
            continue
        # row-wise CDF of the category choice of the block's users: [n, C2] float64
        theta0 = world.users.theta[rows, 0]  # [n, k]
        logits = theta0 @ world.categories.phi.T / temperature + np.log(world.categories.popularity)[None, :]
        logits -= logits.max(axis=1, keepdims=True)
        cdf = np.cumsum(np.exp(logits), axis=1)
        cdf = cdf / cdf[:, -1:]
        C = cdf.shape[1]
        local = user[sel] - b0
        stacked = (cdf + np.arange(len(rows))[:, None]).ravel()  # monotone across rows
        pos = np.searchsorted(stacked, local + rng.random(len(sel)))
        out[sel] = np.minimum(pos - local * C, C - 1)
    return out


def make_exposures(
    cfg: SyntheticConfig, world: World, requests: Requests, rng: np.random.Generator, chunk: int = 1 << 22
) -> Exposures:
    """Exposures of all requests, drawn in chunks of `chunk` slots to bound memory at full scale."""
    n_req = len(requests.user)
    request = np.repeat(np.arange(n_req), requests.num_exposures)
    start = np.cumsum(requests.num_exposures) - requests.num_exposures
    position = np.arange(len(request)) - start[request]
    video = np.empty(len(request), dtype=np.int64)
    v = world.videos
    origin = int(v.upload_ms.min())
    keys = (v.category_two << _CAT_SHIFT) + (v.upload_ms - origin)
    cum = np.cumsum(v.weight)
    pop_cdf = np.cumsum(world.categories.popularity)
    pop_cdf /= pop_cdf[-1]
    for a in range(0, len(request), chunk):
        r = request[a : a + chunk]
        video[a : a + chunk] = _draw_videos(cfg, world, requests.user[r], requests.timestamp_ms[r], keys, origin, cum,
                                            pop_cdf, rng)
    return Exposures(request=request, video=video, position=position.astype(np.int64))


def _draw_videos(cfg, world, user, ts, keys, origin, cum, pop_cdf, rng) -> np.ndarray:
    s = cfg.sessions
    n = len(user)
    category = np.minimum(np.searchsorted(pop_cdf, rng.random(n)), len(pop_cdf) - 1)
    lean = rng.random(n) < s.interest_lean
    category[lean] = _lean_categories(world, s.lean_temperature, user[lean], rng)

    fresh = rng.random(n) < s.fresh_share
    age_days = np.where(fresh, rng.exponential(s.fresh_mean_days, n),
                        np.exp(rng.uniform(0.0, np.log(s.old_max_days), n)))
    target_ms = ts - np.maximum((age_days * MS_PER_DAY).astype(np.int64), 1000)
    del fresh, age_days

    base = category << _CAT_SHIFT
    last = np.searchsorted(keys, base + np.maximum(target_ms - origin, 0), side="right") - 1  # latest upload <= target
    first = np.searchsorted(keys, base + np.maximum(target_ms - int(s.age_window_days * MS_PER_DAY) - origin, 0),
                            side="left")
    cat_first = np.searchsorted(keys, base, side="left")
    last = np.maximum(last, cat_first)  # never empty: each category has a video at the catalogue start
    # fallback when the age window is empty: the category's latest upload at least a second before the request
    freshest = np.maximum(np.searchsorted(keys, base + (ts - 1000 - origin), side="right") - 1, cat_first)

    below = np.where(first > 0, cum[np.maximum(first - 1, 0)], 0.0)
    draw = below + rng.random(n) * (cum[last] - below)
    picked = np.minimum(np.searchsorted(cum, draw, side="left"), last)
    return np.where(first <= last, np.maximum(picked, first), freshest)
