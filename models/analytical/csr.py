"""The CSR row-per-warp baseline (``kernels_ir/kernels/csr_baseline.py``), per step.

CSR row-per-warp baseline (the quantity the cross-check prices: one step, layer in L2)
-------------------------------------------------------------------------------------
The kernel as written: one warp per row, rows sorted longest first, ``ceil(R / 8)`` CTAs of 256
threads, co-resident as far as the registers let an SM hold them (CTA ``c`` on SM ``c % sm_count``;
a larger grid runs in waves, :func:`csr_step_cycles`); a chunk loop of 128 nonzeros per round (32
lanes x 4, 128-bit loads of values and column indices, then the 4 nonzeros' gathers of h back to
back, then their FFMAs); rows padded to a multiple of 4 with column 0. Rows are Bernoulli(d): a
row's length is Binomial(N, d) (normal, continuity-corrected), so round ``i`` has every row
longer than ``128 (i + 1)`` full and the rows ending in it partial (their mean lanes from the
truncated normal); the expected longest row sets the critical warp. The kernel is modelled in
fp32 (as written) whatever ``dtype``. Per round, cycles:

- L1TEX of the busiest SM (``W = 8 ceil(ceil(R / 8) / sm_count)`` warps), the slower of its two
  stages (as ``gpusim/engine/smem.py``): the tag stage, 4 distinct 128-byte lines per cycle
  (``(m + 7) / 8`` lines for a 16-byte-aligned load of ``m`` lanes; for a gather the distinct
  lines of its lanes, :func:`_sorted_distinct`: lanes take every 4th nonzero of a sorted row, so
  neighbours share a line with the probability their column gap allows; the padding lanes add
  line 0), and the data stage, ``smem_wavefronts_per_cycle`` bank wavefronts per cycle
  (``ceil(m / 8)`` for the 16-byte loads; for a gather shared memory's rule at the load's width,
  per phase of 32 / 16 / 8 lanes the expected largest count of its lanes' columns in one of
  ``32 / gcd(B, 32)`` bank groups, :func:`_gather_wavefronts`); perm, rowptr and x add one line
  and one wavefront each per warp;
- the L2 slices (all SMs): the value and index sectors, and the gathers' requests, which with h
  held in L1 (:func:`_resident`, the simulator's smallest-first rule, for L1 and for L2 residency)
  are each SM's first touch of a sector only; an h not held passes through the capacity L1 has
  left as a direct-mapped cache (as the simulator's L1 does), so a later touch of a sector is a
  request only where its slot was refilled in between (:func:`_h_kept`), and the padding lanes'
  requests for column 0 that miss all queue at one slice;
  ``l2_sector_bytes / l2_bytes_per_cycle_per_slice`` each over ``l2_slices``; and the busiest
  SM's share of those requests (``W / R`` of them, a request being one 128-byte line of a
  warp-instruction) leaves the SM at most one per
  ``l2_request_cycles_per_sm`` (``gpusim/engine/l2.py``); and the busiest L2 contention group
  (``l2_group_map``) serves one request every ``l2_group_request_cycles``
  (:func:`.l2.group_cycles`): the gathers' requests lie in the groups of h's lines (32 KiB or
  less sits in fewer than all groups), the value and index lines over their arrays; the
  slowest of the three;
- DRAM: values and indices not resident in L2 stream at ``dram_bandwidth_bytes_per_s``, one
  channel that serves requests as they arrive (the engine's backfill): every warp issues its
  first round at once, so there the one FIFO serves every warp's values before its indices (the
  chain waits for them, once a step); later the warps are spread and a round is the stream's
  share or the chain without that wait;
- issue: the sub-partition's warps' instructions of a chunk (FFMAs at the FP32 pipe rate);
- the critical warp's chain: IADD, ISETP, the value and index loads, the indices' round trip
  (``l2_hit_latency_cycles``, + the DRAM latency when not resident; with both arrays in DRAM the
  step's first round waits for every warp's values), its own value/index lines, the
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
acknowledgement); the butterfly takes its chain or, where the SM's ``W`` warps' ``5 B`` shuffles
take longer through the shared pipe (``shfl_per_cycle_per_sm``, as the simulator serves them
since ``measurements/h100/shfl_pipe.json``), that. Split L2 (``l2_partitions``): each of a
warp's own round trips (perm, rowptr, indices per chain-bound round, x, store) is near or far
with even odds; the step ends with the unluckiest of the warps that run the most rounds
(``E[max]`` of binomials, normal approximation), and a first round bound by the data stage
starts with the luckiest warps of the SM. Against the simulator
(``tests/models/test_csr_model.py``): 40 random layers on the H100 and the V100 (80
configurations), mean 2.7%, max 9.7% when this model was written; against the 7 measured H100
CSR cases 16% (the simulator 16%; the bandwidth stream this model replaces was 39-69% under).
Against today's simulator (with the butterfly's shuffle-pipe bound above): mean 7.2%, 4 of the
80 beyond 15%, one of them 2.6 times too slow (V100, hidden 3477, batch 8, density 0.075: its L2
term; the same without the bound). That one was h just past L1: with the pass-through
(:func:`_h_kept`; before it, every gather of an h not held was a request to L2, 2-2.4 times the
simulator's step past the edge) the sweep is 4.9% off, max 18.3%.

Gated cells (``cell`` lstm / gru: ``R = G N`` gate rows)
------------------------------------------------------
The kernel has a warp per *unit* (``ceil(N / 8)`` CTAs, ``W`` from N), units sorted by their G
gate rows' total nonzeros, and each warp runs its G gate rows back to back, each exactly as a
vanilla row. So the step is G *phases*, each the vanilla kernel's rounds with N rows in flight
(one per warp; the requests of a round, the busiest SM's share, the longest row and the rows
still running are those of N rows), while the footprints that decide L1 and L2 residency are
the whole matrix's (``x`` has G N rows; the LSTM adds ``c_in`` and ``c_out``, ``c_in`` read
only). Two things differ from G vanilla launches: the gathers of a later gate row find h in
the SM's L1 as far as the earlier rows' gathers covered it (the coverage runs on through the
phases, their first rounds included), and only the first gate row's first round starts every
warp at once (the queue at the slices, the fill never hidden): the warps reach their later
gate rows at different times. Per warp the prologue loads the 2G row pointers back to back and
sets up each gate row (IADD, B MOVs, ISETP); the epilogue is G butterflies, then lane 0's loads
of the G x vectors and of ``c_{t-1}`` (LSTM) or ``h_{t-1}`` (GRU) in one round trip, the cell's
update scheduled instruction by instruction from the kernel's own epilogue
(:func:`_cell_math_cycles`: sigmoid and tanh with their own latencies, the SFU pipe's
occupancy), and the stores (h_t; LSTM also c_t) with their acknowledgement. Against the
simulator (``tests/models/test_csr_model.py``, 40 LSTM and GRU layers on the H100 and the V100):
mean 4.5%, max 14.9%, signed mean -1.9%. The contention of the sub-partition's warps for the SFU
pipe in the epilogue (5 SFU operations per column for the LSTM, all on lane 0's warp) is not
modelled.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from kernels_ir.ir import SFU, Op, RegRef
from kernels_ir.kernels.csr_baseline import (
    CELLS,
    CHUNK,
    DEFAULT_THREADS,
    VEC,
    cell_epilogue_instructions,
    gather_loads,
)

from .. import capacity as cap
from .l2 import distinct_groups, group_cycles, l2_latency
from .variants import REDUCTION_STEPS, WARP

TAG_SETS_PER_CYCLE = 4   # the L1TEX tag stage's lines per cycle (gpusim/engine/smem.py)
REGISTERS_FILE = "csr_registers.json"   # ptxas' registers by trips (measurements/csr_registers.py)


@cache
def _register_table() -> dict:
    import json
    from pathlib import Path

    return json.loads((Path(__file__).with_name(REGISTERS_FILE)).read_text())["registers"]


@cache
def _ctas_per_sm(spec, batch: int, cell: str, chunks: int) -> float:
    """CTAs of the CSR kernel (256 threads) that one SM holds at ``batch``, ``cell`` and
    ``chunks`` trips of its chunk loop, from ptxas' registers for ``spec.arch`` as recorded in
    :data:`REGISTERS_FILE` (the simulator asks ptxas itself: ptxas unrolls the loop, so the
    registers grow with its trips; past the table's last trip count, its last entry) and the
    spec's limits, as the CUDA occupancy calculator counts them (registers in units of
    ``reg_alloc_unit_per_warp`` a warp, threads, CTAs). A batch between the table's: the next
    one up (the largest for more); an architecture the table does not have: every CTA
    co-resident (``inf``), as before the waves were modelled."""
    by_cell = _register_table().get(getattr(spec, "arch", ""), {}).get(cell)
    if not by_cell:
        return np.inf
    batches = sorted(int(k) for k in by_cell)
    regs = by_cell[str(next((b for b in batches if b >= batch), batches[-1]))]
    r = regs[min(chunks, len(regs)) - 1]
    unit = spec.reg_alloc_unit_per_warp
    per_warp = -(-r * WARP // unit) * unit
    warps = DEFAULT_THREADS // WARP
    return float(min(spec.regs_per_sm // (per_warp * warps),
                     spec.max_threads_per_sm // DEFAULT_THREADS, spec.max_ctas_per_sm))


def csr_waves(spec, N, R, B, d, cell: str = "rnn"):
    """Waves of the CSR kernel's ``ceil(N / 8)`` CTAs (arrays; ``R`` rows, G per unit), the units
    of each full wave and the rounds of the expected longest row, as the simulator runs the grid
    (:func:`_ctas_per_sm`, with those rounds)."""
    N, R, B, d = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (N, R, B, d)))
    wpc = DEFAULT_THREADS // WARP
    ctas = np.ceil(N / wpc)
    r_max = cap._cf_quantile(1.0 - (1.0 - cap._MEDIAN_RANK[0]) / (R + cap._MEDIAN_RANK[1]), N, d)
    chunks = np.maximum(1, np.ceil(VEC * np.ceil(r_max / VEC) / CHUNK)).astype(int)
    per_wave = np.array([_ctas_per_sm(spec, int(b), cell, int(c)) * spec.sm_count
                         for b, c in zip(B.ravel(), chunks.ravel(), strict=True)],
                        dtype=np.float64).reshape(N.shape)
    per_wave = np.where(ctas > spec.sm_count, per_wave, np.inf)
    waves = np.maximum(1.0, np.ceil(ctas / per_wave))
    return waves, np.minimum(per_wave * wpc, N), chunks


def csr_step_cycles(spec, N, R, B, d, cell: str = "rnn") -> dict:
    """:func:`_csr_row_per_warp` with the grid's waves (:func:`csr_waves`): the rounds as if every
    CTA were co-resident (the same work through the same units), and each wave after the first adds
    the chain of a CTA of its own (``waves``, cycles beside the rounds), since the simulator starts
    a later wave's CTA when a slot frees and a CTA alone is bound by its chain: the prologue ``P``,
    its rounds (``C`` cycles each, the critical warp's chain over the longest row's ``r`` rounds)
    and the epilogue ``E``. The rows are dealt longest first, so the last wave's rows and the first
    wave's shortest are those at the boundary quantile (``r_b`` rounds): the last wave's CTAs start
    as those first-wave CTAs exit, ``(r - r_b) C`` before the longest, and add ``max(0, P + E + (2
    r_b - r) C)``; a middle wave adds ``P + E + r C``. ``C`` leaves out the chain's wait for
    the DRAM FIFO (``chain_fifo``, the step's first round's), and a wave's own rounds (``r C``,
    ``r_b C``) shrink by its share (its rows over N) of the rounds that a GPU-wide unit bounds
    (the L2 or the DRAM, ``shared_bound``): the rounds already pass every row through those
    units once, the later waves' rows included, while an SM's L1TEX holds only the warps
    resident. Against the simulator on 13 layers whose values or indices stream from DRAM (H100,
    H200, V100): mean 7.9%; before, the FIFO's wait in every later wave's every round, 48%. The
    known gap: H200 8192-b4-d0.3, two waves of half the rows each, which leave the DRAM channel
    a third idle on the GPU and in the simulator (warps that wait for DRAM, then all gather at
    once), -34% against the simulator, -29% against the GPU (6% slow before the change;
    ``measurements/h200/csr_dram.json``)."""
    from scipy.special import ndtri

    one = _csr_row_per_warp(spec, N, R, B, d, cell)
    waves, units, r = csr_waves(spec, N, R, B, d, cell)
    Nf, dd = (np.asarray(x, dtype=np.float64) for x in (N, d))
    mu, sig = Nf * dd, np.sqrt(np.maximum(Nf * dd * (1 - dd), 1e-9))
    last = np.clip((Nf - (waves - 1) * units) / np.maximum(Nf, 1.0), 1e-6, 1.0)
    rb = np.clip(np.ceil(VEC * np.ceil(np.maximum(mu + sig * ndtri(last), 1.0) / VEC) / CHUNK),
                 1, r)
    # a later wave's chain without the DRAM FIFO's wait (the step's first round only); its own
    # rounds, r C (a middle wave) or r_b C (the last), shrink by its share of the rounds that
    # the L2 or the DRAM bounds, which already pass every row once (later waves' rows included)
    C = (one["chain"] - one["chain_fifo"]) / r
    P, E = one["prologue"], one["epilogue"]
    share_mid = np.minimum(units / np.maximum(Nf, 1.0), 1.0) * one["shared_bound"]
    share_last = last * one["shared_bound"]
    extra = np.where(waves > 1, (waves - 2) * (P + E + r * C - np.minimum(share_mid, r * C))
                     + np.maximum(0.0, P + E + (2 * rb - r) * C
                                  - np.minimum(share_last, rb * C)), 0.0)
    return {**one, "waves": extra}


def _butterfly_cycles(spec, B):
    """The butterfly of one row's B batch columns, one after another: per column 5 dependent
    SHFL_XOR -> FADD pairs (``shfl + fma`` each; the next column's first shuffle issues one
    cycle after the last FADD, it does not depend on it)."""
    B = np.asarray(B, dtype=np.float64)
    fma = spec.fma_latency_cycles
    return B * (REDUCTION_STEPS * spec.shfl_latency_cycles + (REDUCTION_STEPS - 1) * fma + 1) + fma


def _csr_tail_cycles(spec, B):
    """CSR row-per-warp baseline (``kernels_ir/kernels/csr_baseline.py``), after its gathers.

    Butterfly (:func:`_butterfly_cycles`); ISETP lane 0 (its PAND folded into it,
    ``gpusim.engine.lowering``) -> IMUL base (the ``if``)
    -> LDG of x (ALU latency each, then one L2 round trip); per column FADD x -> TANH (FMA
    latency, then the next column's FADD issues); the STG waits for the last TANH (SFU latency);
    the ``if`` around them is a branch region, but nothing of the warp follows it, so its
    reconvergence costs nothing (the simulator's ``on_reconverge`` charges the next
    instruction).
    """
    B = np.asarray(B, dtype=np.float64)
    fma, alu = spec.fma_latency_cycles, spec.alu_latency_cycles
    x_load = 1 + 2 * alu + spec.l2_hit_latency_cycles
    return _butterfly_cycles(spec, B) + x_load + B * (fma + 1) + spec.sfu_latency_cycles


def _cell_math_cycles(spec, B, cell: str):
    """A gated cell's update on lane 0 (``csr_baseline._csr_cell_epilogue``), from its inputs'
    arrival to its last result: the kernel's own instructions
    (:func:`~kernels_ir.kernels.csr_baseline.cell_epilogue_instructions`, each operation for the
    B columns together) issued in order, one a cycle at most, each when its sources are ready
    and its pipe is free (FP32 ops: FMA latency; TANH and SIGMOID: their own latencies; the
    pipes' occupancy ``32 / lanes``), as the simulator's scoreboard issues them."""
    occ = {"fp32": max(1, WARP // spec.fp32_lanes_per_subpartition),
           "sfu": max(1, WARP // spec.sfu_lanes_per_subpartition)}
    latency = {Op.TANH: spec.sfu_latency_cycles, Op.SIGMOID: spec.sigmoid_latency_cycles}
    B = np.asarray(B)
    out = np.zeros(np.shape(B))
    for b in np.unique(B):
        ready, free, t = {}, {"fp32": 0.0, "sfu": 0.0}, -1.0
        for ins in cell_epilogue_instructions(cell, int(b)):
            pipe = "sfu" if ins.op in SFU else "fp32"
            srcs = [ready.get((r.reg.name, r.index), 0.0) for r in ins.srcs
                    if isinstance(r, RegRef)]
            t = max(t + 1.0, free[pipe], *srcs)
            free[pipe] = t + occ[pipe]
            for r in ins.dsts:
                ready[(r.reg.name, r.index)] = t + latency.get(ins.op, spec.fma_latency_cycles)
        out[B == b] = max(ready.values())
    return out


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
    ``(configs, 1)`` and ``(configs, rounds)``): shared memory's bank rule at the load's width
    (``gpusim/engine/smem.py``): a 32-bit load is one phase of 32 lanes, a 64-bit one two of 16,
    a 128-bit one four of 8 (lanes ``0 .. m - 1`` active, filling the phases in order), each
    phase the largest count of its lanes' first words in one of ``32 / gcd(B, 32)`` bank groups
    (each lane a distinct column ``c`` at word ``B c + k``), the columns' groups taken as uniform
    and independent (the sorted columns' gaps spread neighbours over the banks; within ~7% of a
    Monte Carlo of Bernoulli rows for B = 1..8, d = 0.02..0.5, for the one-phase rule this model
    had before): the sum over phases of the expected largest group count. (The load that hits:
    :func:`_missed_gather_wavefronts` with no lane missing, where the density plays no part.)"""
    return _missed_gather_wavefronts(B, 0.5, m, 0.0)


def _missed_gather_wavefronts(B, d, m, q):
    """Expected data-stage wavefronts of one gather load of ``m`` lanes (arrays ``(configs, 1)``
    and ``(configs, rounds)``) whose lanes each miss L1 with odds ``q`` (``(configs, rounds)``):
    the engine's rule for a load that misses (``gpusim/engine/smem.py``,
    ``SharedPipe.missed_returns``). Per phase of the load's width: the lanes L1 has under the
    bank rule (:func:`_gather_wavefronts` of the phase's expected hits), and the missed lines
    in pieces of two, each one wavefront, or two where the pair's lanes share a bank position
    (``n = 32 / B`` positions a line, a missed line's lanes at distinct ones). The lines of a
    phase are :func:`_sorted_distinct` of its lanes; a line misses with odds
    ``1 - (1 - q)^lanes-a-line``; ``X`` missed lines make ``X / 2 + 1 / 4`` pieces (E[ceil]) and
    ``X / 2 - 1 / 4`` pairs."""
    shape = np.broadcast_shapes(np.shape(B), np.shape(m), np.shape(q), np.shape(d))
    Bi = np.broadcast_to(np.asarray(B, dtype=np.int64), shape)
    m = np.broadcast_to(np.asarray(m, dtype=np.float64), shape)
    q = np.broadcast_to(np.asarray(q, dtype=np.float64), shape)
    dd = np.broadcast_to(np.asarray(d, dtype=np.float64), shape)
    out = np.zeros(shape)
    for b in np.unique(Bi):
        sel = Bi == b
        table = _max_bin_table(WARP // math.gcd(int(b), WARP))
        phases = gather_loads(int(b))[0][0]            # words per load: 1, 2 or 4
        lanes = WARP // phases
        n = max(WARP / float(b), 1.0)                  # bank positions of a line's columns
        qs = q[sel]
        for p in range(phases):
            mp = np.clip(m[sel] - p * lanes, 0.0, lanes)
            out[sel] += np.interp(mp * (1.0 - qs), np.arange(WARP + 1), table)
            lines = _sorted_distinct(n, dd[sel], mp)
            per = mp / np.maximum(lines, 1e-9)
            x = lines * (1.0 - (1.0 - qs) ** per)       # missed lines of the phase
            k = np.maximum(1.0, mp * qs / np.maximum(x, 1e-9))
            clash = 1.0 - np.clip(1.0 - k / n, 0.0, 1.0) ** k
            out[sel] += (x / 2.0 + 0.25 * np.minimum(x, 1.0)
                         + np.maximum(x / 2.0 - 0.25, 0.0) * clash)
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


def _h_kept(spec, sizes, held, h_sectors, gathered, sectors_per_nz, pad_loads):
    """The odds that an SM's L1 still has a sector of h that it touched before in the step
    (arrays): 1 where h is held (:func:`_resident`); else h passes through the capacity left
    over, a direct-mapped cache of ``S`` sectors (``gpusim/engine/l1.py``; on the GPU,
    ``measurements/h200/csr_trace_l1edge.json``, the step has no cliff past the edge). h is
    contiguous, so its sectors take distinct slots up to ``S`` and two share one beyond. A
    sector is touched ``t`` times a step at random times (the SM ``gathered`` nonzeros of
    ``sectors_per_nz`` sectors each, over ``h_sectors``), and its slot is refilled by the
    streamed values and indices (8 bytes a nonzero, ``f = P / S`` fills a step) and, where
    shared, by the other sector of h (``f + t``): :func:`_survives`. The sector of column 0,
    which the padding lanes touch ``pad_loads`` times a step, the same way. Returns
    ``(keep, keep0)``."""
    kept = sum(np.where(held[k], sizes[k], 0.0) for k in held)
    slots = np.maximum(spec.l1_unified_bytes_per_sm - kept, 0.0) / spec.l2_sector_bytes
    t = np.asarray(gathered) * sectors_per_nz / h_sectors
    f = np.asarray(gathered) * 8.0 / spec.l2_sector_bytes / np.maximum(slots, 1e-9)
    shared = np.clip(2.0 * (h_sectors - slots) / h_sectors, 0.0, 1.0)   # h sectors sharing
    keep = (1.0 - shared) * _survives(t, f) + shared * _survives(t, f + t)
    keep0 = _survives(np.asarray(pad_loads, dtype=np.float64), f)
    none = slots < 1
    return (np.where(held["h_in"], 1.0, np.where(none, 0.0, keep)),
            np.where(held["h_in"], 1.0, np.where(none, 0.0, keep0)))


def _survives(t, f):
    """Of a sector's touches in a step that are not its first, the share that find it still
    in its slot: touches at rate ``t`` and refills of the slot at rate ``f`` (per step, Poisson,
    over the one step). A touch at ``u`` follows the previous one by ``Exp(t)`` cut at ``u``,
    which the slot survives with odds ``exp(-f gap)``; integrated over ``u`` in ``[0, 1]``:
    ``t / (t + f) (1 - E(t + f)) / (1 - E(t))`` with ``E(a) = (1 - exp(-a)) / a``."""
    def E(a):
        a = np.maximum(a, 1e-9)
        return -np.expm1(-a) / a
    return t / (t + f) * (1.0 - E(t + f)) / np.maximum(1.0 - E(t), 1e-12)


def _max_normal_approx(n):
    """E[max of n standard normals] (Blom's approximation, array-friendly), 0 for n <= 1."""
    from scipy.special import ndtri

    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    return np.maximum(ndtri((n - 0.375) / (n + 0.25)), 0.0)


def _csr_row_per_warp(spec, N, R, B, d, cell: str = "rnn"):
    """Cycles of one step of the CSR row-per-warp kernel (``kernels_ir/kernels/csr_baseline.py``)
    for random Bernoulli(d) rows of ``N`` columns, ``R`` rows, batch ``B`` (arrays): a dict of
    arrays ``prologue``, ``loop``, ``epilogue``, ``partition`` (cycles, summed) and the loop's
    bounds ``l1tex``, ``l2``, ``dram``, ``chain`` (cycles, inside ``loop``), ``chain_fifo``, the
    chain's wait for the DRAM FIFO that serves every row's values first (the first round's), and
    ``shared_bound``, the rounds that the L2 or the DRAM bounds (for :func:`csr_step_cycles`'s
    later waves). See the module
    docstring for the mechanisms; every number is a spec field or an instruction count.
    ``cell`` gru / lstm: ``R = G N`` gate rows, a warp per unit running its G rows back to back
    (the G phases' rounds in sequence, each phase ``N`` rows in flight), then the cell's
    epilogue (module docstring, "Gated cells")."""
    from scipy.special import ndtr

    G = CELLS[cell]
    Nf, Rf, Bf = (np.asarray(x, dtype=np.float64) for x in (N, R, B))
    Rp = Rf / G                           # rows in flight in a phase: one per warp (= N)
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
    W = wpc * np.ceil(np.ceil(Rp / wpc) / spec.sm_count)      # warps on the busiest SM
    wps = W / spec.subpartitions_per_sm
    ig = np.maximum(wps * occ_i, 1.0)     # one INT instruction of all the sub-partition's warps
    ia = np.maximum(alu, ig)
    ng, width = _csr_gathers(Bf)
    mu = Nf * d
    sig = np.sqrt(np.maximum(mu * (1.0 - d), 1e-9))
    pad = 1.5                             # padding nonzeros per row, (-r) mod 4, r mod 4 uniform
    nnz = np.maximum(Rf * (mu + pad), VEC)
    sizes = {"vals": 4 * nnz, "cols": 4 * nnz, "rowptr": 4 * (Rf + 1), "perm": 4 * Rp,
             "h_in": 4 * Nf * Bf, "x": 4 * Rf * Bf, "h_out": 4 * Rp * Bf}
    read_only = ("vals", "cols", "rowptr", "perm", "h_in", "x")
    if cell == "lstm":                    # the cell state in and out
        sizes.update(c_in=4 * Nf * Bf, c_out=4 * Nf * Bf)
        read_only += ("c_in",)
    l1 = _resident(sizes, read_only, spec.l1_unified_bytes_per_sm)
    l2 = _resident(sizes, sizes, spec.l2_size_bytes)
    vals_dram, cols_dram = ~l2["vals"], ~l2["cols"]
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
    p_any = 1.0 - (1.0 - p_act) ** col(Rp)                   # some row is still running
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
    r_max = cap._cf_quantile(1.0 - (1.0 - cap._MEDIAN_RANK[0]) / (Rp + cap._MEDIAN_RANK[1]),
                             Nf, d)
    m_crit = np.clip((VEC * np.ceil(col(r_max) / VEC) - lo) / VEC, 0.0, WARP)
    m_crit = np.where(m_crit > 0, m_crit, WARP)
    m_crit[:, 0] = WARP
    # a warp's G gate rows back to back: the round columns once per phase (gate row)
    phase = np.repeat(np.arange(G), K + 1)[None, :]
    if G > 1:
        wgt, p_full, p_end, m_end, p_any, lo, p_act, is_first, m_crit = (
            np.tile(a, (1, G)) for a in (wgt, p_full, p_end, m_end, p_any, lo, p_act, is_first,
                                         m_crit))
        is_first = is_first & (phase == 0)
    full = WARP * one

    # L1TEX of the busiest SM, its warps' loads per round (values, column indices, 4 nonzeros'
    # gathers; the padding lanes read column 0, one more line; perm, rowptr twice and x once
    # per warp in the first round, one line and one wavefront each; a gated cell's unit: 2G
    # rowptr loads, G x loads and its c_{t-1} or h_{t-1}): the tag stage in lines
    # (TAG_SETS_PER_CYCLE a cycle) and the data stage in bank wavefronts, the slower one
    tag_full = 2 * tag(vc_lines(full), full) + 4 * col(ng) * tag(g_lines(full), full)
    tag_end = (2 * tag(vc_lines(m_end), m_end)
               + 4 * col(ng) * tag(g_lines(m_end) + pad / VEC, m_end))
    tags = col(W) * (p_full * tag_full + p_end * tag_end)
    epi_loads = G * ng + (ng if G > 1 else 0)   # x of each gate, c_{t-1} or h_{t-1}
    once = W * (1 + 2 * G + epi_loads) / np.maximum(wgt[idx, first], 1.0)
    tags[idx, first] += once
    # L2 slices (all SMs): values and indices, and the gathers' requests; with h held in L1
    # only each SM's first touch of a sector goes to L2 (coverage of the SM's gathers so far)
    req_vc = col(Rp) * (p_full * 2 * vc_sectors(full) + p_end * 2 * vc_sectors(m_end))
    req_g = col(Rp) * 4 * col(ng) * (p_full * g_sectors(full) + p_end * g_sectors(m_end))
    lanes_sm = col(W) * VEC * (p_full * WARP + p_end * m_end)  # nonzeros per SM and round
    done = np.cumsum(lanes_sm * wgt, axis=1)
    before = done - lanes_sm * wgt

    def coverage(q):
        return 1.0 - np.exp(-q * col(sectors_per_nz) / col(h_sectors))

    touch = spec.sm_count * col(h_sectors) * (coverage(done) - coverage(before))
    req_all = req_g
    # h not held passes through what L1 has left as a direct-mapped cache (:func:`_h_kept`):
    # a sector touched again is still there with odds ``keep``; the two loads of one sector
    # (batch 8 and more) are back to back, the second a hit
    keep, keep0 = _h_kept(spec, sizes, l1, h_sectors, done[:, -1], sectors_per_nz, W * pad * G)
    distinct = req_all / col(ng / sectors_per_nz)
    first_touch = touch / np.maximum(wgt, 1.0)
    req_g = first_touch + np.maximum(distinct - first_touch, 0.0) * (1.0 - col(keep))
    # the data stage: a gather's lanes miss L1 with the round's odds (their sectors go to L2 or
    # wait on a fill in flight, as at batch 8 and more the second load of a sector does) and
    # pass in pieces (:func:`_missed_gather_wavefronts`)
    # a touch misses where its sector was not in the SM's L1 when the round began: the first
    # toucher goes to L2 and the round's later touchers wait on its fill (one L2 round trip
    # outlasts a round's issue); the start-of-round share left untouched, averaged over the
    # rounds a column stands for (a geometric series), and a touched sector since refilled
    a_nz = col(sectors_per_nz / h_sectors)
    w = np.maximum(wgt, 1.0)
    step = np.maximum(a_nz * lanes_sm, 1e-12)
    cold = (np.exp(-a_nz * before) * -np.expm1(-step * w)
            / np.maximum(w * -np.expm1(-step), 1e-12))
    q_miss = np.clip(cold + (1.0 - cold) * (1.0 - col(keep)), 0.0, 1.0)
    wf_full = 2 * vc_wf(full) + 4 * col(ng) * _missed_gather_wavefronts(col(Bf), col(d), full,
                                                                        q_miss)
    wf_end = 2 * vc_wf(m_end) + 4 * col(ng) * _missed_gather_wavefronts(col(Bf), col(d), m_end,
                                                                       q_miss)
    data = col(W) * (p_full * wf_full + p_end * wf_end)
    data[idx, first] += once
    ds = np.maximum(tags, data / wf)
    # ... and the padding lanes' loads of column 0 all wait at one slice where L1 lets them miss
    hot = col(Rp) * p_end * col(ng) * pad * svc * (1.0 - col(keep0))
    l2t = (req_vc + req_g) * svc / spec.l2_slices + hot
    # ... and the busiest SM sends its share of them at most one per l2_request_cycles_per_sm
    # (a request is one 128-byte line of a warp-instruction: the coalesced value and index
    # loads carry 128 / l2_sector_bytes sectors per request, a gather one)
    lines_vc = req_vc / max(1.0, 128.0 / spec.l2_sector_bytes)
    l2t = np.maximum(l2t, (lines_vc + req_g) * col(W) / np.maximum(col(Rp), 1.0)
                     * float(getattr(spec, "l2_request_cycles_per_sm", 0.0)))
    # ... and the busiest L2 contention group serves them one request at a time: the
    # gathers' requests over the lines of h (a small h sits in a few groups), the value and
    # index lines over their arrays (a request: the sectors of one line of one warp-instruction)
    h_lines = np.ceil(Nf * Bf * 4 / 128.0)
    per_line = g_lines(full) / np.maximum(g_sectors(full), 1e-9)
    req_grp = req_g * np.minimum(per_line, 1.0)
    # (every SM gathers from h; a gather's missed lines, on average over the step, fall in q
    # of the groups h spans; the value and index lines are each SM's own, one line a
    # warp-instruction)
    g_h = distinct_groups(spec, col(h_lines))
    miss = (req_g * wgt).sum(axis=1, keepdims=True) / np.maximum(
        (req_all * wgt).sum(axis=1, keepdims=True), 1e-9)        # over the step's rounds
    miss_lines = np.maximum(g_lines(full) * miss, 1.0)
    q_g = g_h * (1.0 - (1.0 - 1.0 / g_h) ** miss_lines)
    l2t = np.maximum(l2t, group_cycles(spec, col(h_lines), req_grp, q=q_g, anywhere=True)
                     + group_cycles(spec, col(np.ceil(nnz * 4 / 128.0)), lines_vc, sharers=1.0))
    nz_bytes = col(Rp) * (p_full * WARP + p_end * m_end) * VEC * 4
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
    # (a gated cell's later gate rows: their first round too, after the earlier rows' gathers)
    seen = np.where(phase > 0, before, before / np.maximum(wgt, 1.0))
    rt_g = np.where((lo > 0) | (phase > 0),
                    spec.l1_hit_latency_cycles + (far - spec.l1_hit_latency_cycles)
                    * (1.0 - (col(keep) * coverage(seen)) ** m_crit), far)
    # (the FIFO's wait for every warp's values: once, in the step's first round, where the
    # warps issue together; later the warps are spread and the channel takes each array's
    # requests as they come, so a round is the DRAM bound, ``dram``, or the chain without the
    # wait; on column 0, which stands for i0 rounds, the one wait is spread over them)
    fifo = np.where(col(vals_dram & cols_dram) & is_first, nz_bytes / dram_bpc
                    / np.maximum(wgt, 1.0), 0.0)
    fill = (2 * alu + 2 + rt_cols + fifo
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
    # LDG rowptr (two, back to back; a gated unit's 2G), IADD, B MOVs, the first ISETP (one
    # of each per gate row)
    prologue = (3 * ig + 2 * ia + ig + 2 * (mean + 1) + (2 * G - 2)
                + G * (ia + (Bf + 1) * ig + alu))
    # a row's butterfly: its chain, or the SM's warps' 5 B shuffles each through the shared
    # pipe (``shfl_per_cycle_per_sm``, the simulator's rule), the slower
    chain_b = _butterfly_cycles(spec, Bf)
    shuffles = np.maximum(chain_b, W * REDUCTION_STEPS * Bf / spec.shfl_per_cycle_per_sm)
    if G == 1:
        # epilogue: butterfly, lane 0 loads x, FADD + TANH per column (the SFU pipe), the
        # stores and their acknowledgement
        epilogue = (_csr_tail_cycles(spec, Bf) - chain_b + shuffles - Bf * (fma + 1)
                    + Bf * np.maximum(fma + 1, occ_s) + (ng - 1) + mean + 1)
    else:
        # a gated cell: the butterfly of each gate row, then lane 0's ISETP (PAND folded) -> IMUL,
        # its loads of x (G) and of c_{t-1} or h_{t-1} back to back and their round trip, the
        # cell's update (:func:`_cell_math_cycles`), the stores (h_t; LSTM also c_t) and their
        # acknowledgement
        stores = ng * (2 if cell == "lstm" else 1)
        epilogue = (G * shuffles + 1 + 2 * alu + (epi_loads - 1) + mean
                    + _cell_math_cycles(spec, Bf, cell) + (stores - 1) + mean + 1)
    # near / far L2 partition: a round trip of a warp's own (perm, rowptr, indices of a round,
    # x, store) is near or far with even odds. The step ends with the unluckiest of the warps
    # that run the most rounds; a first round bound by the data stage starts with the luckiest
    # warps of the SM instead
    chain_bound = chain >= np.maximum(busy, np.maximum(l2r, np.maximum(dram, issue)))
    n_chain = (p_any * wgt * chain_bound).sum(axis=1)
    start_chain = ds[idx, first] < chain[idx, first]
    n_crit = np.maximum(1.0, Rp * (1.0 - ndtr((CHUNK * np.maximum(np.ceil(r_max / CHUNK) - 1, 0)
                                               + 0.5 - mu) / sig)))
    k_end = 2.0 + n_chain + np.where(start_chain, 2.0, 0.0)
    k_start = np.where(start_chain, 0.0, 3.0)
    e_max = np.minimum(k_end, k_end / 2 + np.sqrt(k_end) / 2 * _max_normal_approx(n_crit))
    e_min = np.maximum(0.0, k_start / 2 - np.sqrt(k_start) / 2 * _max_normal_approx(W))
    partition = far_extra * ((e_max - k_end / 2) - (k_start / 2 - e_min))
    return {"prologue": prologue, "loop": loop, "epilogue": epilogue, "partition": partition,
            "l1tex": (ds * wgt).sum(axis=1), "l2": (l2t * wgt).sum(axis=1),
            "dram": (dram * wgt).sum(axis=1), "chain": (chain * wgt).sum(axis=1),
            "chain_fifo": (p_any * fifo * wgt).sum(axis=1),
            "shared_bound": (np.where(np.maximum(dram, l2r) >= rounds, rounds, 0.0)
                             * wgt).sum(axis=1)}
