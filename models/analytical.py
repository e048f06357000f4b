"""Closed-form per-step time of every kernel and baseline, vectorised over configurations.

This is an independent witness of the simulator: it reads only the GPU spec (never
``gpusim.engine``) and the structure of the kernels as written in
``kernels_ir/kernels/sparse_rnn.py``. Every hardware number is a spec field; the counts below are
instruction counts of that kernel, not fitted constants.

Persistent kernels (one CTA of 256 threads = 8 warps per SM, 2 warps per sub-partition)
----------------------------------------------------------------------------------------
Per step (cycles), for the slowest warp; every term is a chain of the kernel's instructions timed
by the simulator's mechanisms (in-order issue, one issue slot and ``32 / lanes`` pipe cycles per
warp-instruction, dependent results after the unit's latency, a FIFO shared pipe per SM, L2
round trips, polls that must be served after the data reached L2, CTA barrier latency):

``step = prefetch + stage + broadcast + sum_j row_j + stagger + sync``

- ``prefetch`` (Lamport; the barrier kernel hides it behind the atomic): IMUL, then per row
  IADD -> LDG of x_t (ALU latency each).
- ``stage`` (:func:`_stage_parts`, ``_stage_h``): HBASE, TID4 and the chunk MOVs, then per group
  of ``STAGE_GROUP`` 128-bit chunks the dependent index ops, the loads issued back to back (one
  L2 round trip per group), for Lamport the dependent checks (BITCAST, ISETP, POR per word, and
  PAND when the slot ends inside a group), the STS, and the CTA barrier. INT ops of the
  sub-partition's two warps share the INT pipe after a barrier (``ig``/``ia``). ``broadcast``:
  all SMs read h through the L2 slices.
- ``row_j`` = max(one warp's chain, issue, FP32 pipe, INT pipe, the SM's shared wavefronts):
  the chain is B MOVs, per slot the loads, ``smem_latency`` + wavefronts, B FFMAs one FP32
  occupancy apart, where a warp keeps the loads of ``D`` slots in flight ahead of their FFMAs
  (the kernel's prefetch depth, :func:`prefetch_depths`: up to 8 loads as far as the spare
  registers allow), so after a row's first slot a slot costs its chain / ``D`` or the SM's
  batch of wavefronts, whichever is longer; the interleaved butterfly (:func:`_reduction_cycles`: per xor mask one
  shuffle latency + B FADDs); the epilogue (:func:`_epilogue_cycles`). Shared-pipe queueing
  (FIFO): with L > 1 loads per slot a slot waits for the batch of all warps' loads (the warps
  stay in step); with one load the warps leave the barrier clustered, the first slot queues
  once (``stagger``) and each later slot of a row waits when the batch of all warps' loads
  exceeds the warp's own slot chain.
- ``sync``: Lamport: an extra poll round when the busiest warp's stores become visible
  (``l2_store_visibility_cycles`` after the slice serves them) later than the idlest warp's
  first poll (a poll's ``lead`` after its own store); ``spread`` = FIFO stagger + per-warp
  wavefront difference of the mapping + the h broadcast (the slices serve the SMs' staging
  loads over ``bw`` cycles, so the SMs start their rows that far apart). A warp's load of its
  own pending store waits instead of re-polling (never longer than a re-poll). Sectors of the
  exchanged h written by several SMs (:func:`shared_sectors`: where a CTA's words do not end on a
  32-byte boundary) are complete only ``l2_sector_handover_cycles`` after the previous SM's
  store (:func:`_handover_cycles`): the exchange waits for the last such sector when that comes
  after the last store of the step.
  Barrier (:func:`_barrier_cycles`): BAR, FENCE waiting for thread 0's store acknowledgement,
  the atomic arrive (``l2_atomic_latency / 2``) behind what the counter's FIFO has not drained
  of the other SMs' arrivals (``(sm_count - 1) * l2_atomic_same_address_cycles`` less the
  spread of the arrivals: poll phases and the other CTAs' shorter work), then the last CTA to
  notice: the slowest CTA's own polls or another CTA one poll phase late
  (:func:`_poll_phases`), the reply, the CTA barrier. After the barrier the h broadcast only
  costs what the slices have not drained while the CTAs were being released.
- once per launch: ``launch_overhead_s`` + loading the weights from DRAM.

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

Per-step baselines (in a CUDA graph, docs/cuda_notes.md s1.5: a step is its graph's nodes)
------------------------------------------------------------------------------------------
A step is the chain of kernels the measurement harness (:mod:`gpusim.backends.baselines`) puts in
its CUDA graph; :data:`LIBRARY_NODES` lists them per path, as ``torch.profiler`` recorded them
(``measurements/h100/library_profile.json``; a test checks the counts against that record).
The library kernels are black boxes the simulator cannot run; two models of their cost:

1. A spec with a ``[library]`` table: every small node (elementwise, copy, memset, split-K
   reduce, CSR partition) costs ``node_s``; the product kernel of class :func:`library_class`
   (gemv, gemm, gemm8, spmv, spmm) costs ``<class>_fixed_s`` + its bytes /
   ``<class>_bytes_per_s``. The fitted throughputs fold in what the bandwidth bound misses
   (cuBLAS's split-K kernels for skinny fp32 batches, cuSPARSE's SpMM gathers); one throughput
   per class, no L2 / DRAM regime switch (on the H100 a 38 MB weight matrix already streams at
   DRAM-like rates, below the 50 MB L2). The H100 and H200 tables are fitted by
   ``gpusim.calibrate`` to ``measurements/<gpu>/library_sweep.json`` (the same harness at 24
   layer sizes, none a campaign size). The V100's libraries were never measured: its table is
   the H100 fit transferred in hardware-relative terms (``transferred_from = "h100"``,
   :func:`gpusim.calibrate.transfer_library`): the node and fixed costs in absolute time (they
   are the launch path of a graph node, about 2.5 us where the node's kernel runs 0.26 us: the
   driver's and the graph's work, not a GPU rate), the streaming classes' throughputs (GEMV,
   SpMV: one pass over the matrix) as the same fraction of ``dram_bandwidth_bytes_per_s``, the
   others' (split-K GEMM, batch-8 GEMM, SpMM: 65% of the DRAM bandwidth and less on the H100,
   bound inside the SMs) scaled by ``sm_count * clock_hz`` and capped at the best streaming
   fraction of the DRAM bandwidth (on the V100 the cap binds for both GEMM classes). Out of
   sample, the same transfer from the H100 to the H200 predicts the H200's own sweep at MAPE
   13.9% (its own fit 13.2%, the H100 values unchanged 16.2%); the H200 has the H100's SMs and
   clock, so that check exercises the DRAM scaling and the absolute fixed costs, not the
   ``sm_count * clock_hz`` rule, which stays untested.
2. Otherwise (a spec without the table) each kernel (graph node) costs
   ``graph_launch_overhead_s`` + two memory round trips (its loads', then its stores' until the
   kernel completes: the simulated duration of a one-element kernel, which the calibration of
   ``graph_launch_overhead_s`` subtracts) + its bytes at the bandwidth of where they live (L2
   ``l2_slices * l2_bytes_per_cycle_per_slice * clock`` if the streamed data fit in
   ``l2_size_bytes``, else ``dram_bandwidth_bytes_per_s``). On the H100 this under-predicts the
   measured baselines by about 55% (fp32 cuBLAS GEMM kernels at batch 2-8 run 5-30x slower than
   the bandwidth bound, docs/cuda_notes.md s3 and s5; a small node costs about 1.2 us, not 1.0).

The paths:
- ``cublas``: the best of one GEMM (a GEMV kernel at B = 1, else GEMM + split-K reduce), B GEMVs
  each copied into its output column, and the GEMM with the batch padded to 8 (copy in, GEMM +
  reduce, copy out); then ``torch.add`` and ``torch.tanh``.
- ``cusparse``: a row-partition kernel, the CSR SpMV (+ memset of y) or SpMM (+ scale and fill
  of y) streaming values + indices + row pointers and h, the copy into y, add and tanh.
- ``csr-row-per-warp``: our kernel (``kernels_ir/kernels/csr_baseline.py``), one graph node
  (``graph_launch_overhead_s``) plus its cycles (:func:`_csr_row_per_warp`), below.

CSR row-per-warp baseline (the quantity the cross-check prices: one step, layer in L2)
-------------------------------------------------------------------------------------
The kernel as written: one warp per row, rows sorted longest first, ``ceil(R / 8)`` CTAs of 256
threads, all co-resident as the simulator runs them (CTA ``c`` on SM ``c % sm_count``; past
``max_threads_per_sm`` the hardware would run waves, which changes only latency terms of layers
that are bound by throughput anyway); a chunk loop of 128 nonzeros per round (32 lanes x 4, 128-bit
loads of values and column indices, then the 4 nonzeros' gathers of h back to back, then their
FFMAs); rows padded to a multiple of 4 with column 0. Rows are Bernoulli(d): a row's length is
Binomial(N, d) (normal, continuity-corrected), so round ``i`` has every row longer than
``128 (i + 1)`` full and the rows ending in it partial (their mean lanes from the truncated
normal); the expected longest row sets the critical warp. The kernel is modelled in fp32 (as
written) whatever ``dtype``. Per round, cycles:

- L1TEX of the busiest SM (``W = 8 ceil(ceil(R / 8) / sm_count)`` warps), the slower of its two
  stages (as ``gpusim/engine/smem.py``): the tag stage, 4 distinct 128-byte lines per cycle
  (``(m + 7) / 8`` lines for a 16-byte-aligned load of ``m`` lanes; for a gather the distinct
  lines of its lanes, :func:`_sorted_distinct`: lanes take every 4th nonzero of a sorted row, so
  neighbours share a line with the probability their column gap allows; the padding lanes add
  line 0), and the data stage, ``smem_wavefronts_per_cycle`` bank wavefronts per cycle
  (``ceil(m / 8)`` for the 16-byte loads; for a gather the expected largest count of its lanes'
  columns in one of ``32 / gcd(B, 32)`` bank groups, :func:`_gather_wavefronts`); perm, rowptr
  and x add one line and one wavefront each per warp;
- the L2 slices (all SMs): the value and index sectors, and the gathers' requests, which with h
  held in L1 (:func:`_resident`, the simulator's smallest-first rule, for L1 and for L2 residency)
  are each SM's first touch of a sector only; with h not in L1 the padding lanes' requests for
  column 0 all queue at one slice; ``l2_sector_bytes / l2_bytes_per_cycle_per_slice`` each over
  ``l2_slices``; and the busiest SM's share of those requests (``W / R`` of them, a request
  being one 128-byte line of a warp-instruction) leaves the SM at most one per
  ``l2_request_cycles_per_sm`` (``gpusim/engine/l2.py``), the slower of the two;
- DRAM: values and indices not resident in L2 stream at ``dram_bandwidth_bytes_per_s``;
- issue: the sub-partition's warps' instructions of a chunk (FFMAs at the FP32 pipe rate);
- the critical warp's chain: IADD, ISETP, the value and index loads, the indices' round trip
  (``l2_hit_latency_cycles``, + the DRAM latency when not resident; with both arrays in DRAM the
  one FIFO serves every warp's values of the round first), its own value/index lines, the
  gathers' issue, their round trip (``l1_hit_latency_cycles`` once the SM holds every lane's
  sector, else :func:`l2_latency` over many partition units), its own gathers' L1TEX cycles, B
  FFMAs.

A round costs ``max(chain, L1TEX + the part of the next chunk's fill that the other warps'
last gathers do not hide, L2 + the round trips of the full rows' warps, DRAM, issue)``: warps in
step issue a round's requests together, so the slices' work adds to the round trips of the
values/indices and of the gathers. The first round's fill is never hidden, and there the
gathers' requests wait at the slices behind every warp's value and index loads (issued first);
the tag stage (at issue) meanwhile takes the gathers of the warps whose indices are back, so the
first round's L1TEX overlaps that queue: ``max(L1TEX + fill, queue + own gathers)``.
Around the rounds: the prologue (SREG, IMAD, ISETP, IMIN through the INT pipe of the
sub-partition's warps, the dependent perm and rowptr loads, B MOVs) and the epilogue
(:func:`_csr_tail_cycles`: butterfly, x load, FADD and TANH at the SFU pipe rate, the stores'
acknowledgement). Split L2 (``l2_partitions``): each of a warp's own round trips (perm, rowptr,
indices per chain-bound round, x, store) is near or far with even odds; the step ends with the
unluckiest of the warps that run the most rounds (``E[max]`` of binomials, normal approximation),
and a first round bound by the data stage starts with the luckiest warps of the SM. Against the
simulator (``tests/models/test_csr_model.py``): 40 random layers on the H100 and the V100 (80
configurations), mean 2.7%, max 9.7%; against the 7 measured H100 CSR cases 16% (the simulator
16%; the bandwidth stream this model replaces was 39-69% under).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from kernels_ir.errors import InputError
from kernels_ir.kernels.csr_baseline import CHUNK, DEFAULT_THREADS, VEC, gather_loads
from kernels_ir.kernels.sparse_rnn import STAGE_GROUP, _prefetch_depth
from kernels_ir.mapping import MAX_BATCH, WIDE_BATCHES, access_pattern

from . import capacity as cap

__all__ = ["Variant", "VARIANTS", "PERSISTENT", "BASELINES", "REASONS", "KernelTimes",
           "predict_many", "predict_mapping", "mapping_wavefronts", "expected_max_occupancy",
           "geometry_classes", "speedup_summary", "Row", "Report", "predict_layer",
           "EXACT_NNZ_LIMIT", "ENGINES", "SIMULATED"]

WARP = 32
TAG_SETS_PER_CYCLE = 4   # the L1TEX tag stage's lines per cycle (gpusim/engine/smem.py)
REDUCTION_STEPS = 5        # log2(32) butterfly steps (xor masks) per batch column


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    family: str            # "persistent" or "baseline"
    sparse: bool
    sync: str = ""
    wide_loads: bool = False
    layout: str = ""
    doc: str = ""


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("sparse-naive", "persistent", True, "barrier", False, "naive",
            "sparse persistent: grid barrier, B scalar loads, columns in order"),
    Variant("sparse-wide", "persistent", True, "barrier", True, "naive",
            "+ wide (64/128-bit) shared loads"),
    Variant("sparse-bank", "persistent", True, "barrier", True, "optimal",
            "+ bank-aware layout (optimal)"),
    Variant("sparse-lamport", "persistent", True, "lamport", True, "optimal",
            "+ Lamport timestamps: all optimisations (Zhu et al. 2018)"),
    Variant("dense-persistent", "persistent", False, "lamport", True, "naive",
            "dense persistent (Diamos et al. 2016), Lamport exchange, wide loads"),
    Variant("cublas", "baseline", False, doc="cuBLAS per step: best of GEMM and B GEMVs + tanh"),
    Variant("cusparse", "baseline", True, doc="cuSPARSE CSR SpMV/SpMM per step + tanh"),
    Variant("csr-row-per-warp", "baseline", True,
            doc="CSR row-per-warp kernel per step, tanh fused"),
)}
PERSISTENT = tuple(n for n, v in VARIANTS.items() if v.family == "persistent")
# kernels that exist in the IR (kernels_ir.kernels): ``engine="sim"`` simulates these; the library
# baselines (cuBLAS, cuSPARSE) are black boxes and keep their model
SIMULATED = PERSISTENT + ("csr-row-per-warp",)
BASELINES = tuple(n for n, v in VARIANTS.items() if v.family == "baseline")

REASONS = ("", "registers", "shared memory", "batch not supported by wide loads",
           "batch too large")


# ----------------------------------------------------------------------------- bank statistics


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


# ----------------------------------------------------------------------------- time model


@dataclass(frozen=True, slots=True)
class KernelTimes:
    """One kernel over many configurations: arrays of the same shape (NaN time = does not fit)."""

    name: str
    per_step_s: np.ndarray
    fits: np.ndarray
    reason: np.ndarray                  # index into REASONS
    setup_s: np.ndarray                 # once per launch (persistent: launch + weight load)
    breakdown: dict = field(default_factory=dict)  # term -> seconds per step (array)
    bound: np.ndarray | None = None     # persistent: which compute bound won (str array)

    def total_s(self, timesteps) -> np.ndarray:
        return self.setup_s + np.asarray(timesteps) * self.per_step_s


def _cyc(spec):
    """Per-SM resources of the persistent kernels (one CTA of THREADS_PER_CTA threads per SM)."""
    wpc = cap.THREADS_PER_CTA // WARP
    wps = math.ceil(wpc / spec.subpartitions_per_sm)
    ipc = spec.issue_per_cycle_per_subpartition
    occ_i = max(1.0, WARP / spec.int32_lanes_per_subpartition)
    return {
        "wps": wps,                                               # warps per sub-partition
        "wpc": wpc,
        "ipc": ipc,
        "pipe": max(1.0, WARP / spec.fp32_lanes_per_subpartition),  # FP32 pipe cycles / instr
        "occ_i": occ_i,                                           # INT32 pipe cycles / instr
        # the sub-partition's warps issue the same INT instruction together (after a barrier):
        # consecutive INT instructions of one warp are ig apart, dependent ones ia apart
        "ig": max(wps * occ_i, wps / ipc),
        "ia": max(spec.alu_latency_cycles, wps * occ_i, wps / ipc),
        "wf": spec.smem_wavefronts_per_cycle,
        "l2_bpc": spec.l2_slices * spec.l2_bytes_per_cycle_per_slice,
    }


def _reduction_cycles(spec, B):
    """Butterfly: per xor mask B SHFL_XOR then B FADD (B chains interleaved), one warp.

    A mask's first FADD waits ``shfl_latency`` for its shuffle; the B FADDs then issue one FP32
    pipe occupancy apart; the next mask's first shuffle issues right after the last FADD (its
    operand, the first FADD's result, is ready ``fma_latency`` after that FADD).
    """
    B = np.asarray(B, dtype=np.float64)
    occ_f = max(1.0, WARP / spec.fp32_lanes_per_subpartition)
    return REDUCTION_STEPS * (spec.shfl_latency_cycles
                              + np.maximum((B - 1) * occ_f + 1, spec.fma_latency_cycles))


def _epilogue_cycles(spec, B):
    """MOV val, B - 1 dependent SELs and FADD x (each an ALU result), tanh (an FADD result),
    FADD +0 (an SFU result), IADD (independent), STG (address: an ALU result), next instruction.
    """
    B = np.asarray(B, dtype=np.float64)
    a = spec.alu_latency_cycles
    return 3 + (B + 1) * a + spec.fma_latency_cycles + spec.sfu_latency_cycles


def _tail_cycles(spec, B):
    """Per row: reduction + epilogue of one warp of the persistent kernels."""
    return _reduction_cycles(spec, B) + _epilogue_cycles(spec, B)


def _csr_tail_cycles(spec, B):
    """CSR row-per-warp baseline (``kernels_ir/kernels/csr_baseline.py``), after its gathers.

    Butterfly: the B batch columns one after another, per column 5 dependent SHFL_XOR -> FADD
    pairs (``shfl + fma`` each; the next column's first shuffle issues one cycle after the last
    FADD, it does not depend on it); ISETP lane 0 -> PAND store -> IMUL base (the ``if``) -> LDG
    of x (ALU latency each, then one L2 round trip); per column FADD x -> TANH (FMA latency, then
    the next column's FADD issues); the STG waits for the last TANH (SFU latency).
    """
    B = np.asarray(B, dtype=np.float64)
    fma, alu = spec.fma_latency_cycles, spec.alu_latency_cycles
    butterfly = B * (REDUCTION_STEPS * spec.shfl_latency_cycles
                     + (REDUCTION_STEPS - 1) * fma + 1) + fma
    x_load = 1 + 3 * alu + spec.l2_hit_latency_cycles
    return butterfly + x_load + B * (fma + 1) + spec.sfu_latency_cycles


def _row_chain(spec, K, W, B, L):
    """One warp's row-slot as a dependent chain (cycles), from its first MOV to the next row's,
    with one slot's loads in flight at a time (prefetch depth 1; :func:`_persistent_from_slots`
    shortens the later slots for the kernel's real depth).

    B MOVs (INT pipe) then per slot: L shared loads issued back to back, the data
    ``smem_latency`` after the warp's own ``W / K`` wavefronts; B FFMAs one FP32 occupancy apart
    (the last load's FFMAs wait for it); then the reduction and the epilogue.
    """
    c = _cyc(spec)
    B = np.asarray(B, dtype=np.float64)
    own = W / c["wf"]
    slots = K * (spec.smem_latency_cycles + 1) + own + K * (B // L - 1) * c["pipe"]
    return (B - 1) * c["occ_i"] + 1 + slots + _tail_cycles(spec, B)


def prefetch_depths(spec, v: Variant, N, B, K, R, S):
    """Slots whose shared loads a warp has in flight ahead of their FFMAs, per configuration:
    the kernel's own rule (``kernels_ir.kernels.sparse_rnn._prefetch_depth``: up to
    ``PREFETCH_LOADS`` loads, as far as the registers the layer leaves over allow, B per slot)
    for the staging group and dense tail the builder derives from ``N`` and ``B``."""
    L = len(access_pattern(int(B), v.wide_loads))
    threads = cap.THREADS_PER_CTA
    kmax = np.asarray(K, dtype=np.float64).max(axis=-1) if np.ndim(K) else K
    N, R, S, kmax = (np.atleast_1d(np.asarray(x)) for x in (N, R, S, kmax))
    slot = -(-(N.astype(np.int64) * int(B)) // 4) * 4
    group = np.minimum(STAGE_GROUP, -(-slot // (4 * threads)))
    hs_words = np.maximum(slot, WARP * kmax.astype(np.int64) * int(B)) if not v.sparse else slot
    depth = [_prefetch_depth(spec, b=int(B), S=int(s), R=int(r), dense=not v.sparse,
                             threads=threads, sync=v.sync, group=int(g), dense_tail=bool(t),
                             loads_per_slot=L)
             for s, r, g, t in zip(*np.broadcast_arrays(S, R, group, hs_words > slot),
                                   strict=True)]
    return np.asarray(depth, dtype=np.float64)


def _row_throughput(spec, K, wf_sm, B, L):
    """Per row-slot resource bounds of the sub-partition / SM (cycles), stacked.

    issue: ``wps`` warps x the row's instructions (B MOV, K (L LDS + B FFMA), 5 B SHFL + 5 B
    FADD, MOV + B - 1 SEL, FADD, TANH, FADD, IADD, STG); FP32 pipe: ``K B + 5 B + 2`` FP32
    instructions; INT pipe: ``2 B + 1``; shared pipe: all warps' wavefronts of the SM.
    """
    c = _cyc(spec)
    B = np.asarray(B, dtype=np.float64)
    issue = c["wps"] * (12 * B + 5 + K * (L + B)) / c["ipc"]
    fp32 = c["wps"] * c["pipe"] * (K * B + REDUCTION_STEPS * B + 2)
    intp = c["wps"] * c["occ_i"] * (2 * B + 1) + 0 * K
    smem = wf_sm / c["wf"]
    return np.stack(np.broadcast_arrays(issue, fp32, intp, smem))


def _stage_parts(spec, N, B, R, sync):
    """h_t from L2 into shared memory (_stage_h), cycles: (setup, per-round, poll, rounds, bw).

    setup: HBASE, TID4 and the 4 G chunk MOVs (INT, ``ig`` apart); per group round the IMAD and
    IADD (dependent INT ops ``ia`` apart) and the G loads back to back; when the slot is not a
    multiple of the group's words also G ISETPs (``inside``) and, for chunks 1..G-1, the
    selected address (IADD, SEL); poll: the L2 round trip of the group's first load then
    (Lamport) the dependent checks, 12 G (BITCAST, ISETP, POR per word) or 16 G with the
    ``inside`` PAND; then G STS. bw: every SM reads all of h through the L2 slices
    (``sm_count * slot * 4`` bytes at ``l2_slices * l2_bytes_per_cycle_per_slice``): the last
    request of a slice waits behind the others. After the grid barrier the CTAs are released
    over the range of their poll phases (:func:`_poll_phases`), and the slices drain the earlier
    CTAs' requests meanwhile, so the last CTA waits only for the rest.
    """
    c = _cyc(spec)
    slot = np.ceil(np.asarray(N) * np.asarray(B) / 4.0) * 4
    chunks = np.ceil(slot / (4 * cap.THREADS_PER_CTA))
    G = np.minimum(STAGE_GROUP, chunks)
    rounds = np.ceil(chunks / G)
    setup = (2 + 4 * G) * c["ig"]
    aligned = np.mod(slot, 4 * cap.THREADS_PER_CTA * G) == 0
    per_round = np.where(aligned, 2 * c["ia"] + G, 3 * G * c["ia"] + 2 * G)
    check = (np.where(aligned, 12, 16) * G - 1) * c["ia"] + 1 if sync == "lamport" else 0 * G
    poll = l2_latency(spec, G) + check   # the group's G loads lie in G partition units
    bw = spec.sm_count * slot * 4 / c["l2_bpc"]
    if sync == "barrier":
        bw = np.maximum(0.0, bw - _poll_phases(spec)[1])
    return setup, per_round, poll, rounds, bw


def _prefetch_cycles(spec, R):
    """IMUL xoff, then per row IADD -> LDG of x_t (dependent, ALU latency)."""
    a = spec.alu_latency_cycles
    return a + R * (a + 1)



def l2_latency(spec, units=1):
    """Expected L2 round trip (cycles) of loads issued together over ``units`` independent
    partition units (:mod:`gpusim.engine.l2`): the mean for one, the slowest of ``units`` draws of
    near / far otherwise (``np.inf``: the far latency)."""
    extra = spec.l2_far_extra_cycles if spec.l2_partitions > 1 else 0
    k = np.asarray(units, dtype=np.float64)
    return spec.l2_hit_latency_cycles + extra / 2.0 * (1.0 - 2.0 ** (1.0 - k))

def _poll_phases(spec):
    """Release of the CTAs after the grid barrier's last arrival (cycles): ``(lag, range)``.

    Thread 0 of every CTA polls the counter every ``l2_hit_latency + 2`` cycles (LDG -> ISETP ->
    branch) on its own phase, set by when its own atomic went out; the last arrival is seen by
    each CTA at a phase taken as uniform over one period. With ``n = sm_count`` CTAs the latest
    one sees it ``P (n - 1) / n`` late (largest of the other ``n - 1`` phases) and the releases
    span ``P (n - 1) / (n + 1)`` (expected range of ``n`` uniform phases).
    """
    period = l2_latency(spec, np.inf) + 2   # the last CTAs to notice poll the far partition
    n = spec.sm_count
    return period * (n - 1) / n, period * (n - 1) / (n + 1)


def _barrier_cycles(spec, R, cta_spread=0.0):
    """Grid barrier, from the slowest warp's last store to the CTA barrier releasing step t+1.

    BAR (all warps), thread 0's FENCE waits for its stores to be acknowledged (one L2 round trip
    after its last store, taken as the slowest warp's), the atomic arrive reaches L2
    (``l2_atomic_latency / 2``) and waits in the counter's FIFO (the slice performs one
    same-address atomic every ``l2_atomic_same_address_cycles``, in order of arrival): the
    ``sm_count - 1`` earlier arrivals only delay it by what they do not drain before it arrives,
    ``max(0, (sm_count - 1) * same_address - spread)``, where ``spread`` is how far the arrivals
    are apart (the CTAs' poll phases, :func:`_poll_phases`, plus ``cta_spread``, how much
    earlier the other CTAs' work ends). The step then ends when the last CTA to notice is
    released: either the slowest CTA itself, whose thread 0 prefetches x and polls every
    ``l2_hit_latency + 2`` cycles from its own atomic (the poll served after the counter is
    complete), or another CTA, one poll phase late (:func:`_poll_phases`); the poll's reply
    returns half a round trip later and BAR releases the CTA.

    Store visibility (``l2_store_visibility_cycles``) is not on this path: the FENCE waits for
    the stores' acknowledgements, not their visibility, the counter is visible when the atomic
    is performed, and the staging loads after the barrier are plain loads that come a fence,
    an atomic and a poll (>= 2 L2 round trips) after the stores.
    """
    a = float(l2_latency(spec, np.inf))   # the counter and the slowest CTA's stores: far side
    bar = spec.cta_barrier_latency_cycles
    fence = max(2 + bar + 1, a) + spec.fence_latency_cycles
    lag, phases = _poll_phases(spec)
    queue = np.maximum(0.0, (spec.sm_count - 1) * spec.l2_atomic_same_address_cycles
                       - phases - cta_spread)
    ready = spec.l2_atomic_latency_cycles / 2 + queue
    first = 3 + _prefetch_cycles(spec, R) + a / 2
    period = a + 2
    own = first + np.ceil(np.maximum(0.0, ready - first) / period) * period
    return fence + np.maximum(own, ready + lag) + a / 2 + 1 + bar


_BOUNDS = np.array(["latency", "issue", "fp32", "int", "smem"])


SECTOR_WORDS = 8  # 32-bit words of h per 32-byte L2 sector


def shared_sectors(row_ids, positions, batch: int, warps_per_cta: int):
    """Sectors of the exchanged h (slot of ``N x batch`` words) that rows of more than one CTA
    write: ``(cta, j, ok)``, int arrays (sectors, writers): the CTA and row-slot of every row in
    the sector (``ok`` False for padding). Row ``r`` of warp ``w``'s row-slot ``j`` stores its
    ``batch`` words at ``positions[r] * batch`` (one sector, ``batch`` divides 8)."""
    rid = np.asarray(row_ids)
    w, j = np.nonzero(rid >= 0)
    r = rid[w, j]
    pos = r if positions is None else np.asarray(positions)[r]
    sec = pos.astype(np.int64) * int(batch) // SECTOR_WORDS
    cta = w // int(warps_per_cta)
    order = np.lexsort((cta, sec))
    sec, cta, j = sec[order], cta[order], j[order]
    uniq, first, count = np.unique(sec, return_index=True, return_counts=True)
    lo = np.minimum.reduceat(cta, first) if sec.size else cta
    hi = np.maximum.reduceat(cta, first) if sec.size else cta
    multi = np.flatnonzero(hi != lo)
    m = int(count[multi].max()) if multi.size else 0
    out_c = np.zeros((multi.size, m), np.int64)
    out_j = np.zeros((multi.size, m), np.int64)
    ok = np.zeros((multi.size, m), bool)
    for i, k in enumerate(multi):
        n = count[k]
        out_c[i, :n] = cta[first[k]:first[k] + n]
        out_j[i, :n] = j[first[k]:first[k] + n]
        ok[i, :n] = True
    return out_c, out_j, ok


@cache
def _deal_shared(n_rows: int, batch: int, n_warps: int, warps_per_cta: int):
    """:func:`shared_sectors` of equal rows dealt as :func:`kernels_ir.mapping.map_matrix` deals
    them (snake order, h in owner order), for the expectation path (no mapping): the distinct
    writer patterns ``(cta, j, ok)`` with ``cta`` counted from the sector's first CTA (CTAs are
    alike there)."""
    from kernels_ir.mapping import _deal

    _, row_ids, _ = _deal(np.zeros(n_rows, np.int64), n_warps)
    owned = row_ids.reshape(-1)
    owned = owned[owned >= 0]
    pos = np.empty(n_rows, np.int64)
    pos[owned] = np.arange(owned.size)
    cta, j, ok = shared_sectors(row_ids, pos, batch, warps_per_cta)
    if not cta.size:
        return cta, j, ok
    rel = np.where(ok, cta - cta[:, :1], 0)
    _, keep = np.unique(np.concatenate([rel, j, ok], axis=1), axis=0, return_index=True)
    return rel[keep], j[keep], ok[keep]


_NO_SHARED = (np.zeros((0, 0), np.int64), np.zeros((0, 0), np.int64), np.zeros((0, 0), bool))


def _handover_cycles(spec, T, cta, j, ok) -> np.ndarray:
    """Cycles by which the multi-SM sectors (``cta``, ``j``, ``ok`` of :func:`shared_sectors`)
    complete after the last store of the step: ``T`` (..., CTAs, R) the cycle each CTA stores
    its row-slot ``j``. A sector's writers are taken in time order; each store from another CTA
    is performed ``l2_sector_handover_cycles`` after the previous one at the earliest (the
    engine's :mod:`gpusim.engine.l2` rule); the rows of one CTA pass at once."""
    c = float(spec.l2_sector_handover_cycles)
    T = np.asarray(T, dtype=np.float64)
    last = T.max(axis=(-2, -1))
    if not c or not np.size(cta):
        return np.zeros(np.shape(last))
    t = np.where(ok, T[..., cta, j], np.inf)              # (..., sectors, writers)
    order = np.argsort(t, axis=-1, kind="stable")
    t = np.take_along_axis(t, order, axis=-1)
    who = np.take_along_axis(np.broadcast_to(cta, t.shape), order, axis=-1)
    done = t[..., 0]
    prev = who[..., 0]
    for k in range(1, t.shape[-1]):
        tk = t[..., k]
        real = np.isfinite(tk)
        step = np.where(who[..., k] != prev, np.maximum(tk, done + c), np.maximum(tk, done))
        done = np.where(real, step, done)
        prev = np.where(real, who[..., k], prev)
    return np.maximum(0.0, done.max(axis=-1) - last)


def _persistent_from_slots(spec, v: Variant, N, B, K, wf_sm, wf_warp, mask, R, S, dtype,
                           spread_wf=0.0, cta_spread=0.0, shared=None):
    """Assemble per-step cycles from per-row-slot arrays (configs x Rmax).

    ``spread_wf``: wavefronts by which the busiest warp's rows exceed the idlest warp's (exact
    mapping; 0 for the expectation). ``cta_spread``: cycles by which the slowest CTA's work
    exceeds the fastest's (exact mapping; 0 for the expectation), see :func:`_barrier_cycles`.
    ``shared``: the multi-SM sectors of h, ``(cta, j, ok)`` of :func:`shared_sectors` with the
    rows of ``wf_sm`` the CTAs (exact mapping), or a list with one :func:`_deal_shared` per
    configuration (expectation: alike CTAs); None: not counted.
    """
    c = _cyc(spec)
    L = len(access_pattern(int(B), v.wide_loads))
    Kf = np.asarray(K, dtype=np.float64)
    # FIFO shared pipe: with L > 1 loads per slot every warp's last load of a slot is queued
    # behind all warps' earlier loads of the slot, so the slowest warp waits for the whole SM's
    # wavefronts of the slot and the warps stay in step; with one load per slot only the first
    # slot after the CTA barrier queues (stagger below) and the warps drift apart
    chain = _row_chain(spec, Kf, wf_sm if L > 1 else wf_warp, B, L)
    # software pipelining (the kernel's prefetch depth D): slot i + D's loads issue right after
    # slot i's FFMAs, so a slot's own chain (latency + wavefronts + FFMAs) is paid once per D
    # slots; the first slot of a row still waits for its whole chain
    D = prefetch_depths(spec, v, N, B, Kf, R, S).reshape(-1, 1)
    if L > 1:
        # the pipe serves all warps' load 0 of a slot, then all load 1, ...: the first warp's
        # last load is served after (L - 1) / L of the slot's wavefronts, it then issues the
        # next slot's loads (latency, its FFMAs); when that comes before the batch is done the
        # pipe never idles and a slot takes the batch's wavefronts, else the gap adds
        k1 = np.maximum(Kf, 1)
        batch = wf_sm / (k1 * c["wf"])
        first = batch * (L - 1) / L + wf_warp / (k1 * L * c["wf"]) + \
            spec.smem_latency_cycles + (B // L - 1) * c["pipe"] + 1
        slot_chain = spec.smem_latency_cycles + batch + (B // L - 1) * c["pipe"] + 1
        chain = chain - Kf * slot_chain + np.minimum(Kf, 1) * np.maximum(batch, first) + \
            np.maximum(Kf - 1, 0) * np.maximum(batch, first / D)
    if L == 1:
        # the CTA's warps leave the barrier together and stay clustered (a row's chain is much
        # longer than the FIFO's stagger): the pipe serves the slot-k loads of all warps as one
        # batch, so each later slot of a row takes the batch's wavefronts when that exceeds the
        # warp's own slot chain (latency + own wavefronts + FFMAs + the next issue) over D
        k1 = np.maximum(Kf, 1)
        own_slot = spec.smem_latency_cycles + wf_warp / (k1 * c["wf"]) + \
            (B - 1) * c["pipe"] + 1
        batch = wf_sm / (k1 * c["wf"])
        chain = chain - np.maximum(Kf - 1, 0) * own_slot + \
            np.maximum(Kf - 1, 0) * np.maximum(own_slot / D, batch)
    thr = _row_throughput(spec, Kf, wf_sm, B, L)
    bounds = np.concatenate([chain[None], thr])
    bounds = np.where(mask[None], bounds, 0.0)
    row = bounds.max(axis=0)
    which = _BOUNDS[bounds.sum(axis=-1).argmax(axis=0)]
    # after the CTA barrier every warp issues its first load together: the last one waits for
    # the other warps' wavefronts of that slot in the shared pipe (FIFO); the B MOVs before it
    # contend for the INT pipe with the sub-partition's other warps
    k0 = np.maximum(Kf[..., 0], 1)
    queue0 = 0.0 if L > 1 else (wf_sm[..., 0] - wf_warp[..., 0]) / (k0 * c["wf"])
    stagger = queue0 + (c["wps"] - 1) * B * c["occ_i"]
    compute = row.sum(axis=-1) + stagger
    smem_total = np.where(mask, wf_sm, 0.0).sum(axis=-1) / c["wf"]
    tail = _tail_cycles(spec, B) * R
    Rf = np.asarray(R, dtype=np.float64)
    setup_st, per_round, poll, rounds, bw = _stage_parts(spec, N, B, Rf, v.sync)
    bar = spec.cta_barrier_latency_cycles
    stage = setup_st + rounds * (per_round + poll) + 1 + bar
    if v.sync == "lamport":
        pre = _prefetch_cycles(spec, Rf)
        # a warp polls as soon as its own rows are stored: when the busiest warp (anywhere)
        # stores more than `lead` cycles after the idlest one, the idlest warp's first poll is
        # served before that data reached L2 and it polls again; its CTA waits for it
        lead = 1 + pre + setup_st + per_round
        spread = stagger + spread_wf / c["wf"] + bw
        # ... and its stores to the far partition reach L2 a quarter of the far extra later
        vis = spec.l2_store_visibility_cycles + (l2_latency(spec, np.inf)
                                                 - spec.l2_hit_latency_cycles) / 2
        extra_polls = np.ceil(np.maximum(0.0, spread + vis - lead) / poll)
        sync = np.maximum(0.0, extra_polls * poll - spread)
        if shared is not None:
            # each CTA stores row-slot j when its rows up to j are done
            ends = np.cumsum(np.where(mask, row, 0.0), axis=-1) + np.asarray(stagger)[..., None]
            if isinstance(shared, list):   # alike CTAs: one pattern set per configuration
                hand = np.zeros(ends.shape[0])
                for i, (cta, jj, ok) in enumerate(shared):
                    if cta.size:
                        T = np.broadcast_to(ends[i], (int(cta.max()) + 1, ends.shape[1]))
                        hand[i] = _handover_cycles(spec, T, cta, jj, ok)
            else:   # the CTAs of one mapping: the last sector against the step's last store
                hand = _handover_cycles(spec, ends, *shared)
            sync = sync + hand
    else:
        pre = 0.0 * Rf        # warp 0 prefetches while the atomic is in flight (in sync)
        sync = _barrier_cycles(spec, Rf, cta_spread)
    total = pre + stage + bw + compute + sync
    cs = spec.cycle_s
    breakdown = {
        "compute_s": compute * cs,
        "smem_wavefronts_s": smem_total * cs,   # the shared-pipe bound (inside compute_s)
        "reduction_epilogue_s": np.broadcast_to(tail * cs, np.shape(total)).copy(),
        "h_exchange_s": np.broadcast_to((pre + stage) * cs, np.shape(total)).copy(),
        "h_broadcast_s": np.broadcast_to(bw * cs, np.shape(total)).copy(),
        "sync_s": np.broadcast_to(sync * cs, np.shape(total)).copy(),
    }
    n_w = cap.n_warps(spec)
    slot_bytes = 4 if v.sparse is False else 8
    if dtype == "fp16":
        slot_bytes //= 2
    setup = (spec.launch_overhead_s + spec.dram_latency_cycles * cs
             + S * WARP * n_w * slot_bytes / spec.dram_bandwidth_bytes_per_s)
    return total * cs, setup, breakdown, which


def _layer_arrays(hidden, batch, density):
    N = np.atleast_1d(np.asarray(hidden, dtype=np.int64))
    B = np.atleast_1d(np.asarray(batch, dtype=np.int64))
    d = np.atleast_1d(np.asarray(density, dtype=np.float64))
    N, B, d = np.broadcast_arrays(N, B, d)
    if np.any(N < 1) or np.any(B < 1):
        raise InputError("hidden and batch must be positive integers")
    if np.any(~(d > 0)) or np.any(d > 1):
        raise InputError("density must be in (0, 1]")
    return N, B, d


def _persistent_fast(spec, v: Variant, N, B, d, cell, dtype):
    """Expected per-step time of a persistent variant for random layers (vectorised)."""
    gates = cap.check_cell(cell)
    nw = cap.n_warps(spec)
    rows = gates * N
    shape = N.shape
    per = np.full(shape, np.nan)
    setup = np.full(shape, np.nan)
    fits = np.zeros(shape, bool)
    reason = np.zeros(shape, np.int64)
    which = np.full(shape, "", dtype=object)
    bd: dict[str, np.ndarray] = {}
    R_all = -(-rows // nw)
    for b in np.unique(B):
        b = int(b)
        sel = B == b
        if v.wide_loads and b not in WIDE_BATCHES:
            reason[sel] = 3
            continue
        if not v.wide_loads and b > MAX_BATCH:
            reason[sel] = 4
            continue
        n, dd, rr = N[sel], d[sel], rows[sel]
        R = R_all[sel]
        rmax = int(R.max())
        if v.sparse:
            longest, typical, mask = cap.row_slot_quantiles(n, rr, dd, nw, rmax)
            K = np.where(mask, np.maximum(1, np.ceil(longest / WARP)), 0)
            wf_warp = np.where(mask, _expected_row_wavefronts(typical, K, b, v.wide_loads,
                                                              v.layout), 0.0)
        else:
            mask = np.arange(rmax)[None, :] < R[:, None]
            K = np.where(mask, np.ceil(n / WARP)[:, None], 0)
            wf_warp = K * _dense_slot_wavefronts(b, v.wide_loads)
        S = K.sum(axis=-1)
        regs = cap.registers_per_thread(S, R, b, dense=not v.sparse, dtype=dtype, arch=spec.arch)
        smem = cap.smem_bytes(n, b, dense=not v.sparse, dtype=dtype,
                              kmax=K.max(axis=-1) if not v.sparse else None)
        ok_r = regs <= cap.reg_limit(spec)
        ok_s = smem <= spec.smem_bytes_per_cta
        r_code = np.where(~ok_r, 1, np.where(~ok_s, 2, 0))
        wpc = _cyc(spec)["wpc"]
        wf_sm = wf_warp * wpc
        # h in owner order (square layers): the multi-SM sectors of the deal of equal rows
        shared = ([_deal_shared(int(x), b, nw, wpc) if x == y else _NO_SHARED
                   for x, y in zip(rr, n, strict=True)] if v.sync == "lamport" else None)
        t, su, parts, wh = _persistent_from_slots(spec, v, n, b, K, wf_sm, wf_warp, mask, R, S,
                                                  dtype, shared=shared)
        ok = ok_r & ok_s
        per[sel] = np.where(ok, t, np.nan)
        setup[sel] = np.where(ok, su, np.nan)
        fits[sel] = ok
        reason[sel] = r_code
        which[sel] = np.where(ok, wh, "")
        for key, val in parts.items():
            bd.setdefault(key, np.full(shape, np.nan))[sel] = np.where(ok, val, np.nan)
    return KernelTimes(v.name, per, fits, reason, setup, bd, which)


# ----------------------------------------------------------------------------- CSR row-per-warp


def _csr_gathers(B):
    """Per nonzero: (gather loads, words per load) of the CSR kernel (also its x loads and
    h_out stores per row), from :func:`kernels_ir.kernels.csr_baseline.gather_loads`."""
    ng, width = np.ones(np.shape(B)), np.ones(np.shape(B))
    for b in np.unique(B):
        loads = gather_loads(int(b))
        ng[B == b], width[B == b] = len(loads), loads[0][0]
    return ng, width


def _sorted_distinct(group, d, m):
    """Expected distinct groups of ``group`` consecutive columns (128-byte lines, 32-byte
    sectors) that one gather of ``m`` lanes touches. Lane ``l`` takes nonzero ``4 l + e`` of the
    chunk and a row's columns are sorted, so neighbouring lanes are 4 nonzeros apart: they share
    a group only with each other, with probability ``E[(1 - G / group)^+]`` for the gap ``G``,
    the sum of 4 geometric(d) column gaps of a Bernoulli(d) row (taken as the Gamma of the same
    mean ``4 / d`` and variance ``4 (1 - d) / d^2``)."""
    from scipy.special import gammainc

    d = np.minimum(np.asarray(d, dtype=np.float64), 1.0 - 1e-6)
    k, scale = 4.0 / (1.0 - d), (1.0 - d) / d
    x = group / scale
    same = gammainc(k, x) - (k * scale / group) * gammainc(k + 1.0, x)
    m = np.asarray(m, dtype=np.float64)
    return np.where(m > 0, m - np.maximum(m - 1.0, 0.0) * np.clip(same, 0.0, 1.0), 0.0)


@cache
def _max_bin_table(bins: int) -> np.ndarray:
    """E[the largest bin's count] of ``m`` balls thrown uniformly into ``bins`` bins, for
    ``m = 0 .. 32`` (exact: P(every bin < k) = m! [x^m] (sum_{j<k} x^j / j!)^bins / bins^m)."""
    fact = np.array([math.factorial(j) for j in range(WARP + 1)], dtype=np.float64)
    out = np.zeros(WARP + 1)
    for k in range(1, WARP + 1):
        base = np.where(np.arange(WARP + 1) < k, 1.0 / fact, 0.0)
        poly = np.zeros(WARP + 1)
        poly[0] = 1.0
        for _ in range(bins):
            poly = np.convolve(poly, base)[:WARP + 1]
        below = poly * fact / float(bins) ** np.arange(WARP + 1)   # P(every bin < k), per m
        out += 1.0 - np.minimum(below, 1.0)
    return out


def _gather_wavefronts(B, m):
    """Expected L1TEX data-stage wavefronts of one gather load of ``m`` lanes (arrays
    ``(configs, 1)`` and ``(configs, rounds)``): the bank rule of the lanes' first words
    (``gpusim/engine/smem.py``), each lane a distinct column ``c`` at word ``B c + k``, so
    ``32 / gcd(B, 32)`` bank groups, the columns' groups taken as uniform and independent (the
    sorted columns' gaps spread neighbours over the banks; within ~7% of a Monte Carlo of
    Bernoulli rows for B = 1..8, d = 0.02..0.5): the expected largest group count."""
    Bi = np.broadcast_to(np.asarray(B, dtype=np.int64), np.shape(m))
    m = np.asarray(m, dtype=np.float64)
    out = np.zeros(np.shape(m))
    for b in np.unique(Bi):
        sel = Bi == b
        table = _max_bin_table(WARP // math.gcd(int(b), WARP))
        out[sel] = np.interp(m[sel], np.arange(WARP + 1), table)
    return out


def _resident(sizes: dict, names, capacity):
    """Which of ``names`` a cache of ``capacity`` bytes holds: admitted smallest first (ties by
    name) while they fit, as :func:`gpusim.engine.l1.resident_buffers` does (arrays)."""
    keys = sorted(names)
    size = np.stack([np.broadcast_to(sizes[k], np.shape(sizes[keys[0]])) for k in keys])
    order = np.argsort(size, axis=0, kind="stable")      # stable: ties stay in name order
    fits = np.cumsum(np.take_along_axis(size, order, axis=0), axis=0) <= capacity
    held = np.empty_like(fits)
    np.put_along_axis(held, order, fits, axis=0)
    return dict(zip(keys, held, strict=True))


def _max_normal_approx(n):
    """E[max of n standard normals] (Blom's approximation, array-friendly), 0 for n <= 1."""
    from scipy.special import ndtri

    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    return np.maximum(ndtri((n - 0.375) / (n + 0.25)), 0.0)


def _csr_row_per_warp(spec, N, R, B, d):
    """Cycles of one step of the CSR row-per-warp kernel (``kernels_ir/kernels/csr_baseline.py``)
    for random Bernoulli(d) rows of ``N`` columns, ``R`` rows, batch ``B`` (arrays): a dict of
    arrays ``prologue``, ``loop``, ``epilogue``, ``partition`` (cycles, summed) and the loop's
    bounds ``l1tex``, ``l2``, ``dram``, ``chain`` (cycles, inside ``loop``). See the module
    docstring for the mechanisms; every number is a spec field or an instruction count."""
    from scipy.special import ndtr

    Nf, Rf, Bf = (np.asarray(x, dtype=np.float64) for x in (N, R, B))
    d = np.asarray(d, dtype=np.float64)
    n_cfg = Nf.size
    idx = np.arange(n_cfg)
    wpc = DEFAULT_THREADS // WARP
    alu, fma = spec.alu_latency_cycles, spec.fma_latency_cycles
    pipe_f = max(1.0, WARP / spec.fp32_lanes_per_subpartition)
    occ_i = max(1.0, WARP / spec.int32_lanes_per_subpartition)
    occ_s = max(1.0, WARP / spec.sfu_lanes_per_subpartition)
    wf = spec.smem_wavefronts_per_cycle           # L1TEX data stage: wavefronts per cycle
    mean = float(spec.l2_hit_latency_cycles)
    far = float(l2_latency(spec, np.inf))
    far_extra = spec.l2_far_extra_cycles if spec.l2_partitions > 1 else 0
    dram_extra = max(0.0, spec.dram_latency_cycles - spec.l2_hit_latency_cycles)
    svc = spec.l2_sector_bytes / spec.l2_bytes_per_cycle_per_slice      # cycles per request
    dram_bpc = spec.dram_bandwidth_bytes_per_s / spec.clock_hz
    sector_words = spec.l2_sector_bytes / 4

    # the grid: every CTA co-resident (as the simulator runs it), the busiest SM first
    W = wpc * np.ceil(np.ceil(Rf / wpc) / spec.sm_count)      # warps on the busiest SM
    wps = W / spec.subpartitions_per_sm
    ig = np.maximum(wps * occ_i, 1.0)     # one INT instruction of all the sub-partition's warps
    ia = np.maximum(alu, ig)
    ng, width = _csr_gathers(Bf)
    mu = Nf * d
    sig = np.sqrt(np.maximum(mu * (1.0 - d), 1e-9))
    pad = 1.5                             # padding nonzeros per row, (-r) mod 4, r mod 4 uniform
    nnz = np.maximum(Rf * (mu + pad), VEC)
    sizes = {"vals": 4 * nnz, "cols": 4 * nnz, "rowptr": 4 * (Rf + 1), "perm": 4 * Rf,
             "h_in": 4 * Nf * Bf, "x": 4 * Rf * Bf, "h_out": 4 * Rf * Bf}
    l1 = _resident(sizes, ("vals", "cols", "rowptr", "perm", "h_in", "x"),
                   spec.l1_unified_bytes_per_sm)
    l2 = _resident(sizes, sizes, spec.l2_size_bytes)
    h_l1, vals_dram, cols_dram = l1["h_in"], ~l2["vals"], ~l2["cols"]
    h_sectors = np.ceil(Nf * Bf * 4 / spec.l2_sector_bytes)
    sectors_per_nz = np.maximum(Bf / sector_words, 1.0)      # h sectors of one column

    def col(x):
        return np.asarray(x).reshape(n_cfg, 1)

    def g_lines(m):         # 128-byte lines of one gather load
        return _sorted_distinct(col(np.maximum(WARP / Bf, 1.0)), col(d), m)

    def g_sectors(m):       # L2 requests of one gather load
        return (_sorted_distinct(col(np.maximum(sector_words / Bf, 1.0)), col(d), m)
                * col(np.maximum(width / sector_words, 1.0)))

    def vc_lines(m):        # one 128-bit load of m lanes, 16-byte aligned: lines, sectors
        return np.where(m > 0, (m + 7) / 8.0, 0.0)

    def tag(lines, m):      # tag-stage cycles of a load over `lines` lines (E[ceil(lines / 4)])
        return np.where(m > 0, np.clip(lines / TAG_SETS_PER_CYCLE + 0.375, 1.0,
                                       np.ceil(m / TAG_SETS_PER_CYCLE)), 0.0)

    def vc_wf(m):           # data-stage wavefronts of a 128-bit load of m consecutive lanes
        return np.where(m > 0, np.clip((m + 3.5) / 8.0, 1.0, np.ceil(m / 8.0)), 0.0)

    def g_wf(m):            # data-stage wavefronts of one gather load
        return _gather_wavefronts(col(Bf), m)

    def g_stage(m):         # one gather load through L1TEX: the slower of its two stages
        return np.maximum(tag(g_lines(m), m), g_wf(m) / wf)

    def vc_sectors(m):
        return np.where(m > 0, (m + 1) / 2.0, 0.0)

    # rounds (chunk iterations): column 0 stands for the i0 rounds in which every row is still
    # full (weight i0), then K rounds around the row-length distribution (weight 1 each)
    i0 = np.floor(np.maximum(0.0, mu - 7.0 * sig) / CHUNK)
    K = int(max(2, math.ceil((14.0 * float(sig.max(initial=0.0)) + 2 * CHUNK) / CHUNK)))
    lo = CHUNK * (col(i0) + np.arange(K)[None, :])
    Mu, Sg = col(mu), col(sig)
    p_act = 1.0 - ndtr((lo + 0.5 - Mu) / Sg)                 # the row has nonzeros >= lo
    p_act = np.where(lo == 0, 1.0 - (1.0 - col(d)) ** col(Nf), p_act)
    p_full = 1.0 - ndtr((lo + CHUNK - 0.5 - Mu) / Sg)        # ... and a full chunk here
    p_end = np.maximum(p_act - p_full, 0.0)
    za, zb = (lo + 0.5 - Mu) / Sg, (lo + CHUNK - 0.5 - Mu) / Sg
    phi = np.exp(-0.5 * za * za) - np.exp(-0.5 * zb * zb)
    r_end = Mu + Sg * phi / math.sqrt(2 * math.pi) / np.maximum(ndtr(zb) - ndtr(za), 1e-300)
    m_end = np.clip((np.clip(r_end, lo + 1, lo + CHUNK) - lo) / VEC + pad / VEC, 1.0, WARP)
    p_any = 1.0 - (1.0 - p_act) ** col(Rf)                   # some row is still running
    one = np.ones((n_cfg, 1))
    wgt = np.concatenate([col(i0), np.ones_like(p_act)], axis=1)
    p_full = np.concatenate([one, p_full], axis=1)
    p_end = np.concatenate([0.0 * one, p_end], axis=1)
    m_end = np.concatenate([WARP * one, m_end], axis=1)
    p_any = np.concatenate([one, p_any], axis=1)
    lo = np.concatenate([0.0 * one, lo], axis=1)
    p_act = p_full + p_end
    first = np.where(i0 > 0, 0, 1)                            # the column of the first round
    is_first = np.arange(K + 1)[None, :] == col(first)
    # the longest row: the critical warp's lanes in each round
    r_max = cap._cf_quantile(1.0 - (1.0 - cap._MEDIAN_RANK[0]) / (Rf + cap._MEDIAN_RANK[1]),
                             Nf, d)
    m_crit = np.clip((VEC * np.ceil(col(r_max) / VEC) - lo) / VEC, 0.0, WARP)
    m_crit = np.where(m_crit > 0, m_crit, WARP)
    m_crit[:, 0] = WARP
    full = WARP * one

    # L1TEX of the busiest SM, its warps' loads per round (values, column indices, 4 nonzeros'
    # gathers; the padding lanes read column 0, one more line; perm, rowptr twice and x once
    # per warp in the first round, one line and one wavefront each): the tag stage in lines
    # (TAG_SETS_PER_CYCLE a cycle) and the data stage in bank wavefronts, the slower one
    tag_full = 2 * tag(vc_lines(full), full) + 4 * col(ng) * tag(g_lines(full), full)
    tag_end = (2 * tag(vc_lines(m_end), m_end)
               + 4 * col(ng) * tag(g_lines(m_end) + pad / VEC, m_end))
    wf_full = 2 * vc_wf(full) + 4 * col(ng) * g_wf(full)
    wf_end = 2 * vc_wf(m_end) + 4 * col(ng) * g_wf(m_end)
    tags = col(W) * (p_full * tag_full + p_end * tag_end)
    data = col(W) * (p_full * wf_full + p_end * wf_end)
    once = W * (3 + ng) / np.maximum(wgt[idx, first], 1.0)
    tags[idx, first] += once
    data[idx, first] += once
    ds = np.maximum(tags, data / wf)
    # L2 slices (all SMs): values and indices, and the gathers' requests; with h held in L1
    # only each SM's first touch of a sector goes to L2 (coverage of the SM's gathers so far)
    req_vc = col(Rf) * (p_full * 2 * vc_sectors(full) + p_end * 2 * vc_sectors(m_end))
    req_g = col(Rf) * 4 * col(ng) * (p_full * g_sectors(full) + p_end * g_sectors(m_end))
    lanes_sm = col(W) * VEC * (p_full * WARP + p_end * m_end)  # nonzeros per SM and round
    done = np.cumsum(lanes_sm * wgt, axis=1)
    before = done - lanes_sm * wgt

    def coverage(q):
        return 1.0 - np.exp(-q * col(sectors_per_nz) / col(h_sectors))

    touch = spec.sm_count * col(h_sectors) * (coverage(done) - coverage(before))
    req_g = np.where(col(h_l1), touch / np.maximum(wgt, 1.0), req_g)
    # ... and the padding lanes' loads of column 0 all wait at one slice when h is not in L1
    hot = np.where(col(h_l1), 0.0, col(Rf) * p_end * col(ng) * pad * svc)
    l2t = (req_vc + req_g) * svc / spec.l2_slices + hot
    # ... and the busiest SM sends its share of them at most one per l2_request_cycles_per_sm
    # (a request is one 128-byte line of a warp-instruction: the coalesced value and index
    # loads carry 128 / l2_sector_bytes sectors per request, a gather one)
    lines_vc = req_vc / max(1.0, 128.0 / spec.l2_sector_bytes)
    l2t = np.maximum(l2t, (lines_vc + req_g) * col(W) / np.maximum(col(Rf), 1.0)
                     * float(getattr(spec, "l2_request_cycles_per_sm", 0.0)))
    nz_bytes = col(Rf) * (p_full * WARP + p_end * m_end) * VEC * 4
    dram = (np.where(col(vals_dram), nz_bytes, 0.0)
            + np.where(col(cols_dram), nz_bytes, 0.0)) / dram_bpc
    issue = col(wps) * p_act * np.maximum(4 + 4 * col(ng) + 4 * col(Bf),
                                          4 * col(Bf) * pipe_f)
    # the critical warp's chain of one round: IADD -> ISETP -> LDG values, indices -> the
    # indices' round trip (DRAM when not L2-resident; with both arrays in DRAM it serves every
    # warp's values of the round first, in issue order) -> own value and index lines -> the
    # gathers, back to back -> their round trip (an L1 hit once the SM holds all its lanes'
    # sectors, else the far partition: the lanes span many units) -> own gather lines -> FFMAs
    rt_cols = mean + col(np.where(cols_dram, dram_extra, 0.0))
    rt_g = np.where(col(h_l1) & (lo > 0),
                    spec.l1_hit_latency_cycles + (far - spec.l1_hit_latency_cycles)
                    * (1.0 - coverage(before / np.maximum(wgt, 1.0)) ** m_crit), far)
    fill = (2 * alu + 2 + rt_cols + np.where(col(vals_dram & cols_dram), nz_bytes / dram_bpc, 0.0)
            + 2 * np.maximum(tag(vc_lines(m_crit), m_crit), vc_wf(m_crit) / wf)
            + 4 * col(ng) + rt_g)
    # the first round starts together: the slices serve every warp's value and index loads
    # (issued first) before any gather's request, whose data come back half a trip later
    vc_phase = np.where(col(vals_dram), req_vc / 2, req_vc) * svc / spec.l2_slices
    queued = rt_cols / 2 + vc_phase / np.maximum(wgt, 1.0) + rt_g / 2
    own = 4 * col(ng) * g_stage(m_crit) + col(Bf) * pipe_f + 1
    # ... while the tag stage (at issue) takes the gathers of the warps whose indices are back:
    # the SM's L1TEX work of the first round overlaps that queue
    first_l1tex = np.maximum(ds + fill, queued + own)
    fill = np.where(is_first, np.maximum(fill, queued), fill)
    chain = p_any * (fill + own)
    # a round of many warps: L1TEX is busy but for the part of the next round's fill that the
    # other warps' last gathers (still in the stage) do not hide; the first round's fill is
    # never hidden
    drain = np.maximum(col(W) * p_act - 1.0, 0.0) * g_stage(np.where(p_full > 0.5, WARP,
                                                                     m_end))
    gap = np.where(is_first, fill, np.maximum(0.0, fill - drain))
    busy = np.where(is_first, p_any * first_l1tex, ds + p_any * gap)
    # warps in step (full rows): a round's requests reach the slices together, so the slices'
    # work of a round adds to its round trips (values/indices, then the gathers) instead of
    # hiding them
    l2r = l2t + p_full * (rt_cols + rt_g)
    rounds = np.maximum(chain, np.maximum(busy, np.maximum(l2r, np.maximum(dram, issue))))
    loop = (rounds * wgt).sum(axis=1)

    # prologue: 3 SREG, IMAD, ISETP, IMIN (INT, shared by the sub-partition's warps), LDG perm,
    # LDG rowptr (two, back to back), IADD, B MOVs, the first ISETP
    prologue = 3 * ig + 2 * ia + ig + 2 * (mean + 1) + ia + (Bf + 1) * ig + alu
    # epilogue: butterfly, lane 0 loads x, FADD + TANH per column (the SFU pipe), the stores
    # and their acknowledgement
    epilogue = (_csr_tail_cycles(spec, Bf) - Bf * (fma + 1)
                + Bf * np.maximum(fma + 1, occ_s) + (ng - 1) + mean + 1)
    # near / far L2 partition: a round trip of a warp's own (perm, rowptr, indices of a round,
    # x, store) is near or far with even odds. The step ends with the unluckiest of the warps
    # that run the most rounds; a first round bound by the data stage starts with the luckiest
    # warps of the SM instead
    chain_bound = chain >= np.maximum(busy, np.maximum(l2r, np.maximum(dram, issue)))
    n_chain = (p_any * wgt * chain_bound).sum(axis=1)
    start_chain = ds[idx, first] < chain[idx, first]
    n_crit = np.maximum(1.0, Rf * (1.0 - ndtr((CHUNK * np.maximum(np.ceil(r_max / CHUNK) - 1, 0)
                                               + 0.5 - mu) / sig)))
    k_end = 2.0 + n_chain + np.where(start_chain, 2.0, 0.0)
    k_start = np.where(start_chain, 0.0, 3.0)
    e_max = np.minimum(k_end, k_end / 2 + np.sqrt(k_end) / 2 * _max_normal_approx(n_crit))
    e_min = np.maximum(0.0, k_start / 2 - np.sqrt(k_start) / 2 * _max_normal_approx(W))
    partition = far_extra * ((e_max - k_end / 2) - (k_start / 2 - e_min))
    return {"prologue": prologue, "loop": loop, "epilogue": epilogue, "partition": partition,
            "l1tex": (ds * wgt).sum(axis=1), "l2": (l2t * wgt).sum(axis=1),
            "dram": (dram * wgt).sum(axis=1), "chain": (chain * wgt).sum(axis=1)}


# Kernels (graph nodes) of one step of each library baseline path, as (kind, bytes) with bytes a
# function of (rows, N, B, weight bytes W, CSR bytes C): recorded with torch.profiler on the H100
# (measurements/h100/library_profile.json, torch 2.11 / CUDA 13); "stream" nodes carry the
# product's weights, the others move vectors. tests/models/test_analytical.py checks the counts.
def _vec(k):
    return lambda r, n, b, w, c: k * r * b * 4


_EPILOGUE = (("add", _vec(3)), ("tanh", _vec(2)))
LIBRARY_NODES = {
    "cublas_gemm": lambda b: ((("stream", lambda r, n, b, w, c: w + (n + r) * b * 4),)
                              + ((("reduce", _vec(2)),) if b > 1 else ()) + _EPILOGUE),
    "cublas_gemv": lambda b: (("stream", lambda r, n, b, w, c: w + (n + r) * 4),
                              ("copy", lambda r, n, b, w, c: 2 * r * 4)) * b + _EPILOGUE,
    "cublas_gemm_pad8": lambda b: (("copy", _vec(2)),
                                   ("stream", lambda r, n, b, w, c: w + (n + r) * 8 * 4),
                                   ("reduce", lambda r, n, b, w, c: 2 * r * 8 * 4),
                                   ("copy", _vec(2))) + _EPILOGUE,
    "cusparse": lambda b: (("partition", lambda r, n, b, w, c: (r + 1) * 4),
                           ("stream", lambda r, n, b, w, c: c + (n + r) * b * 4))
                          + ((("memset", _vec(1)),) if b == 1 else
                             (("scale", _vec(2)), ("fill", _vec(1))))
                          + (("copy", _vec(2)),) + _EPILOGUE,
}


def library_class(key: str, b: int) -> str:
    """The class (``gpusim.specs.LIBRARY_CLASSES``) of the product kernel of baseline path ``key``
    at batch ``b``: cuBLAS runs a GEMV kernel for a one-column GEMM, and a GEMM at batch 8 (or
    padded to 8) is its own class since the library picks its kernel by the batch width."""
    if key == "cusparse":
        return "spmv" if b == 1 else "spmm"
    if key == "cublas_gemm_pad8" or b == 8:
        return "gemm8"
    return "gemv" if key == "cublas_gemv" or b == 1 else "gemm"


def library_matrix_bytes(rows, n, nnz, value_bytes=4, index_bytes=4):
    """(dense weight bytes W, CSR bytes C: values + column indices + row pointers) of a
    ``rows x n`` layer matrix with ``nnz`` nonzeros: what the library products stream."""
    return rows * n * value_bytes, nnz * (value_bytes + index_bytes) + (rows + 1) * 4


def library_path_parts(lib: dict, key: str, b: int, r, n, w, c):
    """(fixed part, streaming part) of one step of baseline path ``key`` at batch ``b`` with the
    fitted ``[library]`` parameters ``lib`` of a spec (arrays over the layers ``r, n, w, c``)."""
    fixed, streaming = 0.0, 0.0
    for kind, nbytes in LIBRARY_NODES[key](b):
        if kind == "stream":
            cls = library_class(key, b)
            fixed = fixed + lib[f"{cls}_fixed_s"]
            streaming = streaming + nbytes(r, n, b, w, c) / lib[f"{cls}_bytes_per_s"]
        else:
            fixed = fixed + lib["node_s"]
    return fixed, streaming


def _baselines(spec, name, N, B, d, cell, dtype):
    gates = cap.check_cell(cell)
    rows = (gates * N).astype(np.float64)
    Nf, Bf = N.astype(np.float64), B.astype(np.float64)
    vb = cap.DTYPES[dtype]
    cs = spec.cycle_s
    l2_bw = spec.l2_slices * spec.l2_bytes_per_cycle_per_slice * spec.clock_hz
    node = spec.graph_launch_overhead_s
    store_trip = spec.l2_hit_latency_cycles * cs

    def stream(nbytes, footprint):
        in_l2 = footprint <= spec.l2_size_bytes
        bw = np.where(in_l2, l2_bw, spec.dram_bandwidth_bytes_per_s)
        lat = np.where(in_l2, spec.l2_hit_latency_cycles, spec.dram_latency_cycles) * cs
        return lat + nbytes / bw, nbytes / bw

    W, C = library_matrix_bytes(rows, Nf, rows * Nf * d, vb, 4 if dtype == "fp32" else 2)

    lib = spec.library_params

    def path(key):
        """(per-step time, launch part, weights-streaming part) of one baseline path."""
        shape = np.broadcast(rows, Bf).shape
        tot, launch, weights = (np.zeros(shape) for _ in range(3))
        matrix = C if key == "cusparse" else W      # what a "stream" node's footprint is
        for b in np.unique(Bf):
            sel = Bf == b
            r, n, w, c = rows[sel], Nf[sel], W[sel], C[sel]
            if lib is not None:   # the spec's fitted library kernels
                fixed, streaming = library_path_parts(lib, key, int(b), r, n, w, c)
                tot[sel] += fixed + streaming
                launch[sel] += fixed
                weights[sel] += streaming
                continue
            for kind, nbytes in LIBRARY_NODES[key](int(b)):
                by = nbytes(r, n, b, w, c)
                t, bw_part = stream(by, matrix[sel] if kind == "stream" else by)
                tot[sel] += node + store_trip + t
                launch[sel] += node
                if kind == "stream":
                    weights[sel] += bw_part
        return tot, launch, weights

    if name in ("cublas", "cusparse"):
        keys = ["cusparse"] if name == "cusparse" else ["cublas_gemm", "cublas_gemv",
                                                        "cublas_gemm_pad8"]
        best = None
        for key in keys:
            t, la, w = path(key)
            if key == "cublas_gemm_pad8":
                t = np.where(Bf < 8, t, np.inf)
            if best is None:
                best = [t, la, w]
            else:
                better = t < best[0]
                best = [np.where(better, a, o) for a, o in zip((t, la, w), best, strict=True)]
        per, la, w = best
        bd = {"launch_s": la, "weights_s": w, "epilogue_s": per - la - w}
    else:  # csr-row-per-warp: our kernel, one graph node, tanh fused (see the module docstring)
        c = _csr_row_per_warp(spec, Nf, rows, Bf, d)
        per = node + (c["prologue"] + c["loop"] + c["epilogue"] + c["partition"]) * cs
        bd = {"launch_s": node + 0 * per, "prologue_s": c["prologue"] * cs,
              "loop_s": c["loop"] * cs, "epilogue_s": c["epilogue"] * cs,
              "partition_s": c["partition"] * cs,
              "l1tex_s": c["l1tex"] * cs, "l2_s": c["l2"] * cs, "dram_s": c["dram"] * cs,
              "chain_s": c["chain"] * cs}
    shape = N.shape
    return KernelTimes(name, per, np.ones(shape, bool), np.zeros(shape, np.int64),
                       np.zeros(shape), bd, None)


def predict_many(spec, hidden, batch, density, *, cell: str = "rnn", dtype: str = "fp32",
                 kernels=None) -> dict[str, KernelTimes]:
    """Per-step time of every kernel (or those named) for arrays of configurations."""
    cap.check_cell(cell)
    cap.check_dtype(dtype)
    N, B, d = _layer_arrays(hidden, batch, density)
    names = tuple(VARIANTS) if kernels is None else tuple(kernels)
    out = {}
    for name in names:
        if name not in VARIANTS:
            raise InputError(f"kernel {name!r} is unknown; accepted: {', '.join(VARIANTS)}")
        v = VARIANTS[name]
        if v.family == "persistent":
            out[name] = _persistent_fast(spec, v, N, B, d, cell, dtype)
        else:
            out[name] = _baselines(spec, name, N, B, d, cell, dtype)
    return out


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


def predict_mapping(spec, variant: str | Variant, mapping, batch: int, *, dtype: str = "fp32",
                    report=None, wavefronts=None) -> KernelTimes:
    """Per-step time of a persistent variant for a concrete mapping (exact wavefronts).

    ``variant``: a name of :data:`VARIANTS` or any :class:`Variant` (e.g. a recorded case's
    sync / wide-loads / layout combination). ``report`` (:func:`kernels_ir.layouts.analyse` of
    the mapping) or ``wavefronts`` (:func:`mapping_wavefronts`) may be given to avoid recomputing
    them. The slowest SM sets the step.
    """
    v = variant if isinstance(variant, Variant) else VARIANTS[variant]
    if v.family != "persistent":
        raise InputError(f"{variant!r} is not a persistent kernel")
    b = int(batch)
    if wavefronts is not None:
        wf = np.asarray(wavefronts)
    elif report is not None:
        wf = report.wavefronts  # (n_warps, S, n_loads)
    else:
        wf = mapping_wavefronts(mapping, b, v.wide_loads)
    rs = mapping.slot_row_slot
    R = len(mapping.slots)
    per_rs = np.zeros((mapping.n_warps, R))
    np.add.at(per_rs, (slice(None), rs), wf.sum(axis=-1))
    wpc = mapping.warps_per_cta
    per_cta = per_rs.reshape(mapping.n_ctas, wpc, R)
    wf_sm = per_cta.sum(axis=1)                       # (n_ctas, R)
    wf_warp = per_cta.max(axis=1)
    K = np.broadcast_to(np.asarray(mapping.slots, dtype=np.float64), wf_sm.shape)
    mask = np.ones(wf_sm.shape, bool)
    N = mapping.n_cols
    S = mapping.total_slots
    tw = per_rs.sum(axis=1)                           # each warp's wavefronts per step
    args = (spec, v, np.array([N]), b, K, wf_sm, wf_warp, mask, R, S, dtype)
    shared = (shared_sectors(mapping.row_ids, mapping.positions, b, wpc)
              if v.sync == "lamport" else None)
    t, su, parts, which = _persistent_from_slots(*args, spread_wf=float(tw.max() - tw.min()),
                                                 shared=shared)
    if v.sync == "barrier":  # the other CTAs' atomics arrive earlier by their shorter work
        work = t - parts["sync_s"] / spec.cycle_s
        t, su, parts, which = _persistent_from_slots(
            *args, spread_wf=float(tw.max() - tw.min()), cta_spread=float(work.max() - work.min()))
    worst = int(np.argmax(t))
    f = cap.fit(spec, N, b, 1.0, cell="rnn", dtype=dtype, dense=not v.sparse,
                slots=mapping.slots)
    ok = f.fits
    parts = {k: np.atleast_1d(np.asarray(val))[worst if np.size(val) > 1 else 0]
             for k, val in parts.items()}
    return KernelTimes(v.name, np.array([t[worst] if ok else np.nan]), np.array([ok]),
                       np.array([0 if ok else REASONS.index(f.limit)]), np.array([su]),
                       {k: np.array([val]) for k, val in parts.items()},
                       np.array([which[worst]], dtype=object))


def speedup_summary(times: dict[str, KernelTimes]):
    """Best sparse persistent kernel vs the best of everything else (arrays of names/speedup)."""
    sparse_p = [n for n in times if VARIANTS[n].family == "persistent" and VARIANTS[n].sparse]
    others = [n for n in times if n not in sparse_p]
    shape = next(iter(times.values())).per_step_s.shape

    def best(names):
        if not names:
            return np.full(shape, ""), np.full(shape, np.nan)
        arr = np.stack([np.where(times[n].fits, times[n].per_step_s, np.inf) for n in names])
        idx = arr.argmin(axis=0)
        val = arr.min(axis=0)
        nm = np.array(names, dtype=object)[idx]
        return np.where(np.isfinite(val), nm, ""), np.where(np.isfinite(val), val, np.nan)

    bp_name, bp = best(sparse_p)
    nb_name, nb = best(others)
    return bp_name, bp, nb_name, nb, nb / bp


# ----------------------------------------------------------------------------- one layer report

EXACT_NNZ_LIMIT = 1_000_000  # above this the mapping takes > 0.3 s: use the expectation
# the random layer draws one number per weight position (rows x hidden) whatever the density:
# above this (hidden 16384 for an RNN cell, ~4 s) use the expectation too (hidden 65536 took 70 s)
EXACT_DRAW_LIMIT = 1 << 28
ENGINES = ("model", "sim")


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    family: str
    engine: str
    fits: bool
    per_step_s: float | None
    total_s: float | None
    reason: str            # why it does not fit ("" if it fits)
    bound: str             # persistent: the compute bound that won; baselines: ""
    breakdown: dict

    def as_dict(self) -> dict:
        return {"name": self.name, "family": self.family, "engine": self.engine,
                "fits": self.fits, "per_step_s": self.per_step_s, "total_s": self.total_s,
                "reason": self.reason, "bound": self.bound, "breakdown": self.breakdown}


@dataclass(frozen=True, slots=True)
class Report:
    gpu: str
    hidden: int
    batch: int
    density: float
    timesteps: int
    cell: str
    dtype: str
    engine: str
    rows: tuple[Row, ...]
    best_persistent: str | None
    next_best: str | None
    speedup: float | None
    note: str

    def as_dict(self) -> dict:
        return {"gpu": self.gpu, "hidden": self.hidden, "batch": self.batch,
                "density": self.density, "timesteps": self.timesteps, "cell": self.cell,
                "dtype": self.dtype, "engine": self.engine,
                "kernels": [r.as_dict() for r in self.rows],
                "best_persistent": self.best_persistent, "next_best": self.next_best,
                "speedup": self.speedup, "note": self.note}


def _validate(hidden, batch, density, timesteps, cell, dtype, engine):
    for name, v in (("hidden", hidden), ("batch", batch), ("timesteps", timesteps)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise InputError(f"{name}={v!r} must be a positive integer")
    if not (0.0 < float(density) <= 1.0):
        raise InputError(f"density={density} is outside (0, 1]")
    if batch > 1024:
        raise InputError(f"batch={batch} is absurd for a recurrent layer; accepted: 1..1024")
    if hidden > 1 << 20:
        raise InputError(f"hidden={hidden} is absurd; accepted: 1..{1 << 20}")
    cap.check_cell(cell)
    cap.check_dtype(dtype)
    if engine not in ENGINES:
        raise InputError(f"engine={engine!r} is not supported; accepted: {', '.join(ENGINES)}")


def _reason(spec, code: int, hidden, batch, density, cell, dtype, dense, slots=None) -> str:
    label = REASONS[code]
    if code in (1, 2):
        f = cap.fit(spec, hidden, batch, density, cell=cell, dtype=dtype, dense=dense,
                    slots=slots, exact=False)
        best = cap.max_hidden(spec, density, batch, cell=cell, dtype=dtype, dense=dense,
                              exact=False)
        msg = f.message or label
        return f"{msg}; largest that fits: hidden={best.hidden} ({best.limit})"
    if code == 3:
        return (f"batch={batch} cannot use wide loads; accepted with wide loads: "
                f"{', '.join(map(str, WIDE_BATCHES))}")
    if code == 4:
        return f"batch={batch} exceeds the kernel's {MAX_BATCH} batch columns"
    return label


def _f(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else x


def predict_layer(spec, hidden: int, batch: int, density: float, *, timesteps: int = 1,
                  cell: str = "rnn", dtype: str = "fp32", engine: str = "model", seed: int = 0,
                  simulator=None, exact: bool = True) -> Report:
    """Per-step and total time of every kernel and baseline for one layer (``gpusim predict``).

    The persistent kernels are evaluated on a concrete random layer (seeded) mapped onto the GPU
    when it has at most :data:`EXACT_NNZ_LIMIT` nonzeros (exact ``K_j`` and wavefronts from the
    layout analysis), else from the expectation. ``engine="sim"`` calls
    ``simulator(spec, variants, hidden, batch, density, seed) -> {name: (per_step_s, setup_s,
    breakdown)}`` for every kernel of :data:`SIMULATED` that fits (fp32 RNN cells); this
    package never imports the simulator: the CLI passes it in. Every row names the engine that
    produced it.
    """
    _validate(hidden, batch, density, timesteps, cell, dtype, engine)
    if engine == "sim" and simulator is None:
        raise InputError("engine='sim' needs a simulator callable (see gpusim predict)")
    fast = predict_many(spec, hidden, batch, density, cell=cell, dtype=dtype)
    gates = cap.CELLS[cell]
    nnz_expected = gates * hidden * hidden * density
    use_exact = (exact and nnz_expected <= EXACT_NNZ_LIMIT and
                 gates * hidden * hidden <= EXACT_DRAW_LIMIT)
    U = None
    mappings: dict = {}
    wavefronts: dict = {}
    if use_exact:
        from kernels_ir.mapping import map_matrix_layouts

        from .sparse import random_sparse

        U = random_sparse(gates * hidden, hidden, density, np.random.default_rng(seed))
        # every mapping the loop below prices, made together: they share the sorted, dealt rows
        want: dict = {}
        for name, kt in fast.items():
            v = VARIANTS[name]
            if v.family == "persistent" and v.sparse and int(kt.reason[0]) not in (3, 4):
                want.setdefault(_mapping_key(v), (v.layout, v.wide_loads))
        made = map_matrix_layouts(U, list(want.values()), n_ctas=spec.sm_count,
                                  warps_per_cta=cap.THREADS_PER_CTA // cap.WARP, batch=batch,
                                  seed=seed)
        mappings = dict(zip(want, made, strict=True))
    rows = []
    notes = []
    to_simulate: list[str] = []
    for name, kt in fast.items():
        v = VARIANTS[name]
        eng = "model"
        per = float(kt.per_step_s[0])
        setup = float(kt.setup_s[0])
        ok = bool(kt.fits[0])
        code = int(kt.reason[0])
        bound = str(kt.bound[0]) if kt.bound is not None else ""
        bd = {k: _f(val[0]) for k, val in kt.breakdown.items()}
        slots = None
        if v.family == "persistent" and v.sparse and U is not None and code not in (3, 4):
            key = _mapping_key(v)
            m = mappings[key]
            slots = m.slots
            f = cap.fit(spec, hidden, batch, density, cell=cell, dtype=dtype, slots=m.slots)
            ok = f.fits
            code = 0 if ok else REASONS.index(f.limit)
            if ok:
                # keyed by the loads, not by wide_loads: at batch 1 both read one 32-bit word
                wkey = (key, tuple(access_pattern(batch, v.wide_loads)))
                if wkey not in wavefronts:
                    wavefronts[wkey] = mapping_wavefronts(m, batch, v.wide_loads)
                ex = predict_mapping(spec, name, m, batch, dtype=dtype,
                                     wavefronts=wavefronts[wkey])
                per, setup = float(ex.per_step_s[0]), float(ex.setup_s[0])
                bound = str(ex.bound[0])
                bd = {k: _f(val[0]) for k, val in ex.breakdown.items()}
                eng = "model (exact layout)"
        if ok and engine == "sim" and name in SIMULATED:
            if cell != "rnn" or dtype != "fp32":
                notes.append(f"the simulator builds fp32 rnn cells only: {name} from the model")
            else:
                to_simulate.append(name)
        if ok:
            rows.append(Row(name, v.family, eng, True, per, setup + timesteps * per, "", bound,
                            bd))
        else:
            rows.append(Row(name, v.family, eng, False, None, None,
                            _reason(spec, code, hidden, batch, density, cell, dtype,
                                    not v.sparse, slots), "", {}))
    if to_simulate and not any(r.fits and r.family == "persistent" and VARIANTS[r.name].sparse
                               for r in rows):
        # no sparse persistent kernel fits: there is no speedup to predict, so the baselines keep
        # the model (a CSR step of the largest layers takes minutes to simulate)
        to_simulate = [n for n in to_simulate if VARIANTS[n].family == "persistent"]
        notes.append("no sparse persistent kernel fits: the CSR baseline is priced by the model")
    if to_simulate:
        simulated = simulator(spec, [VARIANTS[n] for n in to_simulate], hidden, batch, density,
                              seed)
        for i, r in enumerate(rows):
            if r.name in simulated:
                per, setup, bd = simulated[r.name]
                rows[i] = Row(r.name, r.family, "sim", True, per, setup + timesteps * per, "",
                              "", bd)
    best_p = _best([r for r in rows if r.family == "persistent" and
                    VARIANTS[r.name].sparse])
    nxt = _best([r for r in rows if not (r.family == "persistent" and
                                        VARIANTS[r.name].sparse)])
    speed = (nxt.per_step_s / best_p.per_step_s) if best_p and nxt else None
    if not use_exact and exact:
        notes.append(f"{nnz_expected:.3g} nonzeros: wavefronts and K_j are expectations for "
                     f"random columns, not from a concrete matrix")
    return Report(spec.name, int(hidden), int(batch), float(density), int(timesteps), cell,
                  dtype, engine, tuple(rows), best_p.name if best_p else None,
                  nxt.name if nxt else None, speed, "; ".join(notes))


def _mapping_key(v: Variant) -> tuple:
    """Variants with equal keys share one mapping (the naive layout ignores wide loads)."""
    return (v.layout, v.wide_loads if v.layout != "naive" else None)


def _best(rows):
    ok = [r for r in rows if r.fits and r.per_step_s is not None]
    return min(ok, key=lambda r: r.per_step_s) if ok else None
