"""Synthetic RecFlow-format log with a planted, known truth.

`generate(scale, out, seed=0) -> Path` writes, atomically, a folder laid out like RecFlow
(`realshow/YYYY-MM-DD.feather` with RecFlow's 30 columns, `seq_effective_50_dict/YYYY-MM-DD.pkl`) plus
`synthetic_truth/YYYY-MM-DD.feather` (column `true_p`, row-aligned with realshow) and `SYNTHETIC.json`
(parameters, summary, calibrated intercepts, oracle AUC). It is read back by the `recflow` reader; the
`synthetic` source adds `true_p`.

Generative model (every strength is a field of `config.SyntheticConfig`):
1. World (`world.py`): 140 level-one / 784 level-two categories with Zipf popularity; latent
   phi_c; users with drifting interest theta_u(day) and demographics; a catalogue with new uploads every
   day, authors clustered in categories, lognormal durations, quality q_v, Pareto exposure weights,
   psi_v = phi_c + noise.
2. Requests (`sessions.py`): sessions of 1 + Geometric requests, lognormal gaps of seconds to minutes,
   diurnal start times, per-day traffic shaped like RecFlow; 1..20 exposures per request (median 6).
3. Exposures (`exposures.py`): a noisy recommender leaning towards the user's categories and towards
   fresh uploads (so most test-period videos are new).
4. Labels (`labels.py`): logit p = b + a<theta,psi> + beta log1p(S) + gamma g(hour, c1) - delta z(log dur)
   + q_v with S a recency-weighted, candidate-category-dependent sum over the user's earlier effective
   views; effective_view implied by long_view; playing_time consistent with duration and labels.
"""
from __future__ import annotations

from .config import SCALES, SyntheticConfig, scale_config
from .pipeline import MARKER, build_log, generate, is_complete

__all__ = ["SCALES", "SyntheticConfig", "scale_config", "generate", "build_log", "is_complete", "MARKER"]
