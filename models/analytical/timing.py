"""Per-SM resources and the instruction chains of a persistent kernel's rows (cycles).

The model's side of ``gpusim/engine/timing.py``: in-order issue, one issue slot and
``32 / lanes`` pipe cycles per warp-instruction, dependent results after the unit's latency,
a FIFO shared pipe per SM that the shuffles share. The terms of the step (:mod:`.persistent`
adds them up) that live here:

- ``prefetch`` (Lamport; the barrier kernel hides it behind the atomic): IMUL, then per row
  IADD -> LDG of x_t (ALU latency each).
- ``row_j`` = max(one warp's chain, issue, FP32 pipe, INT pipe, the SM's shared wavefronts):
  the chain is B MOVs, per slot the loads, ``smem_latency`` + wavefronts, B FFMAs one FP32
  occupancy apart, where a warp keeps the loads of ``D`` slots in flight ahead of their FFMAs
  (the kernel's prefetch depth, :func:`prefetch_depths`: up to 8 loads as far as the spare
  registers allow), so after a row's first slot a slot costs its chain / ``D`` or the SM's
  batch of wavefronts, whichever is longer; the interleaved butterfly
  (:func:`_reduction_cycles`: per xor mask one shuffle latency + B FADDs); the epilogue
  (:func:`_epilogue_cycles`). Shared-pipe queueing (FIFO): with L > 1 loads per slot a slot
  waits for the batch of all warps' loads (the warps stay in step); with one load the warps
  leave the barrier clustered, the first slot queues once (``stagger``) and each later slot
  of a row waits when the batch of all warps' loads exceeds the warp's own slot chain.

The shared-pipe queueing, the prefetch depth's shortening of a row's later slots and the overlap
of a row-slot's loads and FFMAs with the previous row-slot's reduction and epilogue (ptxas's
schedule: the engine's issue order) are applied where the step is assembled
(:func:`.persistent._persistent_from_slots`).
"""

from __future__ import annotations

import math

import numpy as np

from kernels_ir.kernels.sparse_rnn import STAGE_GROUP, _prefetch_depth
from kernels_ir.mapping import access_pattern

from .. import capacity as cap
from .variants import REDUCTION_STEPS, WARP, Variant


def _test_cycles(spec):
    """A compare and the branch that reads its predicate, to the next instruction
    (``predicate_branch_cycles`` + ``branch_cycles``; the engine's loop edges,
    ``gpusim.engine.timing._Timing._edge``)."""
    return spec.predicate_branch_cycles + spec.branch_cycles


def _loop_edge_cycles(spec):
    """The end of a rolled counted loop's iteration (the time loop, the barrier kernel's staging
    group loop; the Lamport kernel's is unrolled):
    the count's increment, then its compare and branch."""
    return spec.alu_latency_cycles + _test_cycles(spec)


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

    A mask's first FADD waits ``shfl_latency`` for its shuffle; with B > 1 the second FADD waits
    for the second shuffle, issued ``mio_issue_interval_cycles`` after the first. The next
    mask's first shuffle reads the first FADD's result: ptxas's stall count puts it
    ``fma_latency + mio_operand_extra_cycles`` after that FADD by its own count, so after the
    second FADD when the second FADD issued late (the engine's nominal clock,
    ``measurements/h200/shfl_pipe_chains.json``: one chain 29 cycles a mask, two 32). A mask's
    B shuffles are ``mio_issue_interval_cycles`` apart, so a mask takes at least B of those.
    """
    B = np.asarray(B, dtype=np.float64)
    reader = spec.fma_latency_cycles + spec.mio_operand_extra_cycles
    mask = spec.shfl_latency_cycles + np.where(
        B > 1, spec.mio_issue_interval_cycles + reader - 1, reader)
    return REDUCTION_STEPS * np.maximum(mask, B * spec.mio_issue_interval_cycles)


def _epilogue_cycles(spec, B):
    """MOV val, B - 1 dependent SELs and FADD x (each an ALU result), tanh (an FADD result),
    FADD +0 (an SFU result), IADD (independent), STG (its value an FP32 result, read
    ``mio_operand_extra_cycles`` late as a memory-pipe operand), next instruction;
    the FADD x to the STG are the ``if`` of the row's lanes, a branch region the warp's lanes
    split over (``divergent_branch_cycles``, as the simulator's ``on_reconverge``).
    """
    B = np.asarray(B, dtype=np.float64)
    a = spec.alu_latency_cycles
    return (3 + (B + 1) * a + spec.fma_latency_cycles + spec.sfu_latency_cycles
            + spec.mio_operand_extra_cycles + spec.divergent_branch_cycles)


def _tail_cycles(spec, B):
    """Per row: reduction + epilogue of one warp of the persistent kernels."""
    return _reduction_cycles(spec, B) + _epilogue_cycles(spec, B)


# A gated cell's unit epilogue (``sparse_rnn._cell_epilogue``), instructions per unit: LSTM 4
# FADD + 3 SIGMOID + TANH (the gates), FMUL + FFMA (c), TANH + FMUL (h), FADD +0, IADD, STG;
# GRU 2 FADD + 2 SIGMOID, FFMA + TANH (n), LDS h, FSUB + FFMA (h), FADD +0, IADD, STG. Of them
# on the FP32 pipe: LSTM 8, GRU 6 (2 per gate row, as the vanilla row's two FADDs); on the SFU:
# LSTM 5, GRU 3.
CELL_EPILOGUE_INSTRS = {"lstm": 15, "gru": 12}


def _gate_select_cycles(spec, B):
    """A gate row of a gated cell after its reduction: MOV gate, B - 1 dependent SELs (ALU
    results); the next instruction (the next row's MOVs) does not wait for them."""
    B = np.asarray(B, dtype=np.float64)
    return 1 + (B - 1) * spec.alu_latency_cycles


def _cell_epilogue_cycles(spec, B, cell: str):
    """A unit's epilogue after its last gate row (``sparse_rnn._cell_epilogue``), one warp, in
    issue order; ``gap``: consecutive SFU instructions of a warp are at least the FADD before
    each (an FP32 result) and the SFU pipe's occupancy apart.

    LSTM: FADD then SIGMOID/TANH for the four gates (i, f, g, o; the last one issued ``F + 3
    gap`` after the first FADD), the FFMA of ``c`` waits for i, f and g, TANH of ``c`` for the
    FFMA, FMUL ``o tanh(c)`` for the TANH and o, FADD +0 for the FMUL; IADD, STG (address: an
    ALU result), next instruction. Each function has its own latency (CUDA's ``tanhf`` and
    ``1 / (1 + expf(-x))`` are sequences of different length: ``measurements/pipes.py``).
    GRU: FADD, SIGMOID (r), FADD, SIGMOID (z); the FFMA of ``n`` waits for r (SFU), TANH for
    the FFMA; LDS of ``h_{t-1}`` is issued meanwhile, the FSUB waits for the TANH (or the LDS),
    the FFMA of ``h`` for the FSUB, FADD +0 for it; IADD, STG, next instruction.
    """
    B = np.asarray(B, dtype=np.float64)
    a, f = spec.alu_latency_cycles, spec.fma_latency_cycles
    th, sg = spec.sfu_latency_cycles, spec.sigmoid_latency_cycles   # tanh, sigmoid
    gap = max(f + 1.0, WARP / spec.sfu_lanes_per_subpartition)
    end = 1 + a + 1                                  # IADD, STG, next instruction
    if cell == "lstm":   # gates i, f (sigmoid), g (tanh), o (sigmoid) issued gap apart
        c = max(f + sg, f + gap + sg, f + 2 * gap + th, f + 3 * gap + 1) + f
        out = max(c + th, f + 3 * gap + sg) + f + end
    else:
        out = f + max(gap + 1, sg) + f + max(th, spec.smem_latency_cycles + 1) + f + f + end
    # the update is the ``if`` of the unit's lanes: a branch region they split over
    return out + spec.divergent_branch_cycles + 0 * B


def _unpack_costs(spec, sparse: bool, dtype: str):
    """Per weight slot, what unpacking fp16 weights adds (``sparse_rnn``: U16 then the slot's
    loads, H2F beside them): ``(chain cycles, issue slots, FP32-pipe instructions, INT-pipe
    instructions)``. Sparse: the loads wait for U16's result (ALU latency) and the two
    instructions take an issue slot each; dense: H2F only. The H2F result is ready long before
    the loads' data, so its latency is off the chain. fp32: nothing."""
    if dtype != "fp16":
        return 0.0, 0.0, 0.0, 0.0
    if sparse:
        return spec.alu_latency_cycles + 1.0, 2.0, 1.0, 1.0
    return 1.0, 1.0, 1.0, 0.0


def _row_chain(spec, K, W, B, L, tail=None, unpack=0.0, loads=True):
    """One warp's row-slot as a dependent chain (cycles), from its first MOV to the next row's,
    with one slot's loads in flight at a time (prefetch depth 1; :func:`_persistent_from_slots`
    shortens the later slots for the kernel's real depth).

    B MOVs (INT pipe) then per slot: L shared loads issued back to back, the data
    ``smem_latency`` after the warp's own ``W / K`` wavefronts; B FFMAs one FP32 occupancy apart
    (the last load's FFMAs wait for it); then the reduction and the epilogue (``tail``: per
    row-slot instead of :func:`_tail_cycles`, a gated cell's, see :func:`_gated_tails`).
    ``unpack``: chain cycles an fp16 slot's unpacking adds (:func:`_unpack_costs`).
    ``loads=False``: a row-slot whose h words are already in registers (a dense kernel's later
    row-slots, ``sparse_rnn.shares_h``): per slot B FFMAs, one FMA latency at least (each
    accumulator's chain); an fp16 value's unpacking is issued ahead of its slot.
    """
    c = _cyc(spec)
    B = np.asarray(B, dtype=np.float64)
    own = W / c["wf"]
    if loads:
        slots = K * (spec.smem_latency_cycles + 1 + unpack) + own + K * (B // L - 1) * c["pipe"]
    else:
        slots = K * np.maximum(B * c["pipe"], spec.fma_latency_cycles)
    return (B - 1) * c["occ_i"] + 1 + slots + (_tail_cycles(spec, B) if tail is None else tail)


def _gated_tails(spec, B, cell: str, rmax: int):
    """``(tail cycles, instructions after the reduction)`` of each of ``rmax`` row-slots of a
    gated cell (arrays of ``rmax``): every gate row is reduced and selected
    (:func:`_gate_select_cycles`: MOV + B - 1 SELs), the unit's last gate row (row-slot
    ``j % gates == gates - 1``) also runs the unit's epilogue (:func:`_cell_epilogue_cycles`,
    :data:`CELL_EPILOGUE_INSTRS`)."""
    gates = cap.check_cell(cell)
    last = (np.arange(rmax) % gates) == gates - 1
    tail = _reduction_cycles(spec, B) + _gate_select_cycles(spec, B) + \
        np.where(last, _cell_epilogue_cycles(spec, B, cell), 0.0)
    instrs = np.where(last, CELL_EPILOGUE_INSTRS[cell], 0.0)
    return tail, instrs


def prefetch_depths(spec, v: Variant, N, B, K, R, S, dtype: str = "fp32"):
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
                             loads_per_slot=L, dtype=dtype)
             for s, r, g, t in zip(*np.broadcast_arrays(S, R, group, hs_words > slot),
                                   strict=True)]
    return np.asarray(depth, dtype=np.float64)


def _row_throughput(spec, K, wf_sm, B, L, epilogue=None, unpack=(0.0, 0.0, 0.0), loads=1.0):
    """Per row-slot resource bounds of the sub-partition / SM (cycles), stacked.

    issue: ``wps`` warps x the row's instructions (B MOV, K (L LDS + B FFMA), 5 B SHFL + 5 B
    FADD, MOV + B - 1 SEL, FADD, TANH, FADD, IADD, STG); FP32 pipe: ``K B + 5 B + 2`` FP32
    instructions; INT pipe: ``2 B + 1``; shared pipe: all warps' wavefronts of the SM and their
    ``5 B`` shuffles, ``shfl_per_cycle_per_sm`` a cycle (the engine's rule: one pipe,
    ``measurements/h100/shfl_pipe.json``); memory pipe of one warp: its ``K L`` loads, ``5 B``
    shuffles and store, ``mio_issue_interval_cycles`` apart.
    ``epilogue``: the instructions after MOV + SELs per row-slot instead of the vanilla row's 5
    (a gated cell's, :func:`_gated_tails`; its FP32 ones average 2 per gate row, as counted).
    ``unpack``: an fp16 slot's extra (issue slots, FP32, INT) instructions
    (:func:`_unpack_costs`). ``loads``: 1 where a row-slot issues its L loads a slot, 0 where it
    reuses h words already in registers (per row-slot, broadcast against ``K``).
    """
    c = _cyc(spec)
    B = np.asarray(B, dtype=np.float64)
    u_issue, u_fp, u_int = unpack
    if epilogue is None:
        issue = c["wps"] * (12 * B + 5 + K * (L * loads + B + u_issue)) / c["ipc"]
    else:
        issue = c["wps"] * (12 * B + epilogue + K * (L * loads + B + u_issue)) / c["ipc"]
    fp32 = c["wps"] * c["pipe"] * (K * (B + u_fp) + REDUCTION_STEPS * B + 2)
    intp = c["wps"] * c["occ_i"] * (2 * B + 1 + K * u_int)
    smem = wf_sm / c["wf"] + c["wpc"] * REDUCTION_STEPS * B / spec.shfl_per_cycle_per_sm
    # one warp's memory-pipe instructions (its loads, shuffles and store), each
    # ``mio_issue_interval_cycles`` after the one before (the SASS's stall counts; the engine's
    # nominal clock)
    mio = (K * L * loads + REDUCTION_STEPS * B + 1) * spec.mio_issue_interval_cycles
    return np.stack(np.broadcast_arrays(issue, fp32, intp, smem, mio))


def _prefetch_cycles(spec, R):
    """IMUL xoff, then per row IADD -> LDG of x_t (dependent, ALU latency)."""
    a = spec.alu_latency_cycles
    return a + R * (a + 1)
