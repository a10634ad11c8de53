"""Learning-curve figures: one per family, from the TensorBoard event files of its runs (harness/curves.py).

A family is what the scaling fits call one (architecture and every non-size setting); within it each model
size has a colour and each seed a thin line: training loss against optimiser step (left) and validation NE
at each evaluation (right, when logged). Every run of runs.parquet is drawn, unhealthy ones dashed (their
status in the legend), so a curve that never fell or is still falling at the end is seen at a glance.
Nothing is drawn for a sweep whose runs have no event files (a published reference holds no run folders).
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from core import results_layout as layout
from harness import runs_columns as C
from harness.curves import read_curves

from ..collect import SweepResults
from ..columns import family_columns, show, size_columns

LOSS, VALID = "train/loss", "valid/ne"


def _name(key: tuple) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(str(k) for k in key)).strip("_")


def plot_learning_curves(results: SweepResults, runs: pd.DataFrame, status: pd.Series | None,
                         plots: Path) -> dict[str, Path]:
    """`{"curves_<family>": png}` for each family with event files; `runs` is every run (`status` per row)."""
    if C.RUN_DIR not in runs.columns:
        return {}
    curves = {i: read_curves(results.run_path(d)) for i, d in runs[C.RUN_DIR].items() if isinstance(d, str)}
    if not any(c.get(LOSS) for c in curves.values()):
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = results.config_columns
    sizes = size_columns(runs, cols, results.config.scaling.size_by)
    fams = family_columns(runs, cols, sizes)
    # a family is named by the columns that tell families apart (arch and any varying setting), not by the
    # settings every run shares
    named = [i for i, c in enumerate(fams) if c == C.ARCH or runs[c].nunique(dropna=False) > 1]
    out = {}
    for key, fam in runs.groupby(fams, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        key = tuple(key[i] for i in named)
        if not any(curves.get(i, {}).get(LOSS) for i in fam.index):
            continue
        size_keys = sorted({tuple(str(show(r[c])) for c in sizes) for _, r in fam.iterrows()},
                           key=lambda k: [(0, float(x), "") if x.replace(".", "", 1).isdigit() else (1, 0.0, x)
                                          for x in k])  # numbers in order, then names
        colour = {k: plt.cm.viridis(0.85 * j / max(len(size_keys) - 1, 1)) for j, k in enumerate(size_keys)}
        # sizes are told apart by the size columns that vary inside this family (not other families' columns)
        label_cols = [c for c in sizes if fam[c].nunique(dropna=True) > 1]
        has_valid = any(curves.get(i, {}).get(VALID) for i in fam.index)
        fig, axes = plt.subplots(1, 2 if has_valid else 1, figsize=(11 if has_valid else 6.5, 4.2), squeeze=False)
        labelled = set()
        for i, r in fam.iterrows():
            c = curves.get(i, {})
            size = tuple(str(show(r[s])) for s in sizes)
            bad = status is not None and status.get(i, "ok") != "ok"
            name = ", ".join(f"{s.removeprefix(C.MODEL_PREFIX)}={show(r[s])}" for s in label_cols) or str(r[C.ARCH])
            label = name if size not in labelled else None
            labelled.add(size)
            style = dict(color=colour[size], linewidth=0.9, alpha=0.85, linestyle="--" if bad else "-")
            if c.get(LOSS):
                steps, values = zip(*c[LOSS])
                axes[0, 0].plot(steps, values, label=label, **style)
                if bad and status is not None:
                    axes[0, 0].annotate(f"seed {r[C.SEED]}: {status[i]}", (steps[-1], values[-1]), fontsize=7,
                                        color=colour[size])
            if has_valid and c.get(VALID):
                steps, values = zip(*c[VALID])
                axes[0, 1].plot(steps, values, marker="o", markersize=3, **style)
        axes[0, 0].set(xlabel="optimiser step", ylabel="training loss (mean per target, per window)",
                       title="training loss")
        axes[0, 0].legend(fontsize=7, title="size (one line per seed)", title_fontsize=7, loc="upper right")
        if has_valid:
            axes[0, 1].axhline(1.0, color="grey", linewidth=0.6, linestyle=":")
            axes[0, 1].set(xlabel="optimiser step", ylabel="validation NE", title="validation NE (1 = base rate)")
        fig.suptitle(", ".join(f"{fams[j].removeprefix(C.MODEL_PREFIX)}={show(v)}" for j, v in zip(named, key)),
                     fontsize=10)
        fig.tight_layout()
        path = plots / layout.plot_file(f"curves_{_name(key)}")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out[f"curves_{_name(key)}"] = path
    return out


def curves_section(plots: dict[str, str]) -> list[str]:
    """report.md's learning-curve figures (nothing when there are none)."""
    names = sorted(n for n in plots if n.startswith("curves_"))
    if not names:
        return []
    return ["## Learning curves", "",
            "Training loss per logging window and validation NE at each evaluation, from each run's TensorBoard "
            "event files (`tensorboard --logdir` on this folder shows them all); colour = model size, one thin "
            "line per seed, unhealthy runs dashed.", "", *[f"![{n}]({plots[n]})" for n in names], ""]
