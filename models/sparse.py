"""Sparse recurrent matrices: magnitude pruning and seeded random layers.

Random weights are normal with standard deviation ``1/sqrt(expected nonzeros per row)``, so each
row's dot product with a vector of unit-scale entries has unit-scale variance and ``tanh`` does
not saturate over many steps (the spectral radius of such a matrix is about 1).
"""

from __future__ import annotations

import functools
import math
import os
import threading
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from kernels_ir.errors import InputError

__all__ = ["prune_magnitude", "random_sparse", "random_layer", "Layer", "check_density", "GATES",
           "check_heads", "block_diagonal", "rounds_probe_layer"]

GATES = {"rnn": 1, "gru": 3, "lstm": 4}  # recurrent matrix rows = GATES[cell] * N
_ROW_CHUNK_ELEMS = 1 << 20  # random keys drawn per chunk of rows (sized to stay in cache)


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


def _uniform_below(rng: np.random.Generator, n: int, d: float) -> np.ndarray:
    """``rng.random(n, dtype=np.float32) < d`` (bool, flat), leaving ``rng`` in the same state.

    The largest exact layers draw 67 M uniforms, most of ``gpusim predict``'s time for them.
    NumPy makes a float32 uniform from one 32-bit half of a 64-bit PCG64 output (low half first,
    the high half kept for the next draw) as ``(u >> 8) * 2**-24``, so ``value < d`` is the
    integer test ``u >> 8 < ceil(d' * 2**24)`` (``d'``: ``d`` in the comparison's dtype; the
    scaling by a power of two is exact). Drawing the raw 64-bit outputs and testing the halves
    skips the float conversion: the same mask and the same generator state after, a third
    faster. Any other bit generator, or a NumPy whose stream :func:`_raw_uniforms_match` finds
    different, takes ``rng.random`` itself.
    """
    bg = rng.bit_generator
    if type(bg) is not np.random.PCG64 or not _raw_uniforms_match():
        return rng.random(n, dtype=np.float32) < d
    u = _raw_uint32(bg, n)
    x = float(np.result_type(np.float32, d).type(d)) * 2.0 ** 24
    c = math.ceil(x)
    if c >= 1 << 24:                 # every uniform is below d
        return np.ones(n, dtype=bool)
    return u < np.uint32(c << 8)     # u >> 8 < c  <=>  u < c * 256


def _raw_uint32(bg: np.random.PCG64, n: int) -> np.ndarray:
    """The next ``n`` 32-bit draws of ``bg`` as NumPy's float32 uniforms consume them (uint32),
    with the generator's state (its kept high half included) left as those draws leave it."""
    st = bg.state
    head = np.zeros(0, dtype=np.uint32)
    if st["has_uint32"] and n > 0:   # a high half kept by an earlier draw comes first
        head = np.array([st["uinteger"]], dtype=np.uint32)
        bg.state = {**st, "has_uint32": 0}
        n -= 1
    raw = bg.random_raw((n + 1) // 2)
    halves = raw.astype("<u8", copy=False).view("<u4")   # low half, then high half
    st = bg.state
    if n % 2:                        # an odd count keeps the last high half for later
        bg.state = {**st, "has_uint32": 1, "uinteger": int(halves[n])}
    elif n:                          # the last high half was used: NumPy keeps its value
        bg.state = {**st, "has_uint32": 0, "uinteger": int(halves[n - 1])}
    return np.concatenate([head, halves[:n]]) if head.size else halves[:n]


@functools.cache
def _raw_uniforms_match() -> bool:
    """Whether :func:`_raw_uint32` reproduces ``Generator.random(dtype=float32)`` on this NumPy:
    values and state after, for odd and even counts, with and without a kept half."""
    for seed, pre, n in ((1, 0, 1001), (2, 1, 1000), (3, 1, 1), (4, 3, 64), (5, 0, 0)):
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        a.random(pre, dtype=np.float32)
        b.random(pre, dtype=np.float32)
        want = a.random(n, dtype=np.float32)
        got = (_raw_uint32(b.bit_generator, n) >> 8).astype(np.float32) * np.float32(2.0 ** -24)
        if not np.array_equal(want, got) or a.bit_generator.state != b.bit_generator.state:
            return False
        if a.standard_normal(3).tolist() != b.standard_normal(3).tolist():
            return False
    return True


def _draw_rows(rng: np.random.Generator, n_rows: int, n_cols: int, d: float, chunk: int):
    """The nonzero positions of ``n_rows`` rows drawn from ``rng`` (``chunk`` rows at a time):
    a list of int32 column arrays and a list of per-row counts, row after row."""
    indices, counts = [], []
    for r0 in range(0, n_rows, chunk):
        r1 = min(n_rows, r0 + chunk)
        if d >= 1.0:
            mask = np.ones((r1 - r0, n_cols), dtype=bool)
        else:
            mask = _uniform_below(rng, (r1 - r0) * n_cols, d)
        # flat positions are row-major, as np.nonzero(mask) gives them, but 1-D nonzero is
        # several times faster than 2-D (which builds both index arrays)
        flat = np.flatnonzero(mask)
        rows = flat // n_cols
        counts.append(np.bincount(rows, minlength=r1 - r0))
        indices.append((flat - rows * n_cols).astype(np.int32))
    return indices, counts


_SPLIT_MIN_ELEMS = 1 << 23  # uniforms of a layer worth drawing on two cores (8192^2: 67 M)


def _second_stream(rng: np.random.Generator, n_rows: int, n_cols: int, d: float):
    """``(r, rng2)``: rows ``r ..`` of a large layer drawn by ``rng2``, a generator placed where
    ``rng``'s stream reaches row ``r``, so that two threads draw the rows (NumPy releases the
    GIL while it generates); ``None`` where that does not pay or cannot be done exactly (one
    CPU, a small layer, a density of 1, another bit generator than PCG64).

    Row ``r`` starts at uniform ``e = r * n_cols``; uniform ``i`` is the kept high half for
    ``i = 0`` if ``rng`` holds one (``h = 1``), else half ``(i - h) % 2`` (low first) of 64-bit
    output ``(i - h) // 2`` (:func:`_raw_uint32`). ``PCG64.advance`` skips outputs exactly."""
    if d >= 1.0 or n_rows < 2 or n_rows * n_cols < _SPLIT_MIN_ELEMS or _cpus() < 2:
        return None
    bg = rng.bit_generator
    if type(bg) is not np.random.PCG64 or not _raw_uniforms_match():
        return None
    r = n_rows // 2
    st = bg.state
    k = r * n_cols - int(st["has_uint32"])        # 32-bit halves of fresh outputs before row r
    bg2 = np.random.PCG64()
    bg2.state = {**st, "has_uint32": 0, "uinteger": 0}
    bg2.advance(k // 2)
    if k % 2:                                      # row r starts with a high half
        high = int(bg2.random_raw(1)[0]) >> 32
        bg2.state = {**bg2.state, "has_uint32": 1, "uinteger": high}
    return r, np.random.Generator(bg2)


@functools.cache
def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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
    split = _second_stream(rng, n_rows, n_cols, d)
    if split is None:
        indices, counts = _draw_rows(rng, n_rows, n_cols, d, chunk)
    else:   # the later rows drawn by a thread, from their place in the same stream
        r_split, rng2 = split
        later: dict = {}

        def draw_later():
            try:
                later["rows"] = _draw_rows(rng2, n_rows - r_split, n_cols, d, chunk)
            except BaseException as exc:  # noqa: BLE001 - raised again below
                later["error"] = exc

        worker = threading.Thread(target=draw_later, name="random_sparse")
        worker.start()
        try:
            indices, counts = _draw_rows(rng, r_split, n_cols, d, chunk)
        finally:
            worker.join()
        if "error" in later:
            raise later["error"]
        indices += later["rows"][0]
        counts += later["rows"][1]
        rng.bit_generator.state = rng2.bit_generator.state   # after the last draw
    counts = np.concatenate(counts)
    indptr = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(counts)])
    indices = np.concatenate(indices) if indices else np.zeros(0, np.int32)
    total = int(indptr[-1])
    if total == 0:
        r, c = int(rng.integers(n_rows)), int(rng.integers(n_cols))
        indptr = np.r_[np.zeros(r + 1, np.int64), np.ones(n_rows - r, np.int64)]
        indices = np.array([c], dtype=np.int32)
        total = 1
    values = rng.standard_normal(total)
    values *= scale                 # in place: the same float64 products, one array fewer
    values = values.astype(dtype)
    return sp.csr_matrix((values, indices, indptr), shape=(n_rows, n_cols))


@dataclass(frozen=True, slots=True, eq=False)
class Layer:
    """One recurrent layer's data: ``U`` (csr, float32), ``x_proj`` (T, rows, B), ``h0`` (N, B).

    ``heads`` H: ``U`` is block-diagonal, H independent recurrences of N/H units each (every
    gate block of a gated cell is block-diagonal: unit ``u`` of head ``u // (N/H)`` only reads
    the h of that head's units).
    """

    cell: str
    U: sp.csr_matrix
    x_proj: np.ndarray
    h0: np.ndarray
    heads: int = 1

    @property
    def hidden(self) -> int:
        return self.U.shape[1]

    @property
    def batch(self) -> int:
        return self.h0.shape[1]

    @property
    def timesteps(self) -> int:
        return self.x_proj.shape[0]


def check_heads(heads, hidden: int) -> int:
    """``heads`` as an int: a positive divisor of ``hidden`` (InputError otherwise)."""
    if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1 \
            or hidden % heads:
        raise InputError(f"heads={heads!r} must be a positive integer that divides "
                         f"hidden={hidden} (accepted: 1 and the divisors of {hidden})")
    return int(heads)


def block_diagonal(blocks_of_rows: sp.csr_matrix, hidden: int, heads: int) -> sp.csr_matrix:
    """``gates*N x N`` block-diagonal matrix from ``gates*N x N/H`` rows: row ``r`` (unit
    ``r % N``) keeps its columns, shifted into its head's block ``(r % N) // (N/H)``."""
    m = sp.csr_matrix(blocks_of_rows)
    size = hidden // heads
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    indices = (m.indices + ((rows % hidden) // size) * size).astype(np.int32)
    return sp.csr_matrix((m.data, indices, m.indptr), shape=(m.shape[0], hidden))


def rounds_probe_layer(rounds: int, batch: int, cell: str = "rnn") -> Layer:
    """A layer whose CSR row-per-warp kernel (``kernels_ir/kernels/csr_baseline.py``, 128
    nonzeros a round) runs ``rounds`` rounds of its chunk loop: the first gate row holds
    ``128 rounds - 64`` nonzeros, every other row one, all 0.01; x and h_0 zero. ptxas' registers
    of that kernel depend on the rounds, the batch and the cell, not on the matrix
    (``measurements/csr_registers.py``)."""
    long = 128 * rounds - 64
    n = max(256, long + 64)
    rows = GATES[cell] * n
    lengths = np.ones(rows, dtype=np.int64)
    lengths[0] = long
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    indices = np.concatenate([np.arange(long), np.arange(1, rows) % n]).astype(np.int32)
    U = sp.csr_matrix((np.full(indptr[-1], 0.01, np.float32), indices, indptr), shape=(rows, n))
    return Layer(cell, U, np.zeros((1, rows, batch), np.float32),
                 np.zeros((n, batch), np.float32))


def random_layer(hidden: int, batch: int, density, timesteps: int, seed: int,
                 cell: str = "rnn", heads: int = 1) -> Layer:
    """A fresh random layer (never zeros): sparse ``U``, inputs and initial state, float32.

    ``x_proj`` and ``h0`` are normal with standard deviation 0.5, so pre-activations stay in the
    range where ``tanh``/``sigmoid`` have useful slope. ``heads`` H (a divisor of ``hidden``):
    ``U`` is block-diagonal (:class:`Layer`), each row drawn over its head's N/H columns with
    the same ``density`` (the weights' scale follows the head's width).
    """
    hidden = _check_positive("hidden", hidden)
    batch = _check_positive("batch", batch)
    timesteps = _check_positive("timesteps", timesteps)
    heads = check_heads(heads, hidden)
    if cell not in GATES:
        raise InputError(f"cell={cell!r} is not supported; accepted: {', '.join(GATES)}")
    rng = np.random.default_rng(seed)
    rows = GATES[cell] * hidden
    if heads == 1:
        U = random_sparse(rows, hidden, density, rng)
    else:
        U = block_diagonal(random_sparse(rows, hidden // heads, density, rng), hidden, heads)
    x_proj = (0.5 * rng.standard_normal((timesteps, rows, batch))).astype(np.float32)
    h0 = (0.5 * rng.standard_normal((hidden, batch))).astype(np.float32)
    for a in (x_proj, h0):
        a.setflags(write=False)
    return Layer(cell, U, x_proj, h0, heads)
