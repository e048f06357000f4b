"""Speedup heatmaps of a sweep: hidden size x density, one panel per (GPU, batch).

Each cell is the predicted per-step speedup of the best sparse persistent kernel over the next
best alternative (``gpusim sweep`` columns ``speedup``, ``best_persistent``). Cells where no
sparse persistent kernel fits are hatched and marked "x" (the layer does not fit on-chip).
"""

from __future__ import annotations

import numpy as np

from gpusim.plots.style import figure

__all__ = ["speedup_heatmap", "thinned_ticks"]

MAX_TICKS_X = 9      # hidden-size labels per panel (a 4 in wide panel holds about 9 rotated)
MAX_TICKS_Y = 12
BAR_TICKS = (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 20, 30, 50, 100)


def thinned_ticks(n: int, max_ticks: int = MAX_TICKS_X) -> list[int]:
    """Indices of at most ``max_ticks`` evenly spaced labels out of ``n`` cells, the first and
    (where the spacing allows) the last included."""
    if n <= max_ticks:
        return list(range(n))
    step = -(-(n - 1) // (max_ticks - 1))
    ticks = list(range(0, n, step))
    if n - 1 - ticks[-1] > step / 2:
        ticks.append(n - 1)
    return ticks


def speedup_heatmap(cols: dict, *, title: str | None = None):
    """Figure of the sweep columns ``cols`` (as returned by :func:`gpusim.sweep.run_sweep`)."""
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter

    gpus = list(dict.fromkeys(cols["gpu"]))
    batches = sorted(set(cols["batch"]))
    hidden = sorted(set(cols["hidden"]))
    dens = sorted(set(cols["density"]))
    panels = [(g, b) for g in gpus for b in batches]
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = figure(nrows, ncols, size=(4.2 * ncols + 1.2, 3.6 * nrows + 0.6), squeeze=False)
    sp = np.array([np.nan if s is None else s for s in cols["speedup"]], dtype=float)
    finite = sp[np.isfinite(sp) & (sp > 0)]
    lo, hi = (finite.min(), finite.max()) if finite.size else (0.5, 2.0)
    lo, hi = min(lo, 0.99), max(hi, 1.01)
    norm = LogNorm(vmin=lo, vmax=hi)
    image = None
    hi_idx = {h: i for i, h in enumerate(hidden)}
    d_idx = {d: i for i, d in enumerate(dens)}
    for ax, (g, b) in zip(axes.flat, panels, strict=False):
        grid = np.full((len(dens), len(hidden)), np.nan)
        nofit = np.zeros_like(grid, dtype=bool)
        for i, (gg, bb) in enumerate(zip(cols["gpu"], cols["batch"], strict=False)):
            if gg != g or bb != b:
                continue
            r, c = d_idx[cols["density"][i]], hi_idx[cols["hidden"][i]]
            if cols["best_persistent"][i] is None or cols["speedup"][i] is None:
                nofit[r, c] = True
            else:
                grid[r, c] = cols["speedup"][i]
        image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto",
                          cmap="RdYlGn", norm=norm)
        for r, c in zip(*np.nonzero(nofit), strict=False):
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///",
                                   edgecolor="0.5", linewidth=0))
            ax.text(c, r, "x", ha="center", va="center", color="0.3", fontsize=7)
        xt = thinned_ticks(len(hidden))
        ax.set_xticks(xt, [str(hidden[i]) for i in xt], rotation=45)
        yt = thinned_ticks(len(dens), MAX_TICKS_Y)
        ax.set_yticks(yt, [f"{dens[i]:g}" for i in yt])
        ax.set_xlabel("hidden size N")
        ax.set_ylabel("density (fraction nonzero)")
        ax.set_title(f"{g}, batch {b}")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    if image is not None:
        bar = fig.colorbar(image, ax=axes, shrink=0.9)
        bar.set_label("speedup over next best (x)")
        ticks = [v for v in BAR_TICKS if lo <= v <= hi] or [lo, hi]
        bar.set_ticks(ticks)
        bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        bar.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    layer = []
    for key, default in (("cell", "rnn"), ("dtype", "fp32")):
        vals = set(cols.get(key) or [default])
        if vals != {default}:
            layer.append("/".join(sorted(map(str, vals))))
    heads = set(cols.get("heads") or [1])
    if heads != {1}:
        layer.append("/".join(map(str, sorted(heads))) + " heads (density within the heads)")
    what = f"\n{', '.join(layer)}; " if layer else " ("
    fig.suptitle(title or "Predicted per-step speedup of the best sparse persistent kernel"
                 f"{what}hatched x: does not fit" + ("" if layer else ")"))
    return fig
