"""The library baselines priced from measured step times on a grid of layer shapes.

cuBLAS and cuSPARSE are black boxes: the library picks its kernels by shape, and one fixed cost
and one throughput per kernel class (:func:`.libraries.library_path_parts`) cannot follow the
switches (at batch 1 near hidden 1000 cuBLAS's step drops by a quarter, at batch 8 near 1580 it
halves). A spec whose ``[library]`` table names a measured grid (``table``, a
``*_library_table.json`` beside the spec, written by ``python -m gpusim.calibrate
--library-table`` from ``measurements/<gpu>/library_grid_*.json.gz``) prices an fp32 layer of a
covered cell by interpolating between its measured neighbours (fp16 weights: on the grid of the
libraries' fp16 paths, ``cublas_fp16`` / ``cusparse_fp16``, where the table has one):

- cuBLAS (the best of its paths, as the campaign measures it): log step time linear in log
  hidden between the two grid sizes around the layer (the grid's sizes are about x1.12 apart);
- cuSPARSE: at each grid size the step time linear in the density between the two grid
  densities around the layer's (the sparse product streams the nonzeros), then log time linear
  in log hidden between the two sizes.

A layer outside the grid (hidden or density beyond its ends, another batch, fp16 weights without
an fp16 grid), or next to a grid point that failed its values check (an fp16 product of a large
dense-ish matrix rounds past the campaign's tolerance; the table holds ``nan`` there), gets
``nan`` here and the fitted classes' price in :mod:`.libraries`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["table_key", "table_step_s"]


def table_key(library: str, dtype: str = "fp32") -> str:
    """The table's section for ``library`` with weights of ``dtype``."""
    return library if dtype == "fp32" else f"{library}_{dtype}"


def _between(grid: np.ndarray, x: np.ndarray):
    """(index of the grid point below, weight of the one above, inside) for every ``x``."""
    inside = (x >= grid[0]) & (x <= grid[-1])
    i = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, grid.size - 2)
    return i, i + 1, inside


def _log_weight(grid: np.ndarray, x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        w = (np.log(x) - np.log(grid[lo])) / (np.log(grid[hi]) - np.log(grid[lo]))
    return np.clip(np.nan_to_num(w), 0.0, 1.0)


def table_step_s(table: dict, library: str, cell: str, batch, hidden, density,
                 dtype: str = "fp32") -> np.ndarray:
    """Interpolated step time (s) of ``library`` ("cublas" / "cusparse") with ``dtype`` weights
    for layers of ``cell`` (arrays ``batch``, ``hidden`` and ``density``, broadcast together),
    ``nan`` where the grid does not cover them (``table``: :func:`gpusim.specs
    .load_library_table`)."""
    n, d, b = np.broadcast_arrays(np.asarray(hidden, dtype=np.float64),
                                  np.asarray(density, dtype=np.float64), np.asarray(batch))
    out = np.full(n.shape, np.nan)
    for bb in np.unique(b):
        sel = b == bb
        out[sel] = _one_batch(table, table_key(library, dtype), cell, int(bb), n[sel], d[sel])
    return out


def _one_batch(table: dict, key: str, cell: str, batch: int, n: np.ndarray, d: np.ndarray
               ) -> np.ndarray:
    """:func:`table_step_s` at one batch (``n``, ``d``: 1-d arrays of equal size)."""
    entry = table.get(key, {}).get(cell, {}).get(batch)
    if entry is None:
        return np.full(n.shape, np.nan)
    hid, dens, t = entry
    lo, hi, inside = _between(hid, n)
    w = _log_weight(hid, n, lo, hi)
    if dens is None:
        at_lo, at_hi = t[lo], t[hi]
    else:
        dlo, dhi, din = _between(dens, d)
        inside &= din
        with np.errstate(divide="ignore", invalid="ignore"):
            v = np.clip(np.nan_to_num((d - dens[dlo]) / (dens[dhi] - dens[dlo])), 0.0, 1.0)
        at_lo = (1 - v) * t[lo, dlo] + v * t[lo, dhi]
        at_hi = (1 - v) * t[hi, dlo] + v * t[hi, dhi]
    out = np.exp((1 - w) * np.log(at_lo) + w * np.log(at_hi))
    return np.where(inside, out, np.nan)
