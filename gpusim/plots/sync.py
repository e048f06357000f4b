"""Synchronisation across SMs, drawn from simulator results: grid barrier vs Lamport timestamps.

:func:`draw_sm_timeline` draws one :class:`gpusim.engine.SimResult`'s timeline on one axes: a row
per SM, a bar per simulated step from the SM's start to its end of that step, split into the
simulator's breakdown categories (issue, shared memory, waiting for data, barrier) in proportion
to the cycles charged to each. :func:`plot_sync_comparison` puts several results (normally the
barrier and the Lamport variant of one layer) side by side on a common time axis and adds the
step durations and the L2 traffic by kind (data, poll, atomic, store) underneath.

What to look for: with the barrier every SM's step ends at nearly the same time (nobody starts
step t+1 before the slowest SM finished step t and the arrivals were counted); with Lamport
timestamps an SM starts as soon as the h values it reads are there, so steps overlap a little
and the barrier category shrinks to the CTA-local ``__syncthreads``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .style import figure, label, pyplot

__all__ = ["CATEGORY_COLORS", "draw_sm_timeline", "plot_sync_comparison", "timeline_arrays"]

CATEGORY_COLORS = {
    "issue": "#4c72b0",
    "shared_memory": "#55a868",
    "waiting_for_data": "#dd8452",
    "barrier": "#c44e52",
}
_L2_KINDS = ("data", "poll", "atomic", "store")


def timeline_arrays(result) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """``(start, end, {category: cycles})`` as arrays of shape (steps, SMs)."""
    tl = result.timeline
    if not tl:
        from kernels_ir.errors import InputError

        raise InputError(f"result of kernel {result.kernel} has no timeline (no time loop ran)")
    start = np.array([[s for s, _, _ in step] for step in tl], dtype=np.float64)
    end = np.array([[e for _, e, _ in step] for step in tl], dtype=np.float64)
    cats = {c: np.array([[float(b.get(c, 0.0)) for _, _, b in step] for step in tl])
            for c in CATEGORY_COLORS}
    return start, end, cats


def draw_sm_timeline(ax, result, *, t0_cycles: float = 0.0, title: str | None = None,
                     legend: bool = True) -> None:
    """Per-SM timeline of one result on ``ax``; x in microseconds, y = SM."""
    start, end, cats = timeline_arrays(result)
    us = 1e6 / result.clock_hz
    n_steps, n_sms = start.shape
    span = np.maximum(end - start, 0.0)
    total = sum(cats.values())
    scale = np.divide(span, total, out=np.zeros_like(span), where=total > 0)
    left = start.copy()
    for cat, color in CATEGORY_COLORS.items():
        width = cats[cat] * scale
        for sm in range(n_sms):
            ax.broken_barh(list(zip((left[:, sm] - t0_cycles) * us, width[:, sm] * us,
                                    strict=True)),
                           (sm - 0.42, 0.84), facecolors=color, linewidth=0)
        left = left + width
    # step boundaries: a thin black tick at each SM's end of each step
    for k in range(n_steps):
        ax.scatter((end[k] - t0_cycles) * us, np.arange(n_sms), marker="|", color="black",
                   s=12, linewidths=0.6)
    ax.set_ylim(n_sms - 0.5, -0.5)
    ax.set_xlim(0, (end.max() - t0_cycles) * us * 1.01)
    if title is None:
        title = f"{result.kernel}: {n_steps} steps"
    label(ax, "time since launch", "SM (one CTA each)", title, xunit="us")
    if legend:
        from matplotlib.patches import Patch

        handles = [Patch(color=c, label=k.replace("_", " ")) for k, c in CATEGORY_COLORS.items()]
        handles.append(pyplot().Line2D([], [], color="black", marker="|", linestyle="",
                                       label="end of a step"))
        ax.legend(handles=handles, loc="lower right", fontsize=7, framealpha=0.9)


def plot_sync_comparison(results: Mapping[str, object], *, title: str | None = None):
    """Timelines side by side (top), step times and L2 traffic per variant (bottom)."""
    results = dict(results)
    if not results:
        from kernels_ir.errors import InputError

        raise InputError("plot_sync_comparison needs at least one SimResult")
    names = list(results)
    n = len(names)
    n_sms = max(len(r.timeline[0]) for r in results.values())
    fig, axes = figure(2, n, size=(7.0 * n, 5.0 + min(6.0, 0.06 * n_sms)),
                       height_ratios=[2.2, 1.0], squeeze=False)
    t_max = max(timeline_arrays(r)[1].max() * 1e6 / r.clock_hz for r in results.values())
    for i, name in enumerate(names):
        r = results[name]
        per = r.per_step_s * 1e6
        draw_sm_timeline(axes[0, i], r, legend=i == n - 1,
                         title=f"{name}: {r.steps} simulated steps, steady step {per:.2f} us")
        axes[0, i].set_xlim(0, t_max * 1.01)

    colors = pyplot().get_cmap("tab10")
    # step durations per variant
    ax = axes[1, 0]
    width = 0.8 / n
    for i, name in enumerate(names):
        r = results[name]
        steps = np.asarray(r.step_cycles, dtype=float) * 1e6 / r.clock_hz
        x = np.arange(len(steps)) + (i - (n - 1) / 2) * width
        ax.bar(x, steps, width=width, color=colors(i), label=name)
    ax.set_xticks(range(max(len(r.step_cycles) for r in results.values())))
    label(ax, "simulated step (step 0 starts cold)", "step duration",
          "duration of each step (latest SM)", yunit="us")
    ax.legend(fontsize=7)
    # L2 traffic by kind per variant
    ax = axes[1, 1] if n > 1 else None
    if ax is None:  # a single result: no second bottom panel
        fig.suptitle(title or "per-SM timeline", fontsize=10)
        return fig
    kinds = [k for k in _L2_KINDS if any(r.l2_transactions.get(k, 0) for r in results.values())]
    xk = np.arange(len(kinds))
    for i, name in enumerate(names):
        r = results[name]
        vals = [max(r.l2_transactions.get(k, 0), 0) for k in kinds]
        bars = ax.bar(xk + (i - (n - 1) / 2) * width, vals, width=width, color=colors(i),
                      label=name)
        for b, v in zip(bars, vals, strict=True):
            ax.annotate(f"{v:,}", (b.get_x() + b.get_width() / 2, max(v, 1)), ha="center",
                        va="bottom", fontsize=6, rotation=0)
    ax.set_yscale("log")
    top = max([max(r.l2_transactions.get(k, 0), 1) for r in results.values() for k in kinds],
              default=1)
    ax.set_ylim(bottom=0.8, top=top * 12)   # room for the count above the tallest bar
    ax.set_xticks(xk, kinds)
    steps = max(r.steps for r in results.values())
    label(ax, "kind of L2 transaction", "L2 transactions",
          f"L2 traffic, {steps} simulated steps incl. weight load (sectors; atomics: requests)",
          yunit="log scale")
    ax.legend(fontsize=7)
    for j in range(2, n):
        axes[1, j].axis("off")
    fig.suptitle(title or "synchronisation across SMs", fontsize=10)
    return fig
