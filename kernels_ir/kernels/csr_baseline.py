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

Gated cells (``layer.cell``: ``"lstm"``, 4 gates i, f, g, o; ``"gru"``, 3 gates r, z, n; ``U``
is ``G*N x N``, gate ``g`` of unit ``u`` is row ``g*N + u``, as in :mod:`models.reference` and
docs/cells.md). One warp per hidden *unit*, as the persistent kernels deal them, so that one lane
holds every gate of (unit, b) for the epilogue without another exchange:

- **units sorted by the total nonzeros of their G gate rows** (``perm``, descending, stable);
  the warp loads the 2G row pointers of its unit's gate rows up front (``rowptr`` at ``g*N + u``)
  and runs the G rows back to back, each exactly as a vanilla row (the same chunk loop of
  128-bit value/index loads and gathers, ``ceil(longest gate row / 128)`` rounds for every
  gate, then the butterfly of its B columns into its own accumulators);
- **epilogue on lane 0**, as the vanilla kernel's: it loads the unit's G x vectors (``x`` is
  ``x_proj[t]``, ``G*N x B``: gate g at word ``(g*N + u) * B``) and, LSTM, ``c_{t-1}`` from
  ``c_in`` or, GRU, ``h_{t-1}`` from ``h_in``, all with the loads of :func:`gather_loads`, then
  combines the gates column by column, each operation for the B columns together:
  LSTM ``i, f, o = sigmoid(a + x)``, ``g = tanh(a + x)``, ``c_t = f c_{t-1} + i g``,
  ``h_t = o tanh(c_t)``, storing ``h_t`` to ``h_out`` and ``c_t`` to ``c_out``; GRU (cuDNN form)
  ``r, z = sigmoid(a + x)``, ``n = tanh(x_n + r a_n)``, ``h_t = n + z (h_{t-1} - n)``.
- **c between launches**: the kernel keeps no state, so the LSTM's cell state goes through
  global memory; the host ping-pongs two ``N x B`` buffers (``c_in`` of step t is ``c_out`` of
  step t-1; ``c_0 = 0``).

The vanilla cell (``cell="rnn"``) is the kernel above, instruction for instruction.
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

__all__ = ["CSRProgram", "build_csr_baseline", "CHUNK", "VEC", "DEFAULT_THREADS", "gather_loads",
           "CELLS", "cell_epilogue_instructions"]

WARP = 32
VEC = 4              # nonzeros per lane per chunk (128-bit loads)
CHUNK = WARP * VEC   # nonzeros per warp per chunk
DEFAULT_THREADS = 256
CELLS = {"rnn": 1, "gru": 3, "lstm": 4}  # gate rows per unit (models.sparse.GATES)


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
    :meth:`step_inputs` adds the per-step buffers for step ``t`` (``h_in``, ``x``, ``h_out``,
    and for the LSTM ``c_in``, ``c_out``).
    """

    kernel: Kernel
    inputs: dict
    layer: object
    chunks: int

    @property
    def cell(self) -> str:
        return getattr(self.layer, "cell", "rnn")

    @property
    def gates(self) -> int:
        return CELLS[self.cell]

    def step_inputs(self, t: int, h: np.ndarray, c: np.ndarray | None = None) -> dict:
        """All buffers for step ``t`` with ``h`` = h_t of shape (N, B); LSTM: ``c`` = c_t of
        shape (N, B), zeros (``c_0``) when omitted."""
        nb = self.hidden * self.batch
        d = dict(self.inputs)
        d["h_in"] = np.ascontiguousarray(h, dtype=np.float32).reshape(nb)
        d["x"] = np.ascontiguousarray(self.layer.x_proj[t], dtype=np.float32).reshape(
            self.gates * nb)
        d["h_out"] = np.zeros(nb, np.float32)
        if self.cell == "lstm":
            if c is None:
                c = np.zeros(nb, np.float32)
            c = np.asarray(c, dtype=np.float32)
            if c.size != nb:
                raise InputError(f"c has shape {c.shape}; the LSTM's cell state is (N, B) = "
                                 f"({self.hidden}, {self.batch})")
            d["c_in"] = np.ascontiguousarray(c).reshape(nb)
            d["c_out"] = np.zeros(nb, np.float32)
        elif c is not None:
            raise InputError(f"c: the {self.cell} cell has no cell state; only the lstm takes c")
        return d

    def step_outputs(self, globals_: dict) -> tuple[np.ndarray, np.ndarray | None]:
        """``(h_{t+1}, c_{t+1})`` of shape (N, B) float32 from the buffers after one launch
        (``c`` None but for the LSTM)."""
        shape = (self.hidden, self.batch)

        def get(name):
            return np.asarray(globals_[name]).view(np.float32).reshape(shape).copy()

        return get("h_out"), get("c_out") if self.cell == "lstm" else None

    def states_reference(self) -> tuple[np.ndarray, np.ndarray | None]:
        """float64 ``(H, C)`` (T+1, N, B) of the layer's cell (``C`` None but for the LSTM)."""
        if self.cell == "lstm":
            from models.reference import lstm_reference

            return lstm_reference(self.layer.U, self.layer.x_proj, self.layer.h0)
        return self.reference(), None


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


def _chunk_loop(bld, name, chunks, k, end, acc, v, c, hv, bufs, gathers, b, inside=None):
    """The chunk loop of one row: 128-bit loads of (value, column), the gathers of h, the FMAs
    into ``acc`` (B registers); ``inside``: the predicate register (declared here if None)."""
    g_vals, g_cols, g_h = bufs
    with bld.loop(name, 0, chunks):
        inside = bld.isetp("lt", k, end,
                           dst=bld.reg(PRED, "inside") if inside is None else inside)
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


def _butterfly(bld, acc, sh, b) -> None:
    """Sum each of the B columns of ``acc`` over the warp (every lane gets the sums)."""
    for j in range(b):
        for m in (16, 8, 4, 2, 1):
            bld.shfl_xor(acc[j], m, dst=sh)
            bld.fadd(acc[j], sh, dst=acc[j])


def _check_threads(threads_per_cta) -> None:
    if threads_per_cta % WARP or not WARP <= threads_per_cta <= 1024:
        raise InputError(f"threads_per_cta={threads_per_cta} must be a multiple of 32 in 32..1024")


def build_csr_baseline(layer, *, threads_per_cta: int = DEFAULT_THREADS) -> CSRProgram:
    """The one-step CSR row-per-warp kernel for ``layer`` (a :class:`models.sparse.Layer`): a
    warp per row for the vanilla cell, a warp per unit and its G gate rows for ``lstm`` and
    ``gru`` (see the module docstring)."""
    _check_threads(threads_per_cta)
    cell = getattr(layer, "cell", "rnn")
    if cell not in CELLS:
        raise InputError(f"cell={cell!r} is not supported; accepted: {', '.join(CELLS)}")
    if cell != "rnn":
        return _build_gated(layer, cell, threads_per_cta)
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
    _chunk_loop(bld, "i", chunks, k, end, acc, v, c, hv, (g_vals, g_cols, g_h), gathers, b)
    sh = bld.reg(F32, "sh")
    _butterfly(bld, acc, sh, b)
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


def _build_gated(layer, cell: str, threads_per_cta: int) -> CSRProgram:
    """The LSTM / GRU kernel: a warp per unit, its G gate rows back to back, the cell's
    epilogue on lane 0 (module docstring)."""
    G = CELLS[cell]
    U = layer.U
    n, b = layer.hidden, layer.batch
    if U.shape != (G * n, n):
        raise InputError(f"csr baseline: U has shape {U.shape}; the {cell} cell needs "
                         f"({G}*N, N) = ({G * n}, {n})")
    vals, cols, rowptr, _, longest = _padded_csr(U, b)
    totals = np.diff(sp.csr_matrix(U).indptr).reshape(G, n).sum(axis=0)
    perm = np.argsort(-totals, kind="stable").astype(np.int32)   # units, most nonzeros first
    chunks = max(1, -(-longest // CHUNK))
    wpc = threads_per_cta // WARP
    grid = -(-n // wpc)
    nb = n * b
    gathers = gather_loads(b)

    bld = Builder(f"csr_row_per_warp_{cell}", grid=grid, block=threads_per_cta, hidden=n,
                  batch=b, nnz=int(U.nnz), chunks=chunks, kind="csr", cell=cell)
    g_vals = bld.global_buffer("vals", F32, vals.size)
    g_cols = bld.global_buffer("cols", I32, cols.size)
    g_ptr = bld.global_buffer("rowptr", I32, G * n + 1)
    g_perm = bld.global_buffer("perm", I32, n)
    g_h = bld.global_buffer("h_in", F32, nb)
    g_x = bld.global_buffer("x", F32, G * nb)
    g_out = bld.global_buffer("h_out", F32, nb, role="out")
    lstm = cell == "lstm"
    if lstm:
        g_cin = bld.global_buffer("c_in", F32, nb)
        g_cout = bld.global_buffer("c_out", F32, nb, role="out")

    lane = bld.sreg("lane", dst=bld.reg(I32, "lane"))
    warp = bld.sreg("warp", dst=bld.reg(I32, "warp"))
    cta = bld.sreg("cta", dst=bld.reg(I32, "cta"))
    gw = bld.imad(cta, wpc, warp, dst=bld.reg(I32, "gw"))
    valid = bld.isetp("lt", gw, n, dst=bld.reg(PRED, "valid"))
    slot = bld.imin(gw, n - 1, dst=bld.reg(I32, "slot"))
    unit = bld.ldg(g_perm, slot, dst=bld.reg(I32, "unit"))
    # the 2G row pointers of the unit's gate rows (row g*N + unit), all in flight together
    start = bld.reg(I32, "start", G)
    end = bld.reg(I32, "end", G)
    for g in range(G):
        bld.ldg(g_ptr, unit, offset=g * n, dst=start[g])
        bld.ldg(g_ptr, unit, offset=g * n + 1, dst=end[g])
    lane4 = bld.imul(lane, VEC, dst=bld.reg(I32, "lane4"))
    k = bld.reg(I32, "k")
    acc = bld.reg(F32, "acc", G * b)          # gate g's B sums in acc[g*B ..]
    v = bld.reg(F32, "v", VEC)
    c = bld.reg(I32, "c", VEC)
    hv = bld.reg(F32, "hv", VEC * b)
    inside = bld.reg(PRED, "inside")
    sh = bld.reg(F32, "sh")
    for g in range(G):                        # the gate rows back to back, each a vanilla row
        gacc = [acc[g * b + j] for j in range(b)]
        bld.iadd(start[g], lane4, dst=k)
        for j in range(b):
            bld.mov(0.0, dst=gacc[j])
        _chunk_loop(bld, f"i{g}", chunks, k, end[g], gacc, v, c, hv, (g_vals, g_cols, g_h),
                    gathers, b, inside=inside)
        _butterfly(bld, gacc, sh, b)
    is0 = bld.isetp("eq", lane, 0, dst=bld.reg(PRED, "is0"))
    store = bld.pand(valid, is0, dst=bld.reg(PRED, "store"))
    with bld.if_(store):
        base = bld.imul(unit, b, dst=bld.reg(I32, "base"))
        xv = bld.reg(F32, "xv", G * b)        # gate g's x at word (g*N + unit) * B
        for g in range(G):
            for width, off in gathers:
                bld.ldg(g_x, base, offset=g * nb + off, width=width,
                        dst=tuple(xv[g * b + off + q] for q in range(width)))
        prev = bld.reg(F32, "cst" if lstm else "hp", b)     # c_{t-1} (LSTM), h_{t-1} (GRU)
        for width, off in gathers:
            bld.ldg(g_cin if lstm else g_h, base, offset=off, width=width,
                    dst=tuple(prev[off + q] for q in range(width)))
        _csr_cell_epilogue(bld, cell, acc, xv, prev, b)
        out = [acc[(3 if lstm else 2) * b + j] for j in range(b)]   # h_t
        for width, off in gathers:
            bld.stg(g_out, base, tuple(out[off + q] for q in range(width)), offset=off)
        if lstm:
            for width, off in gathers:
                bld.stg(g_cout, base, tuple(prev[off + q] for q in range(width)), offset=off)
    kernel = verify(bld.build())
    inputs = {"vals": vals, "cols": cols, "rowptr": rowptr, "perm": perm}
    return CSRProgram(kernel, inputs, layer, chunks)


def _csr_cell_epilogue(bld, cell, acc, xv, prev, b) -> None:
    """Lane 0's cell update of its unit, each operation for the B columns together (they are
    independent: B chains in flight). ``acc[g*B + j]``: gate g's ``U h_{t-1}`` of column j;
    ``xv`` the same for ``x_proj[t]``; ``prev``: ``c_{t-1}`` (LSTM; ``c_t`` on return) or
    ``h_{t-1}`` (GRU). ``h_t`` ends in ``acc[3B ..]`` (LSTM, the o gate's) or ``acc[2B ..]``
    (GRU, the n gate's). The forms of :func:`.sparse_rnn._cell_epilogue`, operation for
    operation."""
    def a(g):
        return [acc[g * b + j] for j in range(b)]

    def x(g):
        return [xv[g * b + j] for j in range(b)]

    def each(op, *cols, dst):
        for j in range(b):
            op(*(col[j] for col in cols), dst=dst[j])

    if cell == "lstm":
        i, f, g, o = a(0), a(1), a(2), a(3)
        for gate, k in ((i, 0), (f, 1), (o, 3)):               # i, f, o = sigmoid(a + x)
            each(bld.fadd, gate, x(k), dst=gate)
            each(bld.sigmoid, gate, dst=gate)
        each(bld.fadd, g, x(2), dst=g)                         # g = tanh(a + x)
        each(bld.tanh, g, dst=g)
        each(bld.fmul, f, prev, dst=prev)                      # c' = f c + i g
        each(bld.ffma, i, g, prev, dst=prev)
        each(bld.tanh, prev, dst=g)
        each(bld.fmul, o, g, dst=o)                            # h' = o tanh(c')
    else:
        r, z, n = a(0), a(1), a(2)
        for gate, k in ((r, 0), (z, 1)):                       # r, z = sigmoid(a + x)
            each(bld.fadd, gate, x(k), dst=gate)
            each(bld.sigmoid, gate, dst=gate)
        each(bld.ffma, r, n, x(2), dst=n)                      # n = tanh(x_n + r a_n)
        each(bld.tanh, n, dst=n)
        each(bld.fsub, prev, n, dst=prev)                      # h' = n + z (h - n)
        each(bld.ffma, z, prev, n, dst=n)


def cell_epilogue_instructions(cell: str, batch: int) -> tuple:
    """The instructions of lane 0's cell update (:func:`_csr_cell_epilogue`) for ``batch``
    columns, in issue order, as the gated kernel emits them (the analytical model schedules
    them: ``models.analytical.csr``)."""
    if cell not in CELLS or cell == "rnn":
        raise InputError(f"cell={cell!r}: only the gated cells have this epilogue; accepted: "
                         f"gru, lstm")
    G = CELLS[cell]
    bld = Builder(f"csr_{cell}_epilogue", grid=1, block=WARP)
    acc, xv = bld.reg(F32, "acc", G * batch), bld.reg(F32, "xv", G * batch)
    _csr_cell_epilogue(bld, cell, acc, xv, bld.reg(F32, "prev", batch), batch)
    return bld.build().body
