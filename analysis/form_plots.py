"""The form figure: each family's metric against compute with the three fitted forms (analysis/fits/forms.py).

One panel per family: seeds as small dots, seed means as large markers, and the power law of the gain, the
log-linear and the saturating curve drawn over the measured range and a factor 10 beyond it (dashed), so a
reader sees where they agree and where they part. The best form by held-out error is named in the panel.
"""
from __future__ import annotations

from pathlib import Path
from typing import cast

import matplotlib.pyplot as plt
import numpy as np

from .fits.form_check import FormCheck
from .fits.forms import FORMS, Ladder
from .fits.scaling import FamilyScaling
from .plots import apply_style, save_figure
from .text_format import metric_label

STYLES = {FORMS[0]: ("tab:blue", "power law of gain"), FORMS[1]: ("tab:green", "log-linear"),
          FORMS[2]: ("tab:red", "saturating")}
BEYOND = 10.0


def plot_forms(fits: list[FamilyScaling], metric: str, path: Path) -> Path | None:
    fams = [f for f in fits if f.metric == metric and f.ladder is not None and f.forms is not None]
    if not fams:
        return None
    apply_style()
    cols = min(3, len(fams))
    rows = int(np.ceil(len(fams) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows + 0.6), squeeze=False)
    for ax, fam in zip(axes.ravel(), fams):
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
    for ax in axes.ravel()[len(fams):]:
        ax.axis("off")
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"{metric_label(metric)} against compute: three forms (solid: measured range; dashed: up to "
                 f"{BEYOND:g}x beyond)", fontsize=10)
    return save_figure(fig, path, bottom=0.08)
