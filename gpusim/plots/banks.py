"""Heatmaps of shared-memory bank conflicts per (warp, slot) of one or more layout reports.

Several layouts of one mapping are drawn side by side on one colour scale, so that equal colours
mean equal conflict counts in every panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gpusim.plots.style import FONT_SIZE, figure, save_png

__all__ = ["conflicts_figure", "plot_conflicts", "plot_conflicts_panels"]


def _grid(report) -> np.ndarray:
    """Conflicts (extra wavefronts, all loads of a slot) per warp x slot."""
    return np.asarray(report.conflicts).sum(axis=2)


def conflicts_figure(reports: Sequence, title: str, *, vmax: float | None = None):
    """One heatmap per report (panels in a grid of up to 2 columns), one shared colour scale.

    ``vmax`` fixes the top of the scale (default: the largest count in any panel), so figures
    drawn separately can share it too.
    """
    from matplotlib.ticker import MaxNLocator

    reports = list(reports)
    if not reports:
        from kernels_ir.errors import InputError

        raise InputError("no layout report to plot")
    grids = [_grid(r) for r in reports]
    top = float(vmax) if vmax is not None else max(1.0, max(float(g.max()) for g in grids))
    ncols = 1 if len(reports) == 1 else 2
    nrows = -(-len(reports) // ncols)
    size = (9.0, 5.0) if len(reports) == 1 else (11.0, 3.6 * nrows + 0.8)
    fig, axes = figure(nrows, ncols, size=size, squeeze=False, sharex=True, sharey=True)
    image = None
    for ax, rep, grid in zip(axes.flat, reports, grids, strict=False):
        image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="magma",
                          origin="upper", vmin=0, vmax=top)
        ax.set_title(f"layout={rep.layout}: {rep.total_conflicts} conflicts, "
                     f"{rep.total_wavefronts / rep.lower_bound_wavefronts:.3f} x bound",
                     fontsize=FONT_SIZE + 1)
    for ax in axes[-1, :]:
        ax.set_xlabel("register slot (instruction)")
    for ax in axes[:, 0]:
        ax.set_ylabel("warp (cta * warps_per_cta + warp)")
    for ax in list(axes.flat)[len(reports):]:
        ax.set_visible(False)
    bar = fig.colorbar(image, ax=axes, shrink=0.9 if len(reports) > 1 else 1.0)
    bar.set_label("bank conflicts per slot (extra wavefronts)")
    bar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(title, fontsize=FONT_SIZE + 1)
    return fig


def plot_conflicts(report, path: str | Path, title: str, *, vmax: float | None = None) -> Path:
    """Write a PNG heatmap of one report's conflicts per warp x slot."""
    return save_png(conflicts_figure([report], title, vmax=vmax), path)


def plot_conflicts_panels(reports: Sequence, path: str | Path, title: str) -> Path:
    """Write a PNG with one panel per report (layout), all on one colour scale."""
    return save_png(conflicts_figure(reports, title), path)
