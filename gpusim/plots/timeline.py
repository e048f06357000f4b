"""Per-SM timeline of the simulated steps: stacked breakdown per step (matplotlib, Agg)."""

from __future__ import annotations

import numpy as np

from kernels_ir.errors import InputError

__all__ = ["plot_timeline"]

COLORS = {"issue": "#4C72B0", "shared_memory": "#55A868", "waiting_for_data": "#C44E52",
          "barrier": "#8172B2"}
MAX_ROW_IN = 0.35      # row height (inches) for a few SMs
MIN_ROW_IN = 0.09      # row height for many (132 SMs: a 14 in tall figure)
MAX_Y_TICKS = 20


def plot_timeline(result, path: str, max_sms: int | None = None) -> None:
    """Draw one row per SM (every SM unless ``max_sms`` is given; the title says how many of how
    many are shown); each simulated step is a bar from its start to its end cycle, split in
    proportion to the step's breakdown (issue / shared memory / waiting for data / barrier).
    Writes ``path`` (PNG)."""
    from gpusim.plots.style import pyplot, save_png

    plt = pyplot()
    steps = result.timeline
    if not steps:
        raise InputError("the simulation has no time loop steps to plot")
    total_sms = len(steps[0])
    n_sms = total_sms if max_sms is None else max(1, min(total_sms, int(max_sms)))
    row = min(MAX_ROW_IN, max(MIN_ROW_IN, 8.0 / n_sms))
    fig, ax = plt.subplots(figsize=(10, row * n_sms + 2.0), dpi=100, layout="constrained")
    us = 1e6 / result.clock_hz
    height = 0.8 if n_sms <= 32 else 1.0   # many SMs: rows touch (no aliasing gaps)
    for cat, color in COLORS.items():   # one barh call per category: fast for 132 SMs
        lefts, widths, rows = [], [], []
        for sm in range(n_sms):
            for step in steps:
                start, end, br = step[sm]
                total = sum(br.values()) or 1.0
                left = start + (end - start) * sum(
                    br.get(c, 0.0) for c in list(COLORS)[:list(COLORS).index(cat)]) / total
                lefts.append(left * us)
                widths.append((end - start) * br.get(cat, 0.0) / total * us)
                rows.append(sm)
        ax.barh(rows, widths, left=lefts, color=color, edgecolor="none", height=height,
                antialiased=n_sms <= 32,
                label=cat.replace("_", " "))
    for step in steps:   # step boundaries of SM 0
        ax.axvline(step[0][1] * us, color="k", linewidth=0.4, alpha=0.4)
    ax.set_xlabel("time (us)")
    ax.set_ylabel("SM")
    stride = next(s for s in (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, n_sms)
                  if n_sms / s <= MAX_Y_TICKS)
    ax.set_yticks(np.arange(0, n_sms, stride))
    ax.set_ylim(-0.6, n_sms - 0.4)
    shown = (f"all {total_sms} SMs" if n_sms == total_sms
             else f"SMs 0-{n_sms - 1} of {total_sms}")
    sampled = (f"{result.steps} simulated steps of {result.total_steps}"
               if getattr(result, "extrapolated", False) else f"{len(steps)} steps")
    ax.set_title(f"{result.kernel} on {result.gpu}: per-SM time line, {shown}, {sampled} "
                 f"({result.per_step_s * 1e6:.2f} us/step)", fontsize=10)
    fig.legend(loc="outside lower center", ncols=len(COLORS), fontsize=8, frameon=False)
    save_png(fig, path, dpi=100)
