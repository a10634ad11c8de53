"""Every knob of the synthetic generator, as typed dataclasses (`SyntheticConfig` = scale + world + sessions +
signal; the defaults are the values docs/data.md documents), the four named scales and the planted worlds.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from core.typed_config import ConfigError

#: Realshow requests per day in RecFlow (2024-01-13 .. 2024-02-18, third-party count; see docs/data.md).
#: Only the shape is used: each scale spreads its requests over the 37 days in these proportions.
RECFLOW_DAILY_REQUESTS: tuple[int, ...] = (
    207241, 207965, 191008, 192968, 202217, 205904, 209852, 219389, 217368, 211298, 205496, 210845, 218207,
    224352, 226302, 225440, 212283, 196885, 202835, 196437, 193300, 201379, 200688, 178529, 178490, 194247,
    191905, 184800, 189867, 196085, 195838, 191993, 190034, 195827, 189703, 195875, 187907,
)


@dataclass(frozen=True)
class ScaleConfig:
    """How much data: users, total exposures, catalogue size (relative to exposures)."""

    users: int
    exposures: int  # target total; the realised count differs by sampling noise (< 1 % above tiny)
    author50: bool = False  # write seq_effective_50_dict/*.pkl (only author50 reads them; 727 MB at small)
    videos_per_exposure: float = 0.25  # catalogue uploads (incl. never-shown videos) per exposure
    initial_catalogue_days: int = 180  # videos uploaded before the first day are spread over this window
    initial_catalogue_share: float = 0.25  # share of the catalogue uploaded before the first day
    authors_per_video: float = 0.25


@dataclass(frozen=True)
class WorldConfig:
    """Latent world: categories, users, videos, authors."""

    latent_dim: int = 16  # k of theta_u, phi_c, psi_v
    num_level_one: int = 140
    num_level_two: int = 784
    category_zipf: float = 1.1  # popularity of level-two category i ~ (i + 1) ** -category_zipf
    video_noise: float = 0.5  # psi_v = phi_c + video_noise * N(0, I/sqrt(k))
    quality_sd: float = 0.5  # q_v ~ N(0, quality_sd): per-video quality in the logit
    daily_drift: float = 0.08  # user interest random-walk step per day (relative to |theta|)
    num_upload_types: int = 40
    upload_type_zipf: float = 1.5
    author_zipf: float = 1.2  # within a category, author popularity ~ rank ** -author_zipf
    video_popularity_alpha: float = 1.3  # Pareto tail of per-video exposure weight
    duration_median_s: float = 25.0
    duration_log_sd: float = 0.9
    duration_min_s: float = 3.0
    duration_max_s: float = 600.0
    num_ages: int = 8
    num_genders: int = 3
    num_provinces: int = 79
    second_device_share: float = 0.02  # users who also use a second device


@dataclass(frozen=True)
class SessionConfig:
    """When requests happen and what a request shows."""

    requests_per_session_mean: float = 4.0  # 1 + geometric
    request_gap_median_s: float = 150.0  # time between consecutive requests of a session (lognormal)
    request_gap_log_sd: float = 1.0
    activity_log_sd: float = 0.9  # user activity (sessions per day) is lognormal across users
    # exposures per request: P(n) for n = 1..20 (median 6, p95 8, mean ~5.2, as RecFlow)
    exposures_per_request_probs: tuple[float, ...] = (
        0.06, 0.06, 0.07, 0.07, 0.08, 0.55, 0.05, 0.04,
        0.004, 0.003, 0.002, 0.002, 0.002, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001,
    )
    # the noisy recommender: with prob `interest_lean` a candidate's category is drawn from the user's
    # affinity softmax (temperature `lean_temperature`), otherwise from global category popularity
    interest_lean: float = 0.6
    lean_temperature: float = 0.7
    # age of the shown video at request time: with prob `fresh_share` ~ Exponential(fresh_mean_days),
    # otherwise log-uniform between 1 and `old_max_days` days; the video is then drawn among those of
    # the chosen category uploaded within `age_window_days` before (request time - age), by popularity
    fresh_share: float = 0.33
    fresh_mean_days: float = 1.5
    old_max_days: float = 150.0
    age_window_days: float = 1.0


@dataclass(frozen=True)
class SignalConfig:
    """The planted label model (its formula: docs/data.md, "Generative model")."""

    long_view_rate: float = 0.23  # intercept b is calibrated so that the mean of long_view matches
    effective_view_rate: float = 0.38  # effective_view = long_view OR Bernoulli(sigmoid(b_ev + logit p))
    affinity: float = 0.6  # a: weight of <theta_u(day), psi_v> (user x category interaction)
    history: float = 1.2  # beta: weight of log1p(recency-weighted same-category positive history)
    history_tau_hours: float = 6.0  # recency weight w_j = exp(-(t - t_j) / tau)
    history_level_one_weight: float = 0.3  # kernel: 1 for same level-two category, + this for same level-one
    time_of_day: float = 0.4  # gamma: weight of cos(2 pi (hour - peak_hour(level_one)) / 24)
    duration: float = 0.3  # delta: weight of -(standardised log duration)
    quality: float = 0.6  # weight of q_v
    calibration_users: int = 1500  # users in the pilot that calibrates the two intercepts
    calibration_rounds: int = 6
    # None: the funnel (effective_view = long_view OR ...). A number: effective_view is drawn on its own from
    # its own logit, whose history term counts the user's effective views in any category with this recency
    # (hours) (the two_timescales world: docs/data.md, "Planted worlds")
    effective_view_tau_hours: float | None = None
    effective_view_history: float | None = None  # its history weight there (None: `history`)


@dataclass(frozen=True)
class SyntheticConfig:
    scale: ScaleConfig
    world: WorldConfig = field(default_factory=WorldConfig)
    sessions: SessionConfig = field(default_factory=SessionConfig)
    signal: SignalConfig = field(default_factory=SignalConfig)


SCALES: dict[str, ScaleConfig] = {
    # all 37 days with few users, so train/valid/test periods of the default split are all populated
    "tiny": ScaleConfig(users=24, exposures=6_000),
    "small": ScaleConfig(users=2_500, exposures=1_000_000),
    "medium": ScaleConfig(users=10_000, exposures=6_000_000),
    "full": ScaleConfig(users=39_011, exposures=38_245_315),
}


#: Planted label models by name (docs/data.md, "Planted worlds"): `default` is the documented one;
#: `two_timescales` plants two tasks whose dependence on the history differs in reach.
WORLDS: dict[str, SignalConfig] = {
    "default": SignalConfig(),
    "two_timescales": SignalConfig(effective_view_tau_hours=0.05, effective_view_history=1.5),
}
DEFAULT_WORLD = "default"


def scale_config(scale: str, *, author50: bool | None = None, world: str = DEFAULT_WORLD) -> SyntheticConfig:
    """The preset of a named scale and planted world; `author50` overrides whether the 50-history pickles are
    written."""
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; valid: {', '.join(SCALES)}")
    if world not in WORLDS:
        raise ConfigError(f"unknown world {world!r}; valid: {', '.join(WORLDS)}")
    sc = SCALES[scale]
    if author50 is not None:
        sc = dataclasses.replace(sc, author50=author50)
    return SyntheticConfig(scale=sc, signal=WORLDS[world])
