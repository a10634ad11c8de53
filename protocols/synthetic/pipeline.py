"""Assemble the synthetic log (world -> requests -> exposures -> labels) and write it atomically in RecFlow's
on-disk layout: per day the realshow file, the truth side file and optionally the author-50 pickle (the files:
docs/data.md, "The synthetic log"). A request's author-50 array holds the (up to) 50 most recent effective views
of its user strictly before its time, oldest first, right-aligned with zero leading rows; `EffectiveViewIndex`
finds each request's window end with one searchsorted.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
from tqdm import tqdm

from core.atomic_write import write_json
from core.errors import RecscaleError
from core.typed_config import to_dict

from ..output_location import check_writable
from ..recflow import (
    AUTHOR50_COLUMNS,
    AUTHOR50_DIR,
    AUTHOR50_LEN,
    DEFAULT_DAYS,
    REALSHOW_DIR,
    RECFLOW_COLUMNS,
    RECFLOW_DTYPES,
    TRUTH_DIR,
    author50_path,
    day_bounds_ms,
    truth_path,
)
from . import labels as L
from .config import DEFAULT_WORLD, RECFLOW_DAILY_REQUESTS, SyntheticConfig, scale_config
from .sessions import Requests, make_exposures, make_requests
from .world import World, make_world

FORMAT_VERSION = 1
MARKER = "SYNTHETIC.json"
_USER_SHIFT = 42


def build_log(cfg: SyntheticConfig, seed: int, days: tuple[dt.date, ...] = DEFAULT_DAYS,
              progress: bool = False) -> GeneratedLog:
    """Generate the whole log in memory (compact arrays; columns are materialised per day when written)."""
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(6)]
    bar = tqdm(total=5, desc="synth", disable=not progress, unit="stage")
    day_starts, _ = day_bounds_ms(days)
    weights = np.resize(np.asarray(RECFLOW_DAILY_REQUESTS, dtype=np.float64), len(days))
    world = make_world(cfg, int(day_starts[0]), weights, streams[0])
    bar.update()
    req = make_requests(cfg, world.users, day_starts, weights, streams[1])
    exp = make_exposures(cfg, world, req, streams[2])
    bar.update()

    v, cats = world.videos, world.categories
    user = req.user[exp.request]
    day = req.day[exp.request]
    ts = req.timestamp_ms[exp.request]
    c2 = v.category_two[exp.video]
    c1 = cats.level_one_of[c2]
    static = L.static_logit(cfg, world, user, day, ts, exp.video)
    bar.update()

    first_of_user = np.searchsorted(req.user, req.user, side="left")  # requests are sorted by (user, ts)
    request_rank = np.arange(len(req.user)) - first_of_user
    arrays = {
        "static": static,
        "ts": ts,
        "c2": c2,
        "c1": c1,
        "u_long": streams[3].random(len(user), dtype=np.float32),
        "u_eff": streams[3].random(len(user), dtype=np.float32),
    }
    n_c2, n_c1 = cfg.world.num_level_two, cfg.world.num_level_one
    intercepts = L.calibrate(cfg, arrays, user, exp.request, request_rank, n_c2, n_c1)
    order, bounds = L.round_order(user, exp.request, request_rank)
    p_o, lv_o, ev_o, hist_o = L.simulate(
        cfg, user=user[order], rounds=bounds, intercepts=intercepts, num_users=cfg.scale.users,
        num_c2=n_c2, num_c1=n_c1, **{k: a[order] for k, a in arrays.items()},
    )
    del arrays
    true_p = np.empty(len(user))
    long_view = np.empty(len(user), dtype=np.int8)
    effective_view = np.empty(len(user), dtype=np.int8)
    true_p[order], long_view[order], effective_view[order] = p_o, lv_o, ev_o
    del p_o, lv_o, ev_o, order
    bar.update()

    # file order: requests by request_id (global time rank), exposures by slot
    file_order = np.lexsort((exp.position, req.request_id[exp.request]))
    r = exp.request[file_order]
    vid = exp.video[file_order]
    n = len(r)
    lv, ev = long_view[file_order], effective_view[file_order]
    del long_view, effective_view
    rng = streams[4]
    req_order = np.argsort(req.request_id)
    log = GeneratedLog(
        world=world,
        req=req,
        request=r,
        video=vid,
        position=exp.position[file_order].astype(np.int16),
        level_one=c1[file_order].astype(np.int16),
        level_two=c2[file_order].astype(np.int16),
        long_view=lv,
        effective_view=ev,
        playing_time=L.playing_time(v.duration_ms[vid], lv, ev, rng),
        true_p=true_p[file_order],
        noise={
            "rank_offset": (np.minimum(rng.geometric(0.3, n), 100) - 1).astype(np.int16),
            "like": (rng.random(n) < np.where(lv == 1, 0.08, 0.01)).astype(np.int8),
            "follow": (rng.random(n) < np.where(lv == 1, 0.01, 0.001)).astype(np.int8),
            "forward": (rng.random(n) < np.where(lv == 1, 0.01, 0.002)).astype(np.int8),
            "comment": (rng.random(n) < np.where(lv == 1, 0.02, 0.003)).astype(np.int8),
        },
        day_rows=np.searchsorted(day[file_order], np.arange(len(days) + 1)),
        request_order=req_order,
        request_day_rows=np.searchsorted(req.day[req_order], np.arange(len(days) + 1)),
        intercepts=intercepts,
        oracle_auc=_oracle_auc(true_p[file_order], lv),
        # what a model blind to history could at best reach: the logit without the history term
        oracle_auc_without_history=_oracle_auc(static[file_order], lv),
        history_term_sd=float(hist_o.std()),
    )
    bar.update()
    bar.close()
    return log


@dataclass
class GeneratedLog:
    """A generated log held as compact per-exposure arrays in file order; RecFlow columns on demand."""

    world: World
    req: Requests
    request: np.ndarray  # [N] request of each exposure (row of `req`)
    video: np.ndarray  # [N] video of each exposure (row of the catalogue)
    position: np.ndarray  # [N] int16 slot in the request
    level_one: np.ndarray  # [N] int16
    level_two: np.ndarray  # [N] int16
    long_view: np.ndarray  # [N] int8
    effective_view: np.ndarray  # [N] int8
    playing_time: np.ndarray  # [N] int64 ms
    true_p: np.ndarray  # [N] float64
    noise: dict[str, np.ndarray]  # columns no label reads: rank offset, like, follow, forward, comment
    day_rows: np.ndarray  # [days + 1] first exposure row of each day
    request_order: np.ndarray  # requests in file order (by request_id)
    request_day_rows: np.ndarray  # [days + 1] first position in `request_order` of each day
    intercepts: tuple[float, float]  # calibrated (b, b_ev)
    oracle_auc: float
    oracle_auc_without_history: float
    history_term_sd: float

    def __len__(self) -> int:
        return len(self.request)

    def columns(self, rows: slice | np.ndarray) -> dict[str, np.ndarray]:
        """RecFlow's columns (canonical names, no leading space) of the given rows."""
        req, u, v = self.req, self.world.users, self.world.videos
        r, vid = self.request[rows], self.video[rows]
        user = req.user[r]
        n = len(r)
        position = self.position[rows].astype(np.int64)
        return {
            "request_id": req.request_id[r],
            "request_timestamp": req.timestamp_ms[r],
            "user_id": u.external_id[user],
            "device_id": req.device[r],
            "age": u.age[user],
            "gender": u.gender[user],
            "province": u.province[user],
            "video_id": v.external_id[vid],
            "author_id": v.author[vid],
            "category_level_one": self.level_one[rows],
            "category_level_two": self.level_two[rows],
            "upload_type": v.upload_type[vid],
            "upload_timestamp": v.upload_ms[vid] // 1000,
            "duration": v.duration_ms[vid],
            # every row is a shown (realshow) exposure: its funnel flags are 1, its negative-sample flags 0
            **{flag: np.ones(n, np.int8) for flag in ("realshow", "rerank_pos", "rank_pos")},
            **{flag: np.zeros(n, np.int8) for flag in ("rerank_neg", "rank_neg", "coarse_neg", "prerank_neg")},
            "rank_index": position + self.noise["rank_offset"][rows],
            "rerank_index": position,
            "playing_time": self.playing_time[rows],
            "effective_view": self.effective_view[rows],
            "long_view": self.long_view[rows],
            **{c: self.noise[c][rows] for c in ("like", "follow", "forward", "comment")},
        }

    def effective_view_index(self) -> EffectiveViewIndex:
        """The author-50 arrays' source: every effective view of the log."""
        return EffectiveViewIndex(self.columns(np.flatnonzero(self.effective_view == 1)))

    def requests(self, day: int) -> dict[str, np.ndarray]:
        """request_id, request_timestamp, user_id of the requests of day index `day`, in file order."""
        o = self.request_order[self.request_day_rows[day] : self.request_day_rows[day + 1]]
        return {
            "request_id": self.req.request_id[o],
            "request_timestamp": self.req.timestamp_ms[o],
            "user_id": self.world.users.external_id[self.req.user[o]],
        }


class EffectiveViewIndex:
    """Effective-view events of the whole log, sorted by (user, request_timestamp, request_id, position)."""

    def __init__(self, columns: dict[str, np.ndarray]):
        """`columns`: canonical columns of the log's effective views, in file order."""
        user, ts = columns["user_id"].astype(np.int64), columns["request_timestamp"]
        self.t0 = int(ts.min()) - 1 if len(ts) else 0
        keys = (user << _USER_SHIFT) + (ts - self.t0)
        order = np.argsort(keys, kind="stable")  # input is already in (time, request, position) order
        self.keys = keys[order]
        self.rows = np.stack([columns[c][order].astype(np.int64) for c in AUTHOR50_COLUMNS], axis=1)  # [E, 10]

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


def write_day(
    root: Path,
    day: dt.date,
    columns: dict[str, np.ndarray],
    true_p: np.ndarray,
    author50: EffectiveViewIndex | None,
    requests: dict[str, np.ndarray],
) -> None:
    """Write one day's realshow file, truth file and (if `author50`) 50-history pickle."""
    # RecFlow's columns from the canonical ones (names without the leading space), in RecFlow's widths
    arrays = [pa.array(columns[name.strip()].astype(RECFLOW_DTYPES[name], copy=False)) for name in RECFLOW_COLUMNS]
    realshow = pa.Table.from_arrays(arrays, names=list(RECFLOW_COLUMNS))
    feather.write_feather(realshow, str(Path(root) / REALSHOW_DIR / f"{day.isoformat()}.feather"))
    feather.write_feather(pa.table({"true_p": true_p}), str(truth_path(root, day)))
    if author50 is not None:
        write_author50(author50_path(root, day), author50, requests)


def write_author50(path: Path, author50: EffectiveViewIndex, requests: dict[str, np.ndarray]) -> None:
    """Write one day's 50-history pickle at `path`: request_id -> int64 [50, 10], for the day's requests."""
    arrays = author50.arrays(requests["user_id"], requests["request_timestamp"])
    with open(path, "wb") as f:
        pickle.dump(dict(zip(requests["request_id"].tolist(), arrays)), f, protocol=pickle.HIGHEST_PROTOCOL)


def _oracle_auc(p: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import rankdata

    pos = y == 1
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(p)
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _params(scale: str, seed: int, author50: bool, world: str = DEFAULT_WORLD) -> dict:
    out = {"format": "recscale-synthetic", "version": FORMAT_VERSION, "scale": scale, "seed": int(seed),
           "author50": bool(author50)}
    return out if world == DEFAULT_WORLD else {**out, "world": world}  # logs of the default world predate worlds


def _stored(out: Path) -> dict | None:
    marker = Path(out) / MARKER
    if not marker.is_file():
        return None
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def is_complete(out: Path, params: dict) -> bool:
    """Whether `out` holds a finished log written with `params`; a log that has the author-50 pickles
    also serves a request without them."""
    stored = _stored(out)
    if stored is None:
        return False
    return stored.get("world", DEFAULT_WORLD) == params.get("world", DEFAULT_WORLD) and all(
        stored.get(k) == v or (k == "author50" and not v) for k, v in params.items())


def generate(scale: str, out: Path, seed: int = 0, *, author50: bool | None = None, world: str = DEFAULT_WORLD,
             progress: bool = False) -> Path:
    """Write the synthetic log of `scale` and planted `world` (config.WORLDS) into `out` (atomically); a no-op
    if it is already there. `author50` writes the author-50 pickles too, or adds them to a finished log that
    lacks them (docs/data.md, "The synthetic log")."""
    cfg = scale_config(scale, author50=author50, world=world)
    out = Path(out)
    params = _params(scale, seed, cfg.scale.author50, world)
    if is_complete(out, params):
        return out
    if cfg.scale.author50 and is_complete(out, _params(scale, seed, False, world)):
        add_author50(out, progress=progress)
        return out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise RecscaleError(f"{out}: exists and is not a synthetic log written with {params}; choose another --out")
    check_writable(out, "the synthetic log")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        log = build_log(cfg, seed, DEFAULT_DAYS, progress=progress)
        for sub in (REALSHOW_DIR, TRUTH_DIR) + ((AUTHOR50_DIR,) if cfg.scale.author50 else ()):
            (tmp / sub).mkdir()
        index = log.effective_view_index() if cfg.scale.author50 else None
        rows = log.day_rows
        for i, day in enumerate(tqdm(DEFAULT_DAYS, desc="write", disable=not progress, unit="day")):
            day_slice = slice(rows[i], rows[i + 1])
            write_day(tmp, day, log.columns(day_slice), log.true_p[day_slice], index, log.requests(i))
        summary = {
            **params,
            "days": [d.isoformat() for d in DEFAULT_DAYS],
            "exposures": len(log),
            "requests": int(len(log.req.user)),
            "users": int(len(np.unique(log.req.user))),
            "long_view_rate": float(log.long_view.mean()),
            "effective_view_rate": float(log.effective_view.mean()),
            "oracle_auc": log.oracle_auc,
            "oracle_auc_without_history_term": log.oracle_auc_without_history,
            "history_term_sd": log.history_term_sd,
            "calibrated_intercepts": list(log.intercepts),
            "config": to_dict(cfg),
        }
        (tmp / MARKER).write_text(json.dumps(summary, indent=2))
        if out.exists():
            out.rmdir()  # empty folder given by the user
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def ensure_author50(out: Path, *, progress: bool = False) -> None:
    """Add the author-50 pickles to a finished synthetic log that lacks them (a no-op otherwise, and for
    folders that are not `recscale synth` logs: their reader reports what is missing)."""
    out = Path(out)
    if (out / AUTHOR50_DIR).is_dir() or _stored(out) is None:
        return
    print(f"recscale: writing the author-50 pickles of {out} (the author50 protocol reads them)", file=sys.stderr)
    add_author50(out, progress=progress)


def add_author50(out: Path, *, progress: bool = False) -> None:
    """Write the author-50 pickles of a finished synthetic log that lacks them (atomically: into a temporary
    folder renamed into place, then the marker is updated); docs/data.md, "The synthetic log"."""
    out = Path(out)
    stored = _stored(out)
    if stored is None:
        raise RecscaleError(f"{out}: not a finished synthetic log ({MARKER} missing or unreadable)")
    if stored.get("author50"):
        return
    cfg = scale_config(stored["scale"], author50=True, world=stored.get("world", DEFAULT_WORLD))
    if stored.get("version") != FORMAT_VERSION:
        raise RecscaleError(f"{out}: written by synthetic format version {stored.get('version')}, this code writes "
                            f"{FORMAT_VERSION}; regenerate it with `recscale synth --author50`")
    days = tuple(dt.date.fromisoformat(d) for d in stored.get("days", [d.isoformat() for d in DEFAULT_DAYS]))
    log = build_log(cfg, int(stored["seed"]), days, progress=progress)
    if len(log) != stored.get("exposures"):
        raise RecscaleError(f"{out}: its {MARKER} does not match a regeneration from seed {stored['seed']}")
    index = log.effective_view_index()
    check_writable(out / AUTHOR50_DIR, "the author-50 pickles")
    tmp = Path(tempfile.mkdtemp(prefix=f".{AUTHOR50_DIR}.tmp-", dir=out))
    try:
        for i, day in enumerate(tqdm(days, desc="author50", disable=not progress, unit="day")):
            write_author50(tmp / author50_path(out, day).name, index, log.requests(i))
        os.rename(tmp, out / AUTHOR50_DIR)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    stored["author50"] = True
    stored.setdefault("config", {}).setdefault("scale", {})["author50"] = True
    write_json(out / MARKER, stored, indent=2)
