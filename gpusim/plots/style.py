"""Shared matplotlib set-up for every ``gpusim.plots`` module: backend, figures, labels, saving.

Plot functions in this package *return* a :class:`matplotlib.figure.Figure`; the CLI writes it
with :func:`save_png` and notebooks show it with :func:`show`. Nothing here depends on a display:

- :func:`pyplot` picks the non-interactive Agg backend unless a backend was already chosen (the
  ``MPLBACKEND`` environment variable, an IPython kernel's inline backend, or an earlier import of
  ``matplotlib.pyplot``), so the CLI works on a headless machine and notebooks keep their inline
  figures;
- :func:`show` displays a figure (or a PNG written by another plot command) in a notebook as a
  PNG and closes it, whichever backend is active; outside IPython it only closes the figure.

Conventions, so that every PNG is readable on its own: axis labels carry their unit in
parentheses (``"time (us)"``), every figure has a title saying what was plotted and for which
configuration, colour scales have a labelled colour bar, categories have a legend.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

__all__ = ["pyplot", "figure", "label", "save_png", "check_png_path", "show", "cyclic_colors",
           "DPI", "FONT_SIZE"]

DPI = 110            # dots per inch of saved PNGs (a 10 x 6 in figure is 1100 x 660 pixels)
FONT_SIZE = 9        # base font size (points)


def pyplot():
    """``matplotlib.pyplot``, with Agg selected first unless a backend was chosen already."""
    import matplotlib

    chosen = ("matplotlib.pyplot" in sys.modules or os.environ.get("MPLBACKEND")
              or "ipykernel" in sys.modules)
    if not chosen:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(nrows: int = 1, ncols: int = 1, *, size: tuple[float, float] = (9.0, 5.0),
           **subplot_kw):
    """``(fig, axes)`` with constrained layout and the package's font size.

    ``axes`` is a single Axes for a 1 x 1 grid, otherwise an array (as ``plt.subplots``).
    Extra keyword arguments go to ``plt.subplots`` (``width_ratios=...``, ``sharey=...``).
    """
    plt = pyplot()
    with plt.rc_context({"font.size": FONT_SIZE}):
        fig, axes = plt.subplots(nrows, ncols, figsize=size, dpi=DPI, layout="constrained",
                                 **subplot_kw)
    return fig, axes


def label(ax, xlabel: str, ylabel: str, title: str | None = None, *, xunit: str | None = None,
          yunit: str | None = None) -> None:
    """Label an axes: ``xlabel (xunit)``, ``ylabel (yunit)`` and an optional title."""
    ax.set_xlabel(f"{xlabel} ({xunit})" if xunit else xlabel)
    ax.set_ylabel(f"{ylabel} ({yunit})" if yunit else ylabel)
    if title:
        ax.set_title(title, fontsize=FONT_SIZE + 1)


def cyclic_colors(n: int):
    """``n`` distinguishable RGBA colours (tab20 repeated), for SMs, warps or row-slots."""
    plt = pyplot()
    cmap = plt.get_cmap("tab20")
    return [cmap(i % 20) for i in range(max(1, n))]


def check_png_path(path: str | Path) -> Path:
    """``Path(path)`` if it names a PNG file, else an InputError (call before long work)."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        from kernels_ir.errors import InputError

        raise InputError(f"plot file {str(path)!r} must end in .png")
    return path


def save_png(fig, path: str | Path, *, dpi: int = DPI, close: bool = True) -> Path:
    """Write ``fig`` as a PNG at ``path`` (parent folders created), close it, return the path."""
    path = check_png_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    if close:
        pyplot().close(fig)
    return path


def show(fig_or_path) -> None:
    """Show a figure (or a PNG file written by a plot command) in a notebook, then close it.

    The figure is rendered to PNG bytes and handed to IPython's display, so it appears exactly as
    the CLI would write it, under any backend. Outside IPython nothing is displayed.
    """
    data = None
    if isinstance(fig_or_path, (str, Path)):
        data = Path(fig_or_path).read_bytes()
    else:
        buf = io.BytesIO()
        fig_or_path.savefig(buf, dpi=DPI, format="png")
        pyplot().close(fig_or_path)
        data = buf.getvalue()
    ipython = sys.modules.get("IPython")
    if ipython is None or ipython.get_ipython() is None:
        return
    from IPython.display import Image, display

    display(Image(data=data, format="png"))
