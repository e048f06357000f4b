"""A persistent kernel's step, assembled from the terms of :mod:`.timing` and :mod:`.l2`.

Persistent kernels (one CTA of 256 threads = 8 warps per SM, 2 warps per sub-partition)
----------------------------------------------------------------------------------------
Per step (cycles), for the slowest warp; every term is a chain of the kernel's instructions timed
by the simulator's mechanisms (in-order issue, except that a row-slot's shared loads and FFMAs run
beside the previous slot's reduction and epilogue as ptxas schedules them (the engine's order
floor), one issue slot and ``32 / lanes`` pipe cycles per
warp-instruction, dependent results after the unit's latency, a FIFO shared pipe per SM, L2
round trips, polls that must be served after the data reached L2, CTA barrier latency):

``step = prefetch + stage + broadcast + sum_j row_j + stagger + sync``

- ``prefetch`` and ``row_j``: :mod:`.timing` (the chains of a row, its throughput bounds,
  the prefetch depth).
- ``stage``, ``broadcast`` and ``sync`` (Lamport polls, the sector hand-over, the grid
  barrier): :mod:`.l2`.
- ``stagger``, the shared-pipe queueing of a row's slots and the Lamport re-polls:
  :func:`_persistent_from_slots`, here.
- once per launch: ``launch_overhead_s`` + loading the weights from DRAM.

Two ways in: the expectation over random layers (:func:`_persistent_fast`, vectorised over
configurations, wavefronts from :mod:`.banks`) and a concrete mapping (:func:`predict_mapping`,
exact wavefronts; the slowest SM sets the step).
"""

from __future__ import annotations

import numpy as np

from kernels_ir.codegen_cuda import SPIN_TESTS
from kernels_ir.errors import InputError
from kernels_ir.kernels.sparse_rnn import LAMPORT_STEP_WAIT_NS
from kernels_ir.mapping import MAX_BATCH, WIDE_BATCHES, access_pattern

from .. import capacity as cap
from .banks import _dense_slot_wavefronts, _expected_row_wavefronts, mapping_wavefronts
from .l2 import (
    _barrier_cycles,
    _handover_cycles,
    _stage_parts,
    _stage_release,
    deal_handovers,
    l2_latency,
    shared_lines,
)
from .timing import (
    _cyc,
    _gated_tails,
    _loop_edge_cycles,
    _prefetch_cycles,
    _reduction_cycles,
    _row_chain,
    _row_throughput,
    _tail_cycles,
    _test_cycles,
    _unpack_costs,
    prefetch_depths,
)
from .variants import REASONS, REDUCTION_STEPS, VARIANTS, WARP, KernelTimes, Variant

_BOUNDS = np.array(["latency", "issue", "fp32", "int", "smem", "mio"])
LOCAL = "cta"   # the exchange of a CTA that holds whole heads (kernels_ir sparse_rnn.LOCAL)
_CELL_OF_GATES = {g: cell for cell, g in cap.CELLS.items()}


def _loads_h(v: Variant, R):
    """1 where a row-slot loads its h words from shared memory, 0 where it reuses the words a
    previous row-slot loaded (``kernels_ir.kernels.sparse_rnn.shares_h``: a dense kernel's
    row-slots after the first when a warp has several). ``R``: row-slots per warp, an int (one
    row of flags) or an array of configurations (configs x max R)."""
    R = np.asarray(R)
    rmax = int(R.max()) if R.size else 1
    first = np.arange(rmax) == 0
    if v.sparse:
        return np.ones((rmax,) if R.ndim == 0 else (R.size, rmax))
    if R.ndim == 0:
        return np.where(first | (int(R) < 2), 1.0, 0.0)
    return np.where(first[None, :] | (R[:, None] < 2), 1.0, 0.0)


def _local_cycles(spec, R, gates, before_x):
    """The CTA-local exchange of a CTA that holds whole heads (kernels ``*_local_*``,
    docs/heads.md), cycles per step beside the rows, for the slowest warp:

    - x: the step's ``x_proj`` loads, issued by the prefetch when the step begins, hit L2 (the
      launch finds its buffers there, as the engine's ``gpusim.pricing.PERSISTENT_L2_WARM``: one
      round trip, the far partition's, since the CTA barrier waits for the slowest of its warps'
      loads and the slowest CTA sets the step); with no staging or polls to hide behind, what is
      left of it after the first unit's rows (``before_x``) is exposed;
    - the MOV keeping ``h_t`` for the exchange, then the CTA barrier
      (``cta_barrier_latency`` after the last warp arrives);
    - one STS per unit the warp owns (its B words are contiguous: one wavefront), the
      sub-partition's warps issuing together (``ig`` apart), then the second barrier: released
      ``cta_barrier_latency`` after the last STS issued and not before
      ``cta_barrier_drain`` after the shared pipe served the CTA's stores (the engine's rule, as
      :func:`.l2._stage_release`).
    """
    c = _cyc(spec)
    Rf = np.asarray(R, dtype=np.float64)
    units = np.ceil(Rf / gates)
    x = l2_latency(spec, np.inf)
    wait = np.maximum(0.0, x - before_x)
    bar = spec.cta_barrier_latency_cycles
    drain = units * c["wpc"] / c["wf"]
    return wait + 1 + bar + np.maximum(units * c["ig"] + bar,
                                       drain + spec.cta_barrier_drain_cycles)


def _mask_batch_wait(spec, B):
    """What a row's butterfly adds to its chain when the CTA's warps reach every xor mask
    together (the CTA-local step: they leave the CTA barrier into a few rows each and stay in
    step): the SM's one shared pipe serves ``shfl_per_cycle_per_sm`` shuffles a cycle
    (``measurements/h100/shfl_pipe.json``, the engine's rule), so a mask's ``wpc * B``
    shuffles take ``wpc B / rate`` cycles, and a warp's next mask cannot start before the
    pipe has served the whole batch: each of the five masks takes the longer of its own chain
    (:func:`.timing._reduction_cycles`) and the batch. The throughput bound
    (:func:`.timing._row_throughput`) charges the same shuffles but lets them overlap the
    chain; in step they do not. The grid-wide step keeps the chain alone: its warps reach
    their rows spread by the staging and polls (docs/heads.md says what the rule gives
    there)."""
    c = _cyc(spec)
    B = np.asarray(B, dtype=np.float64)
    mask_chain = _reduction_cycles(spec, B) / REDUCTION_STEPS
    batch = c["wpc"] * B / spec.shfl_per_cycle_per_sm
    return REDUCTION_STEPS * np.maximum(0.0, batch - mask_chain)


def _step_wait_ns(v: Variant) -> int:
    """Nanoseconds of the ``__nanosleep`` that closes a Lamport step (the variant's
    ``step_wait``, else the kernel's own
    :data:`~kernels_ir.kernels.sparse_rnn.LAMPORT_STEP_WAIT_NS`); 0 without one."""
    return LAMPORT_STEP_WAIT_NS if v.step_wait is None else int(v.step_wait)


def _on_tick(spec, ns: int, work):
    """Cycles of a step that closes with ``__nanosleep(ns)``, whose work from one wake to the
    next wait is ``work`` cycles: a warp wakes on the first tick of the sleep timer more than
    ``sleep_tick_lead_ns`` after its wait (the engine's rule,
    :func:`gpusim.specs.rules.sleep_wake_cycles`, with the step starting on a tick), and the
    end of the work varies from step to step by ``lamport_step_spread_ns`` (a normal spread), so
    the step is the mean of that wake over it: ``P (1 + sum_k Phi((work + lead - k P) / s))``.
    What the GPU shows (``measurements/h200/tick_steps.json``: the campaign's kernel on 16
    small layers, every warp stamped at its wake and before its wait): every warp wakes on a
    tick, but the grid's warps are on one tick in 0-12% of the steps and a warp's step takes
    two or more numbers of periods at every layer; the grid's last end after the step's tick
    spreads by 83-152 ns from step to step. The plain kernels' steps (645-723 ns at hidden
    288-864, batch 1, where the whole-tick rule gives 768) mix the counts too. With no spread
    the step is the work rounded up to the next tick, as one warp's staircase is
    (``sleep_stairs.json``); with the spec's 107 ns (0.42 of the period) it is within about 3 ns
    of the work plus the lead plus half a period. The sum starts at the first tick: a wake
    never comes before it, however short the work. The spread is of the grid's last end after
    the step's first tick, the warps' skew over ticks included; the layers' own spreads (83-152
    ns) move the model's steps by at most 7.6 ns."""
    from scipy.special import ndtr

    from gpusim.specs.rules import sleep_period_ns, sleep_wake_cycles

    spread = float(getattr(spec, "lamport_step_spread_ns", 0.0) or 0.0)
    if not ns or spread <= 0:
        return sleep_wake_cycles(spec, ns, work)
    clock = float(spec.clock_hz) * 1e-9                      # cycles per nanosecond
    t = np.asarray(work, dtype=np.float64) / clock + float(spec.sleep_tick_lead_ns)
    period = float(sleep_period_ns(ns))
    # the ticks 1..K of each element, K from its own work (8 spreads past it), the elements of
    # one K summed together: a price does not depend on the others priced with it
    flat = t.reshape(-1)
    last = np.ceil((flat + 8 * spread) / period)
    ticks = np.empty_like(flat)
    for n in np.unique(last):
        m = last == n
        k = np.arange(1.0, n + 1)
        ticks[m] = 1.0 + ndtr((flat[m][:, None] - k * period) / spread).sum(axis=-1)
    return ticks.reshape(t.shape) * period * clock


def _persistent_from_slots(spec, v: Variant, N, B, K, wf_sm, wf_warp, mask, R, S, dtype,
                           spread_wf=0.0, cta_spread=0.0, shared=None, cell="rnn",
                           exchange=""):
    """Assemble per-step cycles from per-row-slot arrays (configs x Rmax).

    ``spread_wf``: wavefronts by which the busiest warp's rows exceed the idlest warp's (exact
    mapping; 0 for the expectation). ``cta_spread``: cycles by which the slowest CTA's work
    exceeds the fastest's (exact mapping; 0 for the expectation), see :func:`_barrier_cycles`.
    ``shared``: the line hand-overs of one step's exchange, an int (:func:`shared_lines` of the
    mapping, whose CTAs are the rows of ``wf_sm``) or an array with one :func:`deal_handovers`
    per configuration (expectation: alike CTAs); None: not counted. ``cell``: a gated cell's
    row-slots are gate rows (reduced and selected) and every unit's last one runs the unit's
    epilogue (:func:`.timing._gated_tails`). ``exchange`` ``"cta"`` (whole heads per CTA): no
    staging, broadcast or grid-wide sync, the CTA-local exchange instead (:func:`_local_cycles`).
    """
    c = _cyc(spec)
    L = len(access_pattern(int(B), v.wide_loads))
    Kf = np.asarray(K, dtype=np.float64)
    gated = cell != "rnn"
    tails = instrs = None
    if gated:
        tails, instrs = _gated_tails(spec, B, cell, Kf.shape[-1])
    u_chain, *u_instr = _unpack_costs(spec, v.sparse, dtype)   # fp16 weights: unpacking
    # FIFO shared pipe: with L > 1 loads per slot every warp's last load of a slot is queued
    # behind all warps' earlier loads of the slot, so the slowest warp waits for the whole SM's
    # wavefronts of the slot and the warps stay in step; with one load per slot only the first
    # slot after the CTA barrier queues (stagger below) and the warps drift apart
    chain = _row_chain(spec, Kf, wf_sm if L > 1 else wf_warp, B, L, tail=tails, unpack=u_chain)
    # software pipelining (the kernel's prefetch depth D): slot i + D's loads issue right after
    # slot i's FFMAs, so a slot's own chain (latency + wavefronts + FFMAs) is paid once per D
    # slots; the first slot of a row still waits for its whole chain
    D = prefetch_depths(spec, v, N, B, Kf, R, S, dtype).reshape(-1, 1)
    if L > 1:
        # the pipe serves all warps' load 0 of a slot, then all load 1, ...: the first warp's
        # last load is served after (L - 1) / L of the slot's wavefronts, it then issues the
        # next slot's loads (latency, its FFMAs); when that comes before the batch is done the
        # pipe never idles and a slot takes the batch's wavefronts, else the gap adds
        k1 = np.maximum(Kf, 1)
        batch = wf_sm / (k1 * c["wf"])
        first = batch * (L - 1) / L + wf_warp / (k1 * L * c["wf"]) + \
            spec.smem_latency_cycles + (B // L - 1) * c["pipe"] + 1 + u_chain
        slot_chain = spec.smem_latency_cycles + batch + (B // L - 1) * c["pipe"] + 1 + u_chain
        chain = chain - Kf * slot_chain + np.minimum(Kf, 1) * np.maximum(batch, first) + \
            np.maximum(Kf - 1, 0) * np.maximum(batch, first / D)
    if L == 1:
        # the CTA's warps leave the barrier together and stay clustered (a row's chain is much
        # longer than the FIFO's stagger): the pipe serves the slot-k loads of all warps as one
        # batch, so each later slot of a row takes the batch's wavefronts when that exceeds the
        # warp's own slot chain (latency + own wavefronts + FFMAs + the next issue) over D
        k1 = np.maximum(Kf, 1)
        own_slot = spec.smem_latency_cycles + wf_warp / (k1 * c["wf"]) + \
            (B - 1) * c["pipe"] + 1 + u_chain
        batch = wf_sm / (k1 * c["wf"])
        chain = chain - np.maximum(Kf - 1, 0) * own_slot + \
            np.maximum(Kf - 1, 0) * np.maximum(own_slot / D, batch)
    # a dense row-slot that reuses the h words of the first (``_loads_h`` 0): per slot only
    # its B FFMAs, each accumulator's chain one FMA latency a slot
    ld = np.broadcast_to(_loads_h(v, R), Kf.shape)
    if not ld.all():
        fma_only = _row_chain(spec, Kf, 0.0, B, L, tail=tails, loads=False)
        chain = np.where(ld > 0, chain, fma_only)
    # ptxas moves a row-slot's shared loads and FFMAs above the previous slot's branch region,
    # among its shuffles (the engine's issue order, ``gpusim/engine/schedule.py``;
    # ``measurements/h200/body_probe_slots.json``): from the second row-slot on, that part of a
    # slot's chain runs beside the previous slot's reduction, and the previous slot's epilogue
    # waits for it (in-order issue); not above a gated unit's epilogue, whose sigmoids call the
    # division's slow path (``gpusim.engine.executor.region_calls``)
    tail_j = tails if gated else np.full(Kf.shape[-1], float(_tail_cycles(spec, B)))
    tail_j = np.broadcast_to(tail_j, Kf.shape)
    red = float(_reduction_cycles(spec, B))
    slack = max(red - REDUCTION_STEPS * float(B) * spec.mio_issue_interval_cycles, 0.0)
    before = np.zeros(Kf.shape)
    before[..., 1:] = np.where(mask[..., :-1], np.minimum(tail_j[..., :-1], slack), 0.0)
    if gated:
        gates = cap.check_cell(cell)
        before[..., np.arange(Kf.shape[-1]) % gates == 0] = 0.0
    chain = chain - np.minimum(np.maximum(chain - tail_j, 0.0), before)
    if exchange == LOCAL:
        chain = chain + _mask_batch_wait(spec, B)
    thr = _row_throughput(spec, Kf, wf_sm, B, L, epilogue=instrs, unpack=tuple(u_instr),
                          loads=ld)
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
    tail = np.where(mask, tail_j, 0.0).sum(axis=-1)
    Rf = np.asarray(R, dtype=np.float64)
    if exchange == LOCAL:
        pre = _prefetch_cycles(spec, Rf)
        stage = bw = 0.0 * Rf
        # the x of the first unit's epilogue, loaded when the step began
        first_unit = row[..., :cap.CELLS[cell]].sum(axis=-1) + stagger
        sync = _local_cycles(spec, Rf, cap.CELLS[cell], first_unit)
    else:
        setup_st, per_round, poll, rounds, bw = _stage_parts(spec, N, B, Rf, v.sync)
        stage = setup_st + rounds * (per_round + poll) + 1 + _stage_release(spec, N, B, v.sync)
        if v.sync == "lamport":
            pre = _prefetch_cycles(spec, Rf)
            # a warp polls as soon as its own rows are stored: when the busiest warp (anywhere)
            # stores more than `lead` cycles after the idlest one, the idlest warp's first poll is
            # served before that data reached L2 and it polls again; its CTA waits for it (the
            # step's closing wait, ``step_wait``, rounds the whole step up below)
            lead = 1 + pre + setup_st + per_round
            spread = stagger + spread_wf / c["wf"] + bw
            # ... and its stores to the far partition reach L2 a quarter of the far extra later
            vis = spec.l2_store_visibility_cycles + (l2_latency(spec, np.inf)
                                                     - spec.l2_hit_latency_cycles) / 2
            late = np.maximum(0.0, spread + vis - lead)
            # the first poll of a group almost always misses (the GPU: 2.04 polls per group and
            # round, ``lmech_ws_1``); a warp polls again at once, and its polls see the data
            # ``l2_poll_sharer_cycles`` per polling SM after it arrived (the engine's rule counts
            # the SMs that polled the line before the late store arrived: here every SM, all of
            # them spinning on h by then), so the replays need ``late + seen`` after the idlest
            # warp's first poll
            seen = float(getattr(spec, "l2_poll_sharer_cycles", 0.0) or 0.0) * spec.sm_count
            # a pass that polls again runs the spin loop's other two tests too: the first poll
            # returns `poll` after it issued, and each further pass (a poll and two tests) adds
            # `period`, so the data that arrives `late + seen` after the first poll is read by
            # poll 1 + ceil((late + seen - poll) / period)
            period = poll + (SPIN_TESTS - 1) * _test_cycles(spec)
            n_polls = 1.0 + np.ceil(np.maximum(0.0, late + seen - poll) / period)
            again = (n_polls - 1) * period + poll
            sync = repoll = np.maximum(0.0, again - spread)
            if shared is not None:
                # the hand-over server starts with the first CTA's stores, `spread` before the last
                hand = _handover_cycles(spec, shared, spread)
                sync = sync + hand
        else:
            pre = 0.0 * Rf        # warp 0 prefetches while the atomic is in flight (in sync)
            sync = _barrier_cycles(spec, Rf, cta_spread)
    # the time loop's edge (its count, compare and branch) ends every step
    total = pre + stage + bw + compute + sync + _loop_edge_cycles(spec)
    if exchange != LOCAL and v.sync == "lamport" and _step_wait_ns(v):
        # every warp closes the step with the wait and wakes on the sleep timer's tick, when
        # the data stored before the tick has reached L2: its first polls do not miss (no
        # re-polls; the line hand-overs stay)
        work = total - repoll
        ticked = _on_tick(spec, _step_wait_ns(v), work)
        sync = sync - repoll + (ticked - work)
        total = ticked
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
        if v.sparse and gates > 1:   # units dealt with their gate rows (capacity's deal)
            R = gates * -(-n // nw)
            rmax = int(R.max())
            mask = np.arange(rmax)[None, :] < R[:, None]
            longest = np.zeros(mask.shape)
            typical = np.zeros(mask.shape)
            for i, (x, y) in enumerate(zip(n, dd, strict=True)):
                lg, ty = cap.unit_slot_quantiles(int(x), float(y), gates, nw, typical=True)
                longest[i, :gates * lg.size] = np.repeat(lg, gates)
                typical[i, :gates * ty.size] = np.repeat(ty, gates)
            K = np.where(mask, np.maximum(1, np.ceil(longest / WARP)), 0)
            wf_warp = np.where(mask, _expected_row_wavefronts(typical, K, b, v.wide_loads,
                                                              v.layout), 0.0)
        elif v.sparse:
            longest, typical, mask = cap.row_slot_quantiles(n, rr, dd, nw, rmax)
            K = np.where(mask, np.maximum(1, np.ceil(longest / WARP)), 0)
            wf_warp = np.where(mask, _expected_row_wavefronts(typical, K, b, v.wide_loads,
                                                              v.layout), 0.0)
        else:
            if gates > 1:
                R = gates * -(-n // nw)
                rmax = int(R.max())
            mask = np.arange(rmax)[None, :] < R[:, None]
            K = np.where(mask, np.ceil(n / WARP)[:, None], 0)
            wf_warp = K * _dense_slot_wavefronts(b, v.wide_loads) * _loads_h(v, R)
        S = K.sum(axis=-1)
        if gates > 1:
            regs = cap.registers_per_thread(S, R, b, dense=not v.sparse, dtype=dtype,
                                            arch=spec.arch, cell=cell)
        else:
            regs = cap.registers_per_thread(S, R, b, dense=not v.sparse, dtype=dtype,
                                            arch=spec.arch)
        smem = cap.smem_bytes(n, b, dense=not v.sparse, dtype=dtype,
                              kmax=K.max(axis=-1) if not v.sparse else None)
        ok_r = regs <= cap.reg_limit(spec)
        ok_s = smem <= spec.smem_bytes_per_cta
        ok_i = cap.fp16_index_fits(n, b, dense=not v.sparse, dtype=dtype)
        r_code = np.where(~ok_r, 1, np.where(~ok_s, 2, np.where(~ok_i, 5, 0)))
        wpc = _cyc(spec)["wpc"]
        wf_sm = wf_warp * wpc
        # h in owner order: the line hand-overs of the deal of equal units (a gated cell's
        # units are dealt as a vanilla cell's rows, and only their h words are exchanged)
        shared = deal_handovers(n, b, nw, wpc) if v.sync == "lamport" else None
        t, su, parts, wh = _persistent_from_slots(spec, v, n, b, K, wf_sm, wf_warp, mask, R, S,
                                                  dtype, shared=shared, cell=cell)
        ok = ok_r & ok_s & ok_i
        per[sel] = np.where(ok, t, np.nan)
        setup[sel] = np.where(ok, su, np.nan)
        fits[sel] = ok
        reason[sel] = r_code
        which[sel] = np.where(ok, wh, "")
        for key, val in parts.items():
            bd.setdefault(key, np.full(shape, np.nan))[sel] = np.where(ok, val, np.nan)
    return KernelTimes(v.name, per, fits, reason, setup, bd, which)


def predict_mapping(spec, variant: str | Variant, mapping, batch: int, *, dtype: str = "fp32",
                    report=None, wavefronts=None) -> KernelTimes:
    """Per-step time of a persistent variant for a concrete mapping (exact wavefronts).

    ``variant``: a name of :data:`VARIANTS` or any :class:`Variant` (e.g. a recorded case's
    sync / wide-loads / layout combination). ``report`` (:func:`kernels_ir.layouts.analyse` of
    the mapping) or ``wavefronts`` (:func:`mapping_wavefronts`) may be given to avoid recomputing
    them. The slowest SM sets the step. A mapping of whole heads per CTA (``cta_local``, a
    multi-head layer, :func:`builder_mapping`) is priced with the CTA-local exchange
    (:func:`_local_cycles`) in place of the staging, broadcast and grid-wide sync.
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
    per_rs = per_rs * _loads_h(v, R)[None, :]
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
    # the rows whose warps store h: a gated cell's units are its gate-0 rows
    units = mapping.row_ids[:, ::mapping.gates]
    # whole heads per CTA (multi-head layers, docs/heads.md): h is exchanged inside the CTA
    exchange = LOCAL if getattr(mapping, "cta_local", False) else ""
    shared = (shared_lines(units, mapping.positions, b, wpc)
              if v.sync == "lamport" and not exchange else None)
    cell = _CELL_OF_GATES[mapping.gates]
    t, su, parts, which = _persistent_from_slots(*args, spread_wf=float(tw.max() - tw.min()),
                                                 shared=shared, cell=cell, exchange=exchange)
    if v.sync == "barrier" and not exchange:  # the other CTAs' atomics arrive earlier by their
        # shorter work
        work = t - parts["sync_s"] / spec.cycle_s
        t, su, parts, which = _persistent_from_slots(
            *args, spread_wf=float(tw.max() - tw.min()), cta_spread=float(work.max() - work.min()),
            cell=cell)
    worst = int(np.argmax(t))
    f = cap.fit(spec, N, b, 1.0, cell=cell, dtype=dtype, dense=not v.sparse,
                slots=mapping.slots)
    # whole heads per CTA: the builder kept them after its own capacity check, with the
    # registers of the CTA-local kernel (no staging), which the single-head count overstates
    ok = f.fits or bool(exchange)
    parts = {k: np.atleast_1d(np.asarray(val))[worst if np.size(val) > 1 else 0]
             for k, val in parts.items()}
    return KernelTimes(v.name, np.array([t[worst] if ok else np.nan]), np.array([ok]),
                       np.array([0 if ok else REASONS.index(f.limit)]), np.array([su]),
                       {k: np.array([val]) for k, val in parts.items()},
                       np.array([which[worst]], dtype=object))


def builder_mapping(spec, variant: str | Variant, layer, *, seed: int = 0, dtype: str = "fp32",
                    local: bool = True):
    """The mapping the kernel builder makes for ``layer`` with ``variant`` (one CTA of
    ``THREADS_PER_CTA`` threads per SM), after its capacity check: for a multi-head layer whole
    heads per CTA when the registers of a CTA hold them (``cta_local``), else the heads dealt
    over all warps (the grid-wide exchange), as :mod:`kernels_ir.kernels.sparse_rnn` decides.
    Raises :class:`kernels_ir.errors.CapacityError` when neither fits. ``local=False``: the
    heads dealt over all warps only (the mapping the builder does not make while whole heads
    fit), ``None`` if that does not fit."""
    from kernels_ir.errors import CapacityError
    from kernels_ir.kernels.sparse_rnn import _map_and_check, fp16_layer

    v = variant if isinstance(variant, Variant) else VARIANTS[variant]
    if dtype == "fp16":
        layer = fp16_layer(layer)
    args = dict(sync=v.sync, wide_loads=v.wide_loads, layout=v.layout if v.sparse else "naive",
                threads_per_cta=cap.THREADS_PER_CTA, seed=seed if v.sparse else 0,
                dense=not v.sparse, n_ctas=spec.sm_count, dtype=dtype)
    heads = int(getattr(layer, "heads", 1))
    if not local:
        try:
            return _map_and_check(layer, spec, heads=1, **args)[0]
        except CapacityError:
            return None
    try:
        return _map_and_check(layer, spec, heads=heads, **args)[0]
    except CapacityError:
        if heads == 1:
            raise
        return _map_and_check(layer, spec, heads=1, **args)[0]
