"""MovieLens-100k (`u.data`, `u.user`, `u.item`) mapped onto the canonical exposure table (MovieLens has no
exposures, sessions, authors or watch times; the mapping is ours): docs/data.md, "MovieLens-100k". Registers the
`movielens100k` source with its default split (docs/protocols.md, "Sources declare their defaults").
"""
from __future__ import annotations

import datetime as dt
import hashlib
import io
from pathlib import Path

import numpy as np
import pandas as pd

from . import SourceDefaults, register_source
from .errors import DataValidationError, check_rows
from .log import ExposureLog
from .recflow import SHANGHAI
from .schema import EXPOSURE_COLUMNS, make_event_id
from .split import tail_split

GENRES: tuple[str, ...] = (
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western",
)
AGE_BUCKET_EDGES = np.array([18, 25, 35, 45, 50, 56])

#: MovieLens-100k's default split: its last 21 days are test, the 21 before valid (UTC calendar days).
MOVIELENS_VALID_DAYS = 21
MOVIELENS_TEST_DAYS = 21

MOVIELENS_DEFAULTS = SourceDefaults(
    split=lambda log: tail_split(int(log["request_timestamp"].min()), int(log["request_timestamp"].max()),
                                 valid_days=MOVIELENS_VALID_DAYS, test_days=MOVIELENS_TEST_DAYS, timezone="UTC"),
    sizes="all",
    split_doc=f"from the log's dates (UTC): test = the last {MOVIELENS_TEST_DAYS} days, valid = the "
              f"{MOVIELENS_VALID_DAYS} days before, train = every earlier day")


def _read(path: Path, sep: str, names: list[str], digest: hashlib._Hash) -> pd.DataFrame:
    if not path.is_file():
        raise DataValidationError(str(path), "(file)", "MovieLens-100k file not found")
    data = path.read_bytes()
    if not data:
        raise DataValidationError(str(path), "(file)", "file is empty")
    digest.update(path.name.encode() + b":" + data)
    try:
        return pd.read_csv(io.BytesIO(data), sep=sep, header=None, names=names, encoding="latin-1", dtype=str,
                           keep_default_na=False)
    except Exception as e:
        raise DataValidationError(str(path), "(file)", f"unreadable: {e}") from None


def _ints(path: Path, frame: pd.DataFrame, field: str) -> np.ndarray:
    values = pd.to_numeric(frame[field], errors="coerce")
    check_rows(path, field, values.isna().to_numpy(), frame[field].to_numpy(), "must be an integer")
    return values.to_numpy().astype(np.int64)


@register_source("movielens100k", defaults=MOVIELENS_DEFAULTS)
def read_movielens(root: Path | str) -> ExposureLog:
    """MovieLens-100k folder (u.data, u.user, u.item) mapped onto the canonical table."""
    root = Path(root)
    digest = hashlib.sha256(b"movielens100k-v1")
    p_data, p_user, p_item = root / "u.data", root / "u.user", root / "u.item"
    ratings = _read(p_data, "\t", ["user", "item", "rating", "timestamp"], digest)
    users = _read(p_user, "|", ["user", "age", "gender", "occupation", "zip"], digest)
    items = _read(p_item, "|", ["item", "title", "release", "video_release", "url", *GENRES], digest)

    user, item = _ints(p_data, ratings, "user"), _ints(p_data, ratings, "item")
    rating, ts_s = _ints(p_data, ratings, "rating"), _ints(p_data, ratings, "timestamp")
    check_rows(p_data, "rating", (rating < 1) | (rating > 5), rating, "must be 1..5")

    u_id = _ints(p_user, users, "user")
    u_age = np.searchsorted(AGE_BUCKET_EDGES, _ints(p_user, users, "age"), side="right")
    u_gender = users["gender"].map({"M": 1, "F": 2}).fillna(0).to_numpy().astype(np.int64)
    first_char = users["zip"].str[:1]
    u_province = np.where(first_char.str.isdigit(), pd.to_numeric(first_char, errors="coerce").fillna(10),
                          10).astype(np.int64)

    i_id = _ints(p_item, items, "item")
    flags = np.stack([_ints(p_item, items, g) for g in GENRES], axis=1)  # [I, 19]
    level_one = np.where(flags.any(axis=1), flags.argmax(axis=1), 0)
    combo_code = flags @ (1 << np.arange(len(GENRES)))
    _, level_two = np.unique(combo_code, return_inverse=True)
    release = pd.to_datetime(items["release"], format="%d-%b-%Y", errors="coerce")
    upload_s = np.where(release.isna(), 0, (release.astype("int64") // 10**9)).astype(np.int64)

    for path, ids, known, field in ((p_data, user, u_id, "user"), (p_data, item, i_id, "item")):
        check_rows(path, field, ~np.isin(ids, known), ids, f"id not listed in u.{field}")
    u_order, i_order = np.argsort(u_id), np.argsort(i_id)
    u_idx = u_order[np.searchsorted(u_id[u_order], user)]
    i_idx = i_order[np.searchsorted(i_id[i_order], item)]

    order = np.lexsort((item, user, ts_s))
    user, item, rating, ts_s, u_idx, i_idx = (a[order] for a in (user, item, rating, ts_s, u_idx, i_idx))
    new_request = np.ones(len(ts_s), dtype=bool)
    new_request[1:] = (np.diff(ts_s) != 0) | (np.diff(user) != 0)
    request_id = np.cumsum(new_request) - 1

    local_day = (ts_s + 8 * 3600) // 86_400  # Asia/Shanghai is UTC+8 without DST
    day_numbers, file_index = np.unique(local_day, return_inverse=True)
    days = tuple(dt.datetime.fromtimestamp(int(d) * 86_400 - 8 * 3600, tz=SHANGHAI).date() for d in day_numbers)
    day_first = np.searchsorted(file_index, np.arange(len(days)))
    record_index = np.arange(len(ts_s)) - day_first[file_index] + 1

    n = len(ts_s)
    columns = {
        "request_id": request_id.astype(np.int64),
        "request_timestamp": ts_s * 1000,
        "user_id": user - 1,
        "device_id": user - 1,
        "age": u_age[u_idx].astype(np.int64),
        "gender": u_gender[u_idx],
        "province": u_province[u_idx],
        "video_id": item - 1,
        "author_id": item - 1,
        "category_level_one": level_one[i_idx].astype(np.int64),
        "category_level_two": level_two[i_idx].astype(np.int64),
        "upload_type": np.zeros(n, np.int64),
        "upload_timestamp": upload_s[i_idx],
        "duration": np.zeros(n, np.int64),
        "playing_time": np.zeros(n, np.int64),
        "effective_view": (rating >= 3).astype(np.int64),
        "long_view": (rating >= 4).astype(np.int64),
    }
    assert set(columns) == set(EXPOSURE_COLUMNS)
    columns["file_index"] = file_index.astype(np.int64)
    columns["record_index"] = record_index.astype(np.int64)
    columns["event_id"] = make_event_id(columns["file_index"], columns["record_index"])
    return ExposureLog(columns=columns, days=days, source="movielens100k", root=root, fingerprint=digest.hexdigest())
