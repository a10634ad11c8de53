"""Family against family, paired by seed (slope differences, iso-FLOP gains, crossover), and Holm's correction
over the lack-of-fit tests and each kind of family contrast (`correct_scaling_tests`). docs/analysis.md."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from harness import runs_columns as C

from ..config import ScalingConfig
from ..stats.paired import Estimate, SeedInterval, holm, mean_t_interval, seed_mean, seeds_for_power
from .axes import HELIX_CTR, UNIT_NAMES, Convention
from .forms import LOG_LINEAR, interval_text, open_seed_interval
from .powerlaw import LEVEL, PowerLawFit
from .scaling import FamilyScaling

METHOD = ("paired by seed: per-seed differences of the per-seed lines, t intervals and t-tests with df = seeds - 1; "
          "crossover by seed bootstrap")
#: A crossover whose interval leaves the measured range by more than this factor is not determined.
CROSSOVER_REACH = 10.0
#: Effects the power statement is sized for.
SLOPE_EFFECT = HELIX_CTR["slope"]
GAIN_EFFECT = 0.001


@dataclass(frozen=True)
class PairedContrast:
    """Per-seed differences A - B of one quantity, tested with the seed as the unit."""

    estimate: Estimate
    p_value: float
    sd: float  # sample sd of the per-seed differences
    n_seeds: int
    effect: float  # the effect size the power statement is for
    seeds_for_80: float  # seeds a paired t-test needs for 80% power at `effect` (NaN without a spread)
    p_holm: float = float("nan")


@dataclass
class FamilyComparison:
    a: str
    b: str
    metric: str
    reference: str
    convention: Convention
    seeds: list[int]  # shared seeds with a line in both families
    slope_a: float
    slope_b: float
    slope_diff: PairedContrast | None  # power-law slope A - B
    log_linear_diff: PairedContrast | None = None  # reference-free: metric per e-fold, A - B
    iso_x: float | None = None  # compute where the gains are read (the fit's axis and unit)
    gain_a: Estimate | None = None
    gain_b: Estimate | None = None
    ratio: Estimate | None = None  # gain A / gain B
    diff: PairedContrast | None = None  # gain A - gain B at x*
    value_a: float = float("nan")  # the metric itself at iso_x (reference value + gain)
    value_b: float = float("nan")
    crossover_x: float | None = None
    crossover_interval: SeedInterval | None = None  # on x
    crossover: str = ""
    method: str = METHOD
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.a} vs {self.b}"

    @property
    def n_seeds(self) -> int:
        return len(self.seeds)


def family_comparisons(fams: list[FamilyScaling], cfg: ScalingConfig) -> tuple[list[FamilyComparison], list[str]]:
    """The comparisons of the `compare` pairs (docs/analysis.md, *Family comparisons*) and notes on empty pairs."""
    fitted = [f for f in fams if f.fit is not None]
    groups: dict[tuple, list[FamilyScaling]] = {}
    for f in fitted:
        shared = sorted((k, str(v)) for k, v in f.context.items() if k != C.ARCH and not k.startswith(C.MODEL_PREFIX))
        groups.setdefault((f.metric, f.reference, f.convention, tuple(shared)), []).append(f)
    pairs: list[tuple[FamilyScaling, FamilyScaling]] = []
    notes: list[str] = []
    if not cfg.compare:
        for members in groups.values():
            pairs += list(itertools.combinations(sorted(members, key=lambda f: f.family), 2))
    for name_a, name_b in cfg.compare:
        found = [(fa, fb) for members in groups.values() for fa in members for fb in members
                 if name_a in (fa.family, fa.arch) and name_b in (fb.family, fb.arch)]
        if not found:
            have = sorted({f.family for f in fitted}) or ["none"]
            notes.append(f"analysis.scaling.compare [{name_a}, {name_b}]: no pair of fitted families with these "
                         f"names in the same setting (fitted: {', '.join(have)})")
        pairs += found
    return [compare_families(a, b) for a, b in pairs], notes


def paired_contrast(diffs: np.ndarray, effect: float, *, level: float = LEVEL) -> PairedContrast:
    """Mean of per-seed differences with its t interval (df = n - 1), t-test p and the seeds for 80% power."""
    _, sd, p = seed_mean(diffs)
    return PairedContrast(_t_estimate(diffs, level), p, sd, len(diffs), effect, seeds_for_power(sd, effect))


def _t_estimate(values: np.ndarray, level: float, transform=lambda v: v) -> Estimate:
    """The mean of per-seed values with its t interval (df = n - 1), each mapped by `transform`."""
    mean, _, half = mean_t_interval(values, level)
    return Estimate(*(float(transform(v)) for v in (mean, mean - half, mean + half)))


def _seed_log_linear_slopes(f: FamilyScaling, seeds: list[int]) -> dict[int, float]:
    ladder = f.ladder
    curves = {} if ladder is None else {s: ladder.fit(LOG_LINEAR, seeds=(int(np.flatnonzero(ladder.seeds == s)[0]),))
                                        for s in seeds if s in ladder.seeds}
    return {s: c.params["b"] for s, c in curves.items() if c is not None}


def compare_families(fa: FamilyScaling, fb: FamilyScaling, *, level: float = LEVEL) -> FamilyComparison:
    """Slope difference, iso-FLOP gains and crossover of two fitted families (A - B), paired by seed."""
    A, B = cast(PowerLawFit, fa.fit), cast(PowerLawFit, fb.fit)  # callers pass fitted families
    seeds = sorted(set(A.seed_slopes) & set(B.seed_slopes))
    out = FamilyComparison(fa.family, fb.family, fa.metric, fa.reference, fa.convention, seeds, A.slope, B.slope, None)
    if len(seeds) < 2:
        out.notes.append(f"{len(seeds)} seed(s) with a line in both families: no paired test (needs 2)")
    if not seeds:
        return out
    ia, sa, ib, sb = (np.array([line[s] for s in seeds])  # [S] each
                      for line in (A.seed_intercepts, A.seed_slopes, B.seed_intercepts, B.seed_slopes))
    out.slope_a, out.slope_b = float(sa.mean()), float(sb.mean())
    out.slope_diff = paired_contrast(sa - sb, SLOPE_EFFECT, level=level)
    lin_a, lin_b = _seed_log_linear_slopes(fa, seeds), _seed_log_linear_slopes(fb, seeds)
    both = [s for s in seeds if s in lin_a and s in lin_b]
    if both:
        out.log_linear_diff = paired_contrast(np.array([lin_a[s] - lin_b[s] for s in both]), GAIN_EFFECT, level=level)
    _iso(out, fa, fb, (ia, sa, ib, sb), level)
    _crossover(out, fa, fb, (ia, sa, ib, sb))
    return out


def _iso(out: FamilyComparison, fa: FamilyScaling, fb: FamilyScaling, lines, level: float) -> None:
    ia, sa, ib, sb = lines
    xa, xb = cast(PowerLawFit, fa.fit).obs_x, cast(PowerLawFit, fb.fit).obs_x
    lo, hi = max(xa.min(), xb.min()), min(xa.max(), xb.max())
    if lo > hi:
        out.notes.append("the measured compute ranges do not overlap: no iso-FLOP reading")
        return
    mid = (lo + hi) / 2  # geometric middle of the overlap, in ln x
    la, lb = ia + sa * mid, ib + sb * mid  # [S] per-seed ln gains at x*
    out.iso_x = float(np.exp(mid))
    out.gain_a, out.gain_b = _t_estimate(la, level, np.exp), _t_estimate(lb, level, np.exp)
    out.ratio = _t_estimate(la - lb, level, np.exp)
    out.diff = paired_contrast(np.exp(la) - np.exp(lb), GAIN_EFFECT, level=level)
    out.value_a = float(fa.convention.value_of(fa.metric, out.gain_a.value, fa.ref_value))
    out.value_b = float(fb.convention.value_of(fb.metric, out.gain_b.value, fb.ref_value))


def _crossing(ia, sa, ib, sb) -> float:
    """ln x where the mean lines meet; +inf for parallel lines."""
    db = float(np.mean(sa) - np.mean(sb))
    return float("inf") if db == 0.0 else float(-(np.mean(ia) - np.mean(ib)) / db)


def _crossover(out: FamilyComparison, fa: FamilyScaling, fb: FamilyScaling, lines) -> None:
    ia, sa, ib, sb = lines
    unit = UNIT_NAMES[out.convention.x_unit]
    lx = np.concatenate([cast(PowerLawFit, fa.fit).obs_x, cast(PowerLawFit, fb.fit).obs_x])
    lo, hi = float(lx.min()), float(lx.max())
    da, db = float(ia.mean() - ib.mean()), float(sa.mean() - sb.mean())
    ahead_hi = out.a if da + db * hi > 0 else out.b
    xc = _crossing(ia, sa, ib, sb)
    if not np.isfinite(xc):
        out.crossover = f"parallel fits: no crossover ({ahead_hi} ahead throughout)"
        return
    reach = np.log(CROSSOVER_REACH)
    ci = open_seed_interval(len(ia), lambda idx: _crossing(ia[idx], sa[idx], ib[idx], sb[idx]))
    with np.errstate(over="ignore"):  # a crossing beyond e^709 is as unbounded as one that never happens
        out.crossover_interval = replace(ci, lo=float(np.exp(ci.lo)), hi=float(np.exp(ci.hi)))
    leader = out.a if db > 0 else out.b
    other = out.b if leader == out.a else out.a
    shown = interval_text(out.crossover_interval.lo, out.crossover_interval.hi)
    if not (lo - reach <= xc <= hi + reach):
        out.crossover = f"no crossover in range ({ahead_hi} ahead over the whole measured range)"
        return
    out.crossover_x = float(np.exp(xc))
    determined = (np.isfinite(ci.lo) and ci.lo >= lo - reach and ci.hi <= hi + reach
                  and ci.undefined_share <= (1 - LEVEL) / 2)
    if not determined:
        out.crossover = (f"not determined: the lines meet at {out.crossover_x:.3g} {unit}, but its seed-bootstrap "
                         f"interval {shown} leaves the measured range by more than a factor {CROSSOVER_REACH:g}")
        return
    where = ("inside the measured range" if lo <= xc <= hi else
             f"outside the measured range, within a factor {CROSSOVER_REACH:g} of it (extrapolated)")
    out.crossover = f"{leader} overtakes {other} above {out.crossover_x:.3g} {unit} {shown}, {where}"
    if out.slope_diff is not None and not (out.slope_diff.estimate.lo > 0 or out.slope_diff.estimate.hi < 0):
        out.crossover += "; the slope difference's interval includes 0, so the crossover is not established"


CONTRASTS = ("slope_diff", "log_linear_diff", "diff")


def correct_scaling_tests(scaling: list[FamilyScaling], comparisons: list[FamilyComparison]) -> None:
    """Set `lof_p_holm` on every form result and `p_holm` on every comparison contrast, in place."""
    forms = [r for f in scaling if f.forms is not None for r in f.forms.forms]
    for r, p in zip(forms, holm([r.lof_p for r in forms])):
        r.lof_p_holm = float(p)
    for metric in {c.metric for c in comparisons}:
        mine = [c for c in comparisons if c.metric == metric]
        for name in CONTRASTS:
            present = [c for c in mine if getattr(c, name) is not None]
            for c, p in zip(present, holm([getattr(c, name).p_value for c in present])):
                setattr(c, name, replace(getattr(c, name), p_holm=float(p)))
