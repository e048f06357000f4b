"""The CSR row-per-warp baseline (the Sputnik idea, Gale et al. SC'20), one launch per step.

``h_{t+1} = tanh(U h_t + x_t)`` for one step per launch; the host launches it T times (back to
back, or as a CUDA graph of T launches), passing slot ``t`` of ``hseq`` as ``h_in``, slot ``t+1``
as ``h_out`` and ``x_proj[t]`` as ``x`` (buffer pointers move, the kernel does not change).

- **Rows sorted by length** (``perm``: argsort by nnz, descending - Sputnik's
  ``SortedRowSwizzle``), one warp per row: consecutive warps get rows of similar length, which
  balances the warps of a CTA and the CTAs of the grid.
- **128-bit loads** of (value, column): every row is padded to a multiple of 4 nonzeros (zero
  weights, column 0 - ROMA-style padding), so each lane loads one ``float4`` of values and one
  ``int4`` of column word-addresses (``col * B``) per chunk; a warp covers 128 nonzeros per chunk.
  The chunk loop runs ``ceil(max_row_nnz / 128)`` times for every warp (the IR's loops have
  constant bounds) with the loads predicated off past the row's end.
- **h from global/L2**: ``h_in`` is ``[N][B]`` batch-interleaved; each nonzero gathers its column's
  B values with one 64/128-bit load (B = 2/4), two 128-bit loads (B = 8) or B scalar loads.
- Butterfly shuffle reduction per batch column, then lane 0 adds ``x``, applies tanh (the fused
  elementwise part of the real layer) and stores the row's B outputs with one vector store.

Grid: ``ceil(N / warps_per_cta)`` CTAs of ``threads_per_cta`` threads (256 by default); warps
past the last row compute row N-1 again and store nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..builder import Builder
from ..errors import InputError
from ..ir import F32, I32, PRED, Kernel
from ..verify import verify
from ._program import LayerProgram

__all__ = ["CSRProgram", "build_csr_baseline", "CHUNK", "VEC", "DEFAULT_THREADS", "gather_loads"]

WARP = 32
VEC = 4              # nonzeros per lane per chunk (128-bit loads)
CHUNK = WARP * VEC   # nonzeros per warp per chunk
DEFAULT_THREADS = 256


def gather_loads(batch: int) -> list[tuple[int, int]]:
    """``(width, offset)`` of the loads that gather one nonzero's ``batch`` values of h (and of
    the loads of x and stores of h_out): one 64/128-bit load for B = 2/4, two 128-bit loads for
    B = 8, else B scalar loads."""
    if batch in (1, 2, 4):
        return [(batch, 0)]
    if batch == 8:
        return [(4, 0), (4, 4)]
    return [(1, k) for k in range(batch)]


@dataclass(frozen=True, eq=False)
class CSRProgram(LayerProgram):
    """The one-step kernel and the host data around it.

    ``inputs`` holds the static buffers (``vals``, ``cols``, ``rowptr``, ``perm``);
    :meth:`step_inputs` adds the three per-step buffers for step ``t``.
    """

    kernel: Kernel
    inputs: dict
    layer: object
    chunks: int

    def step_inputs(self, t: int, h: np.ndarray) -> dict:
        """All buffers for step ``t`` with ``h`` = h_t of shape (N, B)."""
        nb = self.hidden * self.batch
        d = dict(self.inputs)
        d["h_in"] = np.ascontiguousarray(h, dtype=np.float32).reshape(nb)
        d["x"] = np.ascontiguousarray(self.layer.x_proj[t], dtype=np.float32).reshape(nb)
        d["h_out"] = np.zeros(nb, np.float32)
        return d


def _padded_csr(U: sp.csr_matrix, batch: int):
    U = sp.csr_matrix(U, dtype=np.float32)
    U.sort_indices()
    n = U.shape[0]
    lengths = np.diff(U.indptr)
    padded = -(-lengths // VEC) * VEC
    rowptr = np.zeros(n + 1, np.int64)
    np.cumsum(padded, out=rowptr[1:])
    total = max(int(rowptr[-1]), VEC)
    vals = np.zeros(total, np.float32)
    cols = np.zeros(total, np.int32)
    pos = np.repeat(rowptr[:-1] - U.indptr[:-1], lengths) + np.arange(U.nnz)
    vals[pos] = U.data
    cols[pos] = U.indices.astype(np.int32) * batch
    perm = np.argsort(-lengths, kind="stable").astype(np.int32)
    return vals, cols, rowptr.astype(np.int32), perm, int(padded.max(initial=0))


def build_csr_baseline(layer, *, threads_per_cta: int = DEFAULT_THREADS) -> CSRProgram:
    """The one-step CSR row-per-warp kernel for ``layer`` (a :class:`models.sparse.Layer`)."""
    if threads_per_cta % WARP or not WARP <= threads_per_cta <= 1024:
        raise InputError(f"threads_per_cta={threads_per_cta} must be a multiple of 32 in 32..1024")
    U = layer.U
    n, b = layer.hidden, layer.batch
    if U.shape != (n, n):
        raise InputError(f"csr baseline: U has shape {U.shape}; the vanilla RNN needs ({n}, {n})")
    vals, cols, rowptr, perm, longest = _padded_csr(U, b)
    chunks = max(1, -(-longest // CHUNK))
    wpc = threads_per_cta // WARP
    grid = -(-n // wpc)
    nb = n * b
    gathers = gather_loads(b)

    bld = Builder("csr_row_per_warp", grid=grid, block=threads_per_cta, hidden=n, batch=b,
                  nnz=int(U.nnz), chunks=chunks, kind="csr")
    g_vals = bld.global_buffer("vals", F32, vals.size)
    g_cols = bld.global_buffer("cols", I32, cols.size)
    g_ptr = bld.global_buffer("rowptr", I32, n + 1)
    g_perm = bld.global_buffer("perm", I32, n)
    g_h = bld.global_buffer("h_in", F32, nb)
    g_x = bld.global_buffer("x", F32, nb)
    g_out = bld.global_buffer("h_out", F32, nb, role="out")

    lane = bld.sreg("lane", dst=bld.reg(I32, "lane"))
    warp = bld.sreg("warp", dst=bld.reg(I32, "warp"))
    cta = bld.sreg("cta", dst=bld.reg(I32, "cta"))
    gw = bld.imad(cta, wpc, warp, dst=bld.reg(I32, "gw"))
    valid = bld.isetp("lt", gw, n, dst=bld.reg(PRED, "valid"))
    slot = bld.imin(gw, n - 1, dst=bld.reg(I32, "slot"))
    row = bld.ldg(g_perm, slot, dst=bld.reg(I32, "row"))
    start = bld.ldg(g_ptr, row, dst=bld.reg(I32, "start"))
    end = bld.ldg(g_ptr, row, offset=1, dst=bld.reg(I32, "end"))
    lane4 = bld.imul(lane, VEC, dst=bld.reg(I32, "lane4"))
    k = bld.iadd(start, lane4, dst=bld.reg(I32, "k"))
    acc = bld.reg(F32, "acc", b)
    for j in range(b):
        bld.mov(0.0, dst=acc[j])
    v = bld.reg(F32, "v", VEC)
    c = bld.reg(I32, "c", VEC)
    hv = bld.reg(F32, "hv", VEC * b)
    with bld.loop("i", 0, chunks):
        inside = bld.isetp("lt", k, end, dst=bld.reg(PRED, "inside"))
        with bld.if_(inside):
            bld.ldg(g_vals, k, width=VEC, dst=v)
            bld.ldg(g_cols, k, width=VEC, dst=c)
            # the VEC nonzeros' gathers back to back, then their FMAs (ptxas' order: the SASS
            # issues every gather of the chunk before the first FFMA that uses one)
            for e in range(VEC):
                for width, off in gathers:
                    bld.ldg(g_h, c[e], offset=off, width=width,
                            dst=tuple(hv[e * b + off + q] for q in range(width)))
            for e in range(VEC):
                for j in range(b):
                    bld.ffma(v[e], hv[e * b + j], acc[j], dst=acc[j])
        bld.iadd(k, CHUNK, dst=k)
    sh = bld.reg(F32, "sh")
    for j in range(b):
        for m in (16, 8, 4, 2, 1):
            bld.shfl_xor(acc[j], m, dst=sh)
            bld.fadd(acc[j], sh, dst=acc[j])
    is0 = bld.isetp("eq", lane, 0, dst=bld.reg(PRED, "is0"))
    store = bld.pand(valid, is0, dst=bld.reg(PRED, "store"))
    with bld.if_(store):
        base = bld.imul(row, b, dst=bld.reg(I32, "base"))
        xv = bld.reg(F32, "xv", b)
        for width, off in gathers:
            bld.ldg(g_x, base, offset=off, width=width,
                    dst=tuple(xv[off + q] for q in range(width)))
        for j in range(b):
            bld.fadd(acc[j], xv[j], dst=acc[j])
            bld.tanh(acc[j], dst=acc[j])
        for width, off in gathers:
            bld.stg(g_out, base, tuple(acc[off + q] for q in range(width)), offset=off)
    kernel = verify(bld.build())
    inputs = {"vals": vals, "cols": cols, "rowptr": rowptr, "perm": perm}
    return CSRProgram(kernel, inputs, layer, chunks)
