"""Seeds in rounds: group-sequential paired t-tests across one study's questions (Lan-DeMets spending, Holm-type
alpha recycling); method and references: docs/analysis.md, *Seeds in rounds*."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import stats

from .paired import t_interval

Spending = Literal["obrien_fleming", "pocock"]

def spent(fractions: np.ndarray, alpha: float, spending: Spending) -> np.ndarray:
    """Cumulative two-sided alpha spent at information fractions `fractions` (docs/analysis.md, "Spending")."""
    t = np.asarray(fractions, dtype=np.float64)
    if spending == "obrien_fleming":
        return 4.0 * stats.norm.sf(stats.norm.isf(alpha / 4.0) / np.sqrt(t))
    if spending == "pocock":
        return alpha * np.log1p((np.e - 1.0) * t)
    raise ValueError(f"spending: one of obrien_fleming, pocock; got {spending!r}")


@dataclass(frozen=True)
class SequentialDesign:
    """Looks after `seeds[k]` paired seeds; two-sided `alpha` for the family of questions spent by `spending`."""

    seeds: tuple[int, ...]
    alpha: float = 0.05
    spending: Spending = "obrien_fleming"

    def __post_init__(self) -> None:
        if len(self.seeds) == 0 or self.seeds[0] < 2 or any(b <= a for a, b in zip(self.seeds, self.seeds[1:])):
            raise ValueError(f"seeds: increasing seed counts of at least 2, got {self.seeds}")

    @property
    def fractions(self) -> np.ndarray:
        return np.array(self.seeds, dtype=np.float64) / self.seeds[-1]

    def nominal_levels(self, alpha: float | None = None) -> np.ndarray:
        """Two-sided p-value the paired t-test must reach at each look for level `alpha` (default: the design's)."""
        return np.array(_nominal_levels(self.seeds, alpha or self.alpha, self.spending))


@lru_cache(maxsize=256)
def _nominal_levels(seeds: tuple[int, ...], alpha: float, spending: Spending) -> tuple[float, ...]:
    fractions = np.array(seeds, dtype=np.float64) / seeds[-1]
    increments = np.diff(spent(fractions, alpha, spending), prepend=0.0)
    p = _null_pvalues(seeds)  # [P, K]
    going, out = np.ones(len(p), dtype=bool), []
    for k, target in enumerate(increments):
        share = target * len(p) / max(going.sum(), 1)  # of the paths still going
        level = float(np.quantile(p[going, k], min(share, 1.0))) if share > 0 else 0.0
        out.append(level)
        going &= p[:, k] > level
    return tuple(out)


#: Null paths drawn to find the t-tests' nominal levels (a level's spent alpha to about 1e-4 at alpha 0.05).
NULL_PATHS = 400_000


@lru_cache(maxsize=16)
def _null_pvalues(seeds: tuple[int, ...]) -> np.ndarray:
    """Paired t-test p-values at the looks `seeds` of NULL_PATHS paths of standard normal deltas, [P, K], each round
    drawn as its normal sum and chi-square sum of squares (docs/analysis.md, *Seeds in rounds*)."""
    rng = np.random.default_rng(0)
    size = np.diff(seeds, prepend=0)  # [K] seeds per round
    sums = rng.standard_normal((NULL_PATHS, len(seeds))) * np.sqrt(size)  # [P, K]
    within = rng.chisquare(np.maximum(size - 1, 1), (NULL_PATHS, len(seeds))) * (size > 1)  # [P, K]
    total, squares, n = np.cumsum(sums, axis=1), np.cumsum(within + sums**2 / size, axis=1), np.array(seeds)
    sd = np.sqrt((squares - total**2 / n) / (n - 1))
    return 2.0 * stats.t.sf(np.abs(total / n) / (sd / np.sqrt(n)), n - 1)


def paired_t_pvalues(deltas: np.ndarray, seeds: tuple[int, ...]) -> np.ndarray:
    """Two-sided one-sample t-test p-values of mean(deltas[..., :n]) == 0 at each look n of `seeds`:
    [..., S] -> [..., K]; NaN where the deltas have no spread."""
    d = np.asarray(deltas, dtype=np.float64)
    out = []
    for n in seeds:
        part = d[..., :n]
        sd = part.std(axis=-1, ddof=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = part.mean(axis=-1) / (sd / np.sqrt(n))
        out.append(np.where(sd > 0, 2.0 * stats.t.sf(np.abs(t), n - 1), np.nan))
    return np.stack(out, axis=-1)


def holm_sequential(pvalues: np.ndarray, design: SequentialDesign) -> tuple[np.ndarray, np.ndarray]:
    """The look at which each question is rejected (-1: never) and the J it was rejected at (0: never), for p-values
    [..., M, K] of M questions at the design's K looks, by Holm-type alpha recycling (docs/analysis.md)."""
    p = np.nan_to_num(np.asarray(pvalues, dtype=np.float64), nan=1.0)
    m, k_looks = p.shape[-2], p.shape[-1]
    levels = np.stack([design.nominal_levels(design.alpha / j) for j in range(1, m + 1)])  # [M, K]
    rejected_at, open_at = np.full(p.shape[:-1], -1), np.zeros(p.shape[:-1], dtype=np.int64)
    for k in range(k_looks):
        while True:
            open_ = rejected_at < 0
            n_open = open_.sum(axis=-1)  # [...]
            level = levels[np.maximum(n_open, 1) - 1, : k + 1]  # [..., k + 1]
            crossed = open_ & (p[..., : k + 1] <= level[..., None, :]).any(axis=-1)
            if not crossed.any():
                break
            rejected_at = np.where(crossed, k, rejected_at)
            open_at = np.where(crossed, n_open[..., None], open_at)
    return rejected_at, open_at


@dataclass(frozen=True)
class LookVerdict:
    """One question's sequential verdict: rejected at `look` (0-based), or open after it (its last look reached;
    -1: untestable at every look); `level`, `interval`: the nominal level and the (1 - level) t interval of the
    look that decided it (open: its last look at the level of the questions left open)."""

    look: int
    rejected: bool
    level: float
    interval: tuple[float, float]


def look_pvalues(seeds: np.ndarray, deltas: np.ndarray, looks: tuple[int, ...]) -> np.ndarray:
    """[K] paired t p-values of one question's deltas at each look (the seeds below its count; NaN at a look
    whose round it did not reach, or without spread)."""
    out = np.full(len(looks), np.nan)
    for k, n in enumerate(looks):
        if k and not (seeds >= looks[k - 1]).any():
            break
        part = deltas[seeds < n]
        out[k] = paired_t_pvalues(part, (len(part),))[0] if len(part) > 1 else np.nan
    return out


def sequential_verdicts(strata: list[tuple[np.ndarray, np.ndarray]], design: SequentialDesign) -> list[LookVerdict]:
    """The verdict of each (seeds, deltas) question under `holm_sequential`, with its interval."""
    p = np.array([look_pvalues(s, d, design.seeds) for s, d in strata]).reshape(len(strata), len(design.seeds))
    at, open_at = holm_sequential(p, design)
    still_open = max(int((at < 0).sum()), 1)
    out = []
    for (seeds, deltas), p_i, k, j in zip(strata, p, at, open_at):
        levels = design.nominal_levels(design.alpha / (j if k >= 0 else still_open))  # [K]
        reached = np.flatnonzero(np.isfinite(p_i))
        if k >= 0:  # the interval of the look whose data crossed (recycled alpha can reach back to an earlier one)
            look = int(np.flatnonzero(p_i[: k + 1] <= levels[: k + 1])[0])
        elif len(reached):
            look = int(reached[-1])
        else:
            out.append(LookVerdict(-1, False, np.nan, (np.nan, np.nan)))
            continue
        part = deltas[seeds < design.seeds[look]]
        interval = t_interval(float(part.mean()), float(part.std(ddof=1)), len(part), levels[look])
        out.append(LookVerdict(int(k) if k >= 0 else look, bool(k >= 0), float(levels[look]), interval))
    return out
