"""Heatmap of shared-memory bank conflicts per (warp, slot) of a layout report."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def plot_conflicts(report, path: str | Path, title: str) -> Path:
    """Write a PNG heatmap of conflicts (extra wavefronts, all loads of a slot) per warp x slot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = np.asarray(report.conflicts).sum(axis=2)
    fig, ax = plt.subplots(figsize=(9, 5), dpi=110)
    im = ax.imshow(data, aspect="auto", interpolation="nearest", cmap="magma", origin="upper")
    ax.set_xlabel("register slot (instruction)")
    ax.set_ylabel("warp (cta * warps_per_cta + warp)")
    ax.set_title(title, fontsize=10)
    bar = fig.colorbar(im, ax=ax)
    bar.set_label("bank conflicts per slot (extra wavefronts)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
