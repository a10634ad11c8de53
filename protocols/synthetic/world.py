"""The latent world of the synthetic log: categories, users, authors and the video catalogue (docs/data.md,
"Generative model": World).

Latent vectors live in R^k with components of variance 1/sqrt(k), so that the inner product of two
independent vectors has unit variance. Every level-one category gets at least one level-two, with
phi_c2 = phi_c1 + N(0, .). A video's noise psi_v - phi_c2 is the sum of two rows of a shared codebook
(per-video vectors would cost k floats per video at full scale). Videos are stored sorted by
(category_level_two, upload time): the recommender relies on that order.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..recflow import MS_PER_DAY
from .config import SyntheticConfig

CODEBOOK_ROWS = 4096


def zipf_probs(n: int, exponent: float) -> np.ndarray:
    p = (np.arange(n) + 1.0) ** -exponent
    return p / p.sum()


@dataclass
class Categories:
    level_one_of: np.ndarray  # [C2] int64, parent level-one id of each level-two id
    popularity: np.ndarray  # [C2] float64, sums to 1
    phi: np.ndarray  # [C2, k] float32
    peak_hour: np.ndarray  # [C1] float64 in [0, 24)


@dataclass
class Users:
    theta: np.ndarray  # [U, D, k] float32, interest on each day
    activity: np.ndarray  # [U] float64, relative sessions per day (mean 1)
    age: np.ndarray  # [U] int64
    gender: np.ndarray
    province: np.ndarray
    device: np.ndarray  # [U] primary device id
    second_device: np.ndarray  # [U] second device id, -1 if none
    external_id: np.ndarray  # [U] user_id written to disk


@dataclass
class Videos:
    """Catalogue sorted by (category_level_two, upload_ms)."""

    category_two: np.ndarray  # [V] int64
    upload_ms: np.ndarray  # [V] int64
    author: np.ndarray  # [V] int64 (external author_id)
    duration_ms: np.ndarray  # [V] int64
    upload_type: np.ndarray  # [V] int64
    quality: np.ndarray  # [V] float32
    weight: np.ndarray  # [V] float64, Pareto exposure weight
    noise_codes: np.ndarray  # [V, 2] int16 rows of the codebook
    external_id: np.ndarray  # [V] video_id written to disk


@dataclass
class World:
    categories: Categories
    users: Users
    videos: Videos
    codebook: np.ndarray  # [CODEBOOK_ROWS, k] float32
    video_noise: float

    def psi(self, video_index: np.ndarray) -> np.ndarray:
        """psi_v of internal video indices: [n, k] float32."""
        v = self.videos
        noise = self.codebook[v.noise_codes[video_index]].sum(axis=1) / np.sqrt(2)  # [n, k]: the sum of its two rows
        return self.categories.phi[v.category_two[video_index]] + self.video_noise * noise


def _latent(rng: np.random.Generator, shape: tuple[int, ...], k: int) -> np.ndarray:
    return (rng.standard_normal(shape) * k**-0.25).astype(np.float32)


def make_categories(cfg: SyntheticConfig, rng: np.random.Generator) -> Categories:
    w = cfg.world
    c1, c2, k = w.num_level_one, w.num_level_two, w.latent_dim
    popularity = zipf_probs(c2, w.category_zipf)[rng.permutation(c2)]
    # every level-one id owns at least one level-two id; the rest attach by Zipf popularity of level-one
    extra = rng.choice(c1, size=c2 - c1, p=zipf_probs(c1, 1.0)[rng.permutation(c1)])
    level_one_of = rng.permutation(np.concatenate([np.arange(c1), extra]))
    phi1 = _latent(rng, (c1, k), k)
    phi = (phi1[level_one_of] * np.float32(0.8) + _latent(rng, (c2, k), k) * np.float32(0.6)).astype(np.float32)
    peak_hour = rng.uniform(0.0, 24.0, size=c1)
    return Categories(level_one_of=level_one_of.astype(np.int64), popularity=popularity, phi=phi, peak_hour=peak_hour)


def make_users(cfg: SyntheticConfig, num_days: int, rng: np.random.Generator) -> Users:
    w, U, k = cfg.world, cfg.scale.users, cfg.world.latent_dim
    theta0 = _latent(rng, (U, 1, k), k)
    steps = _latent(rng, (U, num_days, k), k) * np.float32(w.daily_drift)
    steps[:, 0] = 0.0
    theta = theta0 + np.cumsum(steps, axis=1, dtype=np.float32)  # [U, D, k]
    activity = rng.lognormal(0.0, cfg.sessions.activity_log_sd, size=U)
    activity /= activity.mean()
    age = rng.choice(w.num_ages, size=U, p=zipf_probs(w.num_ages, 0.3)[rng.permutation(w.num_ages)])
    gender = rng.choice(w.num_genders, size=U, p=zipf_probs(w.num_genders, 0.5)[::-1])  # a rare "unknown" value 0
    province = rng.choice(w.num_provinces, size=U, p=zipf_probs(w.num_provinces, 0.8)[rng.permutation(w.num_provinces)])
    has_second = rng.random(U) < w.second_device_share
    devices = rng.permutation(U + int(has_second.sum()))
    second = np.full(U, -1, dtype=np.int64)
    second[has_second] = devices[U:]
    return Users(
        theta=theta,
        activity=activity,
        age=age.astype(np.int64),
        gender=gender.astype(np.int64),
        province=province.astype(np.int64),
        device=devices[:U].astype(np.int64),
        second_device=second,
        external_id=rng.permutation(U).astype(np.int64),
    )


def make_videos(
    cfg: SyntheticConfig, categories: Categories, first_day_ms: int, day_weights: np.ndarray, rng: np.random.Generator
) -> Videos:
    s, w = cfg.scale, cfg.world
    c2 = w.num_level_two
    total = max(int(s.exposures * s.videos_per_exposure), 4 * c2)
    n_initial = max(int(total * s.initial_catalogue_share), c2)
    n_new = total - n_initial
    # every category has one video at the very start of the catalogue window, so each is always non-empty
    window_ms = s.initial_catalogue_days * MS_PER_DAY
    category = np.concatenate([np.arange(c2), rng.choice(c2, size=total - c2, p=categories.popularity)])
    initial_ms = first_day_ms - window_ms + rng.integers(0, window_ms, size=n_initial - c2)
    new_day = rng.choice(len(day_weights), size=n_new, p=day_weights / day_weights.sum())
    new_ms = first_day_ms + new_day * MS_PER_DAY + rng.integers(0, MS_PER_DAY, size=n_new)
    upload_ms = np.concatenate([np.full(c2, first_day_ms - window_ms), initial_ms, new_ms]).astype(np.int64)
    upload_ms -= upload_ms % 1000  # upload_timestamp is stored in whole seconds
    order = np.lexsort((upload_ms, category))
    category, upload_ms = category[order].astype(np.int64), upload_ms[order]

    # authors: each has a home level-two category; a video picks one of its category's authors (Zipf-like)
    n_authors = max(int(total * s.authors_per_video), c2)
    author_cat = np.sort(np.concatenate([np.arange(c2), rng.choice(c2, size=n_authors - c2, p=categories.popularity)]))
    author_start = np.searchsorted(author_cat, np.arange(c2))
    author_count = np.bincount(author_cat, minlength=c2)
    skew = rng.random(total) ** (1.0 + w.author_zipf)
    author_internal = author_start[category] + np.minimum((skew * author_count[category]).astype(np.int64),
                                                          author_count[category] - 1)
    author_ids = rng.permutation(n_authors).astype(np.int64)

    dur_s = np.clip(rng.lognormal(np.log(w.duration_median_s), w.duration_log_sd, size=total), w.duration_min_s,
                    w.duration_max_s)
    return Videos(
        category_two=category,
        upload_ms=upload_ms,
        author=author_ids[author_internal],
        duration_ms=(dur_s * 1000).astype(np.int64),
        upload_type=rng.choice(w.num_upload_types, size=total,
                               p=zipf_probs(w.num_upload_types, w.upload_type_zipf)).astype(np.int64),
        quality=(rng.standard_normal(total) * w.quality_sd).astype(np.float32),
        weight=rng.pareto(w.video_popularity_alpha, size=total) + 1.0,
        noise_codes=rng.integers(0, CODEBOOK_ROWS, size=(total, 2)).astype(np.int16),
        external_id=rng.permutation(total).astype(np.int64),
    )


def make_world(cfg: SyntheticConfig, first_day_ms: int, day_weights: np.ndarray, rng: np.random.Generator) -> World:
    categories = make_categories(cfg, rng)
    users = make_users(cfg, len(day_weights), rng)
    videos = make_videos(cfg, categories, first_day_ms, day_weights, rng)
    codebook = _latent(rng, (CODEBOOK_ROWS, cfg.world.latent_dim), cfg.world.latent_dim)
    return World(categories=categories, users=users, videos=videos, codebook=codebook,
                 video_noise=cfg.world.video_noise)
