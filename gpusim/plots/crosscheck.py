"""Predicted vs measured per-step time of the recorded GPU cases (``gpusim crosscheck``).

Colour: the kernel kind (sparse persistent, dense persistent, CSR, cuBLAS, cuSPARSE). Marker:
who predicted it: filled circles the simulator, triangles the analytical model (the cuBLAS /
cuSPARSE rows, and, hollow, the model's prediction of the same kernel cases the simulator ran,
so both witnesses can be compared case by case).
"""

from __future__ import annotations

from pathlib import Path

from gpusim.plots.style import FONT_SIZE, figure, pyplot, save_png

__all__ = ["crosscheck_figure", "plot_crosscheck", "MARKERS"]

MARKERS = {"simulator": "o", "analytical": "^"}
KIND_ORDER = ("sparse_persistent", "dense_persistent", "csr", "cublas", "cusparse")


def _mape(pairs) -> float | None:
    pairs = list(pairs)
    if not pairs:
        return None
    return sum(abs(p - m) / m for p, m in pairs) / len(pairs)


def crosscheck_figure(summary: dict, *, model_points: bool = True):
    """Log-log scatter of ``summary["rows"]`` (from :func:`gpusim.cli.crosscheck.run_crosscheck`):
    predicted vs measured per-step time, y = x and +-20% lines."""
    from matplotlib.lines import Line2D

    plt_colors = pyplot().get_cmap("tab10")
    rows = summary["rows"]
    kinds = [k for k in KIND_ORDER if any(r["kind"] == k for r in rows)]
    kinds += sorted({r["kind"] for r in rows} - set(kinds))
    color = {k: plt_colors(i % 10) for i, k in enumerate(kinds)}
    fig, ax = figure(size=(7.5, 7.0))
    vals = []
    for src in ("simulator", "analytical"):
        for k in kinds:
            rs = [r for r in rows if r["source"] == src and r["kind"] == k]
            if not rs:
                continue
            x = [r["measured_s"] * 1e6 for r in rs]
            y = [r["predicted_s"] * 1e6 for r in rs]
            vals += x + y
            ax.scatter(x, y, marker=MARKERS[src], s=34, color=color[k], edgecolors="k",
                       linewidths=0.4, zorder=3)
    model_rows = [r for r in rows if model_points and r.get("model_s") is not None]
    for k in kinds:
        rs = [r for r in model_rows if r["kind"] == k]
        if rs:
            x = [r["measured_s"] * 1e6 for r in rs]
            y = [r["model_s"] * 1e6 for r in rs]
            vals += x + y
            ax.scatter(x, y, marker=MARKERS["analytical"], s=30, facecolors="none",
                       edgecolors=[color[k]], linewidths=1.0, zorder=2)
    lo, hi = min(vals) / 1.4, max(vals) * 1.4
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, zorder=1)
    for f in (0.8, 1.2):
        ax.plot([lo, hi], [lo * f, hi * f], color="0.6", ls=":", lw=0.8, zorder=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    ax.set_xlabel(f"measured per-step time on {summary['gpu']} (us)")
    ax.set_ylabel(f"predicted per-step time, spec {summary['spec']} (us)")
    sim = [(r["predicted_s"], r["measured_s"]) for r in rows if r["source"] == "simulator"]
    lib = [(r["predicted_s"], r["measured_s"]) for r in rows if r["source"] == "analytical"]
    mod = [(r["model_s"], r["measured_s"]) for r in model_rows]
    parts = []
    for name, pairs in (("simulator", sim), ("model on the same kernels", mod),
                        ("model, libraries", lib)):
        m = _mape(pairs)
        if m is not None:
            parts.append(f"{name} {100 * m:.1f}% ({len(pairs)})")
    ax.set_title(f"Predicted vs measured per-step time, {summary['cases']} recorded cases\n"
                 f"MAPE (cases): " + ", ".join(parts), fontsize=FONT_SIZE + 1)
    kind_handles = [Line2D([], [], ls="", marker="s", markersize=8, color=color[k], label=k)
                    for k in kinds]
    src_handles = [Line2D([], [], ls="", marker="o", color="0.3", label="simulator"),
                   Line2D([], [], ls="", marker="^", color="0.3",
                          label="analytical model (libraries)")]
    if model_rows:
        src_handles.append(Line2D([], [], ls="", marker="^", markerfacecolor="none",
                                  color="0.3", label="analytical model (same kernel cases)"))
    src_handles += [Line2D([], [], ls="--", color="k", label="y = x"),
                    Line2D([], [], ls=":", color="0.6", label="+-20%")]
    first = ax.legend(handles=kind_handles, title="kernel kind (colour)", loc="upper left",
                      fontsize=FONT_SIZE - 1, title_fontsize=FONT_SIZE - 1)
    ax.add_artist(first)
    ax.legend(handles=src_handles, title="predicted by (marker)", loc="lower right",
              fontsize=FONT_SIZE - 1, title_fontsize=FONT_SIZE - 1)
    return fig


def plot_crosscheck(summary: dict, path: str | Path, *, model_points: bool = True) -> Path:
    """Write :func:`crosscheck_figure` of ``summary`` as a PNG at ``path``; return the path."""
    return save_png(crosscheck_figure(summary, model_points=model_points), path)
