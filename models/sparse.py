"""Sparse recurrent matrices: magnitude pruning and seeded random layers.

Random weights are normal with standard deviation ``1/sqrt(expected nonzeros per row)``, so each
row's dot product with a vector of unit-scale entries has unit-scale variance and ``tanh`` does
not saturate over many steps (the spectral radius of such a matrix is about 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kernels_ir.errors import InputError

__all__ = ["prune_magnitude", "random_sparse", "random_layer", "Layer", "check_density", "GATES"]

GATES = {"rnn": 1, "gru": 3, "lstm": 4}  # recurrent matrix rows = GATES[cell] * N
_ROW_CHUNK_ELEMS = 1 << 24  # random keys drawn per chunk of rows (memory bound, not hardware)


def check_density(density) -> float:
    try:
        d = float(density)
    except (TypeError, ValueError):
        raise InputError(f"density={density!r} is not a number") from None
    if not (0.0 < d <= 1.0):  # also rejects NaN
        raise InputError(f"density={density} is outside (0, 1]")
    return d


def _check_positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{name}={value!r} must be a positive integer")
    return int(value)


def prune_magnitude(dense, density) -> sp.csr_matrix:
    """Keep the ``round(density * size)`` largest-magnitude weights (at least one).

    Ties at the threshold are broken by position (stable), so the count is exact.
    """
    d = check_density(density)
    a = np.asarray(dense)
    if a.ndim != 2 or a.size == 0:
        raise InputError(f"prune_magnitude needs a non-empty matrix, got shape {a.shape}")
    keep = max(1, int(round(d * a.size)))
    flat = np.abs(a).ravel()
    idx = np.argsort(-flat, kind="stable")[:keep]
    mask = np.zeros(a.size, dtype=bool)
    mask[idx] = True
    rows, cols = np.divmod(np.flatnonzero(mask), a.shape[1])
    return sp.csr_matrix((a.ravel()[mask], (rows, cols)), shape=a.shape)


def random_sparse(n_rows: int, n_cols: int, density, rng: np.random.Generator, *,
                  scale: float | None = None, dtype=np.float32) -> sp.csr_matrix:
    """Each position is nonzero independently with probability ``density`` (seeded by ``rng``).

    Values are normal with standard deviation ``scale`` (default ``1/sqrt(density * n_cols)``,
    one over the root of the expected nonzeros per row). A matrix that would be empty gets one
    nonzero at a random position. Column indices are sorted within rows.
    """
    n_rows, n_cols = _check_positive("n_rows", n_rows), _check_positive("n_cols", n_cols)
    d = check_density(density)
    if scale is None:
        scale = 1.0 / math.sqrt(d * n_cols)
    chunk = max(1, _ROW_CHUNK_ELEMS // n_cols)
    indptr = [np.zeros(1, dtype=np.int64)]
    indices = []
    total = 0
    for r0 in range(0, n_rows, chunk):
        r1 = min(n_rows, r0 + chunk)
        if d >= 1.0:
            mask = np.ones((r1 - r0, n_cols), dtype=bool)
        else:
            mask = rng.random((r1 - r0, n_cols), dtype=np.float32) < d
        counts = mask.sum(axis=1)
        indices.append(np.nonzero(mask)[1].astype(np.int32))
        indptr.append(total + np.cumsum(counts))
        total += int(counts.sum())
    indptr = np.concatenate(indptr)
    indices = np.concatenate(indices) if indices else np.zeros(0, np.int32)
    if total == 0:
        r, c = int(rng.integers(n_rows)), int(rng.integers(n_cols))
        indptr = np.r_[np.zeros(r + 1, np.int64), np.ones(n_rows - r, np.int64)]
        indices = np.array([c], dtype=np.int32)
        total = 1
    values = (rng.standard_normal(total) * scale).astype(dtype)
    return sp.csr_matrix((values, indices, indptr), shape=(n_rows, n_cols))


@dataclass(frozen=True, slots=True, eq=False)
class Layer:
    """One recurrent layer's data: ``U`` (csr, float32), ``x_proj`` (T, rows, B), ``h0`` (N, B)."""

    cell: str
    U: sp.csr_matrix
    x_proj: np.ndarray
    h0: np.ndarray

    @property
    def hidden(self) -> int:
        return self.U.shape[1]

    @property
    def batch(self) -> int:
        return self.h0.shape[1]

    @property
    def timesteps(self) -> int:
        return self.x_proj.shape[0]


def random_layer(hidden: int, batch: int, density, timesteps: int, seed: int,
                 cell: str = "rnn") -> Layer:
    """A fresh random layer (never zeros): sparse ``U``, inputs and initial state, float32.

    ``x_proj`` and ``h0`` are normal with standard deviation 0.5, so pre-activations stay in the
    range where ``tanh``/``sigmoid`` have useful slope.
    """
    hidden = _check_positive("hidden", hidden)
    batch = _check_positive("batch", batch)
    timesteps = _check_positive("timesteps", timesteps)
    if cell not in GATES:
        raise InputError(f"cell={cell!r} is not supported; accepted: {', '.join(GATES)}")
    rng = np.random.default_rng(seed)
    rows = GATES[cell] * hidden
    U = random_sparse(rows, hidden, density, rng)
    x_proj = (0.5 * rng.standard_normal((timesteps, rows, batch))).astype(np.float32)
    h0 = (0.5 * rng.standard_normal((hidden, batch))).astype(np.float32)
    for a in (x_proj, h0):
        a.setflags(write=False)
    return Layer(cell, U, x_proj, h0)
