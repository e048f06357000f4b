"""Per-SM timeline of the simulated steps: stacked breakdown per step (matplotlib, Agg)."""

from __future__ import annotations

import numpy as np

from kernels_ir.errors import InputError

__all__ = ["plot_timeline"]

COLORS = {"issue": "#4C72B0", "shared_memory": "#55A868", "waiting_for_data": "#C44E52",
          "barrier": "#8172B2"}


def plot_timeline(result, path: str, max_sms: int = 16) -> None:
    """Draw one row per SM (up to ``max_sms``); each step is a bar from its start to its end
    cycle, split in proportion to the step's breakdown (issue / shared memory / waiting for data
    / barrier). Writes ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = result.timeline
    if not steps:
        raise InputError("the simulation has no time loop steps to plot")
    n_sms = min(len(steps[0]), max_sms)
    fig, ax = plt.subplots(figsize=(10, 0.35 * n_sms + 1.5))
    us = 1e6 / result.clock_hz
    for sm in range(n_sms):
        for step in steps:
            start, end, br = step[sm]
            total = sum(br.values()) or 1.0
            left = start
            for cat, color in COLORS.items():
                width = (end - start) * br.get(cat, 0.0) / total
                ax.barh(sm, width * us, left=left * us, color=color, edgecolor="none",
                        height=0.8)
                left += width
            ax.axvline(end * us, color="k", linewidth=0.2, alpha=0.3)
    ax.set_xlabel("time (us)")
    ax.set_ylabel("SM")
    ax.set_yticks(np.arange(n_sms))
    ax.set_title(f"{result.kernel} on {result.gpu}: per-SM steps "
                 f"({result.per_step_s * 1e6:.2f} us/step)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, [c.replace("_", " ") for c in COLORS], loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
