"""Bank-conflict layouts of a row's nonzeros over (slot, lane), the lower bound, and the analyser.

In the sparse persistent kernel lane ``l`` of a warp gathers ``h[col]`` for its nonzero of the
current slot; the order of a row's nonzeros over (slot, lane) is free (it only changes the
summation order). This module chooses that order.

Bank classes (derived from :mod:`kernels_ir.banks`, never a second formula)
---------------------------------------------------------------------------
A slot issues ``n_loads`` loads (:func:`kernels_ir.mapping.access_pattern`) of ``W`` words at
``col * B + offset``. Each load is served in ``P = W`` phases of ``m = 32 / W`` lanes
(lanes ``p*m .. p*m+m-1`` form phase ``p``). Inside a phase a lane occupies one aligned group of
``W`` banks, ``banks.bank_group(col * B + offset, W)``, the column's *class*; the phase costs as
many wavefronts as the largest number of distinct columns of one class (lanes on the same column
share a broadcast). The class partition of the columns is the same for every load of the slot
(the offsets only relabel classes), so a slot costs ``n_loads`` times the same amount.

Return packing (64/128-bit loads, ``W`` = 2 or 4): a slot whose lane pairs ``(l, l ^ 1)`` (or
``(l, l ^ 2)``) each read one column is served in ``P / 2`` phases of ``2 m`` lanes, each phase
as costly as its busiest class. Its ``m`` lane pairs per phase hold at most ``m`` distinct
columns, so a packed phase is a group of the same kind as an unpacked one: ``m`` places, ``C``
classes. The mapping realises it: a padding lane whose pair partner is real copies it
(``mapping._fill_padding_columns``), so a slot whose real lanes are at most one per pair is
packed.

Lower bound, and why it is exact (the proof)
--------------------------------------------
Every slot belongs to one row (a warp works on one row per row-slot), so rows are independent.
Take a row with ``n_g`` nonzeros of class ``g`` (columns of a row are distinct) and ``k`` slots,
``j`` of them packed (the condition is on the whole warp, so a slot is packed or not), i.e.
``G_j = (k - j) P + j P / 2`` groups (slot, phase) of ``m`` places. A layout puts ``c_{g,q}``
nonzeros of class ``g`` into group ``q``; group ``q`` costs ``L_q = max(1, max_g c_{g,q})``
wavefronts per load (an executed load costs at least one wavefront per phase; padding lanes
re-read a column already read in their phase, see ``mapping._fill_padding_columns``, so they
add nothing). Then ``c_{g,q} <= L_q``, ``sum_g c_{g,q} <= m`` and ``sum_q c_{g,q} = n_g``.
Summing over the ``a`` largest classes (``S_a = n_(1) + ... + n_(a)``):

    S_a <= sum_q min(m, a L_q) <= F_a(T),   T = sum_q L_q,

where ``F_a(T)`` is ``sum_q min(m, a L_q)`` for the *balanced* split of ``T`` over the ``G``
groups (``L_q`` in ``{floor(T/G), ceil(T/G)}``): ``x -> min(m, a x)`` is concave, so its sum is
Schur-concave and the balanced vector, majorised by every integer vector with the same sum,
maximises it. ``F_a`` grows with ``T``. Hence every layout with ``j`` packed slots costs at least

    T*(G_j) = min { T >= G_j : S_a <= F_a(T) for a = 1 .. C }   wavefronts per load,

and every layout at least ``min_j T*(G_j)`` over the ``j`` with ``n <= G_j m``
(:func:`packed_lower_bound`; without packing, ``W = 1``, only ``j = 0``).

Conversely, for ``T = T*(G_j)`` and the balanced ``L_q``, the conditions ``S_a <= F_a`` are
exactly the min-cut conditions (over class sets ``A``: ``sum_{g in A} n_g <= sum_q min(m, |A|
L_q)``; the worst set of size ``a`` is the ``a`` largest classes) of the flow network source ->
class (capacity ``n_g``) -> group (capacity ``L_q``) -> sink (capacity ``m``). So an integral
flow of value ``n`` exists (max-flow min-cut, integrality), and placing ``c_{g,q}`` = flow gives
a layout of cost ``<= T*(G_j)``: unpacked groups on the ``m`` lanes of their phase, packed
groups on the even lanes of their half (``W = 4``) or warp (``W = 2``), one real lane per pair.
An unpacked slot that happens to have at most one real lane per pair is read packed too, which
never costs more (a merged phase is the union of two). The bound is therefore *tight*:
``optimal`` (with the ``j`` that minimises ``T*``, the fewest such) always meets it (gap 0) for
the row-spread mapping; a row where packing gains nothing gets the same layout as without it.
The construction is a vectorised water-filling (fill each group with the classes of largest
remaining count, at most ``L_q`` each); a row where it falls short is solved by the max-flow
itself (``scipy.sparse.csgraph.maximum_flow``), and the result is checked.

The bound depends on the mapping (rows per warp, ``K_j``), not only on the matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import banks
from .banks import WARP
from .errors import InputError
from .mapping import Mapping, access_pattern, slot_word_addresses

__all__ = ["Geometry", "geometry", "column_classes", "Layout", "LAYOUTS", "get_layout",
           "row_lower_bound", "LayoutReport", "analyse", "analyse_row_per_lane",
           "layout_cost", "width_from_bits"]

_WIDTH_BITS = {32: 1, 64: 2, 128: 4}


def width_from_bits(bits: int) -> int:
    """Access width in words for 32/64/128-bit loads; anything else is one clear error."""
    if bits not in _WIDTH_BITS:
        raise InputError(f"access width={bits} bits is not supported; accepted: 32, 64, 128")
    return _WIDTH_BITS[bits]


@dataclass(frozen=True, slots=True)
class Geometry:
    """How a slot's loads meet the banks, for one (batch, wide_loads)."""

    batch: int
    wide_loads: bool
    loads: tuple[tuple[int, int], ...]  # (width_words, word_offset) per load
    width: int                          # words per lane per load
    lanes_per_phase: int                # m
    phases: int                         # P = width
    classes: int                        # C: bank groups per phase (= m)
    packed_phases: int                  # P/2: phases of a return-packed slot (0: never packed)

    @property
    def n_loads(self) -> int:
        return len(self.loads)


def geometry(batch: int, wide_loads: bool) -> Geometry:
    loads = tuple(access_pattern(batch, wide_loads))
    width = loads[0][0]
    m = banks.lanes_per_phase(width)
    return Geometry(int(batch), bool(wide_loads), loads, width, m, width, m, width // 2)


def column_classes(cols, batch: int, wide_loads: bool) -> np.ndarray:
    """Bank class of each column for this access (same partition for every load of a slot)."""
    g = geometry(batch, wide_loads)
    width, off = g.loads[0]
    return banks.bank_group(np.asarray(cols, dtype=np.int64) * g.batch + off, width)


# ----------------------------------------------------------------------------- lower bound


def row_lower_bound(counts: np.ndarray, groups: np.ndarray, lanes: int) -> np.ndarray:
    """Least wavefronts per load of each row: ``T*`` of the module docstring (exact optimum).

    ``counts``: (rows, C) distinct columns per class; ``groups``: (rows,) ``G = k P``;
    ``lanes``: ``m``. Requires ``counts.sum(1) <= groups * lanes``.
    """
    counts = np.asarray(counts, dtype=np.int64)
    G = np.asarray(groups, dtype=np.int64).reshape(-1)
    if np.any(counts.sum(axis=1) > G * lanes):
        raise InputError("a row has more nonzeros than lanes x slots")
    S = np.cumsum(-np.sort(-counts, axis=1), axis=1)  # S_a, a = 1..C
    a = np.arange(1, counts.shape[1] + 1, dtype=np.int64)

    def ok(T, rows=slice(None)):
        g = G[rows]
        lo_, r = T // g, T % g
        F = (r[:, None] * np.minimum(lanes, a * (lo_[:, None] + 1))
             + (g - r)[:, None] * np.minimum(lanes, a * lo_[:, None]))
        return np.all(S[rows] <= F, axis=1)

    # T* is the least T >= the simple bound with ok(T) (ok only gains with T); usually the
    # simple bound itself, else a bisection of the rows left
    lo = np.maximum(G, counts.max(axis=1, initial=0))
    hi = np.maximum(lo, G * lanes)
    holds = ok(lo)
    hi = np.where(holds, lo, hi)
    lo = np.where(holds, lo, lo + 1)
    rows = np.flatnonzero(lo < hi)
    while rows.size:
        mid = (lo[rows] + hi[rows]) // 2
        good = ok(mid, rows)
        hi[rows] = np.where(good, mid, hi[rows])
        lo[rows] = np.where(good, lo[rows], mid + 1)
        rows = rows[lo[rows] < hi[rows]]
    return lo


def packed_lower_bound(counts: np.ndarray, slots: np.ndarray, g: Geometry
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Least wavefronts per load of each row when slots may be return-packed, and the fewest
    packed slots that reach it: ``(T, j)``, both (rows,) int64 (module docstring).

    ``counts``: (rows, C) distinct columns per class; ``slots``: (rows,) ``k``. A row with
    ``j`` packed slots has ``G_j = (k - j) P + j P / 2`` groups of ``m`` lanes; the optimum is
    ``min_j T*(G_j)`` over the ``j`` whose lanes hold the row (``n <= G_j m``).
    """
    counts = np.asarray(counts, dtype=np.int64)
    k = np.asarray(slots, dtype=np.int64).reshape(-1)
    P, Q, m = g.phases, g.packed_phases, g.lanes_per_phase
    best = row_lower_bound(counts, k * P, m)
    j_best = np.zeros_like(best)
    if Q == 0:
        return best, j_best
    n = counts.sum(axis=1)
    # a packed slot saves P - Q groups and holds Q m lanes: j <= (k P m - n) / ((P - Q) m)
    j_max = np.minimum(k, (k * P * m - n) // ((P - Q) * m))
    for j in range(1, int(j_max.max(initial=0)) + 1):
        rows = np.flatnonzero(j_max >= j)
        T = row_lower_bound(counts[rows], k[rows] * P - j * (P - Q), m)
        better = T < best[rows]
        best[rows[better]] = T[better]
        j_best[rows[better]] = j
    return best, j_best


# ----------------------------------------------------------------------------- layouts


def _slot_table(indptr, ks):
    nnz = np.diff(np.asarray(indptr, dtype=np.int64))
    ks = np.asarray(ks, dtype=np.int64)
    if np.any(nnz > ks * WARP):
        raise InputError("a row has more nonzeros than 32 x its slots")
    row_of_slot = np.repeat(np.arange(ks.size), ks)
    slot_in_row = np.arange(int(ks.sum())) - np.repeat(np.cumsum(ks) - ks, ks)
    pos = slot_in_row[:, None] * WARP + np.arange(WARP)
    return nnz, row_of_slot, pos


def _naive_many(indptr, indices, ks, *, batch, wide_loads, rng):
    nnz, row_of_slot, pos = _slot_table(indptr, ks)
    return np.where(pos < nnz[row_of_slot][:, None], pos, -1)


def _random_many(indptr, indices, ks, *, batch, wide_loads, rng):
    indptr = np.asarray(indptr, dtype=np.int64)
    nnz, row_of_slot, pos = _slot_table(indptr, ks)
    row = np.repeat(np.arange(nnz.size), nnz)
    perm = np.argsort(row + rng.random(row.size), kind="stable") - indptr[row]
    valid = pos < nnz[row_of_slot][:, None]
    src = indptr[row_of_slot][:, None] + np.where(valid, pos, 0)
    return np.where(valid, perm[np.minimum(src, max(perm.size - 1, 0))] if perm.size else -1, -1)


def _by_class(indptr, indices, batch, wide_loads):
    """Per-row class counts, class starts and the row's entries grouped by class."""
    g = geometry(batch, wide_loads)
    indptr = np.asarray(indptr, dtype=np.int64)
    nr = indptr.size - 1
    nnz = np.diff(indptr)
    row = np.repeat(np.arange(nr), nnz)
    cls = column_classes(indices, batch, wide_loads)
    C = g.classes
    key = row * C + cls
    counts = np.bincount(key, minlength=nr * C).reshape(nr, C)
    order = _stable_order(key, nr * C, C)            # entries grouped by (row, class)
    start = np.cumsum(counts, axis=1) - counts       # within-row offset of each class
    return g, counts, start, order


def _stable_order(key: np.ndarray, n_keys: int, C: int) -> np.ndarray:
    """``np.argsort(key, kind="stable")`` for ``key = row * C + class`` (rows ascending, keys
    below ``n_keys``), with NumPy's radix sort of 16-bit keys: runs of rows whose keys span
    2**16 values are sorted one at a time, modulo 2**16 (``C`` divides 2**16, so no row
    straddles two runs and every key before a run's start is below it)."""
    span = 1 << 16
    if n_keys <= span:
        return np.argsort(key.astype(np.uint16), kind="stable")
    if span % C:
        return np.argsort(key, kind="stable")
    bounds = np.searchsorted(key, np.arange(0, n_keys + span, span))
    out = np.empty(key.size, dtype=np.intp)
    low = (key & (span - 1)).astype(np.uint16)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if b > a:
            out[a:b] = np.argsort(low[a:b], kind="stable") + a
    return out


def _water_fill(counts, limit, m: int, caps, rule: str):
    """Choose a class for every (row, position): int8 picks and int32 ranks, -1 = padding.

    Positions ``0 .. limit[r] - 1`` of row ``r`` form groups of ``m`` (group ``p // m``).
    rule "greedy": least used class in the current group, ties to the largest remaining.
    rule "optimal": largest remaining class whose count in the group is below ``caps[r, q]``.
    (Ties between classes go to the lowest class index.)

    The rules are position by position, but solved a group at a time: in a group, the ``t``-th
    pick of class ``c`` (``t = 0, 1, ..``) happens when the class has ``rem_c - t`` left and
    has been used ``t`` times, so each class offers a sequence of "tokens" whose score gets
    strictly worse with ``t`` ("optimal": ``rem_c - t``, larger first, at most ``caps`` of
    them; "greedy": ``t`` first, then larger ``rem_c - t``). Taking the best head every time
    is then a merge: the group's picks are the ``m`` best tokens in the order (score, class),
    which one sort per group gives for all rows, instead of ``m`` whole-array steps.
    """
    if caps is not None:
        return _water_fill_capped(counts, limit, m, caps)
    nr, C = counts.shape
    limit = np.asarray(limit, dtype=np.int64)
    npos = int(limit.max(initial=0))
    rem = counts.astype(np.int64)
    taken = np.zeros_like(rem)
    picks = np.full((nr, npos), -1, dtype=np.int8)
    ranks = np.zeros((nr, npos), dtype=np.int32)
    cls = np.arange(C, dtype=np.int64)
    big = int(counts.max(initial=0)) + 1
    for p0 in range(0, npos, m):
        width = min(m, npos - p0)                  # positions of this group
        live = limit > p0
        n_live = int(np.count_nonzero(live))
        if n_live == 0:
            break
        # live rows: usually a prefix (rows come longest first), else an index array
        rows = slice(0, n_live) if live[:n_live].all() else np.flatnonzero(live)
        r = rem[rows]                              # (live rows, C) left at the group's start
        if caps is None:
            # tokens beyond the first `width` of a row are never taken; greedy takes all its
            # t-th tokens before any (t+1)-th one, so t < T where sum_c min(r_c, T) >= width
            need = np.full(n_live, width, dtype=np.int64)
            for t_max in range(1, width + 1):
                need = np.where((need == width) & (np.minimum(r, t_max).sum(axis=1) >= width),
                                t_max, need)
            n_tok = np.minimum(r, need[:, None])
        else:
            n_tok = np.minimum(np.minimum(r, caps[rows, p0 // m][:, None]), width)
        T = int(n_tok.max(initial=0))
        if T == 0:
            continue
        t = np.arange(T, dtype=np.int64)
        # one integer per token: (score, class, t) in lexicographic order, so a plain sort is
        # the merge; class and t are decoded from the low digits. score = -r + t * ds, so the
        # key is a per-class base plus a per-t step (one broadcast add on the big array).
        ds = big + 1 if caps is None else 1       # greedy: t (rem <= big - 1) before rem - t
        step = t * (ds * C * T + 1)
        hi = (big * C + C) * T + int(step[-1]) + 1  # bounds |key| of every token
        dt = np.int32 if hi < np.iinfo(np.int32).max else np.int64   # int32 sorts faster
        done = np.iinfo(dt).max
        tokens = ((cls - r * C) * T).astype(dt)[:, :, None] + step.astype(dt)
        tokens[t >= n_tok[:, :, None]] = done
        key = np.sort(tokens.reshape(n_live, C * T), axis=1)[:, :width]
        ok = key != done
        cc = np.where(ok, (key // T) % C, 0)
        tt = key % T
        w = key.shape[1]                           # < width when a row offers fewer tokens
        picks[rows, p0:p0 + w] = np.where(ok, cc, -1)
        ranks[rows, p0:p0 + w] = np.where(ok, np.take_along_axis(taken[rows], cc, 1) + tt, 0)
        # picks per class: the row's tokens up to its last pick (keys are distinct)
        last = np.where(ok, key, np.iinfo(dt).min).max(axis=1)
        got = np.count_nonzero((tokens <= last[:, None, None]) & (tokens != done), axis=2)
        taken[rows] += got
        rem[rows] -= got
    return picks, ranks, rem.astype(np.int32)


def _water_fill_capped(counts, limit, m: int, caps):
    """:func:`_water_fill` with rule "optimal": the same picks, ranks and remainders, with less
    array work per group (:func:`_capped_group`). Rows whose tokens would make a long sort
    (more than :data:`_SHORT_SORT` keys) are split by their own count of tokens per class:
    each row's picks depend on its tokens only."""
    nr, C = counts.shape
    limit = np.asarray(limit, dtype=np.int64)
    npos = int(limit.max(initial=0))
    big = int(counts.max(initial=0)) + 1
    dt = np.int32 if big < 1 << 20 else np.int64      # rem, taken
    rem = counts.astype(dt)
    taken = np.zeros_like(rem)
    picks = np.full((nr, npos), -1, dtype=np.int8)
    ranks = np.zeros((nr, npos), dtype=np.int32)
    for p0 in range(0, npos, m):
        width = min(m, npos - p0)                  # positions of this group
        live = limit > p0
        n_live = int(np.count_nonzero(live))
        if n_live == 0:
            break
        # live rows: usually a prefix (rows come longest first), else an index array
        rows = slice(0, n_live) if live[:n_live].all() else np.flatnonzero(live)
        r = rem[rows]                              # (live rows, C) left at the group's start
        cap = np.clip(caps[rows, p0 // m], 0, width).astype(dt)   # (a cap below 0: none)
        n_tok = np.minimum(r, cap[:, None])        # tokens of each class
        T = int(n_tok.max(initial=0))
        if T == 0:
            continue
        parts = [(rows, r, n_tok, T)]
        if C * T > _SHORT_SORT and C <= _SHORT_SORT:
            per_row = n_tok.max(axis=1)
            short = per_row * C <= _SHORT_SORT
            if short.any():
                idx = np.arange(n_live) if isinstance(rows, slice) else rows
                long_ = ~short
                parts = [(idx[sel], r[sel], n_tok[sel], t_max) for sel, t_max in
                         ((short, int(per_row[short].max())), (long_, T)) if sel.any()]
        for sub, r_s, n_s, t_max in parts:
            if t_max == 0:
                continue
            p, k, got = _capped_group(r_s, n_s, taken[sub], t_max, width, big)
            picks[sub, p0:p0 + p.shape[1]] = p
            ranks[sub, p0:p0 + p.shape[1]] = k
            taken[sub] += got
            rem[sub] -= got
    return picks, ranks, rem.astype(np.int32)


_SHORT_SORT = 64   # keys per row that NumPy sorts fast (longer rows sort several times slower)


def _capped_group(r, n_tok, taken, T: int, width: int, big: int):
    """One group of :func:`_water_fill_capped` for some rows: ``(picks, ranks, got)``, picks
    int8 (-1 = padding) and ranks of the group's first ``min(width, C * T)`` positions, and the
    picks per class. ``r``: remaining per class; ``n_tok``: tokens per class (at most ``T``);
    ``taken``: picks per class so far; ``big``: more than any count.

    A token's key packs (score, class, t) into bit fields, ``(big - r + t) << sh | class << tb
    | t``: ascending keys are the merge order of :func:`_water_fill` (larger ``r - t`` first,
    then the lower class, then ``t``), decoded with shifts and masks. A class's picks are its
    tokens up to the group's last key, counted from its first key and the key step. With at
    most one token per class and no more classes than positions (every cap 1) every token is
    taken, so only the classes' order is needed.
    """
    n, C = r.shape
    cb = max(0, (C - 1).bit_length())              # bits of a class (C is a power of two)
    tb = (T - 1).bit_length()                      # bits of t
    sh = cb + tb
    kt = np.int64 if (big + T) << sh >= np.iinfo(np.int32).max else np.int32
    done = np.iinfo(kt).max                        # above every key: no token
    base = ((big - r).astype(kt) << sh) | (np.arange(C, dtype=kt) << tb)   # keys of t = 0
    taken_at = (np.arange(n, dtype=np.intp) * C)[:, None]  # + class: index into taken, flat
    taken = taken.reshape(-1)
    if T == 1 and C <= width:
        key = np.sort(np.where(n_tok > 0, base, done), axis=1)
        ok = key != done
        cc = (key >> tb) & (C - 1)                 # a class even where not ok (masked)
        return (np.where(ok, cc, -1), np.where(ok, np.take(taken, taken_at + cc), 0),
                (n_tok > 0).astype(taken.dtype))
    step = (1 << sh) + 1                           # key(c, t + 1) - key(c, t)
    t = np.arange(T, dtype=kt)[:, None, None]
    tokens = np.where(t < n_tok, base + t * step, done)            # (T, rows, C)
    key = np.sort(tokens.transpose(1, 0, 2).reshape(n, T * C), axis=1)[:, :width]
    ok = key != done
    cc = (key >> tb) & (C - 1)                     # a class even where not ok (masked)
    rank = np.where(ok, np.take(taken, taken_at + cc) + (key & ((1 << tb) - 1)), 0)
    # picks per class: its tokens up to the row's last pick (keys ascend with t); a row with
    # fewer tokens than positions takes them all (its last key is `done`: the clip to n_tok)
    if key.shape[1] < width:
        got = n_tok
    else:
        got = np.clip((key[:, width - 1:width] - base) // step + 1, 0, n_tok)
    return np.where(ok, cc, -1), rank, got.astype(taken.dtype, copy=False)


def _flow_picks(n_g: np.ndarray, L: np.ndarray, m: int, npos: int):
    """Exact transportation by max-flow for one row; returns (picks, ranks) or None."""
    from scipy.sparse.csgraph import maximum_flow

    C, G = n_g.size, L.size
    src, sink = 0, 1 + C + G
    rows_, cols_, caps_ = [], [], []
    for c in range(C):
        rows_.append(src), cols_.append(1 + c), caps_.append(int(n_g[c]))
        for q in range(G):
            rows_.append(1 + c), cols_.append(1 + C + q), caps_.append(int(L[q]))
    for q in range(G):
        rows_.append(1 + C + q), cols_.append(sink), caps_.append(m)
    cap = sp.csr_matrix((np.array(caps_, np.int32), (rows_, cols_)), shape=(sink + 1, sink + 1))
    res = maximum_flow(cap, src, sink)
    if res.flow_value != int(n_g.sum()):
        return None
    flow = res.flow.toarray()[1:1 + C, 1 + C:1 + C + G]
    picks = np.full(npos, -1, dtype=np.int8)
    ranks = np.zeros(npos, dtype=np.int32)
    taken = np.zeros(C, dtype=np.int32)
    for q in range(G):
        p = q * m
        for c in range(C):
            for _ in range(int(flow[c, q])):
                picks[p], ranks[p] = c, taken[c]
                taken[c] += 1
                p += 1
    return picks, ranks


def _assemble(indptr, order, start, picks, ranks, ks):
    indptr = np.asarray(indptr, dtype=np.int64)
    nr = indptr.size - 1
    C = start.shape[1]
    real = picks >= 0
    if order.size == 0:
        local = np.full(picks.shape, -1, dtype=np.int64)
    else:
        it = np.int32 if max(order.size, nr * C) < np.iinfo(np.int32).max else np.int64
        first = indptr[:nr, None].astype(it)
        # where in `order` each (row, class) starts, read per position (a padding position's
        # pick -1 reads a neighbouring one, clipped, and is masked below)
        off = (start + first).astype(it).reshape(-1)
        at = np.take(off, (np.arange(nr, dtype=it) * C)[:, None] + picks, mode="clip") + ranks
        local = np.where(real, np.take(order.astype(it), at, mode="clip") - first, -1)
    keep = np.arange(picks.shape[1])[None, :] < (np.asarray(ks) * WARP)[:, None]
    return local[keep].reshape(-1, WARP).astype(np.int64)


def _greedy_many(indptr, indices, ks, *, batch, wide_loads, rng):
    ks = np.asarray(ks, dtype=np.int64)
    g, counts, start, order = _by_class(indptr, indices, batch, wide_loads)
    picks, ranks, _ = _water_fill(counts, ks * WARP, g.lanes_per_phase, None, "greedy")
    return _assemble(indptr, order, start, picks, ranks, ks)


def _group_lanes(ks, j, g: Geometry, npos: int) -> np.ndarray:
    """Lane position (``slot * 32 + lane``) of every group position of each row, or -1: (rows,
    npos). The row's ``k - j`` unpacked slots come first, ``P`` groups of ``m`` lanes each;
    then ``j`` packed slots, ``P / 2`` groups each, whose position ``i`` is the even lane
    ``2 i`` of its half (``2 m`` lanes; the odd partner is padding that copies it)."""
    P, Q, m = g.phases, g.packed_phases, g.lanes_per_phase
    v = np.arange(npos, dtype=np.int64)[None, :]
    q, i = v // m, v % m
    plain = (ks - j)[:, None] * P
    lane = np.where(q < plain, v, 0)
    if Q:
        qp = q - plain
        slot = (ks - j)[:, None] + qp // Q
        lane = np.where(q < plain, lane, slot * WARP + (qp % Q) * 2 * m + 2 * i)
    G = plain[:, 0] + j * Q
    return np.where(q < G[:, None], lane, -1)


def _optimal_many(indptr, indices, ks, *, batch, wide_loads, rng):
    ks = np.asarray(ks, dtype=np.int64)
    g, counts, start, order = _by_class(indptr, indices, batch, wide_loads)
    m = g.lanes_per_phase
    T, j = packed_lower_bound(counts, ks, g)
    G = ks * g.phases - j * (g.phases - g.packed_phases)
    q = np.arange(int(G.max(initial=0)))
    L = (T // np.maximum(G, 1))[:, None] + (q[None, :] < (T % np.maximum(G, 1))[:, None])
    picks, ranks, rem = _water_fill(counts, G * m, m, L, "optimal")
    for r in np.flatnonzero(rem.sum(axis=1) > 0):  # water-filling fell short: exact max-flow
        got = _flow_picks(counts[r], L[r, :G[r]], m, picks.shape[1])
        if got is None:  # cannot happen if the bound is right; never return a wrong layout
            raise AssertionError(f"optimal layout: no flow meets the bound for row {r}")
        picks[r], ranks[r] = got
    if j.any():  # group positions -> lanes (the identity for rows without a packed slot)
        npos = picks.shape[1]
        out_p = np.full((ks.size, int(ks.max(initial=0)) * WARP), -1, dtype=np.int8)
        out_r = np.zeros(out_p.shape, dtype=np.int32)
        out_p[:, :npos], out_r[:, :npos] = picks, ranks
        rows = np.flatnonzero(j)               # only these move
        lane = _group_lanes(ks[rows], j[rows], g, npos)
        sub_p = np.full((rows.size, out_p.shape[1]), -1, dtype=np.int8)
        sub_r = np.zeros(sub_p.shape, dtype=np.int32)
        rr, vv = np.nonzero(lane >= 0)
        sub_p[rr, lane[rr, vv]] = picks[rows[rr], vv]
        sub_r[rr, lane[rr, vv]] = ranks[rows[rr], vv]
        out_p[rows], out_r[rows] = sub_p, sub_r
        picks, ranks = out_p, out_r
    return _assemble(indptr, order, start, picks, ranks, ks)


@dataclass(frozen=True, slots=True)
class Layout:
    """A layout hook: per row ``layout(cols, k, *, batch, wide_loads, rng) -> (k, 32)``, and
    ``many(indptr, indices, ks, ...)`` for all rows at once (``(sum ks, 32)``)."""

    name: str
    many: Callable
    doc: str

    def __call__(self, cols, k: int, *, batch: int, wide_loads: bool,
                 rng: np.random.Generator) -> np.ndarray:
        cols = np.asarray(cols, dtype=np.int64)
        return self.many(np.array([0, cols.size]), cols, np.array([int(k)]), batch=batch,
                         wide_loads=wide_loads, rng=rng)


LAYOUTS: dict[str, Layout] = {
    "naive": Layout("naive", _naive_many, "column order: nonzero i at slot i//32, lane i%32"),
    "random": Layout("random", _random_many, "a seeded random permutation, then as naive"),
    "greedy": Layout("greedy", _greedy_many,
                     "position by position, the class least used in the phase so far"),
    "optimal": Layout("optimal", _optimal_many, "meets the exact lower bound (proof above)"),
}


def get_layout(name: str) -> Layout:
    if name not in LAYOUTS:
        raise InputError(f"layout={name!r} is not known; accepted: {', '.join(LAYOUTS)}")
    return LAYOUTS[name]


def layout_cost(cols, idx: np.ndarray, batch: int, wide_loads: bool) -> int:
    """Wavefronts of one row laid out by ``idx`` (k, 32), padding filled as the mapping does."""
    from .mapping import _fill_padding_columns

    cols = np.asarray(cols, dtype=np.int64)
    idx = np.asarray(idx)
    pad = idx < 0
    c = np.where(pad, 0, cols[np.where(pad, 0, idx)]).astype(np.int64)
    _fill_padding_columns(c, pad)
    return int(sum(banks.wavefronts(c * batch + off, w).sum()
                   for w, off in access_pattern(batch, wide_loads)))


# ----------------------------------------------------------------------------- analyser


@dataclass(frozen=True, slots=True, eq=False)
class LayoutReport:
    """Wavefronts and conflicts of a mapping's shared loads, at every level, and the bound."""

    layout: str
    batch: int
    wide_loads: bool
    wavefronts: np.ndarray             # int64 (n_warps, S, n_loads)
    conflicts: np.ndarray              # int64 (n_warps, S, n_loads): wavefronts - active phases
    per_row_wavefronts: np.ndarray     # int64 (n_rows,)
    per_row_conflicts: np.ndarray      # int64 (n_rows,)
    per_row_lower_bound: np.ndarray    # int64 (n_rows,) wavefronts
    per_warp_wavefronts: np.ndarray    # int64 (n_warps,)
    per_warp_conflicts: np.ndarray     # int64 (n_warps,)
    total_wavefronts: int
    total_conflicts: int
    lower_bound_wavefronts: int
    ideal_wavefronts: int              # one per phase (packed or not): no conflict at all

    @property
    def ratio_to_bound(self) -> float:
        return self.total_wavefronts / self.lower_bound_wavefronts

    @property
    def gap_wavefronts(self) -> int:
        return self.total_wavefronts - self.lower_bound_wavefronts

    @property
    def lower_bound_conflicts(self) -> int:
        """Conflicts counted against this layout's own ideal at the bound (at least 0; with
        return packing a layout of fewer phases can need fewer wavefronts than this layout's
        conflict-free count). For a layout that meets the bound: its conflicts."""
        return max(0, self.lower_bound_wavefronts - self.ideal_wavefronts)


_CHUNK_LANES = 1 << 22  # lanes analysed per call of banks.cost (memory bound only)


def _wavefront_table(words_per_load, widths) -> tuple[np.ndarray, np.ndarray]:
    """Wavefronts and bank conflicts (:func:`kernels_ir.banks.cost`) of every load: two int64
    arrays ``(n_warps, S, n_loads)``."""
    n_warps, S, _ = words_per_load[0].shape
    wf = np.zeros((n_warps, S, len(widths)), dtype=np.int64)
    conf = np.zeros_like(wf)
    step = max(1, _CHUNK_LANES // max(1, S * WARP))
    for i, (words, width) in enumerate(zip(words_per_load, widths, strict=True)):
        for w0 in range(0, n_warps, step):
            wf[w0:w0 + step, :, i], conf[w0:w0 + step, :, i] = banks.cost(
                words[w0:w0 + step], width)
    return wf, conf


def analyse(mapping: Mapping, batch: int, wide_loads: bool) -> LayoutReport:
    """Charge every shared load of ``mapping`` with :func:`kernels_ir.banks.cost`."""
    g = geometry(batch, wide_loads)
    words = slot_word_addresses(mapping, batch, wide_loads)
    wf, conf = _wavefront_table(words, [w for w, _ in g.loads])
    slot_rows = mapping.slot_rows  # (n_warps, S)
    per_slot = wf.sum(axis=2)
    n_rows = mapping.n_rows
    real = slot_rows >= 0
    per_row = np.bincount(slot_rows[real], weights=per_slot[real], minlength=n_rows)
    per_row_c = np.bincount(slot_rows[real], weights=conf.sum(axis=2)[real], minlength=n_rows)
    # lower bound per (warp, row-slot) from the class counts of its real entries
    R = len(mapping.slots)
    rs = mapping.slot_row_slot
    key = (np.arange(mapping.n_warps)[:, None, None] * R + rs[None, :, None]) * g.classes
    cls = column_classes(mapping.cols, batch, wide_loads)
    keep = ~mapping.pad
    counts = np.bincount((key + cls)[keep], minlength=mapping.n_warps * R * g.classes)
    counts = counts.reshape(mapping.n_warps * R, g.classes)
    ks = np.tile(np.asarray(mapping.slots, dtype=np.int64), mapping.n_warps)
    T = packed_lower_bound(counts, ks, g)[0] * g.n_loads
    rid = mapping.row_ids.reshape(-1)
    per_row_lb = np.zeros(n_rows, dtype=np.int64)
    per_row_lb[rid[rid >= 0]] = T[rid >= 0]
    return LayoutReport(
        layout=mapping.layout, batch=int(batch), wide_loads=bool(wide_loads),
        wavefronts=wf, conflicts=conf,
        per_row_wavefronts=per_row.astype(np.int64), per_row_conflicts=per_row_c.astype(np.int64),
        per_row_lower_bound=per_row_lb,
        per_warp_wavefronts=wf.sum(axis=(1, 2)), per_warp_conflicts=conf.sum(axis=(1, 2)),
        total_wavefronts=int(wf.sum()), total_conflicts=int(conf.sum()),
        lower_bound_wavefronts=int(T.sum()), ideal_wavefronts=int((wf - conf).sum()))


# ------------------------------------------------------------------- one row per lane mapping


def analyse_row_per_lane(U, *, n_ctas: int, warps_per_cta: int, batch: int, wide_loads: bool,
                         layout: str = "naive", seed: int = 0) -> LayoutReport:
    """The alternative mapping: one row per lane (32 rows per warp, CSR-vector style).

    Rows sorted by length are cut into blocks of 32 (one per warp and round); round ``j`` has
    ``K_j`` = the longest row in it, the same for all warps. Lane ``l`` holds its row's nonzeros
    in ``K_j`` slots (padding at the end, re-reading a column of its phase). Layouts: "naive"
    (column order), "random", "greedy" (slot by slot, each lane in turn takes its nonzero whose
    class is least used in the (slot, phase) so far), "optimal" (here: the greedy order, with the
    gap to the bound reported; an exact construction is not implemented for this mapping).
    Lower bound per (block, packing group), a group being the lanes one return-packed phase
    serves (a half warp for 128-bit loads, the warp for 64- and 32-bit ones):
    ``max(K, distinct columns of the fullest class in the group's lanes)``, since every slot
    costs such a group at least one wavefront, packed or not, and each distinct word needs one
    wavefront of its bank. ``per_row_*`` arrays are indexed by row of ``U`` (per-row wavefronts
    are the lane's share: the slot costs of the row's phase split evenly are not defined, so
    they are zeros).
    """
    from .mapping import _as_csr, _fill_padding_columns, _positive

    get_layout(layout)
    n_warps = _positive("n_ctas", n_ctas) * _positive("warps_per_cta", warps_per_cta)
    g = geometry(batch, wide_loads)
    M = _as_csr(U, False)
    n_rows = M.shape[0]
    nnz = np.diff(M.indptr)
    order = np.argsort(-nnz, kind="stable")
    n_blocks = math.ceil(n_rows / WARP)
    rounds = math.ceil(n_blocks / n_warps)
    rng = np.random.default_rng(seed)
    K = []
    for j in range(rounds):
        rows = order[j * n_warps * WARP:(j + 1) * n_warps * WARP]
        K.append(max(1, int(nnz[rows].max())))
    S = sum(K)
    cols = np.zeros((n_warps, S, WARP), dtype=np.int64)
    pad = np.ones((n_warps, S, WARP), dtype=bool)
    lb = 0
    # lower bound per packing group: a pair of phases (half warp, 128 bits), the warp (64 and 32
    # bits); every slot costs such a group at least one wavefront, packed or not
    n_groups = g.packed_phases or g.phases
    group_lanes = WARP // n_groups
    for j in range(rounds):
        off = sum(K[:j])
        for w in range(n_warps):
            b = j * n_warps + w
            rows = order[b * WARP:(b + 1) * WARP]
            if rows.size == 0:
                lb += K[j] * n_groups
                continue
            lane_cols = [M.indices[M.indptr[r]:M.indptr[r + 1]].astype(np.int64) for r in rows]
            placed = _row_per_lane_block(lane_cols, K[j], g, layout, rng)
            for lane, seq in enumerate(placed):
                for s, c in enumerate(seq):
                    if c >= 0:
                        cols[w, off + s, lane] = c
                        pad[w, off + s, lane] = False
            for p in range(n_groups):
                lanes = range(p * group_lanes, (p + 1) * group_lanes)
                allc = np.unique(np.concatenate(
                    [lane_cols[i] for i in lanes if i < len(lane_cols)] + [np.zeros(0, int)]))
                worst = np.bincount(column_classes(allc, batch, wide_loads),
                                    minlength=g.classes).max(initial=0)
                lb += max(K[j], int(worst))
    _fill_padding_columns(cols, pad)
    words = [cols * g.batch + o for _, o in g.loads]
    wf, conf = _wavefront_table(words, [w for w, _ in g.loads])
    zeros = np.zeros(n_rows, dtype=np.int64)
    return LayoutReport(
        layout=layout, batch=g.batch, wide_loads=g.wide_loads, wavefronts=wf, conflicts=conf,
        per_row_wavefronts=zeros, per_row_conflicts=zeros, per_row_lower_bound=zeros,
        per_warp_wavefronts=wf.sum(axis=(1, 2)), per_warp_conflicts=conf.sum(axis=(1, 2)),
        total_wavefronts=int(wf.sum()), total_conflicts=int(conf.sum()),
        lower_bound_wavefronts=int(lb * g.n_loads), ideal_wavefronts=int((wf - conf).sum()))


def _row_per_lane_block(lane_cols, k, g: Geometry, layout: str, rng) -> list[list[int]]:
    """Order each lane's columns over ``k`` slots; -1 = padding."""
    if layout == "naive":
        return [list(c) + [-1] * (k - c.size) for c in lane_cols]
    if layout == "random":
        return [list(rng.permutation(c)) + [-1] * (k - c.size) for c in lane_cols]
    # greedy (and "optimal", see the docstring): per slot and phase, lanes in turn take the
    # nonzero whose class has the fewest distinct columns in this (slot, phase) so far;
    # a column already read there is free (broadcast); ties to the lane's most frequent class.
    m = g.lanes_per_phase
    left = [list(c) for c in lane_cols]
    out = [[-1] * k for _ in lane_cols]
    cls_of = {}
    for c in lane_cols:
        for x, y in zip(c.tolist(), column_classes(c, g.batch, g.wide_loads).tolist(), strict=True):
            cls_of[x] = y
    for s in range(k):
        for p in range(0, len(lane_cols), m):
            seen: set[int] = set()
            used = np.zeros(g.classes, dtype=np.int64)
            for lane in range(p, min(p + m, len(lane_cols))):
                cand = left[lane]
                if not cand:
                    continue
                mine = np.bincount([cls_of[x] for x in cand], minlength=g.classes)
                best = min(range(len(cand)), key=lambda i: (
                    0 if cand[i] in seen else 1 + used[cls_of[cand[i]]],
                    -mine[cls_of[cand[i]]]))
                x = cand.pop(best)
                out[lane][s] = x
                if x not in seen:
                    seen.add(x)
                    used[cls_of[x]] += 1
    return out
