"""The functional executor: runs a verified kernel over all CTAs, warps and lanes with numpy.

State layout (all explicit in :class:`_Machine`): a register element is an array of shape
``(n_warps, 32)`` (a register array is ``(size, n_warps, 32)``), ``n_warps`` counting the warps
of every resident CTA; per-lane active masks of the same shape carry SIMT divergence through
``If`` and ``While``; shared and global memory are flat word arrays (:mod:`.memory`).

Compilation: the statement tree is compiled ONCE. Statements that can never wait (no ``While``,
no ``bar`` inside) become closures with every operand, view and semantics function pre-bound,
so the hot loop is ``for f in body: f(mask)`` with no dict lookups or isinstance checks. The
statements that can wait (a ``While``, a ``bar``, and the loops and ifs around them) form a thin
spine that :meth:`_Machine.run_group` walks with an explicit stack of frames, so that a group of
warps can stop there and resume later.

Interleaving: all warps of all resident CTAs start as ONE group that executes in lockstep,
instruction by instruction (a ``While`` iterates while any active lane anywhere wants to; warps
that are done wait masked off). A barrier holds trivially within a group (the verifier rejects
barriers under divergent control) and a store is visible to every later load. A group stops
when it waits:

- in a spin whose next pass cannot change anything: its exit condition depends only on memory
  (:func:`.deadlock.spin_reads`) and the pass kept the same lanes, or a pass wrote nothing and
  left every register it writes as it was. Then the lanes that do not spin and could still
  store to what it polls (parked in the other branch of an ``if``, or past the loop) split off
  as a new group and run on, as they would on the GPU; the spinning lanes resume when a store
  reaches a buffer they poll;
- at a barrier, when the CTA's other live threads are in other groups that have not arrived.

Groups run one at a time, round robin, each until it waits or ends (a spinning group also yields
after every pass while another group can run). Groups that arrive at the same barrier in the same
place merge again. A spin that no live warp can still write is reported at once; when every group
waits, the wait-for graph (:func:`.deadlock.report`) names the cycle. Both raise
:class:`DeadlockError`, as does a spin that reaches its spin limit. The kernels of this project
never split (their data is always stored earlier in program order than it is polled), so they
run as one lockstep group. Approximations once a run splits: a warp whose lanes are in two groups
shuffles and votes over the lanes of its own group only (as for lanes of an ``if`` not taken);
the time steps the timing model sees start when the first group reaches them.

Residency: with ``spec`` (or ``ctas``) given, a grid larger than the co-resident CTA count runs
in waves, each wave to completion; a wave that spins on data from a later wave deadlocks and the
error says which CTAs are not resident and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from kernels_ir.errors import DeadlockError, InputError
from kernels_ir.ir import (
    F32,
    I32,
    PRED,
    SFU,
    If,
    Imm,
    Instr,
    Kernel,
    Loop,
    MemRef,
    Op,
    RegRef,
    While,
    instructions,
    walk,
)
from kernels_ir.printer import format_instr
from kernels_ir.verify import verify

from .deadlock import Wait, is_store, report, spin_reads, store_keys
from .memory import Space, global_space, shared_space
from .semantics import SEMANTICS

__all__ = ["execute", "ExecResult", "Mask", "branch_region", "region_calls"]

WARP = 32
_NP = {F32: np.float32, I32: np.int32, PRED: np.bool_}


def branch_region(body: tuple) -> bool:
    """Whether ptxas compiles an ``if`` with this body to a branch region (``BSSY`` / ``BRA`` /
    ``BSYNC``) rather than to predicated instructions: when it holds an activation (``tanh``,
    ``exp``, ``sigmoid``: software sequences of some twenty instructions in the CUDA the backend
    emits). Read off the SASS of the kernels' epilogues and of ``measurements/body_probe.py``;
    ptxas predicates smaller blocks, or branches around them, by rules of its own."""
    return any(isinstance(x, Instr) and x.op in SFU for x in walk(body))


def region_calls(body: tuple) -> bool:
    """Whether a branch region's body holds a subroutine call in the SASS: a sigmoid, whose
    IEEE division (``1.0f / (1.0f + expf(-x))``) ptxas compiles with a ``CALL.REL`` to the
    division's slow path. ptxas schedules nothing of what follows such a region above it (the
    SASS of the gated kernels, nvcc 13, sm_90: a unit's gate rows' loads come after the previous
    unit's epilogue, ``BSYNC``; in the plain kernels, whose ``tanhf`` is inline, the next row
    slot's loads go above the region)."""
    return any(isinstance(x, Instr) and x.op is Op.SIGMOID for x in walk(body))


class Mask:
    """Per-lane active mask ``arr`` (bool, ``(n_warps, 32)``) with cached summaries."""

    __slots__ = ("arr", "full", "wany", "warps")

    def __init__(self, arr: np.ndarray, full: bool | None = None):
        self.arr = arr
        self.wany = arr.any(axis=1)
        self.warps = int(np.count_nonzero(self.wany))
        self.full = bool(arr.all()) if full is None else full


@dataclass(frozen=True, slots=True, eq=False)
class ExecResult:
    """What a functional run leaves behind.

    ``globals``: final contents of every global buffer (float32 or int32 arrays).
    ``counts``: warp-instructions executed per static instruction (``instrs[i]``), i.e. the
    number of (warp, execution) pairs with at least one active lane.
    ``spins``: ``(label, iterations)`` per ``While`` in program order; iterations are lockstep
    passes over the body summed over every time the loop was entered (1 per entry when nobody
    had to wait).
    """

    globals: dict[str, np.ndarray]
    counts: np.ndarray
    instrs: tuple[Instr, ...]
    spins: tuple[tuple[str, int], ...]
    waves: int
    resident_ctas: int

    @property
    def warp_instructions(self) -> int:
        return int(self.counts.sum())


class _WhileCtx:
    """Static info of one While and its last polled loads (for deadlock decisions/messages)."""

    __slots__ = ("label", "limit", "writes", "last", "cond_instr", "reads", "loads")

    def __init__(self, label: str, limit: int, cond_instr: Instr | None, reads):
        self.label, self.limit, self.cond_instr = label, limit, cond_instr
        self.reads = reads          # deadlock.SpinReads
        self.writes: list[np.ndarray] = []
        self.last = None            # (buffer, index array, values array) of the last poll
        self.loads: dict = {}       # sid -> (buffer, index array): the condition's loads


# spine item and frame kinds
_CHUNK, _LOOP, _IF, _WHILE, _BAR, _BODY = range(6)


class _Body:
    """A spine body: items ``(kind, payload)`` and what each suffix may still store."""

    __slots__ = ("items", "suffix")

    def __init__(self, items: list, stores: list):
        self.items = items
        suffix = [frozenset()] * (len(items) + 1)
        for i in range(len(items) - 1, -1, -1):
            suffix[i] = suffix[i + 1] | stores[i]
        self.suffix = suffix


class _LoopNode:
    __slots__ = ("var", "rng", "body", "time", "stores")


class _IfNode:
    __slots__ = ("cond", "then", "orelse", "then_stores", "else_stores")


class _WhileNode:
    __slots__ = ("ctx", "wid", "body", "cond", "stores", "read_idx", "path")


class _BarNode:
    __slots__ = ("fn", "sid", "text", "path")


class _Frame:
    """One level of a group's position: a body being walked, or a Loop/If/While in progress."""

    __slots__ = ("kind", "node", "m", "pos", "phase", "e", "cur", "it", "snap", "w0")

    def __init__(self, kind: int, node, m: Mask):
        self.kind, self.node, self.m = kind, node, m
        self.pos = self.phase = self.it = 0
        self.e = self.cur = self.snap = self.w0 = None

    def copy(self, sel: np.ndarray) -> _Frame:
        """This frame restricted to the lanes ``sel``."""
        f = _Frame(self.kind, self.node, Mask(self.m.arr & sel))
        f.pos, f.phase, f.it, f.w0 = self.pos, self.phase, self.it, self.w0
        if self.e is not None:
            f.e = self.e & sel
        if self.cur is not None:
            f.cur = Mask(self.cur.arr & sel)
        return f

    def key(self) -> tuple:
        return (self.kind, id(self.node), self.pos, self.phase)


class _Group:
    """Lanes that execute together: ``lanes`` (every lane of the group, active or parked) and
    ``frames``, the stack of their position. ``wait``: ``None`` (can run), ``("spin", frame,
    counts)`` (write counts of the polled buffers when it stopped) or ``("bar", node, mask)``."""

    __slots__ = ("gid", "frames", "lanes", "wait")

    def __init__(self, gid: int, frames: list, lanes: np.ndarray):
        self.gid, self.frames, self.lanes, self.wait = gid, frames, lanes, None


def _blocking(s) -> bool:
    """Can the statement wait (a While, a bar, or a Loop/If containing one)?"""
    if isinstance(s, Instr):
        return s.op is Op.BAR
    if isinstance(s, While):
        return True
    if isinstance(s, Loop):
        return any(_blocking(x) for x in s.body)
    if isinstance(s, If):
        return any(_blocking(x) for x in s.then) or any(_blocking(x) for x in s.orelse)
    return False


class _Machine:
    """All mutable state of one wave, and the compiler of closures over it."""

    def __init__(self, kernel: Kernel, gmem: Space, cta_ids: np.ndarray, observer=None):
        self.k = kernel
        self.obs = observer
        W = kernel.warps_per_cta
        n_ctas = cta_ids.size
        self.nw = nw = n_ctas * W
        self.n_ctas = n_ctas
        self.gmem = gmem
        self.smem = shared_space(kernel, n_ctas)
        warp_local = np.tile(np.arange(W, dtype=np.int32), n_ctas)
        lane = np.broadcast_to(np.arange(WARP, dtype=np.int32), (nw, WARP))
        tid = warp_local[:, None] * WARP + lane
        self.cta_of_warp = np.repeat(cta_ids.astype(np.int32), W)
        self.slot_of_warp = np.repeat(np.arange(n_ctas, dtype=np.int64), W)
        self.sregs = {
            "lane": np.ascontiguousarray(lane), "warp": np.repeat(warp_local[:, None], WARP, 1),
            "tid": tid, "cta": np.repeat(self.cta_of_warp[:, None], WARP, 1),
            "nctas": np.int32(kernel.grid), "nwarps": np.int32(W),
            "nthreads": np.int32(kernel.block),
        }
        self.base_mask = Mask(tid < kernel.block)
        self.regs = {r.name: np.zeros((r.size, nw, WARP), dtype=_NP[r.dtype])
                     for r in kernel.regs}
        self.instrs = tuple(instructions(kernel))
        self.sid = {id(s): i for i, s in enumerate(self.instrs)}
        self.counts = [0] * len(self.instrs)
        self.whiles: list[_WhileCtx] = []
        self.spins: list[int] = []
        self.buf_index = {b.name: i for i, b in enumerate(kernel.buffers)}
        self.wc = [0] * len(kernel.buffers)   # stores so far, per buffer
        self.shared_bufs = {b.name for b in kernel.shared_buffers}
        self._time_var: np.ndarray | None = None
        self._poll: _WhileCtx | None = None
        self._path = "body"
        self.groups: list[_Group] = []
        self._next_gid = 0
        self._cur_gid = 0
        self._step_seen = None           # the last time step reported to the observer
        self._on_group = getattr(observer, "on_group", None)
        self.spine = self._compile_spine(kernel.body, "body")

    # --- operands -------------------------------------------------------------------------
    def _src(self, s):
        if isinstance(s, RegRef):
            return self.regs[s.reg.name][s.index]
        if isinstance(s, Imm):
            return _NP[s.dtype](s.value)
        raise InputError(f"operand {s!r} is not a register or immediate")

    def _dst(self, d: RegRef) -> np.ndarray:
        return self.regs[d.reg.name][d.index]

    # --- compilation: the spine -----------------------------------------------------------
    def _compile_spine(self, body: tuple, path: str) -> _Body:
        items, stores, run = [], [], []

        def flush() -> None:
            if run:
                fs = self._compile_body(tuple(s for _, s in run))
                items.append((_CHUNK, fs[0] if len(fs) == 1 else _chain(fs)))
                stores.append(store_keys(tuple(s for _, s in run)))
                run.clear()

        for i, s in enumerate(body):
            here = f"{path}/{i}"
            if not _blocking(s):
                run.append((here, s))
                continue
            flush()
            if isinstance(s, Instr):                      # bar
                n = _BarNode()
                n.fn, n.sid = self._compile_instr(s), self.sid[id(s)]
                n.text, n.path = format_instr(s), here
                items.append((_BAR, n))
            elif isinstance(s, Loop):
                items.append((_LOOP, self._compile_spine_loop(s, here)))
            elif isinstance(s, If):
                n = _IfNode()
                n.cond = self.regs[s.cond.reg.name][s.cond.index]
                n.then = self._compile_spine(s.then, here + "/then") if s.then else None
                n.orelse = self._compile_spine(s.orelse, here + "/else") if s.orelse else None
                n.then_stores, n.else_stores = store_keys(s.then), store_keys(s.orelse)
                items.append((_IF, n))
            else:
                items.append((_WHILE, self._compile_spine_while(s, here)))
            stores.append(store_keys(s))
        flush()
        return _Body(items, stores)

    def _compile_spine_loop(self, s: Loop, path: str) -> _LoopNode:
        n = _LoopNode()
        n.var = self.regs[s.var.name][0]
        outer = self._time_var
        if s.kind == "time":
            self._time_var = n.var
        n.body = self._compile_spine(s.body, path + f"/loop %{s.var.name}")
        self._time_var = outer
        n.rng, n.time, n.stores = range(s.start, s.stop, s.step), s.kind == "time", \
            store_keys(s.body)
        return n

    def _compile_spine_while(self, s: While, path: str) -> _WhileNode:
        cond_instr = None
        for st in s.body:
            if isinstance(st, Instr) and any(d == s.cond for d in st.dsts):
                cond_instr = st
        reads = spin_reads(s)
        ctx = _WhileCtx(s.label, s.spin_limit, cond_instr, reads)
        n = _WhileNode()
        n.ctx, n.wid, n.path = ctx, len(self.whiles), path
        self.whiles.append(ctx)
        self.spins.append(0)
        outer_poll = self._poll
        self._poll = ctx
        n.body = self._compile_spine(s.body, path + f"/while {s.label}")
        self._poll = outer_poll
        written = sorted({(d.reg.name, d.index) for st in _walk_instrs(s.body) for d in st.dsts})
        ctx.writes = [self.regs[r][i] for r, i in written]
        n.cond = self.regs[s.cond.reg.name][s.cond.index]
        n.stores = reads.stores
        n.read_idx = tuple(sorted(self.buf_index[b] for b in reads.buffers))
        return n

    # --- compilation: closures ------------------------------------------------------------
    def _compile_body(self, body: tuple) -> list:
        out = []
        for s in body:
            if isinstance(s, Instr):
                out.append(self._compile_instr(s))
            elif isinstance(s, Loop):
                out.append(self._compile_loop(s))
            elif isinstance(s, If):
                out.append(self._compile_if(s))
            else:
                raise InputError(f"kernel {self.k.name}: {s!r} is not a statement; verify() it")
        return out

    def _compile_instr(self, ins: Instr):
        sem = SEMANTICS[ins.op]
        sid = self.sid[id(ins)]
        counts = self.counts
        attrs = dict(ins.attrs)
        kind = sem.kind
        if kind == "alu" or kind == "sreg":
            if kind == "sreg":
                name = sem.fn(attrs)
                if name == "step":
                    if self._time_var is None:
                        raise InputError(f"kernel {self.k.name}: {format_instr(ins)} reads the "
                                         f"step register outside a Loop(kind='time')")
                    val = self._time_var
                else:
                    val = self.sregs[name]
                fn, srcs = (lambda v: v), (val,)
            else:
                fn, srcs = sem.fn(attrs), tuple(self._src(s) for s in ins.srcs)
            dst = self._dst(ins.dsts[0])
            check = self._divisor_check(ins, srcs)
            obs = self.obs

            def run(m: Mask) -> None:
                if check is not None:
                    check(m)
                r = fn(*srcs)
                if m.full:
                    dst[...] = r
                else:
                    np.copyto(dst, r, where=m.arr, casting="unsafe")
                counts[sid] += m.warps
                if obs is not None:
                    obs.on_instr(sid, m, None)
            return run
        if kind in ("load", "store", "atomic"):
            return self._compile_mem(ins, sid, sem)
        if kind == "warp":
            fn = sem.fn
            vals = self._src(ins.srcs[0])
            arg = self._src(ins.srcs[1]) if len(ins.srcs) > 1 else None
            dst = self._dst(ins.dsts[0])
            nw, obs = self.nw, self.obs

            def run(m: Mask) -> None:
                v = np.broadcast_to(vals, (nw, WARP))
                r = fn(v, arg, None if m.full else m.arr)
                if m.full:
                    dst[...] = r
                else:
                    np.copyto(dst, r, where=m.arr)
                counts[sid] += m.warps
                if obs is not None:
                    obs.on_instr(sid, m, None)
            return run
        obs = self.obs

        def run_sync(m: Mask) -> None:  # BAR, FENCE: no functional effect within a group
            counts[sid] += m.warps
            if obs is not None:
                obs.on_instr(sid, m, None)
        return run_sync

    def _divisor_check(self, ins: Instr, srcs):
        if ins.op not in (Op.IDIV, Op.IREM):
            return None
        b = srcs[1]
        text = format_instr(ins)

        def check(m: Mask) -> None:
            zero = np.broadcast_to(b == 0, m.arr.shape)
            if (zero & m.arr).any():
                w, lane = np.argwhere(zero & m.arr)[0]
                raise InputError(f"{text}: division by zero in CTA "
                                 f"{self.cta_of_warp[w]} warp {w % self.k.warps_per_cta} "
                                 f"lane {lane}")
        return check

    def _compile_mem(self, ins: Instr, sid: int, sem):
        mref: MemRef = ins.srcs[0]
        buf = mref.buffer
        shared = buf.space == "shared"
        space = self.smem if shared else self.gmem
        view = space.view(buf)
        width = int(ins.attr("width", 1))
        base = space.bases[buf.name]
        limit = buf.size - width
        idx = self._src(mref.index)
        off = np.int64(mref.offset)
        cta_off = (self.slot_of_warp * space.stride)[:, None] if shared else np.int64(0)
        text = format_instr(ins)
        counts, nw, obs, machine = self.counts, self.nw, self.obs, self
        kind = sem.kind
        fn = sem.fn
        poll = self._poll
        if poll is not None and poll.reads.loads and id(ins) not in poll.reads.loads:
            poll = None                                   # not a load the condition reads
        shape = (nw, WARP)
        wc, bi = self.wc, self.buf_index[buf.name]

        def address(m: Mask) -> np.ndarray:
            a = np.broadcast_to(idx + off, shape)
            if m.full and a.min() >= 0 and a.max() <= limit and \
                    (width == 1 or not (a % width).any()):
                return a                                  # the common case: nothing to report
            bad = (a < 0) | (a > limit)
            if width > 1:
                bad |= (a % width) != 0
            if not m.full:
                bad &= m.arr
            if bad.any():
                w, lane = np.argwhere(bad)[0]
                what = "misaligned" if 0 <= a[w, lane] <= limit else "out of bounds"
                raise InputError(f"{text}: {what} access {buf.name}[{int(a[w, lane])}] "
                                 f"(width {width}, buffer {buf.name} has {buf.size} words) in "
                                 f"CTA {machine.cta_of_warp[w]} warp "
                                 f"{w % machine.k.warps_per_cta} lane {lane}")
            return a

        if kind == "load":
            dsts = [self._dst(d) for d in ins.dsts]
            loads = poll.loads if poll is not None else None

            def run_load(m: Mask) -> None:
                a = address(m)
                flat = a + (cta_off + base)
                if not m.full:
                    flat = np.where(m.arr, flat, base)
                for j, dst in enumerate(dsts):
                    r = fn(view, flat + j) if j else fn(view, flat)
                    if m.full:
                        dst[...] = r
                    else:
                        np.copyto(dst, r, where=m.arr)
                counts[sid] += m.warps
                if poll is not None:
                    poll.last = (buf, a, dsts[0])
                    loads[sid] = (buf, a)
                if obs is not None:
                    obs.on_instr(sid, m, flat)
            return run_load
        if kind == "store":
            vals = [self._src(s) for s in ins.srcs[1:]]

            def run_store(m: Mask) -> None:
                a = address(m)
                flat = a + (cta_off + base)
                if m.full:
                    for j, v in enumerate(vals):
                        fn(view, flat + j, np.broadcast_to(v, shape))
                else:
                    sel = flat[m.arr]
                    for j, v in enumerate(vals):
                        fn(view, sel + j, np.broadcast_to(v, shape)[m.arr])
                wc[bi] += 1
                counts[sid] += m.warps
                if obs is not None:
                    obs.on_instr(sid, m, flat if m.full else np.where(m.arr, flat, base))
            return run_store
        val = self._src(ins.srcs[1])
        dst = self._dst(ins.dsts[0])
        writes = int(is_store(ins))
        loads = poll.loads if poll is not None else None

        def run_atomic(m: Mask) -> None:
            a = address(m)
            flat = np.broadcast_to(a + (cta_off + base), shape)
            old = fn(view, flat[m.arr], np.broadcast_to(val, shape)[m.arr])
            dst[m.arr] = old
            wc[bi] += writes
            counts[sid] += m.warps
            if poll is not None:
                poll.last = (buf, a, dst)
                loads[sid] = (buf, a)
            if obs is not None:
                obs.on_instr(sid, m, np.where(m.arr, flat, base))
        return run_atomic

    def _compile_loop(self, s: Loop):
        var = self.regs[s.var.name][0]
        outer_time = self._time_var
        if s.kind == "time":
            self._time_var = var
        body = self._compile_body(s.body)
        self._time_var = outer_time
        rng = range(s.start, s.stop, s.step)
        machine = self if s.kind == "time" and self.obs is not None else None
        # ptxas schedules within a loop's body, not across its back edge (the timing model's
        # issue order, :meth:`.timing._Timing.on_iteration`)
        iteration = getattr(self.obs, "on_iteration", None)
        # a rolled loop (``#pragma unroll 1``) ends each iteration with its count's compare and
        # branch; ptxas drops the loop of a single iteration
        edge = (getattr(self.obs, "on_loop_edge", None)
                if s.kind in ("time", "seq") and len(rng) > 1 else None)

        def run(m: Mask) -> None:
            for i in rng:
                if m.full:
                    var.fill(i)
                else:
                    np.copyto(var, i, where=m.arr, casting="unsafe")
                if iteration is not None:
                    iteration(m.wany)
                if machine is not None:
                    machine.step(i)
                for f in body:
                    f(m)
                if edge is not None:
                    edge(m.wany)
            if machine is not None:
                machine.step(None)
        return run

    def _compile_if(self, s: If):
        cond = self.regs[s.cond.reg.name][s.cond.index]
        then = self._compile_body(s.then)
        orelse = self._compile_body(s.orelse)
        # an if-block holding an activation is a branch region in the SASS (BSSY / BSYNC), not
        # predicated instructions: a warp whose lanes split over it pays for the split
        reconverge = (getattr(self.obs, "on_reconverge", None)
                      if not orelse and branch_region(s.then) else None)
        calls = region_calls(s.then)
        enter = getattr(self.obs, "on_region", None) if reconverge is not None else None

        def run(m: Mask) -> None:
            t = m.arr & cond
            e = (m.arr & ~cond) if orelse else None
            if then and t.any():
                mt = Mask(t)
                if enter is not None:
                    enter(mt.wany, calls)
                for f in then:
                    f(mt)
                if reconverge is not None:
                    reconverge(m.wany, mt.wany & (m.arr & ~cond).any(axis=1), calls)
            elif reconverge is not None:
                reconverge(m.wany, np.zeros_like(m.wany), calls)
            if e is not None and e.any():
                me = Mask(e)
                for f in orelse:
                    f(me)
        return run

    # --- time steps (the observer sees each step once, in order) --------------------------
    def step(self, i) -> None:
        if i is None:
            if all(not any(f.kind == _LOOP and f.node.time for f in g.frames)
                   for g in self.groups if g.gid != self._cur_gid):
                self._step_seen = None
                self.obs.on_step(None)
            return
        if self._step_seen is None or i > self._step_seen:
            self._step_seen = i
            self.obs.on_step(i)

    # --- the spine interpreter ------------------------------------------------------------
    def run(self) -> None:
        g = _Group(0, [_Frame(_BODY, self.spine, self.base_mask)], self.base_mask.arr)
        self._next_gid = 1
        self.groups = [g]
        last = -1
        while self.groups:
            g = self._pick(last)
            if g is None:
                self._all_wait()
            last = g.gid
            if g.gid != self._cur_gid:
                self._cur_gid = g.gid
                if self._on_group is not None:
                    self._on_group(g.gid)
            self.run_group(g)
            if not g.frames:
                self.groups.remove(g)
                if self.groups:
                    self._check_stuck()
            if len(self.groups) > 1 or (self.groups and self.groups[0].wait is not None):
                self._release_barriers()

    def _pick(self, last: int) -> _Group | None:
        """The next group that can run, round robin after group ``last``."""
        gs = self.groups
        if len(gs) == 1:
            g = gs[0]
            return g if self._runnable(g) else None
        order = [g for g in gs if g.gid > last] + [g for g in gs if g.gid <= last]
        for g in order:
            if self._runnable(g):
                return g
        return None

    def _runnable(self, g: _Group) -> bool:
        w = g.wait
        if w is None:
            return True
        if w[0] == "spin":
            wc = self.wc
            if any(wc[b] != c for b, c in zip(w[1].node.read_idx, w[2], strict=True)):
                g.wait = None
                return True
        return False

    def _others_runnable(self, g: _Group) -> bool:
        return any(h is not g and self._runnable(h) for h in self.groups)

    def run_group(self, g: _Group) -> None:
        """Walk ``g``'s spine until it ends, waits (``g.wait`` set) or yields."""
        frames = g.frames
        obs = self.obs
        while frames:
            f = frames[-1]
            k = f.kind
            if k == _BODY:
                items = f.node.items
                n = len(items)
                m = f.m
                pos = f.pos
                while pos < n:
                    kind, x = items[pos]
                    pos += 1
                    if kind == _CHUNK:
                        x(m)
                    elif kind == _BAR:
                        if len(self.groups) == 1:
                            x.fn(m)
                        else:
                            f.pos = pos
                            g.wait = ("bar", x, m)
                            return
                    else:
                        f.pos = pos
                        frames.append(_Frame(kind, x, m))
                        break
                else:
                    frames.pop()
            elif k == _LOOP:
                node = f.node
                if f.pos < len(node.rng):
                    v = node.rng[f.pos]
                    f.pos += 1
                    m = f.m
                    if m.full:
                        node.var.fill(v)
                    else:
                        np.copyto(node.var, v, where=m.arr, casting="unsafe")
                    if node.time and obs is not None:
                        self.step(v)
                    frames.append(_Frame(_BODY, node.body, m))
                else:
                    frames.pop()
                    if node.time and obs is not None:
                        self.step(None)
            elif k == _IF:
                node = f.node
                if f.phase == 0:
                    arr = f.m.arr
                    t = arr & node.cond
                    f.e = (arr & ~node.cond) if node.orelse is not None else None
                    f.phase = 1
                    if node.then is not None and t.any():
                        frames.append(_Frame(_BODY, node.then, Mask(t)))
                elif f.phase == 1:
                    f.phase = 2
                    if f.e is not None and f.e.any():
                        frames.append(_Frame(_BODY, node.orelse, Mask(f.e)))
                else:
                    frames.pop()
            elif f.phase == 0:                               # While: enter
                node = f.node
                f.cur, f.it, f.snap, f.phase = f.m, 0, None, 1
                if obs is not None:
                    obs.on_while(node.wid, "enter", f.m)
                self._pass_start(f)
                frames.append(_Frame(_BODY, node.body, f.m))
            elif f.phase == 1:                               # While: after a pass
                node = f.node
                f.it += 1
                arr = f.cur.arr & node.cond
                if not arr.any():
                    self.spins[node.wid] += f.it
                    if obs is not None:
                        obs.on_while(node.wid, "exit", f.m)
                    frames.pop()
                    continue
                if self._after_pass(g, f, arr):
                    f.phase = 2
                    return
                if len(self.groups) > 1 and self._others_runnable(g):
                    f.phase = 2                              # let the others run a while
                    return
                if obs is not None:
                    obs.on_while(node.wid, "again", f.cur)
                self._pass_start(f)
                frames.append(_Frame(_BODY, node.body, f.cur))
            else:                                            # While: resume after a wait
                node = f.node
                f.phase = 1
                if obs is not None:
                    obs.on_while(node.wid, "again", f.cur)
                self._pass_start(f)
                frames.append(_Frame(_BODY, node.body, f.cur))

    def _pass_start(self, f: _Frame) -> None:
        node = f.node
        if node.ctx.reads.memory_only:
            f.w0 = None
        else:
            f.w0 = sum(self.wc)

    # --- spins: progress, waits and who can still write -----------------------------------
    max_spin: int | None = None
    prefix = ""

    def _after_pass(self, g: _Group, f: _Frame, arr: np.ndarray) -> bool:
        """After a pass that leaves lanes ``arr`` spinning: True if ``g`` now waits (set in
        ``g.wait``); raises on the spin limit or a spin nobody can satisfy."""
        node = f.node
        ctx = node.ctx
        same = np.array_equal(arr, f.cur.arr)
        if ctx.reads.memory_only:
            idle = same          # the same memory decides the same: nothing changes by itself
        elif same and f.w0 == sum(self.wc):
            now = [w.copy() for w in ctx.writes]
            idle = f.snap is not None and all(np.array_equal(a, b)
                                              for a, b in zip(now, f.snap, strict=True))
            f.snap = now
        else:
            f.snap, idle = None, False
        if not same:
            f.cur = Mask(arr, False)
        if idle:
            return self._spin_waits(g, f, arr)
        limit = self.max_spin if self.max_spin is not None else ctx.limit
        if f.it >= limit:
            raise self._spin_report(g, f, arr, f"spin limit {limit} reached", [])
        return False

    def _spin_waits(self, g: _Group, f: _Frame, arr: np.ndarray) -> bool:
        node = f.node
        reads = self._reads(node, arr)
        wi = g.frames.index(f)
        parked = g.lanes & ~arr
        if parked.any():  # the lanes that do not spin go on by themselves, as on the GPU
            h = _Group(self._next_gid, [x.copy(~arr) for x in g.frames[:wi]], parked)
            self._next_gid += 1
            for x in g.frames:
                x.m = Mask(x.m.arr & arr)
                if x.e is not None:
                    x.e = x.e & arr
                if x.cur is not None:
                    x.cur = Mask(x.cur.arr & arr)
            g.lanes = g.lanes & arr
            self.groups.append(h)
            self._announce(h)
        writers = self._writers(g, reads, arr)
        if not writers:
            raise self._spin_report(g, f, arr, "no live warp can write what it polls" if reads
                                    else "its exit condition reads no memory", [])
        g.wait = ("spin", f, tuple(self.wc[b] for b in node.read_idx))
        return True

    def _announce(self, h: _Group) -> None:
        """Tell the observer about a new group and the loops it is already inside."""
        if self._on_group is None:
            return
        self._on_group(h.gid)
        for x in h.frames:
            if x.kind == _WHILE and x.phase:
                self.obs.on_while(x.node.wid, "enter", x.m)
        self._on_group(self._cur_gid)

    def _reads(self, node: _WhileNode, arr: np.ndarray) -> list:
        """What the waiting lanes ``arr`` poll: ``(buffer name, words or None)`` per buffer."""
        ctx = node.ctx
        seen: dict[str, set | None] = {}
        for buf, a in ctx.loads.values():
            words = np.unique(np.broadcast_to(a, arr.shape)[arr])
            prev = seen.get(buf.name, set())
            seen[buf.name] = None if prev is None else prev | set(words.tolist())
        for name in ctx.reads.buffers:
            seen.setdefault(name, None)
        return list(seen.items())

    def _remaining(self, frames: list) -> frozenset:
        """What lanes at these frames may still store (the rest of each level)."""
        out = frozenset()
        for x in frames:
            k = x.kind
            if k == _BODY:
                out |= x.node.suffix[x.pos]
            elif k == _LOOP:
                if x.pos < len(x.node.rng):
                    out |= x.node.stores
            elif k == _IF:
                if x.phase == 0:
                    out |= x.node.then_stores | x.node.else_stores
                elif x.phase == 1:
                    out |= x.node.else_stores
            elif k == _WHILE:
                out |= x.node.stores
        return out

    def _can_write(self, frames: list, lanes: np.ndarray, reads: list,
                   waiting: np.ndarray) -> bool:
        keys = self._remaining(frames)
        if not keys:
            return False
        for name, words in reads:
            for kb, lo, hi in keys:
                if kb != name:
                    continue
                if lo is not None and words is not None and \
                        not any(lo <= w < hi for w in words):
                    continue
                if name in self.shared_bufs and not self._same_cta(lanes, waiting):
                    continue
                return True
        return False

    def _same_cta(self, a: np.ndarray, b: np.ndarray) -> bool:
        ca = set(self.cta_of_warp[a.any(axis=1)].tolist())
        return bool(ca & set(self.cta_of_warp[b.any(axis=1)].tolist()))

    def _writers(self, g: _Group, reads: list, waiting: np.ndarray) -> list[_Group]:
        """The other groups whose lanes can still store to what ``waiting`` polls."""
        return [h for h in self.groups
                if h is not g and h.frames and self._can_write(h.frames, h.lanes, reads,
                                                               waiting)]

    def _check_stuck(self) -> None:
        """After a group ended: a waiting spin that nobody left can write is stuck now."""
        for g in self.groups:
            if g.wait is not None and g.wait[0] == "spin" and not self._runnable(g):
                f = g.wait[1]
                arr = f.cur.arr & f.node.cond
                if not self._writers(g, self._reads(f.node, arr), arr):
                    raise self._spin_report(g, f, arr, "no live warp can write what it polls",
                                            [])

    # --- barriers across groups -----------------------------------------------------------
    def _per_cta(self, arr: np.ndarray) -> np.ndarray:
        return arr.reshape(self.n_ctas, -1).sum(axis=1)

    def _release_barriers(self) -> None:
        at_bar = [g for g in self.groups if g.wait is not None and g.wait[0] == "bar"]
        if not at_bar:
            return
        live = sum(self._per_cta(g.lanes) for g in self.groups)
        arrived = sum(self._per_cta(g.wait[2].arr) for g in at_bar)
        complete = (live == arrived)
        released: list[_Group] = []
        for g in at_bar:
            ctas = self._per_cta(g.wait[2].arr) > 0
            done = complete & ctas
            if not done.any():
                continue
            if (done == ctas).all():
                released.append(g)
                continue
            sel = np.repeat(done, self.k.warps_per_cta)[:, None] & g.lanes
            h = _Group(self._next_gid, [x.copy(sel) for x in g.frames], g.lanes & sel)
            self._next_gid += 1
            h.wait = ("bar", g.wait[1], Mask(g.wait[2].arr & sel))
            keep = ~sel
            g.frames = [x.copy(keep) for x in g.frames]
            g.lanes = g.lanes & keep
            g.wait = ("bar", g.wait[1], Mask(g.wait[2].arr & keep))
            self.groups.append(h)
            self._announce(h)
            released.append(h)
        if not released:
            return
        by_sid: dict[int, list[_Group]] = {}
        for g in released:
            by_sid.setdefault(g.wait[1].sid, []).append(g)
        for gs in by_sid.values():
            union = gs[0].wait[2].arr.copy()
            for g in gs[1:]:
                union |= g.wait[2].arr
            cur = self._cur_gid
            if self._on_group is not None:
                self._on_group(gs[0].gid)
            gs[0].wait[1].fn(Mask(union))
            if self._on_group is not None:
                self._on_group(cur)
            for g in gs:
                g.wait = None
        self._merge(released)

    def _merge(self, gs: list[_Group]) -> None:
        """Groups at the same place (the same frames) become one again."""
        by_key: dict[tuple, _Group] = {}
        for g in sorted(gs, key=lambda x: x.gid):
            key = tuple(f.key() for f in g.frames)
            h = by_key.get(key)
            if h is None:
                by_key[key] = g
                continue
            for a, b in zip(h.frames, g.frames, strict=True):
                a.m = Mask(a.m.arr | b.m.arr)
                if a.e is not None or b.e is not None:
                    a.e = (a.e if a.e is not None else False) | \
                        (b.e if b.e is not None else False)
                if a.cur is not None or b.cur is not None:
                    a.cur = Mask((a.cur.arr if a.cur is not None else False) |
                                 (b.cur.arr if b.cur is not None else False))
                a.it = max(a.it, b.it)
                a.snap = None
            h.lanes = h.lanes | g.lanes
            self.groups.remove(g)

    # --- deadlock reports -----------------------------------------------------------------
    def _all_wait(self) -> None:
        """Every live group waits: report the wait-for graph."""
        waits: list[Wait] = []
        for g in self.groups:
            kind = g.wait[0]
            if kind == "spin":
                f = g.wait[1]
                arr = f.cur.arr & f.node.cond
                waits += self._spin_waits_of(g, f, arr)
            else:
                waits += self._bar_waits(g)
        raise report(self.k.name, waits, "every live warp waits", self.prefix)

    def _bar_waits(self, g: _Group) -> list[Wait]:
        node, m = g.wait[1], g.wait[2]
        W = self.k.warps_per_cta
        arrived = np.zeros_like(m.arr)
        for h in self.groups:
            if h.wait is not None and h.wait[0] == "bar":
                arrived |= h.wait[2].arr
        live = np.zeros_like(m.arr)
        for h in self.groups:
            live |= h.lanes
        missing = live & ~arrived
        out = []
        for w in np.flatnonzero(m.wany):
            cta = int(self.cta_of_warp[w])
            slot = w // W
            lo, hi = slot * W, (slot + 1) * W
            on = tuple((cta, int(x) % W) for x in range(lo, hi) if missing[x].any())
            out.append(Wait(cta, int(w % W), np.flatnonzero(m.arr[w]).tolist(), "barrier",
                            f"`{node.text}` ({node.path})", on))
        return out

    def _spin_waits_of(self, g: _Group, f: _Frame, arr: np.ndarray) -> list[Wait]:
        node = f.node
        ctx = node.ctx
        reads = self._reads(node, arr)
        W = self.k.warps_per_cta
        writers = [h for h in self.groups if h is not g and h.frames and
                   self._can_write(h.frames, h.lanes, reads, arr)]
        on_all = sorted({(int(self.cta_of_warp[w]), int(w % W))
                         for h in writers for w in np.flatnonzero(h.lanes.any(axis=1))})
        out = []
        for w in np.flatnonzero(arr.any(axis=1)):
            lanes = np.flatnonzero(arr[w]).tolist()
            detail = {}
            if ctx.last is not None:
                buf, a, vals = ctx.last
                v = vals[w, lanes[0]]
                detail.update(buffer=buf.name,
                              address=int(np.broadcast_to(a, vals.shape)[w, lanes[0]]),
                              value=_show(v))
            if ctx.cond_instr is not None:
                detail["condition"] = self._cond_text(ctx.cond_instr, w, lanes[0])
            cta = int(self.cta_of_warp[w])
            on = tuple(x for x in on_all if x != (cta, int(w % W)))
            if node.ctx.reads.buffers & self.shared_bufs and \
                    not (node.ctx.reads.buffers - self.shared_bufs):
                on = tuple(x for x in on if x[0] == cta)
            out.append(Wait(cta, int(w % W), lanes, "spin", ctx.label, on, detail))
        return out

    def _spin_report(self, g: _Group, f: _Frame, arr: np.ndarray, reason: str,
                     extra: list) -> DeadlockError:
        waits = self._spin_waits_of(g, f, arr)
        if reason.startswith("spin limit"):
            for w in waits:       # the limit, not the writers, ended it: name no writers
                w.on = ()
                w.detail["limit"] = True
        return report(self.k.name, waits + extra, reason, self.prefix)

    def _cond_text(self, ins: Instr, w: int, lane: int) -> str:
        parts = []
        for s in ins.srcs:
            if isinstance(s, RegRef):
                parts.append(f"{s}={_show(self.regs[s.reg.name][s.index][w, lane])}")
        return format_instr(ins) + (f" with {', '.join(parts)}" if parts else "")


def _chain(fs: list):
    def run(m: Mask) -> None:
        for f in fs:
            f(m)
    return run


def _walk_instrs(body: tuple):
    return (s for s in walk(body) if isinstance(s, Instr))


def _show(v) -> str:
    if isinstance(v, np.floating):
        bits = np.asarray(v, dtype=np.float32).view(np.uint32)
        return f"{float(v)!r} (0x{int(bits):08x})"
    if isinstance(v, (np.bool_, bool)):
        return "true" if v else "false"
    return str(int(v))


@cache
def _largest_target():
    """Without a spec, a kernel must fit the most generous bundled GPU (its per-CTA limits)."""
    from gpusim.specs import available, load_spec

    specs = [load_spec(n) for n in available()]
    return max(specs, key=lambda s: (s.smem_bytes_per_cta, s.max_threads_per_cta, s.name))


def execute(kernel: Kernel, inputs: dict, *, ctas: int | None = None,
            max_spin: int | None = None, spec=None, observer=None) -> ExecResult:
    """Run ``kernel`` on ``inputs`` (global buffer name -> initial words); see the module doc.

    The kernel is verified first (:func:`kernels_ir.verify`) against ``spec``'s limits, or
    without a spec against the most generous bundled GPU's.
    ``ctas``: how many CTAs are co-resident (a wave); default from ``spec`` through
    :func:`gpusim.engine.residency.residency` when a spec is given, else the whole grid.
    ``max_spin``: overrides every While's ``spin_limit`` (lockstep iterations per entry).
    ``observer``: an object with ``on_instr(sid, mask, flat_addresses)``, ``on_step(step)`` and
    ``on_while(wid, event, mask)`` (used by the timing model), optionally ``on_group(gid)``
    (which group of warps the following events belong to) and ``on_wave(wave, cta_ids)``
    (called before each wave of a grid larger than ``ctas``; an observer without it sees a
    single-wave launch only); ``None`` for a pure functional run.
    Raises :class:`VerifyError` for a malformed kernel, :class:`DeadlockError` when warps wait
    forever, :class:`InputError` on bad inputs or out-of-bounds / misaligned accesses,
    :class:`CapacityError` when a CTA does not fit.
    """
    if not isinstance(kernel, Kernel):
        raise InputError(f"execute() needs a Kernel, got {type(kernel).__name__}")
    verify(kernel, spec=spec if spec is not None else _largest_target())
    return _execute(kernel, inputs, ctas=ctas, max_spin=max_spin, spec=spec, observer=observer)


def _execute(kernel: Kernel, inputs: dict, *, ctas: int | None = None,
             max_spin: int | None = None, spec=None, observer=None) -> ExecResult:
    """:func:`execute` of a kernel already verified."""
    if ctas is not None and (not isinstance(ctas, (int, np.integer)) or isinstance(ctas, bool)):
        raise InputError(f"ctas={ctas!r} must be an int >= 1")
    if max_spin is not None and (not isinstance(max_spin, (int, np.integer))
                                 or isinstance(max_spin, bool)):
        raise InputError(f"max_spin={max_spin!r} must be an int >= 1")
    gmem = global_space(kernel, inputs)
    prefix_reason = ""
    if ctas is None and spec is not None:
        from .residency import residency

        r = residency(kernel, spec)
        ctas = r.resident_ctas
        prefix_reason = r.describe(spec.sm_count)
    if ctas is None:
        ctas = kernel.grid
    if ctas < 1:
        raise InputError(f"ctas={ctas}: need at least one co-resident CTA")
    if max_spin is not None and max_spin < 1:
        raise InputError(f"max_spin={max_spin} must be >= 1")
    ctas = min(int(ctas), kernel.grid)
    waves = -(-kernel.grid // ctas)
    counts = np.zeros(len(tuple(instructions(kernel))), dtype=np.int64)
    spins = None
    on_wave = getattr(observer, "on_wave", None)
    for wave in range(waves):
        ids = np.arange(wave * ctas, min(kernel.grid, (wave + 1) * ctas))
        if on_wave is not None:      # the timing model places each wave's CTAs (timing.py)
            on_wave(wave, ids)
        m = _Machine(kernel, gmem, ids, observer if waves == 1 or on_wave else None)
        m.max_spin = max_spin
        if waves > 1:
            why = prefix_reason or f"{ctas} co-resident CTAs"
            later = f"CTAs {ids[-1] + 1}..{kernel.grid - 1} are not resident" \
                if ids[-1] + 1 < kernel.grid else "earlier CTAs have exited"
            m.prefix = f"{later}: {why}; "
        m.run()
        counts += np.asarray(m.counts, dtype=np.int64)
        spins = m.spins if spins is None else [a + b for a, b in zip(spins, m.spins, strict=False)]
        instrs = m.instrs
        labels = [w.label for w in m.whiles]
    out = {b.name: gmem.read(b.name) for b in kernel.global_buffers}
    return ExecResult(out, counts, instrs, tuple(zip(labels, spins, strict=False)), waves, ctas)
