"""The noisy recommender: which videos each request shows (docs/data.md, "Generative model": Exposures; every
strength a field of `config.SessionConfig`, whose comments give the draws).

The user's affinity softmax is softmax(<theta_u, phi_c> / T + log popularity_c). When a category has no upload
in the age window, its latest upload before the request is shown, so videos are always uploaded before the
request. All steps are vectorised searchsorted look-ups over the (category, upload time)-sorted catalogue.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..recflow import MS_PER_DAY
from .config import SyntheticConfig
from .sessions import Requests
from .world import World

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
