"""The data-scaling figures (analysis/fits/data_scaling.py): IsoFLOP curves and the compute-optimal frontier.

IsoFLOP: the fitted loss against N along curves of fixed training compute C = 6 N D (D = C / 6N), one colour
per C on a log colour scale, each curve's minimum (N*(C)) marked; the measured cells' seed means are drawn
as points in the colour of their own 6 N D, seeds as small dots, so a reader sees how well the surface
meets the data. Solid where D lies within the measured range of D, dotted outside.

Frontier: N*(C) and D*(C) against C (log-log) with their seed-bootstrap bands; the measured (N, D) cells are
drawn at their own C, and the measured range of N (of D) is shaded, so extrapolation is visible.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colors

from .data_scaling_report import bound_text
from .fits.data_scaling import DataScaling
from .fits.surface import FLOPS_PER_PARAM_TARGET
from .plots import apply_style, save_figure
from .text_format import metric_label

N_ISO = 6


def _iso_levels(ds: DataScaling) -> np.ndarray:
    lo, hi = ds.measured_c
    return np.geomspace(lo, hi, N_ISO)


def plot_isoflop(ds: DataScaling | None, path: Path) -> Path | None:
    if ds is None or ds.surface is None or not ds.surface.identified:
        return None
    apply_style()
    s, pts = ds.surface, ds.points
    cmap, norm = plt.get_cmap("viridis"), colors.LogNorm(*ds.measured_c)
    d_lo, d_hi = pts["d"].min(), pts["d"].max()
    n_grid = np.geomspace(pts["n"].min() / 10, pts["n"].max() * 10, 200)
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for c in _iso_levels(ds):
        d = c / (FLOPS_PER_PARAM_TARGET * n_grid)
        loss = s.predict(n_grid, d)
        inside = (d >= d_lo) & (d <= d_hi)
        colour = cmap(norm(c))
        ax.plot(n_grid, np.where(inside, loss, np.nan), color=colour, lw=1.8)
        ax.plot(n_grid, loss, color=colour, lw=1.0, ls=":")
        n_opt = float(s.n_opt(c))
        if not n_grid[0] <= n_opt <= n_grid[-1]:
            continue  # the minimum lies off the panel (far outside the measured sizes)
        ax.scatter([n_opt], [s.predict(n_opt, s.d_opt(c))], marker="*", s=110, color=colour, edgecolor="black",
                   lw=0.6, zorder=4)
    c_pts = FLOPS_PER_PARAM_TARGET * pts["n"] * pts["d"]
    ax.scatter(pts["n"], pts["loss"], c=c_pts, cmap=cmap, norm=norm, s=9, alpha=0.5, lw=0)
    cells = pts.groupby(["n", "d"])["loss"].mean().reset_index()
    ax.scatter(cells["n"], cells["loss"], c=FLOPS_PER_PARAM_TARGET * cells["n"] * cells["d"], cmap=cmap, norm=norm,
               s=45, edgecolor="black", lw=0.6, zorder=3)
    ax.set_xscale("log")
    ax.set_xlim(n_grid[0], n_grid[-1])
    lo, hi = pts["loss"].min(), pts["loss"].max()
    ax.set_ylim(lo - 0.3 * (hi - lo), hi + 0.3 * (hi - lo))
    ax.set_xlabel("N, non-embedding parameters")
    ax.set_ylabel(f"{ds.split} {metric_label(ds.metric)}")
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="C = 6 N D (FLOPs)")
    ax.set_title("IsoFLOP curves of the fitted L(N, D) (solid: D within the measured range; star: N*(C));\n"
                 "points: measured seed means (large) and seeds (small), coloured by their own 6 N D", fontsize=8)
    return save_figure(fig, path)


def plot_frontier(ds: DataScaling | None, path: Path) -> Path | None:
    if ds is None or ds.frontier.empty:
        return None
    apply_style()
    f, pts = ds.frontier, ds.points
    cells = pts.groupby(["n", "d"]).size().reset_index()
    c_cells = FLOPS_PER_PARAM_TARGET * cells["n"] * cells["d"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, key, label, measured in ((axes[0], "n", "N*(C), non-embedding parameters", cells["n"]),
                                     (axes[1], "d", "D*(C), training targets", cells["d"])):
        values = np.concatenate([f[f"{key}_opt"].to_numpy(), measured.to_numpy()])
        lim = (values.min() / 10, values.max() * 10)  # a band reaching "undetermined" runs off the panel
        ax.fill_between(f["c"], np.clip(f[f"{key}_lo"], *lim), np.clip(f[f"{key}_hi"], *lim), color="tab:blue",
                        alpha=0.2, label="95% seed-bootstrap band")
        ax.set_ylim(*lim)
        ax.plot(f["c"], f[f"{key}_opt"], color="tab:blue", lw=2, label="fit")
        ax.scatter(c_cells, measured, s=22, color="grey", label="measured cells")
        ax.axhspan(measured.min(), measured.max(), color="tab:orange", alpha=0.08, label="measured sizes")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("training compute C = 6 N D (FLOPs)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, loc="upper left")
    a = ds.intervals.get("n_exponent")
    text = "" if a is None else (f": N* ~ C^{a.value:.2f} [{bound_text(a.lo, '.2f')}, {bound_text(a.hi, '.2f')}], "
                                 f"D* ~ C^{1 - a.value:.2f}")
    fig.suptitle(f"Compute-optimal allocation from L(N, D){text}", fontsize=10)
    return save_figure(fig, path)
