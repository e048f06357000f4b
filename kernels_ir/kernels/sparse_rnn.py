"""The persistent RNN kernels written in the IR: sparse (Zhu et al. 2018) and dense (Diamos 2016).

One CTA per SM, ``threads_per_cta`` threads (8 warps by default), all co-resident for the whole
launch. Per thread, loaded once before the time loop and never written back:

- ``w[S]`` weight values and (sparse only) ``c[S]`` word addresses ``col * B`` of the
  (value, column) pairs of :class:`kernels_ir.mapping.Mapping` (S = sum of the row-slots' K_j);
- ``rid[R]`` the rows the warp owns, and per row the addresses of its x and h elements.

Each step ``t`` (``loop.time``):

1. stage ``h_t`` (N x B, batch-interleaved ``[N][B]``, slot ``t`` of the global ``hseq``) into the
   shared array ``h_s`` with 128-bit loads, every thread a strided share of the words;
   - ``sync="lamport"``: the loads *are* the synchronisation. Slots 1..T of ``hseq`` are filled
     with the sentinel -0.0 (bits 0x80000000) before the launch; each thread re-loads its 4 words
     with L2-coherent (volatile) loads until none is the sentinel (a bounded spin);
   - ``sync="barrier"``: thread 0 spins on the arrive counter until all CTAs finished step t-1
     (``counter >= t * nctas``), a CTA barrier releases the others, then plain loads;
   then ``__syncthreads()``;
2. for each row-slot j: K_j gathers of ``h_s[col][0..B)`` (one 64/128-bit load with
   ``wide_loads``, else B 32-bit loads) and B FMAs each; a butterfly shuffle reduction per batch
   column; lane b < B selects column b, adds ``x_t[row][b]`` (prefetched at the start of the step),
   applies tanh, canonicalises -0.0 to +0.0 (``+ 0.0``) so a real result never looks like the
   sentinel, and stores ``h_{t+1}[row][b]`` into slot t+1 of ``hseq``;
3. ``sync="barrier"``: ``__syncthreads()``, then thread 0 does ``__threadfence()`` and an atomic
   arrive on ``counter``; ``sync="lamport"``: every thread waits ``step_wait`` nanoseconds
   (``__nanosleep``, :data:`LAMPORT_STEP_WAIT_NS`), so that a warp does not poll the next slot
   right after its own h stores; with ``step_fence`` (off by default,
   :data:`LAMPORT_STEP_FENCE`) every thread first does ``__threadfence()``, so a warp polls the
   next slot only once its own h stores are performed.

Padding rows (``rid = -1``) compute on zero weights and store nothing; padding slots hold zero
weights whose columns were chosen by the mapping to add no shared-memory wavefront.

Gated cells (``layer.cell``: ``"lstm"``, 4 gates i, f, g, o; ``"gru"``, 3 gates r, z, n; ``U``
is ``gates*N x N``, gate ``g`` of unit ``u`` is row ``g*N + u``, as in
:mod:`models.reference`). The mapping deals the gate rows of a unit to one warp as consecutive
row-slots (:func:`kernels_ir.mapping.map_matrix`, ``gates``); each gate's dot product is reduced
as a row above and lane b keeps its column in ``gate[g]``; after the unit's last gate the
epilogue (lanes b < B of a real unit) computes, with ``a = U h_{t-1}`` and ``x = x_proj[t]``:

- LSTM: ``i, f, o = sigmoid(a + x)``, ``g = tanh(a + x)``, ``c_t = f c_{t-1} + i g``,
  ``h_t = o tanh(c_t)``; ``c`` (``c_0 = 0``) stays in a register of the lane for the whole
  launch (``cst``, one per unit the warp owns), so only h is exchanged;
- GRU, cuDNN form (the reset gate multiplies the recurrent product, the recurrent bias of n is
  zero): ``r, z = sigmoid(a + x)``, ``n = tanh(x_n + r a_n)``,
  ``h_t = (1 - z) n + z h_{t-1}``, computed as ``n + z (h_{t-1} - n)``; ``h_{t-1}`` of the unit
  is read back from ``h_s``, where step 1 staged it.

``x_proj`` holds ``gates*N x B`` words per step (gate g of the unit at position p at row
``g*N + p``), ``rid`` of a gate row is that row, so its ``xaddr`` is the x address; the gate-0
row's ``xaddr`` is also the unit's h address. The vanilla cell is ``gates = 1``.

Multi-head layers (``layer.heads`` H > 1, ``U`` block-diagonal: H independent recurrences of
N/H units). The mapping puts whole heads in each CTA (:func:`kernels_ir.mapping.map_matrix`,
``heads``) when the registers of a CTA hold them; then no row reads h of another CTA and the
exchange stays in the CTA (``exchange="cta"``, kernel ``*_local_*``): h_0 is staged into
``h_s`` once before the time loop (plain loads), and each step keeps the rows' results in
``xv`` (the x prefetched for the row, used up by then), stores them to ``hseq`` (the output
only: nothing polls it), and after a CTA barrier writes them into ``h_s`` (the words of the
CTA's own units), then a second CTA barrier: no grid-wide synchronisation, no polling, no
atomics, whatever ``sync`` says. Words of ``h_s`` of other CTAs' units keep h_0 and are read
only by padding or (dense tiles) zero weights. When a CTA cannot hold whole heads, the heads
are dealt over all warps as for H = 1 and the step's exchange is the grid-wide one of ``sync``.

fp16 weights (``dtype="fp16"``, docs/fp16.md): the layer's weights are rounded to fp16 (the
program's layer and reference are those of the rounded weights). A sparse slot is one 32-bit
word, the fp16 value in bits 16-31 and the column's word address ``col * B`` in bits 0-15 (so
``N * B`` must be at most 65536); a dense thread packs two slots' values per word. Each slot is
unpacked where its shared loads are issued: ``U16`` gives the address for them, ``H2F`` the
value as f32 into a register that travels with the slot's h words (one per slot in flight) for
its B FMAs; h, x, the products and the sums stay f32 (fp32 accumulation, the
only rounding beyond fp32's is that of the weights). Both unpacking ops are volatile inline PTX
in the generated CUDA, so the compiler keeps them inside the time loop: the packed words are
loop-invariant, and hoisting their conversion would hold every weight unpacked (two registers
a slot again).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from ..builder import Builder
from ..errors import CapacityError, InputError
from ..ir import F32, I32, PRED, SLEEP_MAX_NS, Kernel
from ..mapping import Mapping, access_pattern, dealt_slots, map_matrix
from ..verify import verify
from ._program import LayerProgram

SENTINEL_BITS = np.int32(-(1 << 31))  # 0x80000000, the bit pattern of -0.0f
SYNCS = ("lamport", "barrier")
LOCAL = "cta"  # the step's exchange of a CTA that holds whole heads (module docstring)
CELLS = {"rnn": 1, "gru": 3, "lstm": 4}  # gate rows per unit (models.sparse.GATES)
DTYPES = ("fp32", "fp16")  # weight precision (module docstring: fp16 weights)
FP16_ADDR_WORDS = 1 << 16  # an fp16 slot's column word address has 16 bits
DEFAULT_THREADS = 256
WARP = 32


@dataclass(frozen=True, eq=False)
class RNNProgram(LayerProgram):
    """A kernel plus everything the host does around it (inputs, output decoding, reference)."""

    kernel: Kernel
    inputs: dict  # buffer name -> initial contents (1-D float32 or int32, length = Buffer.size)
    mapping: Mapping | None
    layer: object  # models.sparse.Layer
    variant: dict
    slot_words: int  # words per hseq slot (N*B rounded up to whole 128-bit chunks)

    def outputs(self, globals_: dict) -> np.ndarray:
        """H (T+1, N, B) float32 from the final contents of the global buffers (h is kept in the
        mapping's position order; unit ``c`` is read back from position ``h_positions[c]``)."""
        n, b, t = self.hidden, self.batch, self.timesteps
        hseq = np.asarray(globals_["hseq"]).view(np.float32).reshape(t + 1, self.slot_words)
        h = hseq[:, : n * b].reshape(t + 1, n, b)
        return h[:, self.mapping.h_positions].copy()

    def max_rel_err(self, globals_: dict) -> float:
        """Largest error of any h_t element relative to the reference's scale at that step."""
        return max_rel_err(self.outputs(globals_), self.reference())


# max_rel_err a simulated (functional) run must reach: fp32 arithmetic in the kernel's own
# summation order against float64 lands near 1e-7; 1e-5 is the acceptance bound of issue 2
VALUE_TOLERANCE = 1e-5


def check_values(err: float, what: str) -> int:
    """0 if ``err`` is within :data:`VALUE_TOLERANCE`, else 2 (the CLI's failure status) after
    one line on stderr. NaN fails."""
    import sys

    if err <= VALUE_TOLERANCE:
        return 0
    print(f"error: {what}: values differ from the float64 reference: max_rel_err={err:.3g} > "
          f"{VALUE_TOLERANCE:g}", file=sys.stderr)
    return 2


def max_rel_err(h: np.ndarray, ref: np.ndarray) -> float:
    """max over t of max|h_t - ref_t| / max(max|ref_t|, 1e-30), steps 1..T.

    Normalising by the step's largest magnitude (not element-wise) keeps the measure meaningful
    for elements near zero, where tanh outputs cross sign and a relative error per element blows
    up although the absolute error is at fp32 rounding.
    """
    h = np.asarray(h, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(h)):
        return float("inf")
    err = np.abs(h - ref).reshape(ref.shape[0], -1).max(axis=1)
    scale = np.maximum(np.abs(ref).reshape(ref.shape[0], -1).max(axis=1), 1e-30)
    return float((err / scale)[1:].max(initial=0.0))


def make_layer(hidden: int, batch: int, density: float, timesteps: int, seed: int = 0,
               cell: str = "rnn", heads: int = 1):
    """A fresh random layer (see :func:`models.sparse.random_layer`)."""
    from models.sparse import random_layer

    if heads == 1:
        return random_layer(hidden, batch, density, timesteps, seed, cell=cell)
    return random_layer(hidden, batch, density, timesteps, seed, cell=cell, heads=heads)


def build_sparse_rnn(layer, spec, *, sync: str = "lamport", wide_loads: bool = True,
                     layout="naive", threads_per_cta: int = DEFAULT_THREADS, seed: int = 0,
                     n_ctas: int | None = None, dtype: str = "fp32",
                     stage_fallback: str | None = None,
                     step_fence: bool | None = None,
                     step_wait: int | None = None,
                     stage_unroll: bool | None = None) -> RNNProgram:
    """The sparse persistent RNN for ``layer`` on ``spec`` (one CTA per SM); ``dtype`` fp16:
    the weights rounded to fp16 (module docstring); ``stage_fallback``: what the Lamport
    staging's chunk past the end of h reads (:data:`FALLBACKS`; None: the kernel's own,
    :data:`PARTIAL_GROUP_FALLBACK`); ``step_fence``: whether the Lamport kernel's step ends
    with a ``__threadfence()`` (None: :data:`LAMPORT_STEP_FENCE`; a multi-head kernel whose
    exchange stays in its CTA has no grid exchange to fence, and takes none); ``step_wait``:
    nanoseconds of ``__nanosleep`` that close the Lamport kernel's step, 0 for none (None:
    :data:`LAMPORT_STEP_WAIT_NS`; as the fence, none where the exchange stays in the CTA);
    ``stage_unroll``: whether the Lamport staging's loop over two groups or more is unrolled
    (None: :data:`LAMPORT_STAGE_UNROLL`). Each, where it is not the kernel's own, is kept in the
    program's ``variant``."""
    return _build(layer, spec, sync=sync, wide_loads=wide_loads, layout=layout,
                  threads_per_cta=threads_per_cta, seed=seed, dense=False, n_ctas=n_ctas,
                  dtype=dtype, stage_fallback=stage_fallback, step_fence=step_fence,
                  step_wait=step_wait, stage_unroll=stage_unroll)


def build_dense_rnn(layer, spec, *, sync: str = "lamport", wide_loads: bool = True,
                    threads_per_cta: int = DEFAULT_THREADS, n_ctas: int | None = None,
                    dtype: str = "fp32", step_fence: bool | None = None,
                    step_wait: int | None = None,
                    stage_unroll: bool | None = None) -> RNNProgram:
    """The dense persistent RNN (Diamos-style: every weight of U in registers, no indices);
    ``step_fence``, ``step_wait`` and ``stage_unroll`` as :func:`build_sparse_rnn`'s."""
    return _build(layer, spec, sync=sync, wide_loads=wide_loads, layout="naive",
                  threads_per_cta=threads_per_cta, seed=0, dense=True, n_ctas=n_ctas,
                  dtype=dtype, step_fence=step_fence, step_wait=step_wait,
                  stage_unroll=stage_unroll)


def fp16_layer(layer):
    """``layer`` with its weights rounded to fp16 (round to nearest even) and kept as float32:
    what an fp16 kernel multiplies, so its float64 reference is that of the rounded layer."""
    import dataclasses

    U = layer.U.copy()
    U.data = U.data.astype(np.float16).astype(np.float32)
    return dataclasses.replace(layer, U=U)


def _check_variant(layer, spec, sync, threads_per_cta, dtype="fp32") -> None:
    if sync not in SYNCS:
        raise InputError(f"sync={sync!r} is not supported; accepted: {', '.join(SYNCS)}")
    if dtype not in DTYPES:
        raise InputError(f"dtype={dtype!r} is not supported; accepted: {', '.join(DTYPES)}")
    cell = getattr(layer, "cell", "rnn")
    if cell not in CELLS:
        raise InputError(f"cell={cell!r} is not supported; accepted: {', '.join(CELLS)}")
    if threads_per_cta % WARP or not WARP <= threads_per_cta <= spec.max_threads_per_cta:
        raise InputError(f"threads_per_cta={threads_per_cta} must be a multiple of 32 in "
                         f"32..{spec.max_threads_per_cta}")


def _map_and_check(layer, spec, *, sync, wide_loads, layout, threads_per_cta, seed, dense,
                   n_ctas, heads, dtype="fp32"):
    """The mapping of ``layer`` (whole heads per CTA when ``heads`` > 1) after the capacity
    check, and the step's exchange: ``sync``, or :data:`LOCAL` for whole heads per CTA."""
    cell = getattr(layer, "cell", "rnn")
    gates = CELLS[cell]
    n, b = layer.hidden, layer.batch
    kw = {} if gates == 1 else {"gates": gates}
    if heads > 1:
        kw["heads"] = heads
    wpc = threads_per_cta // WARP
    # the capacity check needs only the deal's K (dealt_slots); placing the weights of a layer
    # that does not fit would be most of the time spent on it
    K, hpc = dealt_slots(layer.U, n_ctas=n_ctas, warps_per_cta=wpc, dense=dense, **kw)
    exchange = LOCAL if hpc > 0 else sync
    slot = -(-(n * b) // 4) * 4
    hs_words = max(slot, WARP * max(K) * b) if dense else slot
    _check_capacity(spec, n=n, b=b, S=sum(K), R=len(K), dense=dense,
                    threads=threads_per_cta, smem_bytes=4 * hs_words,
                    density=layer.U.nnz / max(1, gates * n * n), sync=exchange,
                    group=min(STAGE_GROUP, -(-slot // (4 * threads_per_cta))),
                    dense_tail=hs_words > slot, cell=cell, dtype=dtype)
    if dtype == "fp16" and not dense and hs_words > FP16_ADDR_WORDS:
        raise CapacityError(f"hidden={n}, batch={b} with fp16 weights: h has {hs_words} words, "
                            f"more than the {FP16_ADDR_WORDS} that a 16-bit column address "
                            f"reaches; accepted: hidden * batch <= {FP16_ADDR_WORDS} (or fp32)")
    mapping = map_matrix(layer.U, n_ctas=n_ctas, warps_per_cta=wpc, batch=b,
                         wide_loads=wide_loads, layout=layout, seed=seed, dense=dense, **kw)
    if mapping.slots != K or mapping.heads_per_cta != hpc:
        raise AssertionError(f"dealt_slots gave K={K}, {hpc} heads per CTA; the mapping "
                             f"{mapping.slots}, {mapping.heads_per_cta}")
    return mapping, exchange


def _build(layer, spec, *, sync, wide_loads, layout, threads_per_cta, seed, dense,
           n_ctas, dtype="fp32", stage_fallback=None, step_fence=None,
           step_wait=None, stage_unroll=None) -> RNNProgram:
    _check_variant(layer, spec, sync, threads_per_cta, dtype)
    step_fence = LAMPORT_STEP_FENCE if step_fence is None else bool(step_fence)
    stage_unroll = LAMPORT_STAGE_UNROLL if stage_unroll is None else bool(stage_unroll)
    step_wait = LAMPORT_STEP_WAIT_NS if step_wait is None else _check_wait(step_wait)
    half = dtype == "fp16"
    if half:
        layer = fp16_layer(layer)
    cell = getattr(layer, "cell", "rnn")
    gates = CELLS[cell]
    heads = int(getattr(layer, "heads", 1))
    n, b, steps = layer.hidden, layer.batch, layer.timesteps
    loads = access_pattern(b, wide_loads)
    n_ctas = spec.sm_count if n_ctas is None else int(n_ctas)
    wpc = threads_per_cta // WARP
    args = dict(sync=sync, wide_loads=wide_loads, layout=layout, threads_per_cta=threads_per_cta,
                seed=seed, dense=dense, n_ctas=n_ctas, dtype=dtype)
    try:
        mapping, exchange = _map_and_check(layer, spec, heads=heads, **args)
    except CapacityError:
        if heads == 1:
            raise
        # a CTA cannot hold whole heads: deal them over all warps, grid-wide exchange
        mapping, exchange = _map_and_check(layer, spec, heads=1, **args)
    local = exchange == LOCAL
    n_warps, S, R = mapping.n_warps, mapping.total_slots, mapping.rows_per_warp
    nb = n * b
    slot = -(-nb // 4) * 4  # 128-bit staging chunks
    hs_words = max(slot, WARP * max(mapping.slots) * b) if dense else slot

    depth = _prefetch_depth(spec, b=b, S=S, R=R, dense=dense, threads=threads_per_cta,
                            sync=exchange,
                            group=min(STAGE_GROUP, -(-slot // (4 * threads_per_cta))),
                            dense_tail=hs_words > slot, loads_per_slot=len(loads), cell=cell,
                            dtype=dtype)
    name = f"{'dense' if dense else 'sparse'}_{cell}_{'local' if local else sync}_" \
        f"{'wide' if wide_loads else 'scalar'}" + ("_fp16" if half else "")
    extra_meta = {} if gates == 1 else {"cell": cell}
    if half:
        extra_meta["dtype"] = dtype
    if heads > 1:
        extra_meta.update(heads=heads, exchange="cta" if local else "grid",
                          heads_per_cta=mapping.heads_per_cta if local else 0)
    bld = Builder(name, grid=n_ctas, block=threads_per_cta, hidden=n, batch=b, timesteps=steps,
                  sync=sync, wide_loads=wide_loads, layout=mapping.layout, dense=dense,
                  nnz=int(layer.U.nnz), slots=S, rows_per_warp=R, prefetch=depth,
                  h_order="owner" if mapping.positions is not None else "natural", **extra_meta)
    SW = (-(-S // 2) if dense else S) if half else S   # weight words per thread
    g_w = bld.global_buffer("w_packed", I32, n_warps * SW * WARP) if half else \
        bld.global_buffer("w_vals", F32, n_warps * S * WARP)
    g_c = None if dense or half else bld.global_buffer("w_cols", I32, n_warps * S * WARP)
    g_rows = bld.global_buffer("row_ids", I32, n_warps * R)
    g_x = bld.global_buffer("x_proj", F32, steps * gates * nb)
    g_h = bld.global_buffer("hseq", F32, (steps + 1) * slot, role="inout")
    g_cnt = bld.global_buffer("counter", I32, 1, role="inout") if exchange == "barrier" \
        else None
    h_s = bld.shared("h_s", F32, hs_words)

    # --- set-up: special registers, weights, rows -------------------------------------------
    lane = bld.sreg("lane", dst=bld.reg(I32, "lane"))
    warp = bld.sreg("warp", dst=bld.reg(I32, "warp"))
    tid = bld.sreg("tid", dst=bld.reg(I32, "tid"))
    cta = bld.sreg("cta", dst=bld.reg(I32, "cta"))
    nctas = bld.sreg("nctas", dst=bld.reg(I32, "nctas"))
    gw = bld.imad(cta, wpc, warp, dst=bld.reg(I32, "gwarp"))
    wbase = bld.imad(gw, SW * WARP, lane, dst=bld.reg(I32, "wbase"))
    w = bld.reg(I32 if half else F32, "w", SW)
    c = None if dense or half else bld.reg(I32, "c", S)
    for s in range(SW):
        bld.ldg(g_w, wbase, offset=s * WARP, dst=w[s])
        if c is not None:
            bld.ldg(g_c, wbase, offset=s * WARP, dst=c[s])
    # fp16: a slot is unpacked where its loads are issued: (sparse) the address register for
    # them, and its value as f32 into one register per slot in flight (beside its h words)
    ca = bld.reg(I32, "ca") if half and not dense else None
    rid = bld.reg(I32, "rid", R)
    xaddr = bld.reg(I32, "xaddr", R)
    mine = bld.reg(PRED, "mine", R)
    rbase = bld.imul(gw, R, dst=bld.reg(I32, "rbase"))
    lane_b = bld.imin(lane, b - 1, dst=bld.reg(I32, "lane_b"))
    lane_ok = bld.isetp("lt", lane, b, dst=bld.reg(PRED, "lane_ok"))
    tmp = bld.reg(I32, "tmp")
    for j in range(R):
        bld.ldg(g_rows, rbase, offset=j, dst=rid[j])
        bld.imax(rid[j], 0, dst=tmp)
        # x of (row, min(lane, B-1)): always in range; for the lanes that store (lane < B of a
        # real row) it is also the address of h[row][lane] within a slot
        bld.imad(tmp, b, lane_b, dst=xaddr[j])
        bld.isetp("ge", rid[j], 0, dst=mine[j])
        bld.pand(mine[j], lane_ok, dst=mine[j])         # lane b < B of a real row stores column b
    pick = bld.reg(PRED, "pick", max(1, b))
    for k in range(1, b):
        bld.isetp("eq", lane, k, dst=pick[k])
    lane_b_addr = None
    if dense:
        lane_b_addr = bld.imul(lane, b, dst=bld.reg(I32, "lane_addr"))
        _zero_tail(bld, h_s, tid, slot, hs_words, threads_per_cta)
    if local:                                              # h_0, once: plain loads
        _stage_h(bld, LOCAL, g_h, None, h_s, None, tid, nctas, slot, threads_per_cta)

    # --- the time loop ------------------------------------------------------------------------
    acc = bld.reg(F32, "acc", b)
    # dense tiles of R >= 2 row-slots: every row-slot reads the same words of h_s (the
    # addresses do not depend on the row and nothing stores to h_s between them), so the warp
    # loads them once, in row-slot 0, and keeps all K B words for the later row-slots, as
    # ptxas compiles the per-row loads (one LDS per slot in the SASS, not R)
    share_h = shares_h(dense, R)
    hv = bld.reg(F32, "hv", b * (mapping.slots[0] if share_h else depth))
    wv = bld.reg(F32, "wv", depth) if half else None
    xv = bld.reg(F32, "xv", R)
    val = bld.reg(F32, "val")
    sh = bld.reg(F32, "sh", b)
    gv = cst = None
    if gates > 1:
        gv = bld.reg(F32, "gate", gates)                   # the unit's gate pre-activations
        if cell == "lstm":
            cst = bld.reg(F32, "cst", R // gates)          # cell state c of each unit (c0 = 0)
            for u in range(R // gates):
                bld.mov(0.0, dst=cst[u])
    with bld.loop("t", 0, steps, kind="time") as t:
        xoff = bld.imul(t, gates * nb, dst=bld.reg(I32, "xoff"))
        for j in range(R):                                 # prefetch x_t for the rows
            bld.iadd(xoff, xaddr[j], dst=tmp)
            bld.ldg(g_x, tmp, dst=xv[j])
        if not local:
            _stage_h(bld, sync, g_h, g_cnt, h_s, t, tid, nctas, slot, threads_per_cta,
                     fallback=stage_fallback, unroll=stage_unroll)
        hoff = bld.imad(t, slot, slot, dst=bld.reg(I32, "hoff"))  # slot t+1
        for j in range(R):
            off = mapping.slot_offset(j)
            for k in range(b):
                bld.mov(0.0, dst=acc[k])
            n_s = mapping.slots[j]

            reload = not (share_h and j > 0)               # else: h already in registers

            def load_slot(i, off=off, reload=reload):
                s, base = off + i, b * (i if share_h else i % depth)
                if half and not dense:
                    bld.u16(w[s], dst=ca)                  # the column word address
                for width, woff in loads if reload else ():
                    dst = tuple(hv[base + woff + q] for q in range(width))
                    if dense:
                        bld.lds(h_s, lane_b_addr, offset=WARP * i * b + woff, width=width,
                                dst=dst)
                    else:
                        bld.lds(h_s, ca if half else c[s], offset=woff, width=width, dst=dst)
                if half:                                   # the slot's fp16 value, as f32
                    bld.h2f(w[s // 2] if dense else w[s], s % 2 if dense else 1,
                            dst=wv[i % depth])

            # software pipelining as ptxas does it: ``depth`` slots' loads in flight ahead of
            # the FMAs that use them (one register set of B words per slot in flight)
            for i in range(min(depth, n_s)):
                load_slot(i)
            for i in range(n_s):
                base = b * (i if share_h else i % depth)
                wi = wv[i % depth] if half else w[off + i]
                for k in range(b):
                    bld.ffma(wi, hv[base + k], acc[k], dst=acc[k])
                if i + depth < n_s:
                    load_slot(i + depth)
            for m in (16, 8, 4, 2, 1):      # B independent butterfly chains, interleaved
                for k in range(b):
                    bld.shfl_xor(acc[k], m, dst=sh[k])
                for k in range(b):
                    bld.fadd(acc[k], sh[k], dst=acc[k])
            if gates > 1:                                  # gate j % gates of the unit
                g = j % gates
                bld.mov(acc[0], dst=gv[g])
                for k in range(1, b):
                    bld.sel(pick[k], acc[k], gv[g], dst=gv[g])
                if g == gates - 1:
                    _cell_epilogue(bld, cell, j - g, gv, xv, cst, val, mine, xaddr, hoff, tmp,
                                   h_s, g_h, local)
                continue
            bld.mov(acc[0], dst=val)
            for k in range(1, b):
                bld.sel(pick[k], acc[k], val, dst=val)
            with bld.if_(mine[j]):
                bld.fadd(val, xv[j], dst=val)
                bld.tanh(val, dst=val)
                bld.fadd(val, 0.0, dst=val)                # -0.0 -> +0.0 (never the sentinel)
                bld.iadd(hoff, xaddr[j], dst=tmp)
                bld.stg(g_h, tmp, val)
                if local:
                    bld.mov(val, dst=xv[j])                # h_t of the row, for h_s below
        if local:
            # every warp has read h_{t-1} from h_s: write h_t of the CTA's units, then release
            bld.bar()
            for j in range(0, R, gates):
                with bld.if_(mine[j]):
                    bld.sts(h_s, xaddr[j], xv[j])
            bld.bar()
        elif sync == "lamport":
            if step_fence:
                bld.fence()
            if step_wait:
                bld.nanosleep(step_wait)
        elif sync == "barrier":
            bld.bar()
            is0 = bld.isetp("eq", tid, 0, dst=bld.reg(PRED, "is_t0"))
            with bld.if_(is0):
                bld.fence()
                bld.atom_add(g_cnt, 0, 1, dst=bld.reg(I32, "old"))
    kernel = verify(bld.build(), smem_limit_bytes=spec.smem_bytes_per_cta)
    inputs = _inputs(mapping, layer, slot, exchange, dense, dtype)
    variant = {"sync": sync, "wide_loads": bool(wide_loads), "layout": mapping.layout,
               "dense": dense, "threads_per_cta": threads_per_cta}
    if half:
        variant["dtype"] = dtype
    if heads > 1:
        variant.update(heads=heads, exchange="cta" if local else "grid")
    # the staging and step options where they are not the kernel's own (a rebuild, such as the
    # runner's short launch, passes them on)
    if stage_fallback is not None and stage_fallback != PARTIAL_GROUP_FALLBACK:
        variant["stage_fallback"] = stage_fallback
    if step_fence != LAMPORT_STEP_FENCE:
        variant["step_fence"] = step_fence
    if step_wait != LAMPORT_STEP_WAIT_NS and sync == "lamport" and not local:
        variant["step_wait"] = step_wait          # (a kernel without the grid exchange has none)
    if stage_unroll != LAMPORT_STAGE_UNROLL and sync == "lamport" and not local:
        variant["stage_unroll"] = stage_unroll
    return RNNProgram(kernel, inputs, mapping, layer, variant, slot)


def _cell_epilogue(bld, cell, j0, gv, xv, cst, val, mine, xaddr, hoff, tmp, h_s, g_h,
                   local=False) -> None:
    """Combine the gate pre-activations ``gv`` (``U h_{t-1}``, one per gate row, reduced and
    selected for lane b) of the unit in row-slots ``j0 ..`` into ``h_t`` and store it (lanes
    b < B of a real unit; see the module docstring for the forms).

    LSTM (gates i, f, g, o; ``c`` in the register ``cst[j0 // 4]``): ``i, f, o = sigmoid(a +
    x)``, ``g = tanh(a + x)``, ``c' = f c + i g``, ``h' = o tanh(c')``.
    GRU (gates r, z, n; cuDNN form, r applied after the recurrent product): ``r, z = sigmoid(a +
    x)``, ``n = tanh(x_n + r a_n)``, ``h' = (1 - z) n + z h = n + z (h - n)``, with ``h`` of the
    unit read back from the staged ``h_s`` (its word is the gate-0 row's x address).
    ``local`` (whole heads per CTA): ``h'`` is also kept in ``xv[j0]`` for the CTA's exchange.
    """
    with bld.if_(mine[j0]):
        if cell == "lstm":
            c = cst[j0 // 4]
            for g in (0, 1, 3):
                bld.fadd(gv[g], xv[j0 + g], dst=gv[g])
                bld.sigmoid(gv[g], dst=gv[g])
            bld.fadd(gv[2], xv[j0 + 2], dst=gv[2])
            bld.tanh(gv[2], dst=gv[2])
            bld.fmul(gv[1], c, dst=c)                      # c' = f c + i g
            bld.ffma(gv[0], gv[2], c, dst=c)
            bld.tanh(c, dst=gv[2])
            bld.fmul(gv[3], gv[2], dst=val)                # h' = o tanh(c')
        else:
            for g in (0, 1):
                bld.fadd(gv[g], xv[j0 + g], dst=gv[g])
                bld.sigmoid(gv[g], dst=gv[g])
            bld.ffma(gv[0], gv[2], xv[j0 + 2], dst=gv[2])  # n = tanh(x_n + r a_n)
            bld.tanh(gv[2], dst=gv[2])
            bld.lds(h_s, xaddr[j0], dst=gv[0])             # h_{t-1} of (unit, b)
            bld.fsub(gv[0], gv[2], dst=gv[0])
            bld.ffma(gv[1], gv[0], gv[2], dst=val)         # h' = n + z (h - n)
        bld.fadd(val, 0.0, dst=val)                        # -0.0 -> +0.0 (never the sentinel)
        bld.iadd(hoff, xaddr[j0], dst=tmp)
        bld.stg(g_h, tmp, val)
        if local:
            bld.mov(val, dst=xv[j0])


STAGE_GROUP = 4  # 128-bit chunks a thread loads back to back before it checks them
# What a Lamport poll's chunk past the end of the slot reads, in a last group that is partly
# past it: "previous", the lane's chunk of the previous group (polled and seen already; where
# the slot has one group only, the lane's chunk 0), or "chunk0", the lane's chunk 0 of the
# group again. On the H200 the re-read took 3-24% of the waiting step at batch 1 and 4 with
# a small last group and cost nothing without waiting (measurements/h200/
# exchange_groups_partial.json); the barrier kernel's plain loads keep "chunk0" (L1 serves the
# re-read).
PARTIAL_GROUP_FALLBACK = "previous"
FALLBACKS = ("previous", "chunk0")
# Whether the Lamport kernel's step ends with a __threadfence() of every thread (after the h
# stores, before the next step's polls). On the H200 it took 3-31% off the vanilla kernels'
# step where h fits one staging group (N x B <= 4096 words; nine of nine, on two machines), and
# was mixed elsewhere: gated cells -11% to +8%, larger slots -5% to +13%
# (measurements/h200/stamp_effect*.json, step_fence*.json). Off: the recorded campaigns (the
# H100's among them) measured the kernels without it, and a rule for where it pays is not
# established yet.
LAMPORT_STEP_FENCE = False
# Nanoseconds of __nanosleep that close the Lamport kernel's step (0: none), so that a warp's
# first poll of the next slot does not come right after its own h stores. On the H200, over 21
# Lamport kernels (vanilla, LSTM, GRU, fp16; sparse and dense; batch 1 to 8), a wait of 200 ns
# there made 18 of the 21 steps faster, by 13.5% on average and up to 35% at batch 1-2; two
# sparse LSTM kernels were 0.4% and 2.2% slower, 3584-b8 7.9% slower
# (measurements/h200/step_wait.json; 100 and 400 ns were worse on most; the patched CUDA of
# stamp_effect_waits.json agrees). The wait ends on the next tick of a GPU-wide timer whose
# period is the argument rounded up to a power of two, 256 ns here
# (gpusim.specs.rules.sleep_wake_cycles; measurements/h200/sleep_stairs.json). Recorded cases
# measured before the wait existed carry no ``step_wait`` and are rebuilt without it
# (gpusim.measurements.build_case).
LAMPORT_STEP_WAIT_NS = 200
# Whether the Lamport kernel's staging loop is unrolled where h takes two staging groups or more
# (``_stage_h``). On the H200 it took 89-108 ns off each later group and 7-12% off the waiting
# step at hidden 2560-6144, batch 2-8 (measurements/h200/exchange_passes.json). Recorded cases
# measured before it carry no ``stage_unroll`` and are rebuilt with the rolled loop
# (gpusim.measurements.build_case).
LAMPORT_STAGE_UNROLL = True


def _check_wait(ns) -> int:
    """``ns`` as a step wait in nanoseconds, or one clear error."""
    if isinstance(ns, bool) or not isinstance(ns, (int, np.integer)) or \
            not 0 <= int(ns) <= SLEEP_MAX_NS:
        raise InputError(f"step_wait={ns!r}; accepted: an integer number of nanoseconds, 0 "
                         f"(no wait) to {SLEEP_MAX_NS}")
    return int(ns)


def _stage_h(bld, sync, g_h, g_cnt, h_s, t, tid, nctas, slot, threads, rotate=None,
             fallback: str | None = None, unroll: bool = True) -> None:
    """Copy slot t of hseq into h_s (see the module docstring, step 1).

    Each thread owns chunks ``tid + n * threads`` of 4 words. They are handled in groups of
    :data:`STAGE_GROUP`: the group's loads are issued back to back (memory-level parallelism:
    one L2 round trip per group, not per chunk); with Lamport the whole group is re-polled while
    any of its words is still the sentinel.

    ``rotate`` (a register, e.g. the CTA index; microbenchmarks only, the kernel passes None):
    the groups are taken in the order ``(g + rotate) % groups``, so that CTAs that start together
    read different sectors at the same time.

    ``sync`` :data:`LOCAL` with ``t`` None: slot 0 (h_0) with plain loads, before the time loop.

    ``fallback`` (Lamport; None: :data:`PARTIAL_GROUP_FALLBACK`): what a chunk past the end of
    the slot reads (:data:`FALLBACKS`).

    ``unroll`` (Lamport with two groups or more): the group loop unrolled (the kernel), or kept
    rolled (the microbenchmarks measured before the kernel was, which keep their form).
    """
    if sync == "barrier":
        is0 = bld.isetp("eq", tid, 0, dst=bld.reg(PRED, "wait_t0"))
        target = bld.imul(t, nctas, dst=bld.reg(I32, "target"))
        with bld.if_(is0):
            with bld.while_(label="grid_barrier") as spin:
                cnt = bld.ldg_volatile(g_cnt, 0, dst=bld.reg(I32, "cnt"))
                spin.cond = bld.isetp("lt", cnt, target, dst=bld.reg(PRED, "behind"))
        bld.bar()
    chunks = -(-slot // (4 * threads))
    group = min(STAGE_GROUP, chunks)
    # every chunk of every group lies inside the slot: no guard at all. Otherwise one guard for
    # the group, and a chunk past the end reads a defined word (value masked out below; see
    # ``fallback``): the group's loads stay in one block. A load under its own ``if`` lets
    # ptxas interleave each load with the previous chunk's checks or STS, and the in-order warp
    # then stalls on them before it issues the next load: one L2 round trip per chunk instead
    # of per group (seen in the H100 SASS and PC sampling, measurements/README.md).
    aligned = slot % (4 * threads * group) == 0
    chunk = [bld.reg(F32, f"chunk{i}", 4) for i in range(group)]
    inside = None if aligned else bld.reg(PRED, "inside", group)
    gfirst = bld.reg(I32, "gfirst")
    bits = bld.reg(I32, "bits")  # the sentinel checks' scratch; also a selected chunk address
    base = bld.mov(0, I32, dst=bld.reg(I32, "hbase")) if t is None else \
        bld.imul(t, slot, dst=bld.reg(I32, "hbase"))
    tid4 = bld.imul(tid, 4, dst=bld.reg(I32, "tid4"))
    for i in range(group):  # lanes past the end read a defined value (masked out anyway)
        for k in range(4):
            bld.mov(0.0, dst=chunk[i][k])
    # kind "seq": group after group, as the IR says (unrolled, ptxas issues every group's loads
    # at once on the barrier kernel: more registers than counted, and a schedule the simulator
    # does not run). The Lamport kernel's groups are unrolled (kind "unroll") where there are two
    # or more: each poll loop keeps the next group's loads behind its exit, and rolled, ptxas
    # re-derived the group's global and shared addresses from special registers (S2R, S2UR) at
    # every group, which cost the H200 89-108 ns a later group with every slot written
    # (measurements/h200/exchange_passes.json, the "unrolled" form)
    n_groups = -(-chunks // group)
    fallback = PARTIAL_GROUP_FALLBACK if fallback is None else fallback
    if fallback not in FALLBACKS:
        raise InputError(f"fallback={fallback!r}: accepted {', '.join(FALLBACKS)}")
    # only the last group can be partly past the end; with two groups or more the lane's chunk
    # of the group before it lies 4 x threads x group words back
    previous = sync == "lamport" and fallback == "previous" and n_groups > 1
    unrolled = unroll and sync == "lamport" and n_groups > 1 and rotate is None
    with bld.loop("g", 0, n_groups, kind="unroll" if unrolled else "seq") as g:
        if rotate is not None:
            grot = bld.reg(I32, "grot")
            g = bld.irem(bld.iadd(g, rotate, dst=grot), n_groups, dst=grot)
        # chunk i of the group sits at first + 4*threads*i: one address register and constant
        # offsets (as the compiler would do), so the staging costs few registers
        first = bld.imad(g, 4 * threads * group, tid4, dst=bld.reg(I32, "first"))
        bld.iadd(base, first, dst=gfirst)
        if not aligned:
            for i in range(group):
                bld.isetp("lt", first, slot - 4 * threads * i, dst=inside[i])

        def load_group(op):
            if aligned:
                for i in range(group):
                    op(g_h, gfirst, offset=4 * threads * i, width=4, dst=chunk[i])
                return
            # one guard for the whole group (a lane outside chunk 0 is outside them all); a
            # later chunk past the end reads ``fallback``'s word
            with bld.if_(inside[0]):
                op(g_h, gfirst, width=4, dst=chunk[0])
                for i in range(1, group):
                    if previous:    # past the end: the previous group's chunk i
                        bld.sel(inside[i], 4 * threads * i, 4 * threads * (i - group),
                                dst=bits)
                        bld.iadd(gfirst, bits, dst=bits)
                    else:
                        bld.iadd(gfirst, 4 * threads * i, dst=bits)
                        bld.sel(inside[i], bits, gfirst, dst=bits)
                    op(g_h, bits, width=4, dst=chunk[i])

        if sync == "lamport":
            with bld.while_(label="lamport_poll") as poll:
                load_group(bld.ldg_volatile)
                waiting = bld.mov(False, PRED, dst=bld.reg(PRED, "waiting"))
                one = bld.reg(PRED, "sent")
                for i in range(group):
                    for k in range(4):
                        bld.bitcast(chunk[i][k], I32, dst=bits)
                        bld.isetp("eq", bits, int(SENTINEL_BITS), dst=one)
                        if not aligned:
                            bld.pand(one, inside[i], dst=one)
                        bld.por(waiting, one, dst=waiting)
                # warp-uniform exit (vote.any): the warp re-polls together and leaves together,
                # so the copy below is one warp-instruction per warp on any scheduler
                poll.cond = bld.vote_any(waiting, dst=bld.reg(PRED, "warp_waiting"))
        else:
            load_group(bld.ldg)
        for i in range(group):
            with contextlib.nullcontext() if aligned else bld.if_(inside[i]):
                bld.sts(h_s, first, tuple(chunk[i][k] for k in range(4)),
                        offset=4 * threads * i)
    bld.bar()


def _zero_tail(bld, h_s, tid, start: int, end: int, threads: int) -> None:
    """Dense tiles read up to 32*K columns: zero the words past N*B once (0 * garbage may be
    NaN)."""
    if end <= start:
        return
    idx = bld.reg(I32, "zidx")
    with bld.loop("z", start, end, threads) as z:
        bld.iadd(z, tid, dst=idx)
        ok = bld.isetp("lt", idx, end, dst=bld.reg(PRED, "zok"))
        with bld.if_(ok):
            bld.sts(h_s, idx, 0.0)


def _fp16_bits(values) -> np.ndarray:
    """The IEEE binary16 bits of ``values`` (already fp16-exact), as uint32."""
    return np.asarray(values, dtype=np.float32).astype(np.float16).view(np.uint16) \
        .astype(np.uint32)


def pack_fp16(values: np.ndarray, cols: np.ndarray | None, b: int) -> np.ndarray:
    """The ``w_packed`` words of an fp16 kernel (int32) from the mapping's ``values`` (n_warps,
    S, 32) and, sparse, ``cols``: per slot the value's bits << 16 | the column word address
    ``col * b``; dense (``cols`` None) slots ``2p`` (low half) and ``2p + 1`` (high half) of
    each thread share word ``p``."""
    v = _fp16_bits(values)
    if cols is not None:
        words = (v << np.uint32(16)) | (np.asarray(cols, dtype=np.uint32) * np.uint32(b))
    else:
        if v.shape[1] % 2:
            v = np.concatenate([v, np.zeros_like(v[:, :1])], axis=1)
        words = v[:, 0::2] | (v[:, 1::2] << np.uint32(16))
    return np.ascontiguousarray(words).view(np.int32).reshape(-1)


def _inputs(mapping: Mapping, layer, slot: int, sync: str, dense: bool,
            dtype: str = "fp32") -> dict:
    n, b, steps = layer.hidden, layer.batch, layer.timesteps
    nb = n * b
    pos = mapping.h_positions
    rows = np.asarray(mapping.row_ids)
    # every per-unit array in h's position order: the kernel's "row" is the unit's position
    x_pos = np.empty_like(np.asarray(layer.x_proj, dtype=np.float32))
    if mapping.gates == 1:
        x_pos[:, pos] = layer.x_proj
        row_pos = np.where(rows >= 0, pos[np.maximum(rows, 0)], -1)
    else:   # row g * N + u of a gated cell: gate g of the unit at position pos[u]
        gate_pos = (np.arange(mapping.gates)[:, None] * n + pos[None, :]).reshape(-1)
        x_pos[:, gate_pos] = layer.x_proj
        r = np.maximum(rows, 0)
        row_pos = np.where(rows >= 0, gate_pos[r], -1)
    inputs = {
        "row_ids": row_pos.astype(np.int32).reshape(-1),
        "x_proj": np.ascontiguousarray(x_pos).reshape(-1),
    }
    if dtype == "fp16":
        vals = np.asarray(mapping.values).reshape(mapping.n_warps, -1, WARP)
        cols = None if dense else np.asarray(mapping.cols).reshape(vals.shape)
        inputs["w_packed"] = pack_fp16(vals, cols, b)
    else:
        inputs["w_vals"] = np.ascontiguousarray(mapping.values, dtype=np.float32).reshape(-1)
    if not dense and dtype != "fp16":
        inputs["w_cols"] = (mapping.cols.astype(np.int32) * np.int32(b)).reshape(-1)
    hseq = np.zeros((steps + 1, slot), dtype=np.float32)
    h0 = np.empty_like(np.asarray(layer.h0, dtype=np.float32))
    # + 0.0 turns a -0.0 of h_0 into +0.0: its bits are the Lamport sentinel, a word that would
    # never arrive (the kernel's own stores do the same before every h store)
    h0[pos] = np.asarray(layer.h0, dtype=np.float32) + np.float32(0.0)
    hseq[0, :nb] = h0.reshape(-1)
    if sync == "lamport":
        hseq.view(np.int32)[1:, :nb] = SENTINEL_BITS  # pad words stay 0: never waited on
    elif sync == "barrier":
        inputs["counter"] = np.zeros(1, dtype=np.int32)
    inputs["hseq"] = hseq.reshape(-1)
    return inputs


REGS_PER_ROW = 3          # rid, xaddr, xv
REGS_PER_BATCH = 3        # acc, hv, sh
SCALAR_REGS = 20          # ids, weight/row/staging addresses, loop counters, val, bits
BARRIER_REGS = 3          # target, cnt, old (sync="barrier")
DENSE_REGS = 3            # lane_addr and the zero-fill loop's two (dense tiles)
# the most any variant declares besides weights, rows and batch columns (the capacity model's count)
FIXED_REGS = 4 * STAGE_GROUP + SCALAR_REGS + BARRIER_REGS


def cell_registers(cell: str, R: int) -> int:
    """Registers a gated cell's epilogue adds to the kernel (``R`` row-slots, ``gates`` per
    unit): the unit's gate values, and for the LSTM the cell state of each unit the warp owns
    (it stays in the registers for the whole launch); the vanilla cell adds none."""
    gates = CELLS[cell]
    if gates == 1:
        return 0
    return gates + (R // gates if cell == "lstm" else 0)


def weight_registers(S: int, dense: bool, dtype: str = "fp32") -> int:
    """Registers per thread for ``S`` weight slots and their unpacking (:data:`DTYPES`): fp32
    a value and (sparse) a column word address per slot; fp16 sparse one word per slot (the
    fp16 value in the high half, the 16-bit column address in the low half) plus the two
    registers a slot is unpacked into (value, address), fp16 dense two values per word plus
    the unpacked value."""
    if dtype == "fp32":
        return S * (1 if dense else 2)
    return -(-S // 2) + 1 if dense else S + 2   # + the unpacked value (and sparse address)


def registers_needed(S: int, R: int, b: int, dense: bool, *, sync: str = "barrier",
                     group: int = STAGE_GROUP, dense_tail: bool = True, prefetch: int = 1,
                     cell: str = "rnn", dtype: str = "fp32") -> int:
    """32-bit registers per thread the kernel above declares (predicates excluded: the hardware
    keeps them in its predicate registers): w[S] and (sparse) c[S], rid/xaddr/xv per row,
    acc/hv/sh per batch column, the staging group's chunks (4 per chunk), the scalars, and the
    variant's extras, a gated cell's (:func:`cell_registers`; ``R`` counts every gate row),
    and ``prefetch - 1`` more B-word sets of shared-load results in flight
    (:func:`_prefetch_depth`; the capacity limit counts ``prefetch = 1``: prefetching only uses
    registers a layer leaves over). Exact for the IR (a test compares it with every built
    kernel).

    ptxas allocates its own registers: :func:`ptxas_registers` adds what it was measured to need
    beyond this count (:data:`PTXAS_EXTRA_REGS`, dense row-slots: :func:`dense_reuse_registers`).
    """
    extra = (BARRIER_REGS if sync == "barrier" else 0) + \
        ((DENSE_REGS if dense_tail else 1) if dense else 0)
    per_slot = b + (dtype == "fp16")   # a slot in flight: its h words (and its fp16 value)
    return weight_registers(S, dense, dtype) + REGS_PER_ROW * R + REGS_PER_BATCH * b + \
        4 * group + SCALAR_REGS + extra + (prefetch - 1) * per_slot + cell_registers(cell, R)


def shares_h(dense: bool, R: int) -> bool:
    """Whether a kernel loads each ``h_s`` word once for all its row-slots: dense tiles of
    ``R >= 2`` row-slots (every row-slot reads the same words; the builder keeps all ``K B``
    of them in registers, :func:`dense_reuse_registers`)."""
    return bool(dense) and int(R) >= 2


def dense_reuse_registers(R: int, kmax: int, b: int) -> int:
    """Registers ptxas may keep beyond the builder's count in a dense kernel of ``R >= 2``
    row-slots: every row-slot of a dense tile reads the same words of ``h_s`` (the addresses
    do not depend on the row, and nothing stores to ``h_s`` between them), so ptxas loads each
    word once for all row-slots (the SASS has ``kmax`` shared loads per step, not ``R * kmax``)
    and keeps all ``kmax * b`` words live until the last row-slot has used them: ``(kmax - 1)
    * b`` more than the one B-word set :func:`registers_needed` counts at prefetch depth 1. The
    builder does the same (:func:`shares_h`), so :func:`counted_registers` includes them."""
    return (int(kmax) - 1) * int(b) if shares_h(True, R) else 0


def counted_registers(program: RNNProgram, prefetch: int | None = None) -> int:
    """:func:`registers_needed` of a built kernel (its variant, staging group, dense tail), with
    the kernel's own prefetch depth or ``prefetch``."""
    k, m = program.kernel, program.mapping
    meta = dict(k.meta)
    b, slot = program.batch, program.slot_words
    hs_words = max(slot, WARP * max(m.slots) * b) if m.dense else slot
    sync = LOCAL if meta.get("exchange") == "cta" else meta["sync"]
    depth = meta["prefetch"] if prefetch is None else prefetch
    dtype = meta.get("dtype", "fp32")
    share = shares_h(m.dense, m.rows_per_warp)
    # a kernel that shares h holds all K B words whatever its depth; only fp16 values in flight
    extra = dense_reuse_registers(m.rows_per_warp, max(m.slots), b) + \
        (depth - 1) * (dtype == "fp16") if share else 0
    return registers_needed(m.total_slots, m.rows_per_warp, b, m.dense, sync=sync,
                            group=min(STAGE_GROUP, -(-slot // (4 * k.block))),
                            dense_tail=hs_words > slot, prefetch=1 if share else depth,
                            cell=meta.get("cell", "rnn"), dtype=dtype) + extra


# Registers ptxas allocates beyond the kernel's count at prefetch depth 1 (registers_needed;
# dense kernels of R >= 2 row-slots: plus dense_reuse_registers), per architecture, kernel kind
# and batch: the largest excess over the layers of measurements/ptxas_sweep.json (at the limits
# before and after this correction; a kernel that spilled counts as needing 256), never below 0.
# ptxas schedules the shared loads itself: its registers are the same whatever prefetch depth
# the IR has (measured), so depth 1 is the reference. Written by that script's derive_extra;
# tests/models/test_capacity_ptxas.py checks this table against the file.
PTXAS_EXTRA_REGS: dict[str, dict[str, dict[int, int]]] = {
    "sm_70": {"sparse": {1: 0, 2: 0, 4: 37, 8: 15}, "dense": {1: 0, 2: 0, 4: 11, 8: 0}},
    "sm_90": {"sparse": {1: 0, 2: 0, 4: 34, 8: 12}, "dense": {1: 0, 2: 0, 4: 8, 8: 0}},
}
PTXAS_SOURCE = "measurements/ptxas_sweep.json"


def ptxas_extra_regs(arch: str, dense: bool, b: int) -> int:
    """:data:`PTXAS_EXTRA_REGS` of ``arch`` at batch ``b``: a batch not measured takes the
    value of the next measured batch above it (beyond the largest, the table's largest value),
    an architecture not measured the largest value any measured one has at that batch."""
    kind = "dense" if dense else "sparse"
    tables = [PTXAS_EXTRA_REGS[arch][kind]] if arch in PTXAS_EXTRA_REGS else \
        [t[kind] for t in PTXAS_EXTRA_REGS.values()]
    out = 0
    for t in tables:
        above = [m for m in sorted(t) if m >= b]
        out = max(out, t[above[0]] if above else max(t.values(), default=0))
    return out


def ptxas_registers(S: int, R: int, b: int, dense: bool, *, arch: str, kmax: int | None = None,
                    sync: str = "barrier", group: int = STAGE_GROUP,
                    dense_tail: bool = True, cell: str = "rnn", dtype: str = "fp32") -> int:
    """Registers per thread ptxas is expected to need at most, at prefetch depth 1: the
    kernel's count, plus (dense, ``R >= 2``) :func:`dense_reuse_registers`, plus
    :func:`ptxas_extra_regs`. The layer compiles without spills when this is within the
    per-thread limit (the builder refuses it otherwise; ``models.capacity`` counts the same)."""
    reuse = dense_reuse_registers(R, S // max(1, R) if kmax is None else kmax, b) if dense else 0
    return registers_needed(S, R, b, dense, sync=sync, group=group, dense_tail=dense_tail,
                            cell=cell, dtype=dtype) + reuse + ptxas_extra_regs(arch, dense, b)


PREFETCH_LOADS = 8  # shared loads a warp keeps in flight ahead of their FMAs (ptxas: 7-10)
PREFETCH_MARGIN = 16  # registers left to ptxas' own address arithmetic before prefetching


def _prefetch_depth(spec, *, b, S, R, dense, threads, sync, group, dense_tail,
                    loads_per_slot, cell="rnn", dtype="fp32") -> int:
    """Slots whose shared loads are issued before the first of their FMAs: up to
    :data:`PREFETCH_LOADS` loads, as far as the registers left over allow (B per slot). This
    is the order the simulator issues; ptxas pipelines the loads on its own and allocates the
    same registers whatever the depth (``measurements/ptxas_sweep.json``), so the depth never
    decides whether a layer spills. A kernel that shares h (:func:`shares_h`) already holds
    every slot's h words: its depth is bounded by the slots of a row-slot (and, fp16, by the
    registers left for the unpacked values)."""
    want = max(1, PREFETCH_LOADS // loads_per_slot)
    cap = min(spec.max_regs_per_thread, spec.regs_per_sm // threads)
    spare = cap - PREFETCH_MARGIN - registers_needed(S, R, b, dense, sync=sync, group=group,
                                                     dense_tail=dense_tail, cell=cell,
                                                     dtype=dtype)
    if shares_h(dense, R):   # every h word has its register already: only fp16 values cost
        kmax = S // R
        spare -= dense_reuse_registers(R, kmax, b)
        return int(max(1, min(want, kmax, 1 + spare if dtype == "fp16" else want)))
    return int(max(1, min(want, 1 + spare // (b + (dtype == "fp16")))))


def _check_capacity(spec, *, n, b, S, R, dense, threads, smem_bytes, density, sync, group,
                    dense_tail, cell="rnn", dtype="fp32") -> None:
    regs = registers_needed(S, R, b, dense, sync=sync, group=group, dense_tail=dense_tail,
                            cell=cell, dtype=dtype)
    need = ptxas_registers(S, R, b, dense, arch=spec.arch, sync=sync, group=group,
                           dense_tail=dense_tail, cell=cell, dtype=dtype)
    per_thread_cap = min(spec.max_regs_per_thread, spec.regs_per_sm // threads)
    kind = "dense" if dense else f"density {density:.3g}"
    if cell != "rnn":
        kind = f"{cell}, {kind}"
    if dtype != "fp32":
        kind = f"{kind}, {dtype}"
    if regs > per_thread_cap:
        raise CapacityError(
            f"hidden={n} ({kind}, batch {b}) does not fit in the registers: {S} weight slots per "
            f"thread need {regs} registers/thread, {spec.name} allows {per_thread_cap} at "
            f"{threads} threads/CTA; 'gpusim capacity' gives the largest layer that fits")
    if need > per_thread_cap:
        raise CapacityError(
            f"hidden={n} ({kind}, batch {b}) does not fit in the registers (ptxas: {need} "
            f"registers, spills): {S} weight slots per thread need {regs} registers/thread by "
            f"the kernel's count and ptxas {need - regs} more on {spec.arch} ({PTXAS_SOURCE}); "
            f"{spec.name} allows {per_thread_cap} at {threads} threads/CTA; 'gpusim capacity' "
            f"gives the largest layer that fits")
    if smem_bytes > spec.smem_bytes_per_cta:
        raise CapacityError(
            f"hidden={n}, batch={b} does not fit in shared memory: h needs {smem_bytes} bytes, "
            f"{spec.name} allows {spec.smem_bytes_per_cta} bytes per CTA; 'gpusim capacity' "
            f"gives the largest layer that fits")
