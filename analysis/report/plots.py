"""The report's figures (`FIGURES`, drawn in order by `draw_figures`) and the learning curves, as PNG; each function
returns the path it wrote, or None when the sweep has nothing to show (docs/analysis.md, "Plots")."""
from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import colors

from core import results_layout as layout
from harness import metric_registry
from harness import runs_columns as C
from harness.run_folder import read_curves

from ..collect import SweepResults
from ..columns import family_columns, labelled_columns, show, size_columns
from ..compare.questions import AblationResult
from ..fits.axes import HELIX_CTR
from ..fits.data_scaling import FLOPS_PER_PARAM_TARGET, DataScaling
from ..fits.forms import FORMS, FormCheck, Ladder
from ..fits.scaling import FamilyScaling
from ..result import AnalysisResult
from .section import estimate_text, metric_label

matplotlib.use("Agg")

DELTA_SCALE = 1e3  # deltas are drawn in units of 1e-3
DPI = 150


@contextmanager
def _fixed_jitter(seed: int = 0) -> Iterator[None]:
    """seaborn's strip-plot jitter draws from numpy's global generator: seed it for the call (restoring the
    caller's state afterwards) so that a figure is the same bytes every time it is drawn."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _figure(rows: int = 1, cols: int = 1, **kw: Any) -> tuple[plt.Figure, Any]:
    """A new figure in the report's style (`plt.subplots`' arguments)."""
    sns.set_theme(style="whitegrid", context="notebook", font_scale=1.0)
    return plt.subplots(rows, cols, **kw)


def _panels(n: int, max_cols: int, size: Callable[[int, int], tuple[float, float]], *, off: bool = False,
            **kw: Any) -> tuple[plt.Figure, np.ndarray]:
    """`n` panels, at most `max_cols` a row (`size(cols, rows)`: the figure's size), as a flat array; the grid's
    spare panels hidden (`off`: only their axes)."""
    cols = min(max_cols, n)
    rows = int(np.ceil(n / cols))
    fig, axes = _figure(rows, cols, figsize=size(cols, rows), squeeze=False, **kw)
    for ax in axes.ravel()[n:]:
        ax.axis("off") if off else ax.set_visible(False)
    return fig, axes.ravel()


def save_figure(fig: plt.Figure, path: Path, *, bottom: float = 0.0, dpi: int = DPI) -> Path:
    """Lay out and write `fig`: `bottom` (a share of its height) for a figure legend, the panels below its title."""
    title = getattr(fig, "_suptitle", None)  # the figure title's Text: matplotlib has no public getter for it
    height = fig.get_figheight()
    top = 1.0
    if title is not None:  # pinned 0.1 inch below the top edge, the panels below its last line
        title.set(y=1.0 - 0.1 / height, va="top")
        top -= (0.2 + 0.22 * (title.get_text().count("\n") + 1)) / height
    fig.tight_layout(rect=(0.0, bottom, 1.0, top))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _helix_line(ax: plt.Axes, fits: list[FamilyScaling]) -> None:
    """HELIX's CTR line over our measured x range only, without moving the axes (text when out of view)."""
    xlim, (ylo, yhi) = ax.get_xlim(), ax.get_ylim()
    xs = np.geomspace(*xlim, 50)
    ys = np.exp(HELIX_CTR["intercept"]) * xs ** HELIX_CTR["slope"]
    lo_x = min(f.fit.x_range[0] for f in fits if f.fit is not None)
    hi_x = max(f.fit.x_range[1] for f in fits if f.fit is not None)
    keep = (xs >= lo_x) & (xs <= hi_x)
    label = f"HELIX CTR fit, slope {HELIX_CTR['slope']} (their reference and data; compare slopes)"
    if ((ys[keep] >= ylo) & (ys[keep] <= yhi)).any():
        ax.plot(xs[keep], ys[keep], ls="--", color="grey", lw=1.3, label=label)
    else:
        where = "below" if ys[keep].max() < ylo else "above"
        ax.text(0.99, 0.02, f"{label}:\n{where} this plot (dAUC {ys[keep].min():.2g}–{ys[keep].max():.2g} here)",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="grey")
    ax.set(xlim=xlim, ylim=(ylo, yhi))


def plot_scaling(fits: list[FamilyScaling], metric: str, path: Path, *, helix: bool = True) -> Path | None:
    """Gain against compute (log x), one colour per family: seeds, seed means and the power law with its t band."""
    fits = [f for f in fits if f.metric == metric and f.points]
    if not any(np.isfinite(p.gain) and np.isfinite(p.x) for f in fits for p in f.points):
        return None
    fig, ax = _figure(figsize=(8.5, 5.8))
    palette = sns.color_palette("colorblind", len(fits))
    for colour, fam in zip(palette, fits):
        x = np.array([p.x for p in fam.points])
        g = np.array([p.gain for p in fam.points])
        for p in fam.points:  # per-seed gains
            seed_gain = p.gain_per_seed[np.isfinite(p.gain_per_seed)]
            ax.scatter(np.full(len(seed_gain), p.x), seed_gain, s=14, color=colour, alpha=0.6, lw=0)
        ok = np.isfinite(g) & np.isfinite(x)
        label = fam.family
        if fam.fit is not None:
            lo, hi = fam.fit.slope_ci
            label += f": slope {fam.fit.slope:.3f} [{lo:.3f}, {hi:.3f}] ({fam.fit.n_seeds} seeds)"
            xs = fam.fit.band_x
            ax.plot(xs, fam.fit.predict(xs), color=colour, lw=2)
            if np.isfinite(fam.fit.band_lo).all():
                ax.fill_between(xs, fam.fit.band_lo, fam.fit.band_hi, color=colour, alpha=0.15, lw=0)
        else:
            label += ": " + ("; ".join(fam.notes) or "not fitted")
        ax.scatter(x[ok], g[ok], s=60, color=colour, edgecolor="black", lw=0.6, zorder=3, label=label)
    ax.set_xscale("log")
    ax.axhline(0.0, color="grey", lw=0.8, ls=":")
    if helix and any(f.helix is not None and f.helix.comparable for f in fits):
        _helix_line(ax, fits)
    ax.set_xlabel(f"{fits[0].convention.x_label} (log scale)")
    ax.set_ylabel(fits[0].gain_label)
    ax.set_title(textwrap.fill(f"{fits[0].gain_label} vs {fits[0].reference} against compute, one colour per family",
                               80) + "\nsmall dots: seeds; large: seed means; line: fitted power law; band: its "
                 "95% t band", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.14), ncol=1, frameon=False)
    return save_figure(fig, path)


def _comparison_grid(ablations: list[AblationResult], metrics: list[str]):
    """The frame and panels of `forest.png` and `seed_strip.png` (docs/analysis.md, *Plots*); None: nothing to draw."""
    frame = pd.DataFrame([
        {"comparison": r.label, "metric": m, C.SEED: int(seed), "delta": d * DELTA_SCALE,
         "mean": mc.stats.mean * DELTA_SCALE, "lo": mc.interval[0] * DELTA_SCALE, "hi": mc.interval[1] * DELTA_SCALE,
         "decided": mc.decided}
        for r in ablations for m in metrics if (mc := r.metrics.get(m)) is not None and mc.stats.n > 0
        for seed, d in zip(r.paired.seeds, mc.stats.deltas)])
    if frame.empty:
        return None
    labels = list(dict.fromkeys(frame["comparison"]))
    n = len(labels)
    fig, axes = _panels(len(metrics), 2, lambda cols, rows: (6.2 * cols + 2.0, rows * (1.6 + 0.55 * n) + 0.6),
                        sharey=True)
    for ax, spec in zip(axes, map(metric_registry.get, metrics)):
        ax.set_xlabel(f"$\\Delta$ {spec.label} (A $-$ B) $\\times 10^{{-3}}$, {spec.better} is better for A",
                      fontsize=9)
    return frame, labels, fig, axes


def plot_forest(ablations: list[AblationResult], metrics: list[str], path: Path) -> Path | None:
    """`forest.png` (docs/analysis.md, *Plots*)."""
    metrics = [m for m in metrics if any(m in r.metrics and r.metrics[m].verdict for r in ablations)]
    grid = _comparison_grid(ablations, metrics)
    if grid is None:
        return None
    frame, labels, fig, axes = grid
    for ax, m in zip(axes, metrics):
        sub = frame[frame["metric"] == m].drop_duplicates("comparison").set_index("comparison").reindex(labels)
        y = np.arange(len(labels))
        err = np.vstack([sub["mean"] - sub["lo"], sub["hi"] - sub["mean"]])
        ax.errorbar(sub["mean"], y, xerr=np.where(np.isfinite(err), err, 0), fmt="none", ecolor="black", capsize=3)
        sig = sub["decided"].fillna(False).astype(bool).to_numpy()
        ax.scatter(sub["mean"][sig], y[sig], s=55, color="C3", zorder=3, label="decided (Holm)")
        ax.scatter(sub["mean"][~sig], y[~sig], s=55, facecolor="white", edgecolor="C0", lw=1.5, zorder=3,
                   label="not decided / not testable")
        ax.axvline(0.0, color="grey", lw=1, ls="--")
        ax.set_yticks(y, labels)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_title(f"test {metric_label(m)}: mean paired delta over seeds,\ninterval at the level Holm decides it at")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=9, frameon=False)
    return save_figure(fig, path, bottom=0.45 / fig.get_figheight())


def plot_seed_strip(ablations: list[AblationResult], metrics: list[str], path: Path) -> Path | None:
    """Every seed's paired delta, so the spread behind each mean is visible."""
    grid = _comparison_grid(ablations, metrics)
    if grid is None:
        return None
    frame, labels, fig, axes = grid
    for ax, m in zip(axes, metrics):
        sub = frame[frame["metric"] == m]
        with _fixed_jitter():
            sns.stripplot(data=sub, x="delta", y="comparison", order=labels, hue=C.SEED, palette="viridis",
                          size=7, jitter=0.12, ax=ax, legend=ax is axes[0])
        means = sub.drop_duplicates("comparison").set_index("comparison").reindex(labels)["mean"]
        ax.scatter(means, np.arange(len(labels)), marker="|", s=400, color="black", zorder=3)
        ax.axvline(0.0, color="grey", lw=1, ls="--")
        ax.set_ylabel("")
        ax.set_title(f"test {metric_label(m)}")
    handles, names = axes[0].get_legend_handles_labels()
    if axes[0].get_legend() is not None:
        axes[0].get_legend().remove()
    fig.legend(handles, names, loc="lower center", ncol=len(names), fontsize=9, frameon=False,
               title="colour: seed (black bar: mean over seeds)", title_fontsize=9)
    fig.suptitle("Ablations: per-seed paired deltas", fontsize=12)
    return save_figure(fig, path, bottom=0.7 / fig.get_figheight())


def group_frame(res: AnalysisResult) -> pd.DataFrame:
    """Long table (run label, seed, group, <headline metrics: auc, logloss>, n) from the metrics.json `groups` of
    each architecture's (and varied non-size setting's) largest-compute model (docs/analysis.md, *Plots*)."""
    results = res.results
    runs, cols = results.runs, results.config_columns
    if C.RUN_DIR not in runs.columns:
        return pd.DataFrame()
    family_cols = family_columns(runs, cols, size_columns(runs, cols, results.config.scaling.size_by))
    label = runs[C.ARCH].astype(str)
    for c in labelled_columns(runs, family_cols):
        label = label + f", {c}=" + runs[c].astype(str)
    if C.FLOPS_PER_TARGET in runs.columns and runs[C.FLOPS_PER_TARGET].notna().any():
        top = runs.groupby(family_cols, dropna=False)[C.FLOPS_PER_TARGET].transform("max")
        runs = runs[np.isclose(runs[C.FLOPS_PER_TARGET].to_numpy(dtype=float), top.to_numpy(dtype=float))]
    headline = [m.name for m in metric_registry.headline_metrics()]
    rows = []
    for idx, run in runs.iterrows():  # one small JSON per run, not per event
        metrics = results.metrics_json(run[C.RUN_DIR]) if pd.notna(run[C.RUN_DIR]) else None
        for name, values in (metrics or {}).get("groups", {}).get(results.config.split, {}).items():
            if isinstance(values, dict):
                rows.append({"run": label[idx], C.SEED: run[C.SEED], "group": name,
                             **{m: values.get(m) for m in headline}, "n": values.get("n")})
    return pd.DataFrame(rows)


def group_name(name: str) -> str:
    """Readable group label: `duration_lt_15s` -> `duration < 15 s`, `duration_15_30s` -> `duration 15–30 s`."""
    parts = name.split("_")
    if parts[0] == "duration" and len(parts) > 1:
        rest = parts[1:]
        if rest[0] in ("lt", "gt"):
            return f"duration {'<' if rest[0] == 'lt' else '>'} {rest[1].removesuffix('s')} s"
        if len(rest) == 2 and rest[1].endswith("s"):
            return f"duration {rest[0]}–{rest[1].removesuffix('s')} s"
    return name.replace("_", " ")


def plot_groups(groups: pd.DataFrame, path: Path) -> Path | None:
    """`groups.png`: one bar per run label and group (docs/analysis.md, *Plots*)."""
    if groups.empty:
        return None
    headline = [m.name for m in metric_registry.headline_metrics() if m.name in groups.columns]
    n = pd.to_numeric(groups["n"], errors="coerce").fillna(0)
    groups = groups[(n > 0) & (groups[headline].notna().any(axis=1))]
    if groups.empty:
        return None
    groups = groups.assign(group=groups["group"].map(group_name))
    metrics = [m for m in headline if groups[m].notna().any()]
    order = list(dict.fromkeys(groups["group"]))
    height = max(3.6, 1.6 + len(order) * (0.25 + 0.12 * groups["run"].nunique()))
    fig, axes = _panels(len(metrics), len(metrics), lambda cols, _: (6.0 * cols + 1.5, height), sharey=True)
    for ax, m in zip(axes, metrics):
        data = groups[groups[m].notna()]
        sns.barplot(data=data, y="group", x=m, hue="run", order=order, errorbar="sd", ax=ax, palette="colorblind",
                    orient="h")
        lo, hi = data[m].min(), data[m].max()
        pad = 0.15 * (hi - lo) + 1e-3
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_xlabel(f"test {metric_label(m)} (axis does not start at 0; {metric_registry.get(m).better} is better)")
        ax.set_ylabel("")
        ax.set_title(f"test {metric_label(m)} by group")
        ax.get_legend().remove()
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(3, len(names)), fontsize=9, frameon=False)
    fig.suptitle("Grouped test metrics (largest model of each architecture; error bar: seed sd)", fontsize=12)
    return save_figure(fig, path, bottom=(0.15 + 0.25 * np.ceil(len(names) / 3)) / fig.get_figheight())


def _runs_varying_only(results: SweepResults, column: str) -> pd.DataFrame:
    """Runs whose other settings were also run at another value of `column` (so sizes are not mixed in)."""
    runs = results.runs
    others = [c for c in results.config_columns if c != column]
    spread = runs.groupby(others, dropna=False)[column].transform("nunique")
    kept = runs[spread.to_numpy() > 1]
    return kept if len(kept) else runs


def plot_settings(results: SweepResults, path: Path) -> Path | None:
    """`settings.png`: test AUC against each data setting the sweep varies (docs/analysis.md, *Plots*)."""
    runs, col = results.runs, results.metric_column("auc")
    varied = [c for c in (C.PROTOCOL, *C.protocol_parameter_columns()) if c in runs.columns and runs[c].nunique() > 1]
    if not varied:
        return None
    fig, axes = _figure(1, len(varied), figsize=(6.0 * len(varied), 4.6), squeeze=False)
    for ax, c in zip(axes.flat, varied):
        data = _runs_varying_only(results, c)
        data = data.assign(**{c: data[c].astype(str)})
        order = [str(v) for v in sorted(runs[c].dropna().unique())]
        several = data[C.ARCH].nunique() > 1  # seaborn cannot dodge a single hue level
        with _fixed_jitter():
            sns.stripplot(data=data, x=c, y=col, hue=C.ARCH, order=order, dodge=several, alpha=0.5, size=5,
                          ax=ax, legend=False, palette="colorblind")
        sns.pointplot(data=data, x=c, y=col, hue=C.ARCH, order=order, dodge=0.4 if several else False,
                      errorbar=None, ax=ax,
                      palette="colorblind", markers="D", linestyles="-")
        # a parameter named *_s is in seconds (delay_s, window_s)
        unit = " (s)" if c.endswith("_s") else " (events)" if c == C.HISTORY_LEN else ""
        ax.set_xlabel(c.removesuffix("_s") + unit)
        ax.set_ylabel(f"{results.config.split} AUC")
        ax.set_title(f"{results.config.split} AUC by {c} (dots: seeds, diamonds: mean)")
        ax.legend(fontsize=8, title="arch")
    return save_figure(fig, path)


STYLES = {FORMS[0]: ("tab:blue", "power law of gain"), FORMS[1]: ("tab:green", "log-linear"),
          FORMS[2]: ("tab:red", "saturating")}
BEYOND = 10.0


def plot_forms(fits: list[FamilyScaling], metric: str, path: Path) -> Path | None:
    fams = [f for f in fits if f.metric == metric and f.ladder is not None and f.forms is not None]
    if not fams:
        return None
    fig, axes = _panels(len(fams), 3, lambda cols, rows: (4.6 * cols, 3.6 * rows + 0.6), off=True)
    for ax, fam in zip(axes, fams):
        ladder = cast(Ladder, fam.ladder)  # plotted families have a ladder and forms
        for p in range(len(ladder.x)):
            v = ladder.values[p][np.isfinite(ladder.values[p])]
            ax.scatter(np.full(len(v), ladder.x[p]), v, s=12, color="grey", alpha=0.6, lw=0)
        ax.scatter(ladder.x, ladder.size_means(), s=50, color="black", zorder=3)
        inside = np.linspace(ladder.lx.min(), ladder.lx.max(), 80)
        beyond = np.linspace(ladder.lx.max(), ladder.lx.max() + np.log(BEYOND), 40)
        for form in FORMS:
            curve = ladder.fit(form)
            if curve is None:
                continue
            colour, name = STYLES[form]
            ax.plot(np.exp(inside), curve.predict(inside), color=colour, lw=1.6, label=name)
            ax.plot(np.exp(beyond), curve.predict(beyond), color=colour, lw=1.2, ls="--")
        ax.set_xscale("log")
        ax.set_title(f"{fam.family}\nbest held out: {cast(FormCheck, fam.forms).best or '–'}", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.set_xlabel(fam.convention.x_label, fontsize=7)
        ax.set_ylabel(metric_label(metric), fontsize=8)
        lo, hi = np.nanmin(ladder.values), np.nanmax(ladder.values)
        pad = 0.5 * (hi - lo) if hi > lo else 0.01
        ax.set_ylim(lo - pad, hi + pad)
    drawn: dict[str, Any] = {}  # label -> handle over every panel: a form fitted nowhere gets no legend entry
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            drawn.setdefault(label, handle)
    fig.legend(drawn.values(), drawn.keys(), loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"{metric_label(metric)} against compute: {len(drawn)} of {len(FORMS)} forms fitted (grey: seeds; "
                 f"black: seed means; solid: measured range; dashed: up to {BEYOND:g}x beyond)", fontsize=10)
    return save_figure(fig, path, bottom=0.08)


N_ISO = 6  # fixed-compute curves, geometrically spaced over the measured compute


def plot_isoflop(ds: DataScaling | None, path: Path) -> Path | None:
    if ds is None or ds.surface is None or not ds.surface.identified:
        return None
    s, pts = ds.surface, ds.points
    cmap, norm = plt.get_cmap("viridis"), colors.LogNorm(*ds.measured_c)
    d_lo, d_hi = pts["d"].min(), pts["d"].max()
    n_grid = np.geomspace(pts["n"].min() / 10, pts["n"].max() * 10, 200)
    fig, ax = _figure(figsize=(6.4, 4.6))
    for c in np.geomspace(*ds.measured_c, N_ISO):
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
    f, pts = ds.frontier, ds.points
    cells = pts.groupby(["n", "d"]).size().reset_index()
    c_cells = FLOPS_PER_PARAM_TARGET * cells["n"] * cells["d"]
    fig, axes = _figure(1, 2, figsize=(10, 4.2))
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
    text = "" if a is None else f": N* ~ C^{estimate_text(a, '.2f')}, D* ~ C^{1 - a.value:.2f}"
    fig.suptitle(f"Compute-optimal allocation from L(N, D){text}", fontsize=10)
    return save_figure(fig, path)


# ----------------------------------------------------------------------------------------------
# learning curves (read_curves): one figure per family from its runs' event files (docs/analysis.md, "Plots")


LOSS, VALID = "train/loss", "valid/ne"


def _name(key: tuple) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(str(k) for k in key)).strip("_")


def plot_learning_curves(results: SweepResults, runs: pd.DataFrame, status: pd.Series,
                         plots: Path) -> dict[str, Path]:
    """`{"curves_<family>": png}` for each family with event files; `runs` is every run (`status` per row)."""
    if C.RUN_DIR not in runs.columns:
        return {}
    curves = {i: read_curves(results.run_path(d)) for i, d in runs[C.RUN_DIR].items() if isinstance(d, str)}
    if not any(c.get(LOSS) for c in curves.values()):
        return {}
    cols = results.config_columns
    sizes = size_columns(runs, cols, results.config.scaling.size_by)
    fams = family_columns(runs, cols, sizes)

    def size_of(r: pd.Series) -> tuple:
        return tuple(str(show(r[s])) for s in sizes)

    # a family is named by the columns that tell families apart (arch and any varying setting), not by the
    # settings every run shares
    named = [i for i, c in enumerate(fams) if c == C.ARCH or runs[c].nunique(dropna=False) > 1]
    out = {}
    for key, fam in runs.groupby(fams, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        key = tuple(key[i] for i in named)
        if not any(curves.get(i, {}).get(LOSS) for i in fam.index):
            continue
        size_keys = sorted({size_of(r) for _, r in fam.iterrows()},
                           key=lambda k: [(0, float(x), "") if x.replace(".", "", 1).isdigit() else (1, 0.0, x)
                                          for x in k])  # numbers in order, then names
        colour = {k: plt.cm.viridis(0.85 * j / max(len(size_keys) - 1, 1)) for j, k in enumerate(size_keys)}
        # sizes are told apart by the size columns that vary inside this family (not other families' columns)
        label_cols = [c for c in sizes if fam[c].nunique(dropna=True) > 1]
        has_valid = any(len(curves.get(i, {}).get(VALID, ())) >= 2 for i in fam.index)  # one point is no curve
        fig, axes = plt.subplots(1, 2 if has_valid else 1, figsize=(11 if has_valid else 6.5, 4.2), squeeze=False)
        labelled = set()
        for i, r in sorted(fam.iterrows(), key=lambda ir: size_keys.index(size_of(ir[1]))):  # legend in size order
            c = curves.get(i, {})
            size = size_of(r)
            bad = status.get(i, "ok") != "ok"
            name = ", ".join(f"{s.removeprefix(C.MODEL_PREFIX)}={show(r[s])}" for s in label_cols) or str(r[C.ARCH])
            label = name if size not in labelled else None
            labelled.add(size)
            style = dict(color=colour[size], linewidth=0.9, alpha=0.85, linestyle="--" if bad else "-")
            if c.get(LOSS):
                steps, values = zip(*c[LOSS])
                axes[0, 0].plot(steps, values, label=label, **style)
                if bad:
                    axes[0, 0].annotate(f"seed {r[C.SEED]}: {status[i]}", (steps[-1], values[-1]), fontsize=7,
                                        color=colour[size])
            if has_valid and c.get(VALID):
                steps, values = zip(*c[VALID])
                axes[0, 1].plot(steps, values, marker="o", markersize=3, **style)
        axes[0, 0].set(xlabel="optimiser step", ylabel="training loss (mean per target, per window)",
                       title="training loss")
        coloured = ", ".join(c.removeprefix(C.MODEL_PREFIX) for c in label_cols) or "model"
        axes[0, 0].legend(fontsize=7, title=f"colour: {coloured} (each seed a line)", title_fontsize=7,
                          loc="upper right")
        if has_valid:
            axes[0, 1].axhline(1.0, color="grey", linewidth=0.6, linestyle=":")
            axes[0, 1].set(xlabel="optimiser step", ylabel="validation NE", title="validation NE (1 = base rate)")
        fig.suptitle(", ".join(f"{fams[j].removeprefix(C.MODEL_PREFIX)}={show(v)}" for j, v in zip(named, key)),
                     fontsize=10)
        out[f"curves_{_name(key)}"] = save_figure(fig, plots / layout.plot_file(f"curves_{_name(key)}"), dpi=110)
    return out


# ----------------------------------------------------------------------------------------------
# the figures of a report, in the order they are drawn (and listed in analysis.json's `plots`)


def _groups_figure(res: AnalysisResult, path: Path) -> Path | None:
    groups = group_frame(res)
    if groups.empty:
        res.group_note = (f"No run folder with {layout.METRICS_FILE} `groups` (a results folder with only "
                          f"{layout.RUNS_FILE} has none): no grouped-metric plot.")
    return plot_groups(groups, path)


def _one_per_runs(ablations: list[AblationResult]) -> list[AblationResult]:
    """A question asked on several metrics has one stratum per metric over the same runs: one row each, with
    every metric's comparison from the stratum that asks it (the first stratum's name)."""
    first: dict[tuple, AblationResult] = {}
    asked: dict[tuple, dict] = {}
    for r in ablations:
        key = r.paired.runs
        first.setdefault(key, r)
        if r.question.metric in r.metrics:
            asked.setdefault(key, {})[r.question.metric] = r.metrics[r.question.metric]
    return [dataclasses.replace(r, metrics={**r.metrics, **asked.get(k, {})}) for k, r in first.items()]


def _metrics(res: AnalysisResult) -> list[str]:
    return [m for m in res.results.config.metrics if res.results.has_metric(m)]


#: name -> draws `plots/<name>.png` from the analysis result (None: nothing to show for this sweep).
FIGURES: dict[str, Callable[[AnalysisResult, Path], Path | None]] = {
    "scaling_auc": lambda res, p: plot_scaling(res.scaling, "auc", p, helix=res.results.config.scaling.helix_reference),
    "scaling_logloss": lambda res, p: plot_scaling(res.scaling, "logloss", p, helix=False),
    "forms_auc": lambda res, p: plot_forms(res.scaling, "auc", p),
    "forms_logloss": lambda res, p: plot_forms(res.scaling, "logloss", p),
    "forest": lambda res, p: plot_forest(_one_per_runs(res.ablations), _metrics(res), p),
    "seed_strip": lambda res, p: plot_seed_strip(_one_per_runs(res.ablations), _metrics(res), p),
    "settings": lambda res, p: plot_settings(res.results, p),
    "isoflop": lambda res, p: plot_isoflop(res.data_scaling, p),
    "frontier": lambda res, p: plot_frontier(res.data_scaling, p),
    "groups": _groups_figure,
}


def draw_figures(res: AnalysisResult, plots: Path) -> dict[str, str]:
    """Every figure of FIGURES and the learning curves into `plots`: name -> path relative to the sweep, if drawn."""
    made = {name: draw(res, plots / layout.plot_file(name)) for name, draw in FIGURES.items()}
    if res.health is not None:
        made.update(plot_learning_curves(res.results, res.health.runs, res.health.status, plots))
    return {k: f"{layout.PLOTS_DIR}/{p.name}" for k, p in made.items() if p is not None}
