"""Seaborn figures of a report, written as PNG: scaling fits, ablation forest and seed strip plots,
grouped metrics and protocol / delay comparisons. Each function returns the path it wrote or None when the
sweep has nothing to show for it."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from .ablations import AblationResult  # noqa: E402
from .collect import SweepResults  # noqa: E402
from .config import HIGHER_IS_BETTER  # noqa: E402
from .scaling import GAIN_LABELS, HELIX_CTR, FamilyScaling  # noqa: E402
from .significance import SIGNIFICANT  # noqa: E402

METRIC_NAMES = {"auc": "AUC", "gauc": "GAUC", "logloss": "LogLoss", "ne": "NE"}
DELTA_SCALE = 1e3  # deltas are drawn in units of 1e-3
DPI = 150


def _style() -> None:
    sns.set_theme(style="whitegrid", context="notebook", font_scale=1.0)


def _save(fig: plt.Figure, path: Path, *, bottom: float = 0.0) -> Path:
    fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0))  # `bottom` leaves room for a figure legend
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_scaling(fits: list[FamilyScaling], metric: str, path: Path, *, helix: bool = True) -> Path | None:
    """Log-log gain vs MFLOPs per target: seed dots, seed-mean markers, fit lines and bootstrap bands."""
    fits = [f for f in fits if f.metric == metric and f.points]
    positive = [p for f in fits for p in f.points if np.isfinite(p.gain) and p.gain > 0]
    if not positive:
        return None
    _style()
    fig, ax = plt.subplots(figsize=(8.5, 5.5))
    palette = sns.color_palette("colorblind", len(fits))
    for colour, fam in zip(palette, fits):
        x = np.array([p.flops for p in fam.points]) / 1e6
        g = np.array([p.gain for p in fam.points])
        for p in fam.points:  # per-seed gains
            seed_gain = p.gain_per_seed[np.isfinite(p.gain_per_seed) & (p.gain_per_seed > 0)]
            ax.scatter(np.full(len(seed_gain), p.flops / 1e6), seed_gain, s=14, color=colour, alpha=0.35, lw=0)
        ok = g > 0
        label = fam.family
        if fam.fit is not None:
            lo, hi = fam.fit.slope_ci
            label += f": slope {fam.fit.slope:.3f} [{lo:.3f}, {hi:.3f}], $R^2$ {fam.fit.r2:.2f}"
            xs = fam.fit.band_x
            ax.plot(xs / 1e6, fam.fit.predict(xs), color=colour, lw=2)
            ax.fill_between(xs / 1e6, fam.fit.band_lo, fam.fit.band_hi, color=colour, alpha=0.15, lw=0)
        if (~ok).any():
            label += f" ({int((~ok).sum())} point(s) $\\leq$ 0 not drawn)"
        ax.scatter(x[ok], g[ok], s=60, color=colour, edgecolor="black", lw=0.6, zorder=3, label=label)
    if helix and metric == "auc":
        all_x = np.array([p.flops for f in fits for p in f.points]) / 1e6
        xs = np.geomspace(all_x.min() / 1.5, all_x.max() * 1.5, 50)
        ys = np.exp(HELIX_CTR["intercept"]) * (xs * 1e6 / HELIX_CTR["flops_unit"]) ** HELIX_CTR["slope"]
        ax.plot(xs, ys, ls="--", color="grey", lw=1.3,
                label="HELIX CTR fit, slope 0.085 (their reference and FLOP count)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ref = fits[0].reference
    ax.set_xlabel("forward matrix FLOPs per target (MFLOPs, log scale)")
    ax.set_ylabel(f"{GAIN_LABELS[metric]} vs {ref} (log scale)")
    ax.set_title(f"Scaling: {GAIN_LABELS[metric]} against compute\n(dots: seeds; bands: 95% bootstrap over seeds)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=1, frameon=False)
    return _save(fig, path)


def _delta_frame(ablations: list[AblationResult], metrics: list[str]) -> pd.DataFrame:
    rows = []
    for r in ablations:
        for m in metrics:
            mc = r.metrics.get(m)
            if mc is None or mc.stats.n == 0:
                continue
            for seed, d in zip(r.paired.seeds, mc.stats.deltas):
                rows.append({"comparison": r.label, "metric": m, "seed": int(seed), "delta": d * DELTA_SCALE,
                             "mean": mc.stats.mean * DELTA_SCALE, "lo": mc.stats.ci_low * DELTA_SCALE,
                             "hi": mc.stats.ci_high * DELTA_SCALE, "significant": mc.verdict == SIGNIFICANT})
    return pd.DataFrame(rows)


def _metric_axes(metrics: list[str], n_rows: int) -> tuple[plt.Figure, np.ndarray]:
    cols = min(2, len(metrics))
    rows = int(np.ceil(len(metrics) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols + 2.0, rows * (1.6 + 0.55 * n_rows) + 0.6),
                             squeeze=False, sharey=True)
    axes = axes.ravel()
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    return fig, axes


def _xlabel(metric: str) -> str:
    better = "higher" if HIGHER_IS_BETTER[metric] else "lower"
    return f"$\\Delta$ {METRIC_NAMES[metric]} (A $-$ B) $\\times 10^{{-3}}$, {better} is better for A"


def _comparison_grid(ablations: list[AblationResult], metrics: list[str]):
    """Paired deltas plus one axis per metric with a row per comparison; None when there is nothing to draw."""
    frame = _delta_frame(ablations, metrics)
    if frame.empty:
        return None
    _style()
    labels = list(dict.fromkeys(frame["comparison"]))
    fig, axes = _metric_axes(metrics, len(labels))
    return frame, labels, fig, axes


def plot_forest(ablations: list[AblationResult], metrics: list[str], path: Path) -> Path | None:
    """Mean paired delta per comparison with its 95% BCa interval; filled = significant across seeds."""
    grid = _comparison_grid(ablations, metrics)
    if grid is None:
        return None
    frame, labels, fig, axes = grid
    for ax, m in zip(axes, metrics):
        sub = frame[frame["metric"] == m].drop_duplicates("comparison").set_index("comparison").reindex(labels)
        y = np.arange(len(labels))
        err = np.vstack([sub["mean"] - sub["lo"], sub["hi"] - sub["mean"]])
        ax.errorbar(sub["mean"], y, xerr=np.where(np.isfinite(err), err, 0), fmt="none", ecolor="black", capsize=3)
        sig = sub["significant"].fillna(False).astype(bool).to_numpy()
        ax.scatter(sub["mean"][sig], y[sig], s=55, color="C3", zorder=3, label=SIGNIFICANT)
        ax.scatter(sub["mean"][~sig], y[~sig], s=55, facecolor="white", edgecolor="C0", lw=1.5, zorder=3,
                   label="within seed noise / not testable")
        ax.axvline(0.0, color="grey", lw=1, ls="--")
        ax.set_yticks(y, labels)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_xlabel(_xlabel(m), fontsize=9)
        ax.set_title(f"test {METRIC_NAMES[m]}")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=9, frameon=False)
    fig.suptitle("Ablations: mean paired delta over seeds with 95% BCa interval", fontsize=12)
    return _save(fig, path, bottom=0.45 / fig.get_figheight())


def plot_seed_strip(ablations: list[AblationResult], metrics: list[str], path: Path) -> Path | None:
    """Every seed's paired delta, so the spread behind each mean is visible."""
    grid = _comparison_grid(ablations, metrics)
    if grid is None:
        return None
    frame, labels, fig, axes = grid
    for ax, m in zip(axes, metrics):
        sub = frame[frame["metric"] == m]
        sns.stripplot(data=sub, x="delta", y="comparison", order=labels, hue="seed", palette="viridis",
                      size=7, jitter=0.12, ax=ax, legend=ax is axes[0])
        means = sub.drop_duplicates("comparison").set_index("comparison").reindex(labels)["mean"]
        ax.scatter(means, np.arange(len(labels)), marker="|", s=400, color="black", zorder=3)
        ax.axvline(0.0, color="grey", lw=1, ls="--")
        ax.set_xlabel(_xlabel(m), fontsize=9)
        ax.set_ylabel("")
        ax.set_title(f"test {METRIC_NAMES[m]} (bar: mean over seeds)")
    if axes[0].get_legend() is not None:
        sns.move_legend(axes[0], "best", title="seed", fontsize=8)
    fig.suptitle("Ablations: per-seed paired deltas", fontsize=12)
    return _save(fig, path)


def group_frame(results: SweepResults, runs: pd.DataFrame, label: pd.Series) -> pd.DataFrame:
    """Long table (label, seed, group, auc, logloss, n) from the runs' metrics.json `groups`."""
    rows = []
    if "run_dir" not in runs.columns:
        return pd.DataFrame()
    for idx, run in runs.iterrows():  # one small JSON per run, not per event
        metrics = results.metrics_json(run["run_dir"]) if pd.notna(run["run_dir"]) else None
        groups = (metrics or {}).get("groups", {}).get(results.config.split, {})
        for name, values in groups.items():
            if isinstance(values, dict):
                rows.append({"run": label[idx], "seed": run["seed"], "group": name,
                             "auc": values.get("auc"), "logloss": values.get("logloss"), "n": values.get("n")})
    return pd.DataFrame(rows)


def plot_groups(groups: pd.DataFrame, path: Path) -> Path | None:
    """Bars of grouped test AUC and LogLoss (mean over seeds, error bar = seed sd) per run label."""
    if groups.empty:
        return None
    _style()
    metrics = [m for m in ("auc", "logloss") if groups[m].notna().any()]
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.5 * len(metrics), 4.8), squeeze=False)
    for ax, m in zip(axes.flat, metrics):
        sns.barplot(data=groups, x="group", y=m, hue="run", errorbar="sd", ax=ax, palette="colorblind")
        lo, hi = groups[m].min(), groups[m].max()
        pad = 0.15 * (hi - lo) + 1e-3
        ax.set_ylim(lo - pad, hi + pad)
        ax.set_ylabel(f"test {METRIC_NAMES[m]} (axis does not start at 0)")
        ax.set_xlabel("")
        ax.tick_params(axis="x", rotation=20)
        ax.set_title(f"test {METRIC_NAMES[m]} by group ({'higher' if m == 'auc' else 'lower'} is better)")
        ax.get_legend().remove()
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(4, len(names)), fontsize=9, frameon=False)
    fig.suptitle("Grouped test metrics (largest model of each architecture; error bar: seed sd)", fontsize=12)
    rows = int(np.ceil(len(names) / 4))
    return _save(fig, path, bottom=(0.15 + 0.25 * rows) / fig.get_figheight())


def _runs_varying_only(results: SweepResults, column: str) -> pd.DataFrame:
    """Runs whose other settings were also run at another value of `column` (so sizes are not mixed in)."""
    runs = results.runs
    others = [c for c in results.config_columns if c != column]
    spread = runs.groupby(others, dropna=False)[column].transform("nunique")
    kept = runs[spread.to_numpy() > 1]
    return kept if len(kept) else runs


def plot_settings(results: SweepResults, path: Path, axes_cols: tuple[str, ...] = ("protocol", "delay_s", "history_len")) -> Path | None:
    """Test AUC against each data setting the sweep varies (protocol, delay, history length), per arch."""
    runs, col = results.runs, results.metric_column("auc")
    varied = [c for c in axes_cols if c in runs.columns and runs[c].nunique() > 1]
    if not varied:
        return None
    _style()
    fig, axes = plt.subplots(1, len(varied), figsize=(6.0 * len(varied), 4.6), squeeze=False)
    for ax, c in zip(axes.flat, varied):
        data = _runs_varying_only(results, c)
        data = data.assign(**{c: data[c].astype(str)})
        order = [str(v) for v in sorted(runs[c].dropna().unique())]
        several = data["arch"].nunique() > 1  # seaborn cannot dodge a single hue level
        sns.stripplot(data=data, x=c, y=col, hue="arch", order=order, dodge=several, alpha=0.5, size=5, ax=ax,
                      legend=False, palette="colorblind")
        sns.pointplot(data=data, x=c, y=col, hue="arch", order=order, dodge=0.4 if several else False,
                      errorbar=None, ax=ax,
                      palette="colorblind", markers="D", linestyles="-")
        unit = " (s)" if c == "delay_s" else " (events)" if c == "history_len" else ""
        ax.set_xlabel(c.replace("_s", "") + unit)
        ax.set_ylabel(f"{results.config.split} AUC")
        ax.set_title(f"{results.config.split} AUC by {c} (dots: seeds, diamonds: mean)")
        ax.legend(fontsize=8, title="arch")
    return _save(fig, path)
