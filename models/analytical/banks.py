"""Shared-memory wavefronts of the persistent kernels' slot loads.

Beside ``kernels_ir/banks.py`` (the bank rule the simulator's ``gpusim/engine/smem.py``
applies): expected wavefronts for random columns, exact ones for a concrete mapping
(:func:`mapping_wavefronts`).

Expected wavefronts for random columns (no matrix given)
-------------------------------------------------------
A load of ``W`` words per lane runs in ``W`` phases of ``m = 32 / W`` lanes; a lane's class is
its aligned group of ``W`` banks; a phase costs the largest number of distinct columns in one
class (:mod:`kernels_ir.banks`). Columns of a row are distinct and padding lanes are free, so a
phase with ``n`` real lanes costs the maximum bin occupancy of ``n`` balls in ``c`` bins, where
``c`` is the number of classes the column addresses ``col * B + offset`` can reach (8 for B = 4
wide, but 8 banks only for B = 4 scalar loads, 4 of 8 classes for B = 8 wide). Its expectation
``E[M(n, c)]`` is computed exactly: ``P(M <= t) = n! / c^n [x^n] (sum_{i<=t} x^i / i!)^c``.
- ``random`` layout: each lane of a row's ``K`` slots is real with probability ``r / 32K``.
- ``naive`` layout (columns in order): treated as random positions. This over-estimates the
  conflicts of dense-ish rows (consecutive columns fall in consecutive classes); the exact path
  has no such error.
- ``greedy``/``optimal``: the lower bound of :mod:`kernels_ir.layouts`, approximated by
  ``max(K W, r / c, E[largest class count])`` per load (``E`` exact for ``r <= 32``, a normal
  approximation above).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from kernels_ir.errors import InputError
from kernels_ir.mapping import access_pattern

from .variants import WARP


@cache
def _occupancy_table(c: int, nmax: int = WARP) -> np.ndarray:
    """E[max bin occupancy] of n balls thrown uniformly into c bins, n = 0..nmax (E[0] := 1).

    ``P(M <= t) = n! / c^n [x^n] (sum_{i<=t} x^i / i!)^c`` (exponential generating functions),
    ``E[M] = sum_{t>=0} (1 - P(M <= t))``: one polynomial power per ``t`` serves every ``n``.
    """
    n = np.arange(nmax + 1)
    lfact = np.array([math.lgamma(i + 1) for i in range(nmax + 1)])
    e = np.zeros(nmax + 1)
    for t in range(nmax):
        base = np.where(n <= t, np.exp(-lfact), 0.0)
        poly = np.array([1.0])
        for _ in range(c):
            poly = np.convolve(poly, base)[:nmax + 1]
        poly = np.pad(poly, (0, nmax + 1 - poly.size))
        with np.errstate(divide="ignore"):
            p_le = np.exp(lfact + np.log(np.maximum(poly, 1e-300)) - n * math.log(c))
        e += np.where(n > t, 1.0 - np.minimum(p_le, 1.0), 0.0)
    e[0] = 1.0
    return e


def expected_max_occupancy(n, c: int):
    """``E[M(n, c)]`` (array-friendly in ``n``), 1 for ``n = 0`` (an executed phase costs 1)."""
    n = np.asarray(n)
    if np.all(n <= WARP):
        return _occupancy_table(int(c))[np.clip(n, 0, WARP).astype(int)]
    # beyond a warp (largest class count of a whole row): normal approximation
    small = _occupancy_table(int(c))[np.clip(n, 0, WARP).astype(int)]
    nf = n.astype(np.float64)
    big = nf / c + np.sqrt(nf / c * (1 - 1 / c)) * _max_normal(int(c))
    return np.where(n <= WARP, small, big)


@cache
def _max_normal(c: int) -> float:
    """E[max of c iid standard normals], by numerical integration."""
    x = np.linspace(-8, 8, 4001)
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = np.cumsum(pdf) * (x[1] - x[0])
    dens = c * pdf * np.clip(cdf, 0, 1) ** (c - 1)
    return float(np.sum(x * dens) * (x[1] - x[0]))


@cache
def geometry_classes(batch: int, wide_loads: bool) -> tuple[tuple[int, int], ...]:
    """Per load of a slot: ``(width W, reachable classes c)`` for random columns."""
    out = []
    for width, off in access_pattern(batch, wide_loads):
        words = np.arange(WARP * 4, dtype=np.int64) * batch + off
        cls = (words % WARP) // width
        out.append((width, int(np.unique(cls).size)))
    return tuple(out)


@cache
def _dense_slot_wavefronts(batch: int, wide_loads: bool) -> int:
    """Wavefronts of one full dense slot (lanes read consecutive columns)."""
    from kernels_ir import banks

    cols = np.arange(WARP, dtype=np.int64)
    return int(sum(banks.wavefronts(cols * batch + off, width)
                   for width, off in access_pattern(batch, wide_loads)))


def _expected_row_wavefronts(r, K, batch: int, wide_loads: bool, layout: str):
    """Expected wavefronts of one row with ``r`` nonzeros in ``K`` slots (arrays)."""
    r = np.asarray(r, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    total = np.zeros(np.broadcast(r, K).shape)
    for width, c in geometry_classes(batch, wide_loads):
        m = WARP // width
        if layout in ("greedy", "optimal"):
            ri = np.rint(r).astype(np.int64)
            big = expected_max_occupancy(ri, c)
            lb = np.maximum(np.maximum(K * width, np.ceil(r / c)), np.where(ri > 0, big, 0))
            # a phase of m lanes needs ceil(m / c) wavefronts even when perfectly balanced
            lb = np.maximum(lb, np.ceil(np.minimum(r, K * WARP) / WARP * width) *
                            math.ceil(m / c))
            total = total + lb
        else:
            phi = np.clip(r / np.maximum(K * WARP, 1), 0.0, 1.0)
            table = _occupancy_table(c, m) if m <= WARP else None
            n = np.arange(m + 1)
            logc = np.array([math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1)
                             for k in n])
            with np.errstate(divide="ignore"):
                lp = np.log(phi)[..., None]
                lq = np.log1p(-phi)[..., None]
            pmf = np.exp(logc + n * np.where(np.isfinite(lp), lp, -1e300)
                         + (m - n) * np.where(np.isfinite(lq), lq, -1e300))
            pmf = np.where(np.isnan(pmf), 0.0, pmf)
            per_phase = (pmf * table).sum(axis=-1)
            total = total + K * width * per_phase
    return total


def mapping_wavefronts(mapping, batch: int, wide_loads: bool) -> np.ndarray:
    """Wavefronts of every shared load of ``mapping``: int (n_warps, S, n_loads), from
    :func:`kernels_ir.banks.wavefronts` (the function the simulator and the layout analyser use).
    """
    from kernels_ir import banks
    from kernels_ir.mapping import slot_word_addresses

    loads = access_pattern(int(batch), wide_loads)
    # The loads of a slot read the same columns at offsets that are multiples of their width
    # (col * B + offset, all >= 0): the offset only renames the bank groups and keeps which lanes
    # read equal words, so every load of one width costs what the first one does (the proof is
    # in kernels_ir.layouts' docstring). One banks.wavefronts call per width, not per load (a
    # batch of 8 without wide loads has 8 loads).
    first: dict[int, int] = {}
    for i, (width, off) in enumerate(loads):
        if off % width:   # never for access_pattern's loads; banks.wavefronts rejects them
            raise InputError(f"load offset {off} is not aligned to its width {width}")
        first.setdefault(width, i)
    words = slot_word_addresses(mapping, int(batch), wide_loads, loads=list(first.values()))
    per_width = {width: banks.wavefronts(w, width)
                 for width, w in zip(first, words, strict=True)}
    return np.stack([per_width[width] for width, _ in loads], axis=-1)
