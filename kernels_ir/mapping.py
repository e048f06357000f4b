"""Map a pruned (or dense) recurrent matrix onto a target: CTAs x warps x 32 lanes x slots.

One CTA per SM, ``warps_per_cta`` warps each. Warp ``w = cta * warps_per_cta + warp_in_cta``
owns ``R`` row-slots; row-slot ``j`` holds one row of ``U`` (or padding) and uses ``slots[j]``
consecutive register slots ``slot_offset(j) .. slot_offset(j) + slots[j] - 1``. In slot ``s``
lane ``l`` of warp ``w`` holds the pair ``(values[w, s, l], cols[w, s, l])``; the kernel gathers
``h[cols]`` from shared memory (layout ``[N][B]``, batch-interleaved), multiplies, accumulates
per lane and reduces the row over the warp with shuffles.

Gated cells (``gates`` > 1: GRU 3, LSTM 4): ``U`` has ``gates * N`` rows, gate ``g`` of unit ``u``
being row ``g * N + u``. The gate rows of a unit are dealt together, to the same warp, as
``gates`` consecutive row-slots ``j * gates + g``: the warp reduces each gate's dot product as a
row and combines them in its epilogue, so the cell state never leaves the warp that owns the
unit and only h is exchanged.

Why rows are sorted: the instruction stream is the same for all warps, so ``slots[j]`` must cover
the longest row of row-slot ``j`` over all warps. Dealing rows in order of decreasing nonzero
count makes each row-slot hold rows of similar length (least padding); the snake order (direction
alternating with ``j``) balances the total load across warps and SMs.

Multi-head layers (``heads`` H > 1: ``U`` block-diagonal, H independent recurrences of N/H
units, every gate block of a gated cell block-diagonal too): the heads are dealt to the CTAs
whole, ``heads_per_cta = ceil(H / n_ctas)`` consecutive heads per CTA, and inside a CTA its
heads' rows (units, for a gated cell) are sorted and snake-dealt over its warps as above; a
row-slot's K is the longest of its rows over all CTAs. Every row then reads only h of units
its own CTA computes, so the kernel exchanges h through shared memory inside the CTA
(:mod:`kernels_ir.kernels.sparse_rnn`). Whether the registers hold a CTA's heads is the
kernel's decision; ``heads=1`` is the ordinary deal over all warps.

The shared-memory access of slot ``s`` is given by :func:`access_pattern` (one or more loads of
``width`` words at ``cols * B + offset``); :func:`slot_word_addresses` applies it, so the kernel
builder, the simulator and the bank analyser use the same addresses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .banks import WARP
from .errors import InputError

__all__ = ["Mapping", "map_matrix", "map_matrix_layouts", "dealt_slots", "access_pattern",
           "slot_word_addresses", "apply_mapping", "WIDE_BATCHES", "MAX_BATCH"]

WIDE_BATCHES = (1, 2, 4, 8)  # batches one or two wide (<= 128-bit) loads per column cover
MAX_BATCH = 32               # scalar loads: one lane per batch column in the epilogue
_WIDEST_WORDS = 4            # 128-bit: the widest shared load (banks.ACCESS_WIDTHS)


@dataclass(frozen=True, slots=True, eq=False)
class Mapping:
    """Where every weight of ``U`` lives: see the module docstring. Arrays are read-only."""

    n_rows: int
    n_cols: int
    n_ctas: int
    warps_per_cta: int
    rows_per_warp: int
    slots: tuple[int, ...]
    row_ids: np.ndarray   # int32 (n_warps, R), -1 = padding row
    values: np.ndarray    # float32 (n_warps, S, 32)
    cols: np.ndarray      # int32 (n_warps, S, 32): position of the column in h (h_positions)
    pad: np.ndarray       # bool (n_warps, S, 32), True where the entry is padding (value 0)
    dense: bool
    layout: str
    positions: np.ndarray | None = None  # int32 (n_cols,): where h[c] lives in h_s / hseq
    gates: int = 1        # gate rows per unit: row-slots j * gates .. j * gates + gates - 1
    heads: int = 1        # independent recurrences (block-diagonal U), see the module docstring
    heads_per_cta: int = 0  # heads > 1: whole heads per CTA (0: heads dealt over all warps)

    @property
    def cta_local(self) -> bool:
        """Every CTA holds whole heads: no row reads h computed by another CTA."""
        return self.heads_per_cta > 0

    @property
    def h_positions(self) -> np.ndarray:
        """int (n_cols,): the word index / B at which the kernel keeps unit ``c`` of h (identity
        unless the layer is exchanged in owner order, see :func:`map_matrix`)."""
        if self.positions is None:
            return np.arange(self.n_cols, dtype=np.int32)
        return self.positions

    @property
    def n_warps(self) -> int:
        return self.n_ctas * self.warps_per_cta

    @property
    def total_slots(self) -> int:
        return int(sum(self.slots))

    def slot_offset(self, j: int) -> int:
        return int(sum(self.slots[:j]))

    @property
    def slot_row_slot(self) -> np.ndarray:
        """int (S,): the row-slot ``j`` each slot belongs to."""
        return np.repeat(np.arange(len(self.slots)), self.slots)

    @property
    def slot_rows(self) -> np.ndarray:
        """int (n_warps, S): the row of ``U`` each (warp, slot) works on, -1 for padding."""
        return self.row_ids[:, self.slot_row_slot]

    @property
    def padding_fraction(self) -> float:
        return float(self.pad.mean()) if self.pad.size else 0.0


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{name}={value!r} must be a positive integer")
    return int(value)


def access_pattern(batch: int, wide_loads: bool) -> list[tuple[int, int]]:
    """The shared loads of one slot: ``[(width_words, word_offset), ...]`` at ``col * B + offset``.

    With wide loads: B=1 one 32-bit, B=2 one 64-bit, B=4 one 128-bit, B=8 two 128-bit loads.
    Without: B 32-bit loads (``offset = b``), any B in 1..32.
    """
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)):
        raise InputError(f"batch={batch!r} must be a positive integer")
    batch = int(batch)
    if wide_loads:
        if batch not in WIDE_BATCHES:
            raise InputError(f"batch={batch} cannot use wide loads (64/128-bit); accepted with "
                             f"wide loads: {', '.join(map(str, WIDE_BATCHES))}")
        width = min(batch, _WIDEST_WORDS)
        return [(width, off) for off in range(0, batch, width)]
    if not 1 <= batch <= MAX_BATCH:
        raise InputError(f"batch={batch} is outside 1..{MAX_BATCH}")
    return [(1, b) for b in range(batch)]


def slot_word_addresses(mapping: Mapping, batch: int, wide_loads: bool,
                        loads: Sequence[int] | None = None) -> list[np.ndarray]:
    """One int64 array ``(n_warps, S, 32)`` of first-word addresses per load of a slot
    (``loads``: the indices into :func:`access_pattern` of the loads wanted; default all)."""
    base = mapping.cols.astype(np.int64) * int(batch)
    pattern = access_pattern(batch, wide_loads)
    chosen = pattern if loads is None else [pattern[i] for i in loads]
    return [base + off for _, off in chosen]


def _as_csr(U, dense: bool) -> sp.csr_matrix | np.ndarray:
    if sp.issparse(U):
        if dense:
            return np.asarray(U.toarray(), dtype=np.float32)
        m = sp.csr_matrix(U, dtype=np.float32)
        m.sum_duplicates()
        m.sort_indices()
        return m
    a = np.asarray(U)
    if a.ndim != 2:
        raise InputError(f"U must be a matrix, got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.number):
        raise InputError(f"U must be numeric, got dtype {a.dtype}")
    if dense:
        return a.astype(np.float32)
    m = sp.csr_matrix(a.astype(np.float32))
    m.eliminate_zeros()
    m.sort_indices()
    return m


def _deal(nnz: np.ndarray, n_warps: int):
    """Sort rows by nonzeros (descending, stable), deal row-slot groups in snake order.

    Returns ``(order, row_ids, K)`` with ``K[j] = max(1, ceil(longest row of group j / 32))``.
    """
    n_rows = nnz.size
    order = np.argsort(-nnz, kind="stable")
    R = math.ceil(n_rows / n_warps)
    row_ids = np.full((n_warps, R), -1, dtype=np.int32)
    K = []
    for j in range(R):
        grp = order[j * n_warps:(j + 1) * n_warps]
        w = np.arange(grp.size)
        row_ids[w if j % 2 == 0 else n_warps - 1 - w, j] = grp
        K.append(max(1, -(-int(nnz[grp].max()) // WARP)))
    return order, row_ids, tuple(K)


def _deal_units(nnz: np.ndarray, n_warps: int, gates: int):
    """:func:`_deal` for a gated cell: units (not rows) sorted by their gate rows' total nonzeros
    (descending, stable) and dealt in snake order; unit group ``j`` fills row-slots
    ``j * gates + g`` (row ``g * N + u``) of the same warps.

    Returns ``(order, row_ids, K, counts)``: ``order`` lists the rows row-slot by row-slot in
    dealing order, ``counts[jj]`` how many rows row-slot ``jj`` holds.
    """
    n = nnz.size // gates
    per_gate = nnz.reshape(gates, n)
    units = np.argsort(-per_gate.sum(axis=0), kind="stable")
    Ru = math.ceil(n / n_warps)
    row_ids = np.full((n_warps, Ru * gates), -1, dtype=np.int32)
    order, K, counts = [], [], []
    for j in range(Ru):
        grp = units[j * n_warps:(j + 1) * n_warps]
        w = np.arange(grp.size)
        w = w if j % 2 == 0 else n_warps - 1 - w
        for g in range(gates):
            rows = g * n + grp
            row_ids[w, j * gates + g] = rows
            order.append(rows)
            counts.append(grp.size)
            K.append(max(1, -(-int(per_gate[g, grp].max()) // WARP)))
    return np.concatenate(order), row_ids, tuple(K), tuple(counts)


def _deal_heads(nnz: np.ndarray, n_ctas: int, warps_per_cta: int, gates: int, heads: int,
                n_cols: int):
    """Whole heads per CTA (module docstring): ``heads_per_cta`` consecutive heads to each
    CTA, their rows dealt over its warps by :func:`_deal` / :func:`_deal_units`.

    Returns ``(order, row_ids, K, counts, warps, heads_per_cta)``: ``order`` lists the rows
    row-slot by row-slot (in warp order), ``counts[j]`` how many, ``warps[j]`` their warps.
    """
    size = n_cols // heads
    hpc = math.ceil(heads / n_ctas)
    parts, ks = [], []
    for cta in range(n_ctas):
        units = np.arange(min(heads, cta * hpc) * size, min(heads, (cta + 1) * hpc) * size)
        rows = (np.arange(gates)[:, None] * n_cols + units[None, :]).reshape(-1)
        if rows.size == 0:
            parts.append(np.full((warps_per_cta, 0), -1, dtype=np.int32))
            continue
        if gates > 1:
            _, local, K, _ = _deal_units(nnz[rows], warps_per_cta, gates)
        else:
            _, local, K = _deal(nnz[rows], warps_per_cta)
        parts.append(np.where(local >= 0, rows[np.maximum(local, 0)], -1).astype(np.int32))
        ks.append(K)
    R = max(p.shape[1] for p in parts)
    row_ids = np.full((n_ctas * warps_per_cta, R), -1, dtype=np.int32)
    for cta, p in enumerate(parts):
        row_ids[cta * warps_per_cta:(cta + 1) * warps_per_cta, :p.shape[1]] = p
    K = tuple(max([k[j] for k in ks if j < len(k)] or [1]) for j in range(R))
    order, counts, warps = [], [], []
    for j in range(R):
        w = np.flatnonzero(row_ids[:, j] >= 0)
        order.append(row_ids[w, j])
        counts.append(w.size)
        warps.append(w)
    return np.concatenate(order), row_ids, K, tuple(counts), tuple(warps), hpc


def dealt_slots(U, *, n_ctas: int, warps_per_cta: int, gates: int = 1, heads: int = 1,
                dense: bool = False) -> tuple[tuple[int, ...], int]:
    """``(K, heads_per_cta)`` of the mapping :func:`map_matrix` makes of ``U`` (``K_j`` per
    row-slot; ``heads_per_cta`` 0 unless whole heads go to each CTA), from the rows' nonzero
    counts alone: the deal, without placing a weight. A capacity check needs no more, and on
    the largest layers placing the weights is most of a mapping's time."""
    n_ctas = _positive("n_ctas", n_ctas)
    warps_per_cta = _positive("warps_per_cta", warps_per_cta)
    gates = _positive("gates", gates)
    M = _as_csr(U, False)      # the row counts only: a dense tile's row holds every column
    n_rows, n_cols = M.shape
    if n_rows < 1 or n_cols < 1:
        raise InputError(f"U has shape {M.shape}; both sides must be at least 1")
    if gates > 1 and n_rows != gates * n_cols:
        raise InputError(f"U has shape {M.shape}; gates={gates} needs ({gates}*N, N) = "
                         f"({gates * n_cols}, {n_cols})")
    heads = _check_heads(M, heads, n_rows, n_cols, gates)
    nnz = np.full(n_rows, n_cols) if dense else np.diff(M.indptr)
    if heads > 1:
        _, _, K, _, _, hpc = _deal_heads(nnz, n_ctas, warps_per_cta, gates, heads, n_cols)
        return tuple(K), hpc
    if gates > 1:
        return tuple(_deal_units(nnz, n_ctas * warps_per_cta, gates)[2]), 0
    return tuple(_deal(nnz, n_ctas * warps_per_cta)[2]), 0


def _check_heads(M, heads, n_rows: int, n_cols: int, gates: int) -> int:
    """``heads`` as an int, after checking it divides N and that ``U`` is block-diagonal."""
    heads = _positive("heads", heads)
    if heads == 1:
        return 1
    if n_cols % heads or n_rows != gates * n_cols:
        raise InputError(f"heads={heads} must divide N={n_cols} of a square (gates*N x N) U; "
                         f"U has shape {(n_rows, n_cols)}")
    size = n_cols // heads
    if sp.issparse(M):
        rows = np.repeat(np.arange(n_rows), np.diff(M.indptr))
        bad = np.flatnonzero((rows % n_cols) // size != M.indices // size)
        if bad.size:
            r, c = int(rows[bad[0]]), int(M.indices[bad[0]])
    else:
        r_head = (np.arange(n_rows) % n_cols) // size
        off = (np.asarray(M) != 0) & (r_head[:, None] != (np.arange(n_cols) // size)[None, :])
        bad = np.argwhere(off)
        if bad.size:
            r, c = (int(x) for x in bad[0])
    if bad.size:
        raise InputError(f"U is not block-diagonal with heads={heads}: row {r} (head "
                         f"{(r % n_cols) // size}) has a weight in column {c} (head {c // size})")
    return heads


def _fill_padding_columns(cols: np.ndarray, pad: np.ndarray) -> None:
    """Give every padding lane a column that adds no wavefront (in place).

    In a slot with at most one real lane in every lane pair ``(l, l ^ 1)``, a padding lane whose
    partner is real copies the partner's column, so that every pair reads one address and a
    64/128-bit load is return-packed (:mod:`kernels_ir.banks`; with real lanes placed from the
    start of each quarter-warp, as every layout but a packed "optimal" slot does, this is the
    column the next rule gives). Every other padding lane copies the column of the first real
    lane of its quarter-warp, else of its half-warp, else of its warp: that word is already
    read in the lane's phase for every access width (phases are quarter, half or whole warps),
    so it costs nothing. A slot with no real lane reads column 0 in every lane: one wavefront
    per phase, the minimum for an executed load.
    """
    if not (cols.flags.c_contiguous and pad.flags.c_contiguous):
        _fill_padding_slots(cols, pad)
        return
    # every slot (32 lanes) is filled on its own: only the slots with a padding lane need work
    # (often a small part of a large mapping)
    flat_cols, flat_pad = cols.reshape(-1, WARP), pad.reshape(-1, WARP)
    sel = np.flatnonzero(flat_pad.any(axis=1))
    if sel.size == flat_pad.shape[0]:
        _fill_padding_slots(cols, pad)
        return
    some = flat_cols[sel]
    _fill_padding_slots(some, flat_pad[sel])
    flat_cols[sel] = some


def _fill_padding_slots(cols: np.ndarray, pad: np.ndarray) -> None:
    """:func:`_fill_padding_columns` on every slot of ``cols`` (in place)."""
    lead = cols.shape[:-1]
    todo = pad.copy()
    # lane pairs (l, l ^ 1) as the two entries of a trailing axis of 2; [..., ::-1] is the partner
    real2 = ~pad.reshape(*lead, WARP // 2, 2)
    packable = ~(real2[..., 0] & real2[..., 1]).any(axis=-1)
    t = todo.reshape(real2.shape) & real2[..., ::-1] & packable[..., None, None]
    c2 = cols.reshape(real2.shape)
    np.copyto(c2, c2[..., ::-1].copy(), where=t)  # a padding lane copies its real partner
    todo &= ~t.reshape(todo.shape)
    # the first real lane's column of every quarter-warp, of every half (from its first quarter
    # that has a real lane) and of the warp; the padding lanes left take their quarter's, else
    # their half's, else the warp's, else column 0
    parts = cols.reshape(*lead, _WIDEST_WORDS, WARP // _WIDEST_WORDS)      # quarter-warps
    real = ~pad.reshape(parts.shape)
    has_q = real.any(axis=-1)                                               # (..., 4)
    first_q = np.take_along_axis(parts, real.argmax(axis=-1)[..., None], axis=-1)[..., 0]
    has_h = has_q[..., 0::2] | has_q[..., 1::2]                             # (..., 2)
    first_h = np.where(has_q[..., 0::2], first_q[..., 0::2], first_q[..., 1::2])
    has_w = has_h[..., :1] | has_h[..., 1:]                                 # (..., 1)
    first_w = np.where(has_h[..., :1], first_h[..., :1], first_h[..., 1:])
    fill = np.where(has_q, first_q,
                    np.where(np.repeat(has_h, 2, axis=-1), np.repeat(first_h, 2, axis=-1),
                             np.where(has_w, first_w, 0)))                 # (..., 4)
    np.copyto(parts, fill[..., None], where=todo.reshape(parts.shape))


def _layout_indices(csr: sp.csr_matrix, ks: np.ndarray, layout, batch: int, wide_loads: bool,
                    rng: np.random.Generator) -> np.ndarray:
    """Layout positions for the rows of ``csr``: int64 (sum ks, 32), index into the row or -1."""
    many = getattr(layout, "many", None)
    if many is not None:
        out = np.asarray(many(csr.indptr, csr.indices, ks, batch=batch, wide_loads=wide_loads,
                              rng=rng))
    else:
        parts = []
        for r in range(csr.shape[0]):
            cols = csr.indices[csr.indptr[r]:csr.indptr[r + 1]]
            parts.append(np.asarray(layout(cols, int(ks[r]), batch=batch, wide_loads=wide_loads,
                                           rng=rng)).reshape(int(ks[r]), WARP))
        out = np.concatenate(parts) if parts else np.zeros((0, WARP), np.int64)
    if out.shape != (int(ks.sum()), WARP):
        raise InputError(f"layout returned shape {out.shape}; expected ({int(ks.sum())}, 32)")
    # every nonzero exactly once, nothing out of range
    nnz = np.diff(csr.indptr)
    row_of_slot = np.repeat(np.arange(csr.shape[0]), ks)
    lengths = np.broadcast_to(nnz[row_of_slot][:, None], out.shape)
    if np.any(out >= lengths) or np.any(out < -1):
        raise InputError("layout returned an index outside its row")
    glob = (csr.indptr[row_of_slot][:, None] + out)[out >= 0]
    if glob.size != csr.nnz or np.bincount(glob, minlength=csr.nnz).max(initial=1) != 1:
        raise InputError("layout must place every nonzero of its row exactly once")
    return out.astype(np.int64, copy=False)   # only read: a layout's own array is not copied


def map_matrix(U, *, n_ctas: int, warps_per_cta: int, batch: int, wide_loads: bool,
               layout: str | Callable = "naive", seed: int = 0, dense: bool = False,
               owner_order: bool = True, gates: int = 1, heads: int = 1) -> Mapping:
    """Map ``U`` (n_rows x n_cols; scipy.sparse or ndarray) onto ``n_ctas x warps_per_cta`` warps.

    ``layout`` is a name from :data:`kernels_ir.layouts.LAYOUTS` or a hook
    ``layout(cols, k, *, batch, wide_loads, rng) -> (k, 32)`` of indices into ``cols`` (-1 =
    padding). ``dense=True`` gives Diamos-style dense tiles: every row holds all columns,
    ``cols[s, l] = 32 s + l``, no index registers (layout must be "naive").
    ``batch``/``wide_loads`` are validated here (they decide the bank of each column).

    ``owner_order`` (square sparse matrices, the recurrent exchange): h is kept in the order of
    the units' owners, CTA by CTA (``positions``), and ``cols`` hold those positions. Every CTA's
    outputs are then contiguous in the exchanged h, so a 32-byte sector of it is written by one
    SM only: on an H100, sectors written by two SMs while 132 SMs poll them cost about 0.7 us
    more per exchange (measurements/h100/lamport_probe.json). With ``owner_order=False`` h keeps
    the units' natural order (rows are snake-dealt, so neighbouring units live on different SMs).

    ``gates`` (1, or 3/4 for GRU/LSTM): ``U`` is ``gates * N x N`` and the gate rows of a unit
    are dealt to one warp as consecutive row-slots (module docstring); the owner order is that
    of the units.

    ``heads`` (a divisor of N; ``U`` must be block-diagonal): whole heads per CTA (module
    docstring); the Mapping's ``heads_per_cta`` says how many.
    """
    n_ctas = _positive("n_ctas", n_ctas)
    warps_per_cta = _positive("warps_per_cta", warps_per_cta)
    gates = _positive("gates", gates)
    access_pattern(batch, wide_loads)
    n_warps = n_ctas * warps_per_cta
    M = _as_csr(U, dense)
    n_rows, n_cols = M.shape
    if n_rows < 1 or n_cols < 1:
        raise InputError(f"U has shape {M.shape}; both sides must be at least 1")
    if gates > 1 and n_rows != gates * n_cols:
        raise InputError(f"U has shape {M.shape}; gates={gates} needs ({gates}*N, N) = "
                         f"({gates * n_cols}, {n_cols})")
    heads = _check_heads(M, heads, n_rows, n_cols, gates)
    hpc = 0

    if dense:
        name = layout if isinstance(layout, str) else getattr(layout, "name", "custom")
        if name != "naive":
            raise InputError(f"layout={name!r} is not available for dense tiles; accepted: naive")
        k = math.ceil(n_cols / WARP)
        if heads > 1:
            _, row_ids, K, _, _, hpc = _deal_heads(np.full(n_rows, n_cols), n_ctas,
                                                  warps_per_cta, gates, heads, n_cols)
        elif gates > 1:
            _, row_ids, K, _ = _deal_units(np.full(n_rows, n_cols), n_warps, gates)
        else:
            order, row_ids, K = _deal(np.full(n_rows, n_cols), n_warps)
        S = sum(K)
        grid = np.arange(k * WARP).reshape(k, WARP)
        valid = grid < n_cols
        cols = np.zeros((n_warps, S, WARP), dtype=np.int32)
        values = np.zeros((n_warps, S, WARP), dtype=np.float32)
        pad = np.ones((n_warps, S, WARP), dtype=bool)
        for j in range(len(K)):
            w = np.flatnonzero(row_ids[:, j] >= 0)
            rows = row_ids[w, j]
            sl = slice(j * k, (j + 1) * k)
            cols[w, sl] = np.where(valid, grid, 0)
            pad[w, sl] = ~valid
            tile = np.zeros((rows.size, k * WARP), dtype=np.float32)
            tile[:, :n_cols] = M[rows]
            values[w, sl] = tile.reshape(rows.size, k, WARP)
        _fill_padding_columns(cols, pad)
        return _freeze(Mapping(n_rows, n_cols, n_ctas, warps_per_cta, len(K), K, row_ids,
                               values, cols, pad, True, "naive", gates=gates, heads=heads,
                               heads_per_cta=hpc))

    hook, name = _hook(layout)
    return _place(_deal_sparse(M, n_ctas, warps_per_cta, owner_order, gates, heads), hook, name,
                  batch, wide_loads, seed)


def map_matrix_layouts(U, layouts, *, n_ctas: int, warps_per_cta: int, batch: int,
                       seed: int = 0, owner_order: bool = True, gates: int = 1,
                       heads: int = 1) -> list[Mapping]:
    """:func:`map_matrix` of one sparse ``U`` for several ``(layout, wide_loads)`` pairs.

    Returns the same Mappings as one ``map_matrix(U, ..., layout=layout,
    wide_loads=wide_loads)`` call per pair, but sorts and deals the rows and applies the owner
    order once: that work does not depend on the layout, and for the largest layers
    ``gpusim predict`` prices it is a good part of a mapping's time.
    """
    n_ctas = _positive("n_ctas", n_ctas)
    warps_per_cta = _positive("warps_per_cta", warps_per_cta)
    gates = _positive("gates", gates)
    pairs = [(*_hook(layout), bool(wide)) for layout, wide in layouts]
    for *_, wide in pairs:
        access_pattern(batch, wide)
    M = _as_csr(U, False)
    if M.shape[0] < 1 or M.shape[1] < 1:
        raise InputError(f"U has shape {M.shape}; both sides must be at least 1")
    if gates > 1 and M.shape[0] != gates * M.shape[1]:
        raise InputError(f"U has shape {M.shape}; gates={gates} needs ({gates}*N, N) = "
                         f"({gates * M.shape[1]}, {M.shape[1]})")
    heads = _check_heads(M, heads, *M.shape, gates)
    dealt = _deal_sparse(M, n_ctas, warps_per_cta, owner_order, gates, heads)
    return [_place(dealt, hook, name, batch, wide, seed) for hook, name, wide in pairs]


def _hook(layout) -> tuple[Callable, str]:
    """The layout hook and its name, for a name from ``LAYOUTS`` or a hook."""
    from .layouts import get_layout  # layouts import this module

    if isinstance(layout, str):
        return get_layout(layout), layout
    return layout, getattr(layout, "name", "custom")


@dataclass(frozen=True, slots=True, eq=False)
class _Dealt:
    """A sparse matrix's rows sorted and dealt onto the warps: everything of a mapping that
    does not depend on the layout (see :func:`map_matrix`)."""

    n_rows: int
    n_cols: int
    n_ctas: int
    warps_per_cta: int
    row_ids: np.ndarray
    K: tuple[int, ...]
    ks: np.ndarray                 # row-slot's K of every row, in `order`
    positions: np.ndarray | None
    Ms: sp.csr_matrix              # the rows in `order`, columns as h positions, sorted
    counts: tuple[int, ...]        # rows of every row-slot (consecutive in `order`)
    reverse: tuple[bool, ...]      # row-slot dealt from the last warp down (snake order)
    gates: int
    heads: int = 1
    heads_per_cta: int = 0
    warps: tuple | None = None     # heads > 1: the warps of every row-slot's rows, in `order`


def _deal_sparse(M: sp.csr_matrix, n_ctas: int, warps_per_cta: int,
                 owner_order: bool, gates: int = 1, heads: int = 1) -> _Dealt:
    n_warps = n_ctas * warps_per_cta
    n_rows, n_cols = M.shape
    nnz = np.diff(M.indptr)
    warps, hpc = None, 0
    if heads > 1:
        order, row_ids, K, counts, warps, hpc = _deal_heads(nnz, n_ctas, warps_per_cta, gates,
                                                            heads, n_cols)
    elif gates > 1:
        order, row_ids, K, counts = _deal_units(nnz, n_warps, gates)
    else:
        order, row_ids, K = _deal(nnz, n_warps)
        counts = tuple(min(n_warps, n_rows - j * n_warps) for j in range(len(K)))
    reverse = tuple((j // gates) % 2 == 1 for j in range(len(K)))
    # row-slot of every row, in `order`
    ks = np.repeat(np.asarray(K), counts)
    positions = None
    if owner_order and n_rows == gates * n_cols:
        # warp-major = CTA by CTA; a gated cell's units are its gate-0 rows
        owned = row_ids[:, ::gates].reshape(-1)
        owned = owned[owned >= 0]
        positions = np.empty(n_cols, dtype=np.int32)
        positions[owned] = np.arange(owned.size, dtype=np.int32)
        # "naive" = order of the positions: sorted within rows, by way of the columns (two
        # linear passes instead of a sort of every row)
        M = sp.csr_matrix((M.data, positions[M.indices], M.indptr), shape=M.shape).tocsc().tocsr()
    for a in (row_ids, ks, positions):           # shared by every layout's Mapping
        if a is not None:
            a.setflags(write=False)
    return _Dealt(n_rows, n_cols, n_ctas, warps_per_cta, row_ids, K, ks, positions, M[order],
                  counts, reverse, gates, heads, hpc, warps)


def _place(dealt: _Dealt, hook: Callable, name: str, batch: int, wide_loads: bool,
           seed: int) -> Mapping:
    """The Mapping of ``dealt`` with one layout (the rest of :func:`map_matrix`)."""
    n_rows, K, Ms = dealt.n_rows, dealt.K, dealt.Ms
    n_warps = dealt.n_ctas * dealt.warps_per_cta
    R = len(K)
    idx = _layout_indices(Ms, dealt.ks, hook, batch, wide_loads, np.random.default_rng(seed))

    S = sum(K)
    cols = np.zeros((n_warps, S, WARP), dtype=np.int32)
    values = np.zeros((n_warps, S, WARP), dtype=np.float32)
    pad = np.ones((n_warps, S, WARP), dtype=bool)
    indices = np.zeros(Ms.nnz + 1, dtype=np.int32)   # the last entry: padding's sentinel
    indices[:-1] = Ms.indices
    data = np.zeros(Ms.nnz + 1, dtype=np.float32)
    data[:-1] = Ms.data
    start = 0
    for j in range(R):
        lo = sum(dealt.counts[:j])
        hi = lo + dealt.counts[j]
        block = idx[start:start + (hi - lo) * K[j]].reshape(hi - lo, K[j], WARP)
        start += (hi - lo) * K[j]
        flip = False
        if dealt.warps is not None:
            w = dealt.warps[j]
        elif dealt.reverse[j]:   # rows to the last hi - lo warps, last warp first
            w, flip = slice(n_warps - (hi - lo), n_warps), True
        else:
            w = slice(0, hi - lo)
        real = block >= 0
        glob = np.where(real, Ms.indptr[lo:hi, None, None] + block, Ms.nnz)  # nnz: sentinel
        if flip:
            real, glob = real[::-1], glob[::-1]
        sl = slice(sum(K[:j]), sum(K[:j + 1]))
        cols[w, sl] = indices[glob]
        values[w, sl] = data[glob]
        pad[w, sl] = ~real
    _fill_padding_columns(cols, pad)
    return _freeze(Mapping(n_rows, dealt.n_cols, dealt.n_ctas, dealt.warps_per_cta, R, K,
                           dealt.row_ids, values, cols, pad, False, str(name), dealt.positions,
                           dealt.gates, dealt.heads, dealt.heads_per_cta))


def _freeze(m: Mapping) -> Mapping:
    for a in (m.row_ids, m.values, m.cols, m.pad, m.positions):
        if a is not None:
            a.setflags(write=False)
    return m


def apply_mapping(mapping: Mapping, h: np.ndarray) -> np.ndarray:
    """``U @ h`` in float32 the way the kernel sums: per lane over its slots in order, then a
    butterfly shuffle reduction (xor 16, 8, 4, 2, 1) over the warp. ``h``: (n_cols, B)."""
    h = np.asarray(h, dtype=np.float32)
    if h.ndim != 2 or h.shape[0] != mapping.n_cols:
        raise InputError(f"h has shape {h.shape}; expected ({mapping.n_cols}, B)")
    out = np.zeros((mapping.n_rows, h.shape[1]), dtype=np.float32)
    hp = np.empty_like(h)
    hp[mapping.h_positions] = h                  # h as the kernel keeps it
    h = hp
    lane = np.arange(WARP)
    for j, k in enumerate(mapping.slots):
        off = mapping.slot_offset(j)
        acc = np.zeros((mapping.n_warps, WARP, h.shape[1]), dtype=np.float32)
        for s in range(off, off + k):
            acc = acc + mapping.values[:, s, :, None] * h[mapping.cols[:, s, :]]
        for x in (16, 8, 4, 2, 1):
            acc = acc + acc[:, lane ^ x]
        rows = mapping.row_ids[:, j]
        out[rows[rows >= 0]] = acc[rows >= 0, 0]
    return out
