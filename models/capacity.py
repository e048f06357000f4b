"""Capacity model: does a recurrent layer fit in the persistent kernel, and what is the largest?

The persistent kernels (``kernels_ir/kernels/sparse_rnn.py``) run one CTA of
:data:`THREADS_PER_CTA` threads on every SM, hold every weight of ``U`` in registers for the whole
sequence and stage ``h_{t-1}`` in shared memory each step. Two limits decide whether a layer fits:

Registers (per thread)
    Rows of the recurrent matrix (``gates * N`` rows: 1 for RNN, 3 for GRU, 4 for LSTM) are dealt
    to ``n_warps = sm_count * warps_per_cta`` warps, ``R = ceil(rows / n_warps)`` row-slots per
    warp. Row-slot ``j`` of every warp holds ``K_j`` register slots per lane, ``K_j`` = the
    longest row of that row-slot over all warps, in slots of 32 nonzeros (rows sorted by length
    and dealt in groups of ``n_warps``, :func:`kernels_ir.mapping.map_matrix`). ``S = sum_j K_j``.
    A slot costs 2 registers (fp32 value + int32 word address), or 1 register for fp16 (16-bit
    value and 16-bit word address packed in one register, plus two registers per thread that a
    slot is unpacked into where it is used); dense tiles hold values only (1 register fp32,
    half a register fp16: two values packed, plus one for the unpacked value):
    ``sparse_rnn.weight_registers``. On top of the weights the kernel keeps, per
    thread (counted from the registers the builder declares, as
    ``sparse_rnn.registers_needed`` does, whose constants this module imports):
    ``REGS_PER_ROW`` (rid, xaddr, xv) for each of the ``R`` rows, ``REGS_PER_BATCH`` (the
    accumulator, the gathered h value and the shuffled partial sum) per batch column, and
    :data:`SCALAR_REGS` fixed registers (the staging group's 128-bit chunks and predicates, ids,
    addresses, loop counters).
    The total must stay within ``min(max_regs_per_thread, regs_per_sm / threads_per_cta)``.
Registers as ptxas allocates them
    The count above is the IR's; the GPU runs what ptxas allocates, and a kernel that needs
    more than 255 registers spills to local memory and runs far slower than the simulator says
    (the dense h1536 batch-4 kernel on an H100: 179 counted, 255 allocated and 356 bytes of
    spill stores; the simulator predicted it 38% too fast). So a layer *fits* only when its count
    plus what ptxas needs beyond it stays within the limit (``ptxas=False`` gives the count
    alone, the answer before ptxas was consulted):

    - ``kernels_ir.kernels.sparse_rnn.ptxas_extra_regs(arch, dense, B)``: ptxas pipelines the
      shared loads on its own (its registers do not depend on the prefetch depth the IR has) and
      keeps 64-bit addresses; the largest excess of ptxas' registers over the count at prefetch
      depth 1, per architecture, kernel kind and batch, measured by
      ``measurements/ptxas_sweep.py`` on layers at the limits before and after this correction
      (``measurements/ptxas_sweep.json``: sm_70 with CUDA 12's NVRTC, sm_90 with nvcc; a kernel
      that spilled counts as needing 256). It is largest for 128-bit loads at batch 4 (long rows:
      ptxas keeps about ten ``LDS.128`` in flight) and 0 at batch 1 and 2, where the count is
      already above what ptxas allocates. An architecture not measured takes the largest value;
    - dense tiles of ``R >= 2`` row-slots: every row-slot reads the same h words, and ptxas
      loads each once for all of them (``K`` shared loads per step in the SASS, not ``R K``)
      and may keep all ``K B`` live: ``(K - 1) B`` more (``sparse_rnn.dense_reuse_registers``;
      fp16: two per register, not measured).

    The kernel builder refuses the same layers (``CapacityError`` naming ptxas). fp16 takes the
    fp32 kernels' measured excess (the compile tests build fp16 kernels at their limits for sm_70
    and sm_90 and find no spill); the gru / lstm cells take the vanilla cell's measured ptxas
    excess (their epilogue's registers are in the count).
Shared memory (per CTA)
    ``h`` is staged batch-interleaved ``[N][B]``, rounded up to whole 128-bit chunks: ``N * B``
    words of 4 bytes whatever the weights' dtype (h, x and the sums stay fp32); dense tiles
    read up to ``32 * K`` columns, so the array is at least ``32 * K * B`` words. It must fit in
    ``smem_bytes_per_cta``.
fp16 column addresses (sparse)
    An fp16 slot keeps its column's word address ``col * B`` in 16 bits: ``N * B`` (rounded up
    to whole 128-bit chunks) must be at most :data:`FP16_ADDR_WORDS` = 65536.

Expected ``K_j`` of a random layer (each weight nonzero with probability ``d``)
    A row's nonzero count is Binomial(N, d). The longest row of row-slot ``j`` is the
    ``(j * n_warps + 1)``-th largest of ``rows`` such counts. We take its median through Benard's
    median-rank approximation: the order statistic of rank ``k`` (from the top) out of ``n`` sits
    at the quantile ``1 - (k - 0.3) / (n + 0.4)`` of the row distribution (for ``k = 1`` this is
    ``1 - 0.7 / n``, against the exact median of the maximum ``1 - ln 2 / n``). The quantile is
    the exact binomial one (``scipy.stats.binom.ppf``) in :func:`expected_slots`, and the
    Cornish-Fisher normal approximation (with the skewness term) in the vectorised fast path
    :func:`row_slot_quantiles` that the analytical sweep uses (``scipy.stats`` costs 0.8 s to
    import and its ``ppf`` 2 us per value). A concrete matrix needs neither: its mapping gives
    ``K_j`` exactly.

The largest hidden size that fits is found by bisection over N (the requirement grows with N up to
the rounding of ``K_j``; the search checks the neighbourhood of the answer so that the reported N
fits and N + 1 does not).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kernels_ir.errors import CapacityError, InputError
from kernels_ir.kernels.sparse_rnn import (
    DENSE_REGS,
    FIXED_REGS,
    FP16_ADDR_WORDS,
    PTXAS_SOURCE,
    REGS_PER_BATCH,
    REGS_PER_ROW,
    ptxas_extra_regs,
    weight_registers,
)

__all__ = ["THREADS_PER_CTA", "WARP", "SCALAR_REGS", "DTYPES", "CELLS", "Fit", "MaxHidden",
           "registers_per_thread", "ptxas_extra", "smem_bytes", "reg_limit", "row_slot_quantiles",
           "expected_slots", "unit_slot_quantiles", "fit", "check", "max_hidden",
           "capacity_table", "check_cell", "check_dtype", "check_heads", "fp16_index_fits",
           "FP16_INDEX",
           "H_BYTES"]

THREADS_PER_CTA = 256  # the kernel's block (sparse_rnn.DEFAULT_THREADS): a design choice
WARP = 32              # lanes per warp: defined by the IR
# registers besides weights, rows and batch columns: the kernel builder's count for its largest
# variant (staging chunks, scalars, barrier extras; sparse_rnn.registers_needed)
SCALAR_REGS = FIXED_REGS
DTYPES = {"fp32": 4, "fp16": 2}  # bytes per weight value (h stays fp32: 4 bytes)
H_BYTES = 4                      # bytes per element of the staged h, whatever the dtype
CELLS = {"rnn": 1, "gru": 3, "lstm": 4}  # recurrent rows = gates * N (models.sparse.GATES)
FP16_INDEX = "fp16 column index"  # the limit of a sparse fp16 layer whose h 16 bits cannot address
_MEDIAN_RANK = (0.3, 0.4)  # Benard: quantile 1 - (k - 0.3) / (n + 0.4)


def check_dtype(dtype: str) -> int:
    if dtype not in DTYPES:
        raise InputError(f"dtype={dtype!r} is not supported; accepted: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def check_cell(cell: str) -> int:
    if cell not in CELLS:
        raise InputError(f"cell={cell!r} is not supported; accepted: {', '.join(CELLS)}")
    return CELLS[cell]


def n_warps(spec) -> int:
    return spec.sm_count * (THREADS_PER_CTA // WARP)


def reg_limit(spec) -> int:
    """Registers one thread may use at one CTA of THREADS_PER_CTA per SM."""
    return min(spec.max_regs_per_thread, spec.regs_per_sm // THREADS_PER_CTA)


def registers_per_thread(S, R, batch, *, dense: bool, dtype: str = "fp32", ptxas: bool = True,
                         arch: str | None = None, cell: str = "rnn"):
    """Registers per thread (array-friendly): weights + per-row + per-batch + scalar registers,
    a gated cell's epilogue registers (``sparse_rnn.cell_registers``: its gate values and, LSTM,
    the cell state of each unit), and with ``ptxas`` what ptxas needs beyond them on ``arch``
    (see the module docstring; ``arch=None``: the largest of the measured architectures).

    ``ptxas=False``, fp32, equals ``kernels_ir.kernels.sparse_rnn.registers_needed`` (tested).
    """
    S, R = np.asarray(S), np.asarray(R)
    check_dtype(dtype)
    weights = weight_registers(S, dense, dtype)
    counted = weights + REGS_PER_ROW * R + REGS_PER_BATCH * np.asarray(batch) + \
        FIXED_REGS + (DENSE_REGS if dense else 0)
    if cell != "rnn":
        gates = check_cell(cell)
        counted = counted + gates + (R // gates if cell == "lstm" else 0)
    if not ptxas:
        return counted
    return counted + ptxas_extra(S, R, batch, dense=dense, dtype=dtype, arch=arch)


def ptxas_extra(S, R, batch, *, dense: bool, dtype: str = "fp32", arch: str | None = None):
    """Registers ptxas needs beyond the kernel's count (array-friendly): the measured excess
    (``sparse_rnn.ptxas_extra_regs``) and, dense with ``R >= 2``, the h words of the tile kept
    for the later row-slots (``sparse_rnn.dense_reuse_registers``; f32 words for either dtype)."""
    S, R = np.asarray(S), np.asarray(R)
    extra = np.vectorize(lambda b: ptxas_extra_regs(arch, dense, int(b)))(np.asarray(batch))
    if not dense:
        return extra + 0 * S
    kmax = S // np.maximum(R, 1)
    words = (kmax - 1) * np.asarray(batch)
    reuse = np.where(R >= 2, words, 0)   # h words: f32 whatever the weights' dtype
    return extra + reuse


def smem_bytes(hidden, batch, *, dense: bool, dtype: str = "fp32", kmax=None):
    """Shared-memory bytes of the staged h (array-friendly; f32 words whatever ``dtype``); see
    the module docstring."""
    check_dtype(dtype)
    hidden, batch = np.asarray(hidden), np.asarray(batch)
    words = -(-(hidden * batch) // 4) * 4
    if dense:
        k = -(-hidden // WARP) if kmax is None else np.asarray(kmax)
        words = np.maximum(words, WARP * k * batch)
    return words * H_BYTES


def fp16_index_fits(hidden, batch, *, dense: bool, dtype: str):
    """Whether a sparse fp16 slot's 16-bit word address reaches all of h (array-friendly;
    always true for fp32 and dense kernels)."""
    if dtype != "fp16" or dense:
        return np.ones(np.broadcast(np.asarray(hidden), np.asarray(batch)).shape, bool)
    words = -(-(np.asarray(hidden) * np.asarray(batch)) // 4) * 4
    return words <= FP16_ADDR_WORDS


def _cf_quantile(p, n, d):
    """Cornish-Fisher (normal + skewness) approximation of the Binomial(n, d) quantile ``p``."""
    from scipy.special import ndtri

    n = np.asarray(n, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    mu = n * d
    sigma = np.sqrt(np.maximum(n * d * (1.0 - d), 1e-12))
    z = ndtri(np.clip(p, 1e-12, 1 - 1e-12))
    gamma = (1.0 - 2.0 * d) / sigma
    q = mu + sigma * (z + gamma * (z * z - 1.0) / 6.0)
    q = np.where(d >= 1.0, n, q)
    return np.clip(np.rint(q), 0, n)


def row_slot_quantiles(hidden, rows, density, nw, rmax: int | None = None, exact: bool = False):
    """Expected longest and typical row (nonzeros) of each row-slot ``j``.

    Returns ``(longest, typical, mask)`` arrays of shape ``(configs, Rmax)``: the
    ``(j nw + 1)``-th largest row (sets ``K_j``) and the middle row of the group (rank
    ``j nw + n_j / 2``, the row a typical warp holds), and ``j < R``.
    """
    hidden = np.atleast_1d(np.asarray(hidden, dtype=np.int64))
    rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
    density = np.atleast_1d(np.asarray(density, dtype=np.float64))
    nw = np.atleast_1d(np.asarray(nw, dtype=np.int64))
    R = -(-rows // nw)
    if rmax is None:
        rmax = int(R.max(initial=1))
    j = np.arange(rmax)[None, :]
    mask = j < R[:, None]
    n_j = np.clip(rows[:, None] - j * nw[:, None], 1, nw[:, None])
    a, b = _MEDIAN_RANK
    top_rank = j * nw[:, None] + 1
    mid_rank = j * nw[:, None] + (n_j + 1) / 2.0
    p_top = 1.0 - (top_rank - a) / (rows[:, None] + b)
    p_mid = 1.0 - (mid_rank - a) / (rows[:, None] + b)
    if exact:
        from scipy.stats import binom

        def q(p):
            return binom.ppf(np.clip(p, 0.0, 1.0), hidden[:, None], density[:, None])
    else:
        def q(p):
            return _cf_quantile(p, hidden[:, None], density[:, None])
    longest = np.where(mask, q(p_top), 0.0)
    typical = np.where(mask, q(p_mid), 0.0)
    return longest, typical, mask


def _binom_window(n: int, d: float):
    """``(lo, pmf)``: the Binomial(n, d) probabilities of ``lo .. hi``, the counts within 12
    standard deviations of the mean (normalised; outside it the mass is below 1e-30)."""
    from scipy.special import gammaln

    mu, sd = n * d, np.sqrt(n * d * (1.0 - d))
    lo = int(max(0, np.floor(mu - 12.0 * sd - 1)))
    hi = int(min(n, np.ceil(mu + 12.0 * sd + 1)))
    k = np.arange(lo, hi + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        lp = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0) + k * np.log(d) + \
            (n - k) * np.log1p(-d)
    pmf = np.exp(lp - lp.max())
    return lo, pmf / pmf.sum()


def unit_slot_quantiles(hidden: int, density: float, gates: int, nw: int, *,
                        typical: bool = False, units: int | None = None, groups: int = 1):
    """Expected longest gate row (nonzeros) of each unit group of a gated cell: int array of
    ``ceil(N / nw)`` values, group ``j`` filling row-slots ``j * gates .. j * gates + gates - 1``;
    with ``typical`` also the median gate row of the group (the row a typical warp holds), as
    ``(longest, typical)``.

    :func:`kernels_ir.mapping.map_matrix` sorts the units by the total ``T = X_0 + ... +
    X_{G-1}`` of their gate rows (each ``X_g`` Binomial(N, d), ``T`` Binomial(G N, d)) and deals
    them in groups of ``nw``: group ``j`` holds the units whose totals rank ``j nw + 1 ..
    j nw + n_j`` from the top. A gate row of such a unit follows the distribution of ``X_0``
    given that ``T`` lies in the group's band of the upper tail (exact: ``P(X_0 = x, T = t) =
    P(X_0 = x) P(X_1 + ... = t - x)``, the totals at the band's edges taken in the fraction
    the band holds of them), and row-slot ``j * gates + g`` takes the longest of the ``n_j``
    rows of gate ``g``: Benard's median rank ``k = 1`` out of ``n_j``, the quantile
    ``1 - 0.7 / (n_j + 0.4)`` of that distribution (the same rule the rows of the vanilla cell
    follow, :func:`row_slot_quantiles`). Sorting by the total sorts each gate only loosely, so
    these rows are longer than the longest of ``G N`` rows sorted one by one at that rank.

    ``units`` (default ``N``): how many units are dealt, when a row's ``N`` columns are not the
    number of units (a head's block of a multi-head layer: :func:`expected_slots`); ``groups``:
    how many such deals (the CTAs of a multi-head layer, each dealing its own heads) share a
    row-slot's ``K``: it takes the longest of their ``groups * n_j`` rows. With ``gates`` 1 this
    is the vanilla cell's deal (the total is the row).
    """
    n, d = int(hidden), float(density)
    u = n if units is None else int(units)
    Ru = -(-u // nw)
    if d >= 1.0:
        full = np.full(Ru, n, dtype=np.int64)
        return (full, full.copy()) if typical else full
    xl, px = _binom_window(n, d)
    yl, py = _binom_window((gates - 1) * n, d)
    # joint[i, k] = P(X_0 = xl + i) P(X_1 + ... = yl + k - i): the total is xl + yl + k
    joint = np.zeros((px.size, px.size + py.size - 1))
    np.put_along_axis(joint, np.arange(px.size)[:, None] + np.arange(py.size)[None, :],
                      px[:, None] * py[None, :], axis=1)
    # totals from the top: units of total t hold the upper-tail fractions (below, above]
    joint = joint[:, ::-1]
    pt = joint.sum(axis=0)
    above = np.cumsum(pt)                      # P(T >= t)
    below = above - pt
    cum = np.cumsum(joint, axis=1)             # P(X_0 = x, T >= t)
    # mass of each x among the units of the top fraction p, at the band edges of every group
    edges = np.minimum(np.arange(Ru + 1) * nw, u) / u
    k = np.minimum(np.searchsorted(above, edges), pt.size - 1)
    part = np.clip(edges - below[k], 0.0, None) / np.maximum(pt[k], 1e-300)
    top = np.where(k > 0, cum[:, np.maximum(k - 1, 0)], 0.0) + joint[:, k] * part
    out = np.empty(Ru, dtype=np.int64)
    mid = np.empty(Ru, dtype=np.int64)
    a, b = _MEDIAN_RANK
    for j in range(Ru):
        nj = min(nw, u - j * nw)
        q = np.clip(top[:, j + 1] - top[:, j], 0.0, None)
        cdf = np.cumsum(q / q.sum())
        out[j] = xl + int(np.searchsorted(cdf, 1.0 - (1 - a) / (groups * gates * nj + b)
                                          - 1e-12))
        mid[j] = xl + int(np.searchsorted(cdf, 0.5))
    return (out, mid) if typical else out


def expected_slots(spec, hidden: int, density: float, cell: str = "rnn", *,
                   dense: bool = False, exact: bool = True, heads: int = 1,
                   local: bool = False) -> tuple[tuple[int, ...], int]:
    """Expected ``(K_j per row-slot, R)`` of a random layer on ``spec`` (one CTA per SM).

    A gated cell's units are dealt with their ``gates`` rows together
    (:func:`kernels_ir.mapping.map_matrix`): ``R = gates * ceil(N / n_warps)``, and the row-slots
    of unit group ``j`` take the expected longest gate row of the group's units
    (:func:`unit_slot_quantiles`, exact whatever ``exact`` says).

    ``heads`` H > 1 (block-diagonal ``U``, ``density`` within the blocks): a row has
    Binomial(N / H, d) nonzeros. ``local``: whole heads per CTA, ``ceil(H / n_ctas)`` of them,
    each CTA dealing its heads' units over its own warps and a row-slot's ``K`` the longest over
    the CTAs that hold heads (:func:`unit_slot_quantiles` with ``units`` and ``groups``); a
    dense tile still spans all ``N`` columns. Otherwise the rows are dealt over all warps as
    for one head."""
    gates = check_cell(cell)
    rows = gates * int(hidden)
    nw = n_warps(spec)
    heads = int(heads)
    if heads > 1:
        size = int(hidden) // heads
        if local:
            wpc = THREADS_PER_CTA // WARP
            hpc = -(-heads // spec.sm_count)
            Ru = -(-(hpc * size) // wpc)
            if dense:
                return (-(-int(hidden) // WARP),) * (gates * Ru), gates * Ru
            longest = unit_slot_quantiles(size, density, gates, wpc, units=hpc * size,
                                          groups=-(-heads // hpc))
            K = np.maximum(1, -(-longest // WARP))
            return tuple(int(k) for k in K for _ in range(gates)), gates * Ru
        if not dense:
            if gates > 1:
                longest = unit_slot_quantiles(size, density, gates, nw, units=int(hidden))
                K = np.maximum(1, -(-longest // WARP))
                return tuple(int(k) for k in K for _ in range(gates)), gates * len(K)
            R = -(-rows // nw)
            longest, _, _ = row_slot_quantiles(size, rows, density, nw, R, exact=exact)
            K = np.maximum(1, np.ceil(longest[0] / WARP)).astype(int)
            return tuple(int(k) for k in K), R
    if gates > 1:
        Ru = -(-int(hidden) // nw)
        if dense:
            return (-(-int(hidden) // WARP),) * (gates * Ru), gates * Ru
        longest = unit_slot_quantiles(hidden, density, gates, nw)
        K = np.maximum(1, -(-longest // WARP))
        return tuple(int(k) for k in K for _ in range(gates)), gates * Ru
    R = -(-rows // nw)
    if dense:
        return (-(-int(hidden) // WARP),) * R, R
    longest, _, _ = row_slot_quantiles(hidden, rows, density, nw, R, exact=exact)
    K = np.maximum(1, np.ceil(longest[0] / WARP)).astype(int)
    return tuple(int(k) for k in K), R


@dataclass(frozen=True, slots=True)
class Fit:
    """Whether one layer fits, with the numbers behind the answer."""

    fits: bool
    limit: str           # "" if it fits, else "registers", "shared memory" or FP16_INDEX
    registers: int       # per thread, needed (as ptxas allocates them unless ptxas=False)
    register_limit: int
    smem_bytes: int      # per CTA, needed
    smem_limit: int
    slots: int           # S = sum K_j
    rows_per_warp: int   # R
    message: str         # why not, in words ("" if it fits)
    ptxas_extra: int = 0  # of ``registers``: what ptxas needs beyond the kernel's count
    exchange: str = ""   # heads > 1 and it fits: "cta" (whole heads per CTA) or "grid"


def check_heads(hidden: int, heads) -> int:
    """``heads`` as an int, after checking that it is positive and divides ``hidden``."""
    if isinstance(heads, bool) or int(heads) != heads or heads < 1:
        raise InputError(f"heads={heads!r} must be a positive integer")
    if int(hidden) % int(heads):
        raise InputError(f"heads={heads} must divide hidden={hidden}")
    return int(heads)


def fit(spec, hidden: int, batch: int, density: float, *, cell: str = "rnn", dtype: str = "fp32",
        dense: bool = False, slots: tuple[int, ...] | None = None, exact: bool = True,
        ptxas: bool = True, heads: int = 1) -> Fit:
    """Does the layer fit? ``slots`` (``K_j`` of a concrete mapping) overrides the expectation.
    ``ptxas=False`` counts the kernel's registers only (the answer before ptxas was consulted:
    such a layer may spill).

    ``heads`` H > 1 (block-diagonal ``U``, ``density`` within its blocks), without ``slots``:
    whole heads per CTA if they fit (``exchange`` "cta": no grid-wide sync), else the heads
    dealt over all warps (``exchange`` "grid"), as the kernel builder decides
    (:func:`expected_slots`)."""
    heads = check_heads(hidden, heads)
    if heads > 1 and slots is None:
        kw = dict(cell=cell, dtype=dtype, dense=dense, ptxas=ptxas)
        local = _fit(spec, hidden, batch, density, *expected_slots(
            spec, hidden, density, cell, dense=dense, exact=exact, heads=heads, local=True), **kw)
        if local.fits:
            return replace(local, exchange="cta")
        grid = _fit(spec, hidden, batch, density, *expected_slots(
            spec, hidden, density, cell, dense=dense, exact=exact, heads=heads), **kw)
        return replace(grid, exchange="grid") if grid.fits else grid
    if slots is None:
        K, R = expected_slots(spec, hidden, density, cell, dense=dense, exact=exact)
    else:
        K, R = tuple(slots), len(slots)
    return _fit(spec, hidden, batch, density, K, R, cell=cell, dtype=dtype, dense=dense,
                ptxas=ptxas)


def _fit(spec, hidden, batch, density, K, R, *, cell, dtype, dense, ptxas) -> Fit:
    """:func:`fit` of row-slots ``K`` (``R`` of them)."""
    check_dtype(dtype)
    gates = check_cell(cell)
    S = int(sum(K))
    counted = int(registers_per_thread(S, R, batch, dense=dense, dtype=dtype, ptxas=False,
                                       cell=cell))
    extra = int(ptxas_extra(S, R, batch, dense=dense, dtype=dtype, arch=spec.arch)) if ptxas \
        else 0
    regs = counted + extra
    rlim = reg_limit(spec)
    smem = int(smem_bytes(hidden, batch, dense=dense, dtype=dtype, kmax=max(K) if dense else None))
    slim = spec.smem_bytes_per_cta
    kind = "dense" if dense else f"density {density:g}"
    what = f"hidden={hidden} ({cell}, {kind}, batch {batch}, {dtype})"
    if regs > rlim:
        if counted > rlim:
            msg = (f"{what} does not fit in the registers: {gates * hidden} rows need {S} weight "
                   f"slots per thread ({R} rows per warp), {counted} registers/thread; "
                   f"{spec.name} allows {rlim} (max_regs_per_thread {spec.max_regs_per_thread} "
                   f"at {THREADS_PER_CTA} threads)")
        else:
            msg = (f"{what} does not fit in the registers (ptxas: {regs} registers, spills): "
                   f"{gates * hidden} rows need {S} weight slots per thread ({R} rows per warp), "
                   f"{counted} registers/thread by the kernel's count and {extra} more for "
                   f"ptxas on {spec.arch} ({PTXAS_SOURCE}); {spec.name} allows {rlim} "
                   f"(max_regs_per_thread {spec.max_regs_per_thread} at {THREADS_PER_CTA} "
                   f"threads)")
        return Fit(False, "registers", regs, rlim, smem, slim, S, R, msg, extra)
    if smem > slim:
        msg = (f"{what} does not fit in shared memory: h needs {smem} bytes/CTA, {spec.name} "
               f"allows {slim} (smem_bytes_per_cta)")
        return Fit(False, "shared memory", regs, rlim, smem, slim, S, R, msg, extra)
    if not fp16_index_fits(hidden, batch, dense=dense, dtype=dtype):
        msg = (f"{what} does not fit the fp16 column addresses: h has {smem // H_BYTES} words, "
               f"a 16-bit word address reaches {FP16_ADDR_WORDS} (hidden * batch <= "
               f"{FP16_ADDR_WORDS}; fp32 has no such limit)")
        return Fit(False, FP16_INDEX, regs, rlim, smem, slim, S, R, msg, extra)
    return Fit(True, "", regs, rlim, smem, slim, S, R, "", extra)


def check(spec, hidden: int, batch: int, density: float, **kw) -> Fit:
    """Like :func:`fit` but raises :class:`CapacityError` naming the limit and the largest size."""
    f = fit(spec, hidden, batch, density, **kw)
    if not f.fits:
        best = max_hidden(spec, density, batch, cell=kw.get("cell", "rnn"),
                          dtype=kw.get("dtype", "fp32"), dense=kw.get("dense", False),
                          ptxas=kw.get("ptxas", True), heads=kw.get("heads", 1))
        raise CapacityError(f"{f.message}; the largest that fits is hidden={best.hidden} "
                            f"({best.limit})")
    return f


@dataclass(frozen=True, slots=True)
class MaxHidden:
    hidden: int          # largest N that fits (0 if none)
    limit: str           # the limit that stops N + 1
    message: str         # e.g. "registers: 255/thread allow at most hidden=21479 at density 0.01"
    registers: int       # at the answer
    smem_bytes: int


def max_hidden(spec, density: float, batch: int, *, cell: str = "rnn", dtype: str = "fp32",
               dense: bool = False, upper: int = 1 << 20, exact: bool = True,
               ptxas: bool = True, heads: int = 1, local: bool = False) -> MaxHidden:
    """Largest hidden size N that fits, by bisection, and the binding limit at N + 1.

    ``exact=False`` uses the Cornish-Fisher quantiles (no ``scipy.stats`` import: fast).
    ``heads`` H > 1: N runs over the multiples of H (heads of ``N / H`` units; the answer's
    "N + 1" is ``N + H``), fitting either exchange (:func:`fit`), or with ``local`` only whole
    heads per CTA (no grid-wide sync).
    """
    if not (0.0 < float(density) <= 1.0):
        raise InputError(f"density={density} is outside (0, 1]")
    if isinstance(batch, bool) or int(batch) != batch or batch < 1:
        raise InputError(f"batch={batch!r} must be a positive integer")
    heads = check_heads(heads, heads)     # a positive integer (it divides itself)

    seen: dict[int, Fit] = {}   # each multiple of H is evaluated once (the search revisits some)

    def ok(m: int) -> Fit:
        if m not in seen:
            f = fit(spec, m * heads, batch, density, cell=cell, dtype=dtype, dense=dense,
                    exact=exact, ptxas=ptxas, heads=heads)
            if local and f.fits and f.exchange != "cta":
                f = replace(f, fits=False, limit="whole heads per CTA",
                            message=f"hidden={m * heads} fits only with the heads dealt over "
                                    f"all warps (grid-wide exchange)")
            seen[m] = f
        return seen[m]
    upper = max(1, upper // heads)

    if not ok(1).fits:
        f = ok(1)
        return MaxHidden(0, f.limit, f"{f.limit}: not even hidden={heads} fits", f.registers,
                         f.smem_bytes)
    lo, hi = 1, upper
    if check_cell(cell) > 1 or heads > 1:
        # a gated cell's or a multi-head layer's expectation costs more the wider the layer:
        # bracket the answer by doubling from below instead of starting from the search bound
        while hi > 2 * lo and ok(2 * lo).fits:
            lo *= 2
        hi = min(upper, 2 * lo)
    if ok(hi).fits:
        f = ok(hi)
        return MaxHidden(hi * heads, "search bound",
                         f"fits up to the search bound hidden={hi * heads}", f.registers,
                         f.smem_bytes)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid).fits:
            lo = mid
        else:
            hi = mid
    # the requirement is monotone only up to the rounding of K_j: the bisection may stop below
    # a size that fits, so step forward while the next size still fits
    while lo > 1 and ok(lo + 1).fits:
        lo += 1
    good, bad = ok(lo), ok(lo + 1)
    n = lo * heads
    kind = "dense weights" if dense else f"density {density:g}"
    if heads > 1:
        kind += f", {heads} heads of {lo} units" + (
            "" if not good.exchange else
            ", whole heads per CTA" if good.exchange == "cta" else ", grid-wide exchange")
    if bad.limit == "registers":
        how = f" as ptxas allocates them on {spec.arch}" if ptxas else ""
        msg = (f"registers: {bad.register_limit}/thread{how} allow at most hidden={n} at "
               f"{kind} (batch {batch}, {cell}, {dtype})")
    elif bad.limit == FP16_INDEX:
        msg = (f"{FP16_INDEX}: 16-bit word addresses reach at most hidden={n} at batch {batch} "
               f"(hidden * batch <= {FP16_ADDR_WORDS})")
    elif bad.limit == "whole heads per CTA":
        msg = (f"whole heads per CTA up to hidden={n} ({heads} heads of {lo} units); "
               f"hidden={n + heads} needs the grid-wide exchange")
    else:
        msg = (f"shared memory: {bad.smem_limit} bytes/CTA allow at most hidden={n} at batch "
               f"{batch} (fp32 h)")
    return MaxHidden(n, bad.limit, msg, good.registers, good.smem_bytes)


def capacity_table(spec, densities, batch: int, *, cell: str = "rnn", dtype: str = "fp32",
                   heads: int = 1):
    """``[{density, sparse: MaxHidden, dense: MaxHidden}]`` for each density; with ``heads``
    H > 1 also ``sparse_local`` and ``dense_local``: the largest with whole heads per CTA (no
    grid-wide exchange)."""
    kw = dict(cell=cell, dtype=dtype, heads=heads)
    dense = max_hidden(spec, 1.0, batch, dense=True, **kw)
    out = [{"density": float(d), "sparse": max_hidden(spec, d, batch, dense=False, **kw),
            "dense": dense} for d in densities]
    if heads > 1:
        dense_local = max_hidden(spec, 1.0, batch, dense=True, local=True, **kw)
        for row in out:
            row["sparse_local"] = max_hidden(spec, row["density"], batch, dense=False,
                                             local=True, **kw)
            row["dense_local"] = dense_local
    return out

