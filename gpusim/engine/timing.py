"""The timing model: cycles from the executor's instruction events (functional truth apart).

:func:`simulate` runs the functional executor with a :class:`_Timing` observer. For every
executed warp-instruction (static id, per-lane active mask, per-lane word addresses) the observer
computes, vectorised over the warps of the lockstep step:

0. an instruction that the SASS does not issue (:mod:`.lowering`: a ``BITCAST``, a predicate
   combine folded into the compare before it, a constant predicate, the second half of a zeroed
   register pair) takes no issue slot and no pipe: its results are ready when its latest source
   is;
1. the order: a warp issues in the SASS's order, which is ptxas's, not the IR's
   (:mod:`.schedule`): straight-line code is list-scheduled; a row slot's shared loads and
   arithmetic go above the previous slot's branch region but not above the region before it;
   nothing crosses a barrier, fence, atomic, global load, shared store or poll, a loop's
   edges, or a region that calls a subroutine (a gated cell's epilogue); shuffles keep the
   IR's order among themselves (an approximation: ptxas interleaves independent reductions,
   and the GPU does not gain what the engine's pipes would give them, section "Approximations"
   below). ``measurements/body_probe.py``: two row slots at batch 2 within 1% of the H200,
   where issuing in IR order made them 17% slow;
   ready cycle = max(previous issue + the stall count ptxas puts after it, scoreboard ready
   cycles of the source register elements, control wait (CTA barrier release, fence, a split
   branch region)). The stall counts are the warp's **nominal clock**: each instruction's
   nominal cycle is the previous one's + 1, or later where a fixed-latency (FP32 / INT)
   source's nominal ready cycle says so (its latency; ``mio_operand_extra_cycles`` more for a
   memory-pipe reader), and a shared or global load or store or a shuffle is
   ``mio_issue_interval_cycles`` after the warp's previous one; the warp issues an instruction
   that many cycles after the previous one, however late that one issued (the GPU has no
   scoreboard for fixed latencies: a wait for a dependency barrier delays everything behind it
   by the full stall counts, ``h200/shfl_pipe_chains.json``: two interleaved shuffle-then-add
   chains cost 32 cycles a link on the GPU and in the engine, 29 without the rule); a result
   waits for every shuffle on its dependency barrier (``dependency_barriers``: ptxas gives each
   shuffle the lowest free one, the latest one's when none is free);
2. issue cycle = first cycle >= ready with a free issue slot and free pipe cycles on the warp's
   sub-partition (:mod:`.scheduler`, with backfill);
3. the result's ready cycle: + ``fma``/``alu``/``sfu`` latency; a shuffle takes its place in
   the SM's shared pipe (:mod:`.smem`, ``shfl_per_cycle_per_sm``) and is ready ``shfl``
   latency after it; LDS/STS through the SM's shared pipe (:mod:`.smem`); LDG/STG/atomics
   through L2 slices and DRAM (:mod:`.l2`), a
   global load also through the SM's L1TEX tag stage before and data stage after (:mod:`.smem`);
   BAR releases all warps of a CTA ``cta_barrier_latency_cycles`` after the last one arrives,
   and not before ``cta_barrier_drain_cycles`` after the SM's shared pipe has served the
   accesses issued before it (``measurements/stage_bar.py``: on the H100 a barrier after the
   staging's 128-bit stores costs 32 cycles more per chunk of a CTA's 8 warps, their 32
   wavefronts, with or without a load after it);
   an if-block that holds an activation is a branch region in the SASS: a warp whose lanes
   split over it issues its next instruction no earlier than ``divergent_branch_cycles`` after
   the block's last one (``measurements/body_probe.py``);
   FENCE ends ``fence_latency_cycles`` after its issue or ``fence_after_store_cycles`` after the
   warp's last store or atomic is acknowledged, whichever is later (``measurements/fence.py``:
   on the H100 a fence costs about 690 cycles alone and little more after a store, so its own
   work overlaps the wait for the acknowledgements).

Loop edges: the IR's loops have no instructions of their own for their control; the SASS does.
A compare whose predicate a branch (or a vote) reads is followed by a stall count of
``predicate_branch_cycles`` (13 on sm_90), and a branch by ``branch_cycles`` to the warp's next
instruction, taken or not (``measurements/h200/loop_edges.json``: three one-warp loops of a
register test, 26.6, 72.6 and 87.5 cycles an iteration on the H200, 4, 6 and 9 in the engine
without the edges, 27, 72 and 85 with them). So a rolled counted loop (the time loop, a ``seq``
loop of two iterations or more) ends each iteration with its increment's latency and one test;
a spin loop's pass that does not exit runs three tests (its condition and the generated guards:
the spin limit and the error poll, :data:`kernels_ir.codegen_cuda.SPIN_TESTS`) and one when it
exits; a re-poll that the polling rule below replays runs all three too (the stale pass's exit
test, then the loop's other two: edges with no instruction between them add up,
``tests/engine/test_l2_handover.py``); a vote reads its predicate ``predicate_branch_cycles``
after the compare. The warp's next instruction issues
that long after its last one (:meth:`_Timing._edge`).

Polling (Lamport and the grid barrier's spin) is simulated as traffic: when a While exits, each
warp's polling loads of its last iteration are checked against the cycle at which the words
they read were written at L2; a warp whose load was served earlier would have seen the old value,
so the body's events are replayed for that warp (same addresses, counted as ``poll`` L2
transactions) until every load is served after its data arrived, bounded by the spin limit.
A word written into a line of a polled data buffer is seen by the polls
``l2_poll_sharer_cycles`` per SM whose polls of the line reached L2 before the word was visible
there, that long after it was (:mod:`.l2`, "Pollers of a line"), and a stale warp's replays
start right after its stale poll, as a poll loop re-polls.
Polls of a grid barrier's counter (a buffer that atomics update) instead start their replays
after a delay uniform over one L2 round trip, one per CTA and exit of the loop
(:meth:`_Timing._phase`).

Breakdown attribution: for each warp the time from its previous issue to this one is charged:
1 cycle plus any structural wait (issue slot, pipe) to ``issue``; the rest -- the wait for the
latest source operand or control release -- to the category of what produced it: ALU/SFU/shuffle
results -> ``issue``; LDS/STS -> ``shared_memory``; global loads -> ``waiting_for_data``; loads of
a buffer that atomics update (the grid barrier's counter), atomics, BAR and FENCE -> ``barrier``.

Approximations (documented, not hidden): L1 holds read-only buffers only, without eviction
(:mod:`.l1`; its throughput is the L1TEX stages of :mod:`.smem`); no instruction cache or
fetch; a branch region costs only a warp whose lanes split over it and only when it holds an
activation (measurements/body_probe.py: regions that do not split cost the GPU 20-30 cycles,
about a branch's ``branch_cycles`` and its convergence barrier's stall counts); the branch of an
``if`` outside a region, and the unconditional jump some loops' layouts add, are not charged;
ptxas's schedule is approximated by a list schedule over nominal latencies (:mod:`.schedule`);
its shuffles keep the IR's order, where ptxas interleaves the shuffles of independent rows:
interleaved, the engine prices two rows at batch 2 without a region between them 13-19% fast
and a recorded multi-head LSTM layer at batch 1 (the H200 draw s92) 40% fast; in the IR's order
within 6% and 10%
(``measurements/body_probe.py``; what the GPU loses there is not known; with the stall counts
the engine still prices interleaved gated units 5-10% faster than in the IR's order, further
from the GPU); shared loads take no dependency barrier (in the SASS some do, and share them:
:mod:`.schedule`); an SFU result (a tanh, exp or sigmoid sequence)
is tracked as a variable latency, without the fixed-latency tail of its last FFMA; one
instruction per cycle at most; the store path is
fire-and-forget (the warp does not wait except at FENCE); DRAM is a single aggregate FIFO; the
launch overhead is added once to ``time_s``.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from gpusim.specs.rules import sleep_wake_cycles
from kernels_ir.codegen_cuda import SPIN_TESTS
from kernels_ir.errors import DeadlockError, InputError
from kernels_ir.ir import (
    FLOAT_ALU,
    INT_ALU,
    SFU,
    WARP_OPS,
    If,
    Instr,
    Kernel,
    Loop,
    Op,
    RegRef,
    While,
    instructions,
    walk,
)
from kernels_ir.verify import verify

from .executor import Mask, _execute, branch_region
from .l1 import L1, resident_buffers
from .l2 import L2
from .lowering import folded_instructions, narrowed_loads
from .memory import global_space, shared_space
from .residency import check_launch, launch_residency
from .results import CATEGORIES, SimResult
from .schedule import Pending
from .scheduler import PIPES, IssueUnit
from .smem import SharedPipe, lines

__all__ = ["simulate", "SimResult", "truncate_time_loop"]

ISSUE, SMEM, DATA, BARRIER = range(4)


class _Static:
    """Per static instruction: what the observer needs, precomputed once."""

    __slots__ = ("kind", "src", "dst", "srcs", "dsts", "pipe", "occ", "lat", "cat", "width",
                 "shared", "base", "op", "folded", "hoist", "order", "nominal", "mio", "fixed",
                 "vote")

    def __init__(self, ins: Instr, rows: dict, spec, atomic_bufs: set, gspace, sspace,
                 folded: bool = False, in_region: bool = False):
        op = ins.op
        self.op = op
        self.folded = folded   # no SASS instruction of its own (lowering.py)
        refs = [s for s in ins.srcs if isinstance(s, RegRef)]
        refs += [s.index for s in ins.srcs if hasattr(s, "buffer") and isinstance(s.index, RegRef)]
        self.src = np.array(sorted({rows[(r.reg.name, r.index)] for r in refs}), dtype=np.int64)
        self.dst = np.array([rows[(d.reg.name, d.index)] for d in ins.dsts], dtype=np.int64)
        self.srcs, self.dsts = tuple(self.src.tolist()), tuple(self.dst.tolist())
        self.width = int(ins.attr("width", 1))
        lanes = {"fp32": spec.fp32_lanes_per_subpartition,
                 "int": spec.int32_lanes_per_subpartition,
                 "sfu": spec.sfu_lanes_per_subpartition, "mem": 32}
        if op in FLOAT_ALU:
            self.kind, pipe, self.lat = "alu", "fp32", spec.fma_latency_cycles
        elif op in SFU:   # CUDA's tanhf / expf / sigmoid: sequences of their own latency
            self.kind, pipe, self.lat = "alu", "sfu", {
                Op.TANH: spec.sfu_latency_cycles, Op.EXP: spec.exp_latency_cycles,
                Op.SIGMOID: spec.sigmoid_latency_cycles}[op]
        elif op in (Op.SHFL_XOR, Op.SHFL_IDX):   # through the SM's shared pipe (smem.py)
            self.kind, pipe, self.lat = "shfl", "mem", spec.shfl_latency_cycles
        elif op in WARP_OPS:
            self.kind, pipe, self.lat = "alu", "mem", spec.shfl_latency_cycles
        elif op in INT_ALU:
            self.kind, pipe, self.lat = "alu", "int", spec.alu_latency_cycles
        else:
            pipe, self.lat = "mem", 0
            self.kind = {Op.LDS: "lds", Op.STS: "sts", Op.LDG: "ldg", Op.LDG_VOLATILE: "poll",
                         Op.STG: "stg", Op.ATOM_ADD: "atom", Op.BAR: "bar",
                         Op.FENCE: "fence", Op.SLEEP: "sleep"}[op]
        self.pipe = PIPES.index(pipe)
        self.occ = max(1, 32 // lanes[pipe]) if pipe != "mem" else 1
        self.cat = ISSUE
        self.shared = False
        self.base = 0
        if self.kind in ("lds", "sts"):
            self.cat, self.shared = SMEM, True
        elif self.kind in ("ldg", "poll", "stg", "atom"):
            buf = ins.srcs[0].buffer
            self.cat = BARRIER if (buf.name in atomic_bufs or self.kind == "atom") else DATA
        elif self.kind in ("bar", "fence", "sleep"):
            self.cat = BARRIER
            if self.kind == "sleep":      # its argument, ns (the wake: sleep_wake_cycles)
                self.lat = float(ins.srcs[0].value)
        # ptxas's schedule (:mod:`.schedule`): shared loads and arithmetic outside a branch
        # region may go above the region before them (``hoist``); shuffles, global stores (which
        # no shared load or register aliases) and a region's own instructions wait in the
        # schedule too but stay below it; every other instruction (``order``) is a point that
        # nothing passes, timed at once
        self.hoist = (self.kind in ("alu", "lds") and op not in WARP_OPS and not in_region
                      and not folded)
        self.order = not (self.hoist or folded or in_region or self.kind in ("shfl", "stg"))
        # a memory-pipe instruction: ptxas keeps a warp's consecutive ones
        # ``mio_issue_interval_cycles`` apart (the SASS's stall counts)
        self.mio = self.kind in ("lds", "sts", "shfl", "ldg", "poll", "stg", "atom")
        # a fixed-latency result: no dependency barrier tracks it, its readers wait by the
        # stall counts ptxas encodes (the warp's nominal clock, :meth:`_Timing._instr`)
        self.fixed = self.kind == "alu" and pipe in ("fp32", "int") and not folded
        # a vote reads its predicate ``predicate_branch_cycles`` after the compare, as a branch
        # does (the SASS's stall counts)
        self.vote = op in (Op.VOTE_ANY, Op.VOTE_ALL)
        # the latency ptxas schedules by (:func:`.schedule.list_order`)
        self.nominal = 0 if folded else (spec.smem_latency_cycles if self.kind == "lds"
                                         else self.lat if self.kind in ("alu", "shfl") else 1)


class _Timing:
    def __init__(self, kernel: Kernel, spec, n_ctas: int, gspace, progress,
                 l2_warm: bool = False, l2_flip: bool = False):
        self.k, self.spec = kernel, spec
        W = kernel.warps_per_cta
        nw = n_ctas * W
        self.nw, self.W = nw, W
        P = spec.subpartitions_per_sm
        sm = (np.arange(n_ctas) % spec.sm_count).repeat(W)
        self.sm = sm
        self.n_sms = min(spec.sm_count, n_ctas)
        group = sm * P + (np.arange(nw) % W) % P
        order = np.lexsort((np.arange(nw), group))
        rank = np.empty(nw, dtype=np.int64)
        gs = group[order]
        head = np.r_[True, gs[1:] != gs[:-1]]
        first = np.maximum.accumulate(np.where(head, np.arange(nw), 0))
        rank[order] = np.arange(nw) - first
        self.group, self.rank = group, rank
        self.issue_unit = IssueUnit(spec.sm_count * P, spec.issue_per_cycle_per_subpartition)
        rows = {}
        for r in kernel.regs:
            for i in range(r.size):
                rows[(r.name, i)] = len(rows)
        self.ready = np.zeros((len(rows) + 1, nw))
        self.cat = np.zeros((len(rows) + 1, nw), dtype=np.int8)
        # the nominal cycle (the warp's nominal clock, below) at which a fixed-latency result
        # may be read; -inf for a result that a dependency barrier tracks
        self.nready = np.full((len(rows) + 1, nw), -np.inf)
        atomic_bufs = {i.srcs[0].buffer.name for i in instructions(kernel) if i.op is Op.ATOM_ADD}
        sspace = shared_space(kernel, 1)
        self.sstride = sspace.stride
        self.slot = np.repeat(np.arange(n_ctas, dtype=np.int64), W)
        folded = folded_instructions(kernel)
        in_region = {id(x) for s in walk(kernel.body)
                     if isinstance(s, If) and not s.orelse and branch_region(s.then)
                     for x in walk(s.then) if isinstance(x, Instr)}
        self.static = [_Static(i, rows, spec, atomic_bufs, gspace, sspace, sid in folded,
                               id(i) in in_region)
                       for sid, i in enumerate(instructions(kernel))]
        for sid, width in narrowed_loads(kernel).items():   # what the compiler loads (lowering)
            self.static[sid].width = width
        self.last = np.full(nw, -1.0)     # each warp's latest issue
        self.ctrl = np.zeros(nw)
        # each warp's nominal clock: the sum of the stall counts ptxas encodes up to its latest
        # issue, and the nominal cycle before which its next memory-pipe instruction may not go
        self.nom = np.zeros(nw)
        self.nom_mio = np.zeros(nw)
        self.rctrl = np.zeros(nw)         # a split region's wait (ordered instructions only)
        self.ctrl_cat = np.zeros(nw, dtype=np.int8)
        self.store_ack = np.zeros(nw)
        self.charge = np.zeros((nw, 4))
        self.smem = SharedPipe(spec, spec.sm_count, nw, len(self.static))
        self.l2 = L2(spec, gspace.words.size, sm, l2_flip)
        if l2_warm:
            for name in resident_buffers(kernel, [b.name for b in kernel.global_buffers],
                                         spec.l2_size_bytes):
                self.l2.warm(gspace.bases[name], gspace.buffers[name].size)
        for name in sorted({i.srcs[0].buffer.name for i in instructions(kernel)
                            if i.op is Op.LDG_VOLATILE}):
            self.l2.mark_polled(gspace.bases[name], gspace.buffers[name].size)
            if name not in atomic_bufs:   # a data buffer: its lines' pollers are counted
                self.l2.track_pollers(gspace.bases[name], gspace.buffers[name].size)
        l1 = L1(spec, kernel, gspace, sm, self.n_sms, -(-n_ctas // spec.sm_count))
        self.l1 = l1 if l1.active else None
        self.whiles = [s for s in walk(kernel.body) if isinstance(s, While)]
        self.kernel_name, self.wpc = kernel.name, kernel.warps_per_cta
        self.rec_stacks: dict[int, list] = {0: []}   # per group of warps (executor)
        self.rec_stack: list = self.rec_stacks[0]
        self.replaying = False
        self.waits = np.zeros(-(-nw // W), dtype=np.int64)   # per CTA: its waits so far
        self.steps: list[tuple] = []
        self.warp_instr = 0
        self.all = np.arange(nw)
        self.all4 = self.all * 4
        self.charge_flat = self.charge.reshape(-1)           # view: index warp * 4 + category
        self.smem_base = (self.slot * self.sstride)[:, None]
        self._issue_rounds()
        self.active_nw = nw      # warps of the current wave (on_wave); all of them but the last
        self.retired = 0.0       # the latest store acknowledgement of CTAs that have exited
        self.progress = progress
        # instructions not yet timed, until their place in ptxas's issue order is known
        self.pending = Pending(self.static, (self.ready, self.cat, self.nready), self._emit,
                               self._reconverge, spec.mio_issue_interval_cycles,
                               spec.dependency_barriers, spec.mio_operand_extra_cycles)
        self.trip = next((s.trip_count for s in walk(kernel.body)
                          if isinstance(s, Loop) and s.kind == "time"), 0)

    def _issue_rounds(self) -> None:
        """The issue rounds of :meth:`_rounds` (at most one warp of each sub-partition a round)
        from the warps' groups and ranks."""
        rank, group = self.rank, self.group
        self.rounds = [np.flatnonzero(rank == r) for r in range(int(rank.max()) + 1)]
        self.single_round = len(self.rounds) == 1
        self.full_rounds = _partnered([(sel, group[sel]) for sel in self.rounds])

    # --- executor callbacks -----------------------------------------------------------------
    def on_wave(self, wave: int, ids) -> None:
        """A grid larger than the co-resident CTAs runs in waves: the executor runs the CTAs
        ``ids`` of wave ``wave`` with warps numbered from 0, and this model sizes its warps to
        one wave (:func:`simulate`). Before a later wave, its CTAs take the slots that free
        first (a slot frees when its CTA's last warp has issued its last instruction; the GPU's
        dispatcher hands the next CTA to the first free slot, in CTA order): the slots are
        relabelled by the time they free (:meth:`_relabel`), so that the new CTAs' warps sit
        in the earliest ones, and each new warp issues after its slot's previous CTA exited.
        ``measurements/h200/csr_trace_layers.json.xz``: at hidden 4760, batch 8, the CSR
        kernel's 595 CTAs of 56 registers (528 co-resident) run as 528 CTAs ending at
        8.6-10.3 us and 67 that start at 8.96-9.44 us, as each finds a free slot."""
        self._flush()
        self.active_nw = len(ids) * self.W
        if wave == 0:
            return
        W = self.W
        free = self.last.reshape(-1, W).max(axis=1)          # each slot's CTA exits
        self.retired = max(self.retired, float(self.store_ack.max(initial=0.0)))
        order = np.argsort(free, kind="stable")
        self._relabel(order)
        new = np.arange(self.active_nw)
        start = np.repeat(free[order][:len(ids)], W)
        self.last[new] = start
        self.ctrl[new] = start
        # nothing of the slot's previous CTA holds the new one back: neither a wait of its last
        # split region or loop edge nor the spacing after its last memory-pipe instruction
        self.rctrl[new] = start
        self.nom_mio[new] = self.nom[new]
        self.store_ack[new] = 0.0

    def _relabel(self, order: np.ndarray) -> None:
        """Slot ``c`` (its W warps) becomes what slot ``order[c]`` was: every per-warp array of
        this model and of the L1, L2 and shared pipe it drives, so that a slot keeps its SM,
        sub-partitions and history under its new number."""
        W = self.W
        wp = (order[:, None] * W + np.arange(W)).ravel()
        for name in ("last", "ctrl", "nom", "nom_mio", "rctrl", "ctrl_cat", "store_ack",
                     "charge", "sm", "group", "rank", "slot", "smem_base"):
            setattr(self, name, getattr(self, name)[wp])
        self.ready = self.ready[:, wp]
        self.cat = self.cat[:, wp]
        self.nready = self.nready[:, wp]
        self.pending.rows = (self.ready, self.cat, self.nready)
        self.waits = self.waits[order]
        self.charge_flat = self.charge.reshape(-1)
        self.smem.conflicts_per_warp = self.smem.conflicts_per_warp[wp]
        self.l2.relabel(wp)
        if self.l1 is not None:
            self.l1.sm_of_warp = self.l1.sm_of_warp[wp]
        self._issue_rounds()

    def on_group(self, gid: int) -> None:
        """The following events belong to group ``gid`` (its own stack of open spins)."""
        self._flush()
        self.rec_stack = self.rec_stacks.setdefault(gid, [])

    def on_step(self, step) -> None:
        self._flush()
        per_sm_end = np.full(self.spec.sm_count, -np.inf)
        np.maximum.at(per_sm_end, self.sm, self.last)
        charge = np.zeros((self.spec.sm_count, 4))
        np.add.at(charge, self.sm, self.charge)
        self.steps.append((step, per_sm_end[:self.n_sms].copy(), charge[:self.n_sms].copy()))
        if self.progress is not None and step is not None:
            self.progress(step + 1, self.trip)

    def on_while(self, wid: int, event: str, m: Mask) -> None:
        self.on_iteration(m.wany)     # ptxas does not schedule across a loop's edges
        if self.replaying:
            return
        if event == "enter":
            self.rec_stack.append((wid, [], []))
        elif event == "again":
            self._edge(m.wany, SPIN_TESTS)
            self.rec_stack[-1][1].clear()
            self.rec_stack[-1][2].clear()
        else:
            self._edge(m.wany, 1)
            wid, events, polls = self.rec_stack.pop()
            self._settle(wid, events, polls)

    def on_loop_edge(self, warps: np.ndarray) -> None:
        """The warps (bool per warp) end an iteration of a rolled counted loop (the time loop,
        a ``seq`` loop): the count's increment, its compare and the branch."""
        self._flush()
        self._edge(warps, 1, self.spec.alu_latency_cycles)

    def _edge(self, warps: np.ndarray, tests: int, before: float = 0.0) -> None:
        """A loop's edge for the warps ``warps`` (bool per warp): ``tests`` compare-and-branch
        pairs after the warp's last instruction (``before`` cycles later, an increment's
        latency), each ``predicate_branch_cycles`` to its branch and ``branch_cycles`` from the
        branch to the next instruction (``measurements/h200/loop_edges.json``). The next
        instruction issues no earlier; the nominal clock moves with it. Two edges with no
        instruction between them add up (the exit test charged before :meth:`_settle`'s
        replays and the two tests before each one): each counts from the later of the warp's
        last issue and the floor the previous one set."""
        ws = np.flatnonzero(warps)
        if ws.size == 0 or tests <= 0:
            return
        gap = before + tests * (self.spec.predicate_branch_cycles + self.spec.branch_cycles)
        self.rctrl[ws] = np.maximum(self.rctrl[ws], self.last[ws]) + gap
        self.nom[ws] += gap - 1.0

    def on_iteration(self, warps: np.ndarray) -> None:
        """The warps (bool per warp) start an iteration of a loop: ptxas schedules within a
        loop's body, so everything before this point is timed first."""
        self._flush()

    def on_region(self, entering: np.ndarray, calls: bool = False) -> None:
        """A branch region starts for the warps ``entering`` (bool per warp); ``calls``: it
        holds a subroutine call (:func:`.executor.region_calls`). Its place in the issue order
        comes after the next segment's movable instructions (:class:`.schedule.Pending`)."""
        if not self.replaying:
            self.pending.region(calls)

    def on_reconverge(self, reached: np.ndarray, split: np.ndarray, calls: bool = False) -> None:
        """A branch region just ended (:func:`.executor.branch_region`) for the warps
        ``reached`` (bool per warp) that came to it; ``split``: those whose lanes split over it;
        ``calls``: the region holds a subroutine call. Applied by :meth:`_reconverge` once the
        region's instructions are timed."""
        if not self.replaying:
            self.pending.reconverged(reached, split, calls)

    def _reconverge(self, reached: np.ndarray, split: np.ndarray) -> None:
        """A split warp's next instruction issues no earlier than ``divergent_branch_cycles``
        after the region's last one (``measurements/body_probe.py``: on the H200 the kernels'
        epilogue inside ``if (lane < B)`` costs a round 37-57 cycles more than the same
        epilogue on every lane)."""
        d = self.spec.divergent_branch_cycles
        sp = np.flatnonzero(split)
        if d and sp.size:
            t = self.last[sp] + 1.0 + d
            self.rctrl[sp] = np.maximum(self.rctrl[sp], t)

    def _flush(self) -> None:
        self.pending.flush()

    def _emit(self, e, extra) -> None:
        self._instr(e.sid, e.m, e.flat, None, extra)

    def on_instr(self, sid: int, m: Mask, flat) -> None:
        if not self.rec_stack and not self.replaying:
            if self.static[sid].order:
                self._flush()
                self._instr(sid, m, flat, None)
            else:      # timed when its place in ptxas's issue order is known
                self.pending.add(sid, m, flat)
            return
        self._flush()   # inside a spin loop: in the IR's order
        if not self.replaying:
            self.rec_stack[-1][1].append((sid, m.arr, flat))
        self._instr(sid, m, flat, self.rec_stack[-1][2])

    # --- the model ----------------------------------------------------------------------------
    def _instr(self, sid: int, m: Mask, flat, polls, extra=None) -> None:
        st = self.static[sid]
        full = m.full and self.active_nw == self.nw
        if full:
            ws = self.all
        else:
            ws = np.flatnonzero(m.wany)
            if ws.size == 0:
                return
        dep, dcat = self._latest_source(st, ws, full)
        if extra is not None:   # a dependency barrier that another result shares
            ex = extra if full else extra[ws]
            later = ex > dep
            dep = np.where(later, ex, dep)
            dcat = np.where(later, ISSUE, dcat)
        nsrc = self._nominal_source(st, ws, full)
        if st.folded:    # part of the previous SASS instruction, or none: no issue, no pipe
            self._write(st, ws, full, dep, dcat)
            self._write_nominal(st, ws, full, nsrc)
            return
        self.warp_instr += ws.size
        last = self.last if full else self.last[ws]
        earliest = last + 1.0
        # the stall counts: this instruction's nominal cycle, after the warp's previous one,
        # after its fixed-latency sources (a memory-pipe reader waits
        # ``mio_operand_extra_cycles`` longer) and ``mio_issue_interval_cycles`` after the
        # warp's previous memory-pipe instruction; it issues that many cycles after the
        # previous instruction whatever delayed that one
        nom = self.nom if full else self.nom[ws]
        n_at = nom + 1.0
        if nsrc is not None:
            n_at = np.maximum(n_at, nsrc + self.spec.mio_operand_extra_cycles if st.mio else nsrc)
            if st.vote:
                n_at = np.maximum(n_at, nsrc + (self.spec.predicate_branch_cycles
                                                - self.spec.alu_latency_cycles))
        if st.mio:
            n_at = np.maximum(n_at, self.nom_mio if full else self.nom_mio[ws])
        ctrl = self.ctrl if full else self.ctrl[ws]
        ctrl_cat = self.ctrl_cat if full else self.ctrl_cat[ws]
        # in order, and not before a split region's wait ends (issue time)
        start = np.maximum(last + (n_at - nom), self.rctrl if full else self.rctrl[ws])
        use_ctrl = ctrl > dep
        dep = np.where(use_ctrl, ctrl, dep)
        dcat = np.where(use_ctrl, ctrl_cat, dcat)
        t = np.ceil(np.maximum(start, dep)).astype(np.int64)
        if full and self.single_round:
            issue = self.issue_unit.reserve(self.group, t, st.pipe, st.occ)
        else:
            issue = self.issue_unit.reserve_rounds(self.full_rounds if full else self._rounds(ws),
                                                   t, st.pipe, st.occ)
        issue_f = issue.astype(np.float64)
        # the time since the warp's latest issue is charged
        wait = issue_f - earliest
        dep_wait = dep - earliest                      # np.clip(dep - earliest, 0, wait)
        np.maximum(dep_wait, 0.0, out=dep_wait)
        np.minimum(dep_wait, wait, out=dep_wait)
        own = 1.0 + (wait - dep_wait)
        charge = self.charge_flat
        cell = (self.all4 if full else ws * 4) + dcat
        charge[cell] += dep_wait
        if full:
            self.charge[:, ISSUE] += own
            self.last[:] = issue_f
            self.nom[:] = n_at
            if st.mio:
                self.nom_mio[:] = n_at + self.spec.mio_issue_interval_cycles
        else:
            self.charge[ws, ISSUE] += own
            self.last[ws] = issue_f
            self.nom[ws] = n_at
            if st.mio:
                self.nom_mio[ws] = n_at + self.spec.mio_issue_interval_cycles
        self._write_nominal(st, ws, full, n_at + st.lat if st.fixed else None)
        kind = st.kind
        if kind == "alu":
            self._write(st, ws, full, issue_f + st.lat, ISSUE)
        elif kind == "shfl":
            self._write(st, ws, full, self.smem.shuffle(issue_f, ws, self.sm) + st.lat, ISSUE)
        elif kind in ("lds", "sts"):
            words = flat - self.smem_base
            done = self.smem.access(sid, issue_f, ws, self.sm, words, m.arr, st.width,
                                    "ld" if kind == "lds" else "st")
            if kind == "lds":
                self._write(st, ws, full, done, SMEM)
        elif kind in ("ldg", "poll"):
            tkind = "poll" if (kind == "poll" and (self.replaying or st.cat == BARRIER)) \
                else "data"
            nl = lines(flat[ws], m.arr[ws])
            leave = self.smem.tag_stage(issue_f, ws, self.sm, nl)
            done, served = self.l2.access(leave, ws, flat, m.arr, st.width, tkind, False,
                                          self.l1 if kind == "ldg" else None)
            wf = self.smem.global_wavefronts(sid, flat, m.arr, st.width)[ws]
            missed = self.l2.missed_lanes
            some = missed.any(axis=1) if missed is not None else None
            if some is not None and some.any():     # misses pass the data stage in pieces
                rest = ~some
                out = np.empty(ws.size)
                out[rest] = self.smem.global_returns(done[rest], ws[rest], self.sm, wf[rest])
                out[some] = self.smem.missed_returns(
                    ws[some], self.sm, flat[ws[some]], m.arr[ws[some]], missed[some],
                    self.l2.lanes_back[some], st.width)
                done = out
            else:
                done = self.smem.global_returns(done, ws, self.sm, wf)
            self._write(st, ws, full, done, st.cat)
            if kind == "poll" and polls is not None:
                polls.append((ws, served, flat[ws], m.arr[ws], st.width))
            if kind == "poll" and st.cat != BARRIER and not self.replaying:
                self.l2.note_polls(ws, flat, m.arr, served)
        elif kind == "stg":
            done, _ = self.l2.access(issue_f, ws, flat, m.arr, st.width, "store", True)
            self.store_ack[ws] = np.maximum(self.store_ack[ws], done)
        elif kind == "atom":
            done = self.l2.atomic(issue_f, ws, flat, m.arr)
            self._write(st, ws, full, done, BARRIER)
            self.store_ack[ws] = np.maximum(self.store_ack[ws], done)
        elif kind == "bar":
            cta = ws // self.W
            rel = np.full(self.nw // self.W, -np.inf)
            np.maximum.at(rel, cta, issue_f + self.spec.cta_barrier_latency_cycles)
            # ... and not before the SM's shared pipe has served what was issued before it
            # (the staging stores: measurements/h100/stage_bar.json)
            np.maximum.at(rel, cta, self.smem.free[self.sm[ws]]
                          + self.spec.cta_barrier_drain_cycles)
            self.ctrl[ws] = rel[cta]
            self.ctrl_cat[ws] = BARRIER
        elif kind == "fence":
            self.ctrl[ws] = np.maximum(self.store_ack[ws] + self.spec.fence_after_store_cycles,
                                       issue_f + self.spec.fence_latency_cycles)
            self.ctrl_cat[ws] = BARRIER
        elif kind == "sleep":     # until the next tick of the sleep timer
            self.ctrl[ws] = sleep_wake_cycles(self.spec, st.lat, issue_f)
            self.ctrl_cat[ws] = BARRIER

    def _nominal_source(self, st: _Static, ws: np.ndarray, full: bool):
        """The latest nominal ready cycle of ``st``'s fixed-latency sources, per warp (None
        without sources)."""
        srcs = st.srcs
        if not srcs:
            return None
        nr = self.nready
        out = nr[srcs[0]] if full else nr[srcs[0], ws]
        for r in srcs[1:]:
            out = np.maximum(out, nr[r] if full else nr[r, ws])
        return out

    def _write_nominal(self, st: _Static, ws: np.ndarray, full: bool, value) -> None:
        """The nominal ready cycle of the destinations (None: a dependency barrier tracks
        them)."""
        _set_rows(self.nready, st, ws, full, -np.inf if value is None else value)

    def _latest_source(self, st: _Static, ws: np.ndarray, full: bool):
        """Ready cycle of each warp's latest source operand of ``st`` (the first one among
        equals, as argmax) and its category; 0 and ``issue`` without sources."""
        ready, cat = self.ready, self.cat
        srcs = st.srcs
        if not srcs:
            return np.zeros(ws.size), np.zeros(ws.size, dtype=np.int8)
        r = srcs[0]
        dep, dcat = (ready[r], cat[r]) if full else (ready[r, ws], cat[r, ws])
        for r in srcs[1:]:
            ri = ready[r] if full else ready[r, ws]
            later = ri > dep
            dep = np.where(later, ri, dep)
            dcat = np.where(later, cat[r] if full else cat[r, ws], dcat)
        return dep, dcat

    def _rounds(self, ws: np.ndarray):
        """(positions in ``ws``, their groups, None) per round: at most one warp per group
        each (see :meth:`IssueUnit.reserve_rounds`)."""
        if self.single_round:
            return ((np.arange(ws.size), self.group[ws], None),)
        rk = self.rank[ws]
        out = []
        for r in range(len(self.rounds)):
            sel = np.flatnonzero(rk == r)
            if sel.size:
                out.append((sel, self.group[ws[sel]], None))
        return out

    def _write(self, st: _Static, ws: np.ndarray, full: bool, value, category) -> None:
        """Ready cycle and category (one, or one per warp) of the instruction's destination
        registers."""
        _set_rows(self.ready, st, ws, full, value)
        _set_rows(self.cat, st, ws, full, category)

    def _stale(self, polls) -> np.ndarray:
        """Warps whose polling load was served before the data it returned was seen at L2
        (its arrival, plus :meth:`.l2.L2.seen_delay` for a word written into a line that
        other SMs polled before the word arrived)."""
        bad = np.zeros(self.nw, dtype=bool)
        arrival = self.l2.arrival
        sharers = bool(self.l2.sharer_ranges)
        for ws, served, flat, act, width in polls:
            need = arrival[flat]
            for j in range(1, width):
                need = np.maximum(need, arrival[flat + j])
            if sharers:   # words written during the launch (initial data is seen at once)
                late = (need > 0) & (served >= need) & act
                if late.any():
                    need[late] += self.l2.seen_delay(flat[late], need[late])
            stale = (served < need) & act
            bad[ws[stale.any(axis=1)]] = True
        return bad

    def _phase(self, w: np.ndarray, cat: int) -> None:
        """Warps ``w`` must poll a grid barrier's counter again: their next poll starts after a
        delay uniform over one L2 round trip, the same for the warps of a CTA and drawn afresh for
        every wait of the CTA (a hash of the CTA and the number of its earlier waits, so that the
        draws do not depend on how the program is written). On the GPU a CTA's poll loop meets the
        last write at a phase of its own: the CTAs arrive at different times and poll from their own
        arrival, and the last CTA to notice sets the round (``measurements/fence.py``: the arrive
        and spin of a grid barrier grows from 470 cycles on one CTA to 604, 770 and 1194 on 2, 8 and
        132; ``lamport_trace.py``: the slowest warp of a Lamport step comes 300-600 ns after the
        simulator's). Without it the simulator's CTAs, alike and deterministic, all poll in step and
        notice together. Polls of data buffers (the Lamport slots) no longer take it: on the pollers
        curve (``measurements/lamport_pollers.py --curve``) it made a small exchange about 100 ns
        too slow whatever polled it, while the GPU's round grows with the SMs that poll a line
        (``l2_poll_sharer_cycles``)."""
        cta = w // self.W
        ctas = np.unique(cta)
        k = self.waits[ctas]
        self.waits[ctas] = k + 1
        key = ctas.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + \
            k.astype(np.uint64) * np.uint64(0x632BE59BD9B4E019)
        with np.errstate(over="ignore"):
            u = _uniform(key)[np.searchsorted(ctas, cta)]
        self.ctrl[w] = np.maximum(self.ctrl[w], self.last[w] + u * self.spec.l2_hit_latency_cycles)
        self.ctrl_cat[w] = cat

    def _settle(self, wid: int, events: list, polls: list) -> None:
        limit = self.whiles[wid].spin_limit
        bad = self._stale(polls)
        n = 0
        if bad.any():
            cat = next((self.static[sid].cat for sid, _, _ in events
                        if self.static[sid].kind == "poll"), DATA)
            if cat == BARRIER:   # a grid barrier's counter; data polls re-poll at once
                self._phase(np.flatnonzero(bad), cat)
        self.replaying = True
        try:
            while bad.any() and n < limit:
                n += 1
                new_polls: list = []
                # the stale pass's exit test was charged (on_while): its loop's other tests
                # before the pass again, and the pass's own exit test after it
                self._edge(bad, SPIN_TESTS - 1)
                for sid, arr, flat in events:
                    sub = arr & bad[:, None]
                    if sub.any():
                        self._instr(sid, Mask(sub, False), flat, new_polls)
                self._edge(bad, 1)
                bad = bad & self._stale(new_polls)
        finally:
            self.replaying = False
        if bad.any():  # the real kernel would hit its bounded spin too (CUDA: the error flag)
            w = np.flatnonzero(bad)
            label = self.whiles[wid].label
            who = ", ".join(f"CTA {int(x) // self.wpc} warp {int(x) % self.wpc}" for x in w[:4])
            more = f" and {w.size - 4} more" if w.size > 4 else ""
            raise DeadlockError(
                f"kernel {self.kernel_name}: {who}{more} still wait at '{label}' after its "
                f"spin_limit={limit} poll rounds in simulated time: the data they poll arrives "
                f"later than the spin bound allows",
                [{"warp": int(x), "while": label} for x in w])

    def end(self) -> float:
        self._flush()
        return float(max(self.last.max(), self.store_ack.max(), self.retired, 0.0)) + 1.0


def _set_rows(arr: np.ndarray, st: _Static, ws: np.ndarray, full: bool, value) -> None:
    """``arr``'s rows of the instruction's destination registers take ``value`` (one, or one
    per warp) for the warps ``ws`` (all of them when ``full``)."""
    if full:
        for d in st.dsts:
            arr[d] = value
    else:
        arr[st.dst[:, None], ws] = value


def _uniform(x: np.ndarray) -> np.ndarray:
    """A uniform value in [0, 1) per element of ``x`` (uint64): the splitmix64 finaliser."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _partnered(rounds: list) -> list:
    """``(rows, groups, partner)`` per round: ``partner`` is the position in the round before
    of each row's group when the round before has all of them (else ``None``)."""
    out = []
    for r, (rows, groups) in enumerate(rounds):
        partner = None
        if r:
            before = rounds[r - 1][1]
            pos = np.full(int(max(groups.max(), before.max())) + 1, -1, dtype=np.int64)
            pos[before] = np.arange(before.size)
            partner = pos[groups]
            if (partner < 0).any():
                partner = None
        out.append((rows, groups, partner))
    return out


def truncate_time_loop(kernel: Kernel, steps: int) -> Kernel:
    """A new kernel whose ``Loop(kind="time")`` runs only its first ``steps`` iterations."""
    def body(stmts: tuple) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, Loop):
                s = dataclasses.replace(s, body=body(s.body))
                if s.kind == "time":
                    s = dataclasses.replace(s, stop=min(s.stop, s.start + steps * s.step))
            elif isinstance(s, While):
                s = dataclasses.replace(s, body=body(s.body))
            elif hasattr(s, "then"):
                s = dataclasses.replace(s, then=body(s.then), orelse=body(s.orelse))
            out.append(s)
        return tuple(out)
    return dataclasses.replace(kernel, body=body(kernel.body))


def _progress_bar(stream):
    from gpusim.progress import step_callback

    return step_callback("simulating", "step", stream)


def simulate(kernel: Kernel, inputs: dict, spec, *, sample_steps: int | None = None,
             progress: bool = False, l2_warm: bool = False,
             l2_flip: bool = False) -> SimResult:
    """Simulate one launch of ``kernel`` on ``spec``; values and cycles together.

    The kernel is verified against ``spec`` first (:func:`kernels_ir.verify`): a malformed
    kernel raises :class:`VerifyError` before any work.

    ``sample_steps``: simulate only the first K iterations of the time loop and extrapolate the
    rest from the steady state (:func:`steady_step_cycles`).
    ``progress``: draw a progress bar on stderr. The launch must be co-resident when the kernel
    spins on global memory (else :class:`CapacityError`); a larger grid of a kernel that does
    not spin runs in waves of the co-resident CTAs (:func:`.residency.launch_residency`), a CTA
    of a later wave in the slot that frees first (:meth:`_Timing.on_wave`).
    ``l2_warm``: the launch repeats an identical one (one step of a per-step kernel sequence),
    so the buffers it touched are already in L2 (:func:`.l1.resident_buffers`); default cold,
    every sector's first load comes from DRAM.
    ``l2_flip``: swap which L2 partition every SM is near (:class:`.l2.L2`): the other half of the
    unknown address hash, to average a benchmark that touches one or two addresses over both.
    """
    verify(kernel, spec=spec)
    check_launch(kernel, spec)
    total = next((s.trip_count for s in walk(kernel.body)
                  if isinstance(s, Loop) and s.kind == "time"), 0)
    run_kernel = kernel
    steps = total
    if sample_steps is not None:
        if sample_steps < 1:
            raise InputError(f"sample_steps={sample_steps} must be >= 1")
        if total == 0:
            raise InputError(f"kernel {kernel.name} has no Loop(kind='time') to sample")
        steps = min(int(sample_steps), total)
        run_kernel = truncate_time_loop(kernel, steps)
    gspace = global_space(run_kernel, inputs)
    bar = _progress_bar(sys.stderr) if progress else None
    # a grid larger than the co-resident CTAs (a kernel that does not spin: check_launch
    # refuses the others) runs in waves, each CTA of a later wave in the slot that frees first
    ctas = min(run_kernel.grid, launch_residency(run_kernel, spec).resident_ctas)
    obs = _Timing(run_kernel, spec, ctas, gspace, bar, l2_warm, l2_flip)
    res = _execute(run_kernel, inputs, ctas=ctas, observer=obs)
    return _result(kernel, spec, obs, res, steps, total)


def steady_step_cycles(step_cycles) -> float:
    """Mean step time of the steady state: the longest even-length run of steps at the end,
    leaving out the first step (weights arrive from DRAM then) when there is more than one.

    Even length because persistent kernels often alternate: a step whose polls find their data
    late lets the next one find it early, so per-step times swing high/low with period 2 and an
    odd window would be biased toward one phase.
    """
    cyc = list(step_cycles)
    body = cyc[1:] if len(cyc) > 1 else cyc
    n = max(1, len(body) - len(body) % 2) if len(body) > 1 else 1
    return float(np.mean(body[-n:]))


def _result(kernel, spec, obs: _Timing, res, steps: int, total: int) -> SimResult:
    end = obs.end()
    marks = [s for s in obs.steps if s[0] is not None]
    after = [s for s in obs.steps if s[0] is None]
    bounds = [m[1].max() for m in marks] + ([after[0][1].max()] if after else [])
    step_cycles = tuple(float(b - a) for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    wpsm = max(1, obs.nw // max(1, obs.n_sms))
    timeline, per_step = [], []
    snaps = marks + after[:1]
    for a, b in zip(snaps[:-1], snaps[1:], strict=True):
        diff = (b[2] - a[2]) / wpsm
        per_step.append(dict(zip(CATEGORIES, diff.sum(axis=0) / obs.n_sms, strict=True)))
        timeline.append(tuple((float(s), float(e), dict(zip(CATEGORIES, d, strict=True)))
                              for s, e, d in zip(a[1], b[1], diff, strict=True)))
    per_sm = np.zeros((obs.n_sms, 4))
    np.add.at(per_sm, obs.sm, obs.charge)
    per_sm /= wpsm
    simulated = end
    mean = steady_step_cycles(step_cycles) if steps and step_cycles else 0.0
    cycles = simulated + (total - steps) * mean
    l2 = dict(obs.l2.transactions)
    l2["total"] = sum(l2.values())
    lds = [i for i, s in enumerate(obs.static) if s.kind in ("lds", "sts")]
    return SimResult(
        gpu=spec.name, kernel=kernel.name, cycles=float(cycles),
        simulated_cycles=float(simulated),
        time_s=spec.cycles_to_s(cycles) + spec.launch_overhead_s,
        per_step_s=spec.cycles_to_s(mean), steps=steps, total_steps=total,
        step_cycles=step_cycles,
        breakdown={"total": dict(zip(CATEGORIES, per_sm.sum(axis=0) / obs.n_sms, strict=True)),
                   "per_step": per_step,
                   "per_sm": [dict(zip(CATEGORIES, r, strict=True)) for r in per_sm]},
        smem_wavefronts={"total": int(obs.smem.wavefronts.sum()),
                         "per_instruction": {int(i): int(obs.smem.wavefronts[i]) for i in lds}},
        bank_conflicts={"total": int(obs.smem.conflicts.sum()),
                        "per_instruction": {int(i): int(obs.smem.conflicts[i]) for i in lds},
                        "per_warp": obs.smem.conflicts_per_warp.tolist()},
        l2_transactions=l2, warp_instructions=int(obs.warp_instr),
        timeline=tuple(timeline), clock_hz=spec.clock_hz,
        launch_overhead_s=spec.launch_overhead_s, globals=res.globals)
