"""The planted label model: true P(long_view), labels, effective_view and playing_time (the formula, with S the
recency-weighted, candidate-category-dependent sum over the user's earlier effective views, and the
playing-time rules: docs/data.md, "Generative model"). Because labels feed S, requests are simulated in rounds:
round k handles the k-th request of every user at once (exposures are pre-sorted so each round is one
contiguous slice), using per-user state H[u, c] = sum_j exp(t_j / tau) 1[c_j = c] (log-time trick: no
per-round decay of the whole state). The intercepts b and b_ev are calibrated on a pilot subset of users so
that the label rates match `SignalConfig`. With `effective_view_tau_hours` set (a planted world of two reaches),
effective_view is drawn from its own logit, whose history term uses that recency; its state is kept per user
relative to the user's last request (a short tau would overflow the log-time trick over 37 days).
"""
from __future__ import annotations

import numpy as np

from ..recflow import local_hour
from .config import SyntheticConfig
from .world import World

_CHUNK = 1 << 20


def static_logit(cfg: SyntheticConfig, world: World, user: np.ndarray, day: np.ndarray, ts: np.ndarray,
                 video: np.ndarray) -> np.ndarray:
    """The history-free part of the logit (without intercept): [N] float64."""
    sig, v, cats = cfg.signal, world.videos, world.categories
    out = np.empty(len(user), dtype=np.float64)
    log_dur = np.log(v.duration_ms.astype(np.float64))
    mu, sd = log_dur.mean(), log_dur.std() + 1e-9
    for a in range(0, len(user), _CHUNK):
        sl = slice(a, a + _CHUNK)
        vid = video[sl]
        theta = world.users.theta[user[sl], day[sl]]  # [n, k]
        affinity = np.einsum("nk,nk->n", theta, world.psi(vid))  # [n]
        c1 = cats.level_one_of[v.category_two[vid]]
        time_of_day = np.cos(2 * np.pi * (local_hour(ts[sl]) - cats.peak_hour[c1]) / 24.0)
        duration = -(log_dur[vid] - mu) / sd
        out[sl] = (sig.affinity * affinity + sig.time_of_day * time_of_day + sig.duration * duration
                   + sig.quality * v.quality[vid])
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def simulate(
    cfg: SyntheticConfig,
    static: np.ndarray,
    user: np.ndarray,
    ts: np.ndarray,
    c2: np.ndarray,
    c1: np.ndarray,
    rounds: np.ndarray,
    u_long: np.ndarray,
    u_eff: np.ndarray,
    intercepts: tuple[float, float],
    num_users: int,
    num_c2: int,
    num_c1: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Roll the label model forward. Inputs are sorted by (round, user); `rounds` holds slice bounds.

    Returns (true_p, long_view, effective_view, history term beta*log1p(S)) in the same order.
    """
    sig = cfg.signal
    b, b_ev = intercepts
    tau_ms = sig.history_tau_hours * 3_600_000.0
    t0 = float(ts.min()) if len(ts) else 0.0
    h2 = np.zeros((num_users, num_c2))  # sum exp((t_j - t0) / tau) over positive events, per category
    h1 = np.zeros((num_users, num_c1))
    two_reaches = sig.effective_view_tau_hours is not None
    if two_reaches:  # effective_view's own state: sum exp((t_j - ref_u) / tau_ev), ref_u = the user's last request
        tau_ev_ms = float(sig.effective_view_tau_hours) * 3_600_000.0  # type: ignore[arg-type]
        g, ref = np.zeros(num_users), np.zeros(num_users)  # over every category: a mood, not a taste
        beta_ev = sig.history if sig.effective_view_history is None else sig.effective_view_history
    p = np.empty(len(user))
    lv = np.zeros(len(user), dtype=np.int8)
    ev = np.zeros(len(user), dtype=np.int8)
    hist = np.zeros(len(user))
    for k in range(len(rounds) - 1):
        sl = slice(rounds[k], rounds[k + 1])
        u, t = user[sl], (ts[sl] - t0) / tau_ms
        decay = np.exp(-t)
        s = (h2[u, c2[sl]] + sig.history_level_one_weight * h1[u, c1[sl]]) * decay
        hist[sl] = sig.history * np.log1p(s)
        logit = b + static[sl] + hist[sl]
        p_k = _sigmoid(logit)
        long_k = u_long[sl] < p_k
        if two_reaches:
            t_ev = (ts[sl] - t0) / tau_ev_ms
            rows = np.unique(u)
            now = t_ev[np.searchsorted(u, rows)]
            g[rows] *= np.exp(ref[rows] - now)  # [users of the round]: decayed to this request
            ref[rows] = now
            s_ev = g[u]
            eff_k = u_eff[sl] < _sigmoid(b_ev + static[sl] + beta_ev * np.log1p(s_ev))
        else:
            eff_k = long_k | (u_eff[sl] < _sigmoid(b_ev + logit))
        p[sl], lv[sl], ev[sl] = p_k, long_k, eff_k
        if eff_k.any():
            w = np.exp(t[eff_k])
            np.add.at(h2, (u[eff_k], c2[sl][eff_k]), w)
            np.add.at(h1, (u[eff_k], c1[sl][eff_k]), w)
            if two_reaches:  # every request of a user in a round shares its time: each event adds exp(0)
                np.add.at(g, u[eff_k], 1.0)
    return p, lv, ev, hist


def round_order(user: np.ndarray, request: np.ndarray, request_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Permutation of exposures sorted by (rank of their request within its user, user) and round bounds."""
    rank = request_rank[request]
    order = np.lexsort((request, user, rank))
    bounds = np.searchsorted(rank[order], np.arange(rank.max() + 2 if len(rank) else 1))
    return order, bounds


def _logit(x: float) -> float:
    return float(np.log(x / (1 - x)))


def calibrate(
    cfg: SyntheticConfig, arrays: dict[str, np.ndarray], user_of: np.ndarray, request: np.ndarray,
              request_rank: np.ndarray,
    num_c2: int, num_c1: int,
) -> tuple[float, float]:
    """Find (b, b_ev) so that the pilot's long_view and effective_view rates hit the targets.

    `arrays` holds the per-exposure inputs of `simulate` (static, ts, c2, c1, u_long, u_eff) in any order.
    """
    sig = cfg.signal
    pilot_users = np.unique(user_of)[: sig.calibration_users]
    sel = np.flatnonzero(np.isin(user_of, pilot_users))
    remap = np.searchsorted(pilot_users, user_of[sel])
    order, bounds = round_order(remap, request[sel], request_rank)
    idx = sel[order]
    sub = {k: v[idx] for k, v in arrays.items()}
    target_lv = _logit(sig.long_view_rate)
    two_reaches = sig.effective_view_tau_hours is not None
    target_ev = _logit(sig.effective_view_rate if two_reaches
                       else (sig.effective_view_rate - sig.long_view_rate) / (1 - sig.long_view_rate))
    b, b_ev = target_lv - float(np.median(sub["static"])), target_ev
    previous: tuple[float, float] | None = None  # (b, error) of the last round, for the secant step
    for _ in range(sig.calibration_rounds):
        _, lv, ev, _ = simulate(cfg, user=remap[order], rounds=bounds, intercepts=(b, b_ev), num_users=len(pilot_users),
                             num_c2=num_c2, num_c1=num_c1, **sub)
        error = _logit(float(np.clip(lv.mean(), 1e-4, 1 - 1e-4))) - target_lv
        ev_only = float(np.clip(ev.mean() if two_reaches else ev[lv == 0].mean() if (lv == 0).any() else 0.5,
                                1e-4, 1 - 1e-4))
        slope = 1.0
        if previous is not None and previous[0] != b:
            slope = float(np.clip((error - previous[1]) / (b - previous[0]), 0.2, 2.0))
        previous = (b, error)
        b -= error / slope
        b_ev += target_ev - _logit(ev_only)
    return b, b_ev


def playing_time(duration_ms: np.ndarray, long_view: np.ndarray, effective_view: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    n = len(duration_ms)
    ratio = np.where(
        long_view == 1,
        np.minimum(1.0 + rng.exponential(0.25, n), 3.0),
        np.where(effective_view == 1, rng.uniform(0.3, 1.0, n), rng.uniform(0.02, 0.3, n)),
    )
    return np.floor(duration_ms * ratio).astype(np.int64)
