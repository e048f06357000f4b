"""Float64 reference recurrences: the ground truth that kernels and simulators are checked against.

All functions take the recurrent matrix ``U`` (a dense ndarray or any ``scipy.sparse`` matrix),
the precomputed input projections ``x_proj[t] = W x_t + b`` of shape ``(T, rows, B)`` and the
initial state ``h0`` of shape ``(N, B)``, and compute in float64 whatever dtype they are given.
Biases are part of ``x_proj`` (one GEMM before the recurrent kernel, as in the papers).

Multi-head layers (H independent recurrences of N/H units, ``U`` block-diagonal in every gate
block) need nothing special: the references above take the block-diagonal ``U`` as it is.
:func:`multihead_reference` computes the same thing head by head, from the diagonal blocks
alone, as an independent check that the heads do not interact.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from kernels_ir.errors import InputError

__all__ = ["rnn_reference", "lstm_reference", "gru_reference", "multihead_reference",
           "head_block"]


def _matmul64(U) -> callable:
    if sp.issparse(U):
        U64 = sp.csr_matrix(U, dtype=np.float64)
    else:
        U64 = np.asarray(U, dtype=np.float64)
    return lambda h: np.asarray(U64 @ h)


def _check(U, x_proj, h0, gates: int, cell: str):
    if not sp.issparse(U):
        U = np.asarray(U)
    if U.ndim != 2:
        raise InputError(f"{cell}: U must be a matrix, got shape {U.shape}")
    rows, n = U.shape
    if rows != gates * n:
        raise InputError(f"{cell}: U has shape {U.shape}; expected ({gates}*N, N) = "
                         f"({gates * n}, {n})")
    x_proj = np.asarray(x_proj, dtype=np.float64)
    h0 = np.asarray(h0, dtype=np.float64)
    if h0.ndim != 2 or h0.shape[0] != n:
        raise InputError(f"{cell}: h0 has shape {h0.shape}; expected (N, B) with N={n}")
    batch = h0.shape[1]
    if x_proj.ndim != 3 or x_proj.shape[1:] != (rows, batch):
        raise InputError(f"{cell}: x_proj has shape {x_proj.shape}; expected (T, {rows}, {batch})")
    return U, x_proj, h0


def _sigmoid(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def rnn_reference(U, x_proj, h0) -> np.ndarray:
    """Vanilla RNN ``h_t = tanh(U h_{t-1} + x_proj[t])``.

    Returns ``H`` float64 of shape ``(T+1, N, B)`` with ``H[0] = h0`` and ``H[t+1] = h_{t+1}``.
    """
    U, x_proj, h0 = _check(U, x_proj, h0, 1, "rnn")
    mm = _matmul64(U)
    H = np.empty((x_proj.shape[0] + 1, *h0.shape))
    H[0] = h0
    for t in range(x_proj.shape[0]):
        H[t + 1] = np.tanh(mm(H[t]) + x_proj[t])
    return H


def lstm_reference(U, x_proj, h0, c0=None) -> tuple[np.ndarray, np.ndarray]:
    """LSTM without peepholes; ``U`` is ``4N x N`` with gate blocks in the order i, f, g, o.

    ``a = U h_{t-1} + x_proj[t]``; ``i = sigmoid(a[0:N])``, ``f = sigmoid(a[N:2N])``,
    ``g = tanh(a[2N:3N])``, ``o = sigmoid(a[3N:4N])``; ``c_t = f c_{t-1} + i g``,
    ``h_t = o tanh(c_t)``. ``c0`` defaults to zeros. Returns ``(H, C)``, each ``(T+1, N, B)``.
    """
    U, x_proj, h0 = _check(U, x_proj, h0, 4, "lstm")
    n = h0.shape[0]
    c = np.zeros_like(h0) if c0 is None else np.asarray(c0, dtype=np.float64)
    if c.shape != h0.shape:
        raise InputError(f"lstm: c0 has shape {c.shape}; expected {h0.shape}")
    mm = _matmul64(U)
    H = np.empty((x_proj.shape[0] + 1, *h0.shape))
    C = np.empty_like(H)
    H[0], C[0] = h0, c
    for t in range(x_proj.shape[0]):
        a = mm(H[t]) + x_proj[t]
        i, f = _sigmoid(a[:n]), _sigmoid(a[n:2 * n])
        g, o = np.tanh(a[2 * n:3 * n]), _sigmoid(a[3 * n:])
        C[t + 1] = f * C[t] + i * g
        H[t + 1] = o * np.tanh(C[t + 1])
    return H, C


def gru_reference(U, x_proj, h0) -> np.ndarray:
    """GRU in the cuDNN variant (reset gate applied *after* the recurrent matmul).

    ``U`` is ``3N x N`` with gate blocks r, z, n; ``a = U h_{t-1}``, ``x = x_proj[t]``:
    ``r = sigmoid(x[0:N] + a[0:N])``, ``z = sigmoid(x[N:2N] + a[N:2N])``,
    ``n = tanh(x[2N:3N] + r * a[2N:3N])``, ``h_t = (1 - z) n + z h_{t-1}``.
    cuDNN's separate recurrent bias of the n gate is taken as zero (fold it into ``U``-side
    code if needed); the other biases are in ``x_proj``. Returns ``H`` of shape ``(T+1, N, B)``.
    """
    U, x_proj, h0 = _check(U, x_proj, h0, 3, "gru")
    n = h0.shape[0]
    mm = _matmul64(U)
    H = np.empty((x_proj.shape[0] + 1, *h0.shape))
    H[0] = h0
    for t in range(x_proj.shape[0]):
        a, x = mm(H[t]), x_proj[t]
        r = _sigmoid(x[:n] + a[:n])
        z = _sigmoid(x[n:2 * n] + a[n:2 * n])
        cand = np.tanh(x[2 * n:] + r * a[2 * n:])
        H[t + 1] = (1.0 - z) * cand + z * H[t]
    return H


_REFERENCES = {"rnn": (1, rnn_reference), "lstm": (4, lstm_reference), "gru": (3, gru_reference)}


def head_block(U, heads: int, head: int, gates: int = 1):
    """The rows and columns of head ``head`` of ``U`` (``gates*N x N``): a ``gates*n x n``
    matrix, ``n = N / heads``, gate ``g`` of local unit ``u`` at row ``g*n + u``."""
    n_all = U.shape[1]
    if heads < 1 or n_all % heads:
        raise InputError(f"heads={heads} must be a positive divisor of N={n_all}")
    n = n_all // heads
    units = np.arange(head * n, (head + 1) * n)
    rows = (np.arange(gates)[:, None] * n_all + units[None, :]).reshape(-1)
    M = sp.csr_matrix(U) if sp.issparse(U) else np.asarray(U)
    return M[rows][:, units]


def multihead_reference(cell: str, U, x_proj, h0, heads: int) -> np.ndarray:
    """``H`` (T+1, N, B) of a multi-head layer computed head by head: the cell's reference on
    each diagonal block of ``U`` (:func:`head_block`) with that head's inputs. Weights outside
    the diagonal blocks are ignored (for a block-diagonal ``U`` this equals the cell's reference
    on the whole ``U``)."""
    if cell not in _REFERENCES:
        raise InputError(f"cell={cell!r} is not supported; accepted: {', '.join(_REFERENCES)}")
    gates, ref = _REFERENCES[cell]
    U, x_proj, h0 = _check(U, x_proj, h0, gates, cell)
    n_all = h0.shape[0]
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1 \
            or n_all % heads:
        raise InputError(f"heads={heads!r} must be a positive integer that divides N={n_all}")
    n = n_all // heads
    H = np.empty((x_proj.shape[0] + 1, *h0.shape))
    for k in range(heads):
        units = np.arange(k * n, (k + 1) * n)
        rows = (np.arange(gates)[:, None] * n_all + units[None, :]).reshape(-1)
        out = ref(head_block(U, heads, k, gates), x_proj[:, rows], h0[units])
        H[:, units] = out[0] if isinstance(out, tuple) else out
    return H
