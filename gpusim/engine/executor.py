"""The functional executor: runs a verified kernel over all CTAs, warps and lanes with numpy.

State layout (all explicit in :class:`_Machine`): a register element is an array of shape
``(n_warps, 32)`` (a register array is ``(size, n_warps, 32)``), ``n_warps`` counting the warps
of every resident CTA; per-lane active masks of the same shape carry SIMT divergence through
``If`` and ``While``; shared and global memory are flat word arrays (:mod:`.memory`).

The statement tree is compiled ONCE into nested lists of closures with every operand, view and
semantics function pre-bound, so the hot loop is ``for f in body: f(mask)`` with no dict lookups
or isinstance checks.

Interleaving: all warps of all resident CTAs execute in lockstep, instruction by instruction (a
``While`` iterates while any active lane anywhere wants to; warps that are done wait masked off).
In this interleaving CTA barriers hold trivially and a store is visible to every later load, so
Lamport polling and the grid barrier make progress whenever the data they wait for was stored
earlier in program order. A ``While`` iteration that changes nothing (no memory write anywhere,
the same active lanes and the same values in every register its body writes) would repeat
forever: that, or reaching the spin limit, raises :class:`DeadlockError` naming who waits where.

Residency: with ``spec`` (or ``ctas``) given, a grid larger than the co-resident CTA count runs
in waves, each wave to completion; a wave that spins on data from a later wave deadlocks and the
error says which CTAs are not resident and why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels_ir.errors import DeadlockError, InputError
from kernels_ir.ir import (
    F32,
    I32,
    PRED,
    If,
    Imm,
    Instr,
    Kernel,
    Loop,
    MemRef,
    RegRef,
    While,
    instructions,
)
from kernels_ir.printer import format_instr

from .memory import Space, global_space, shared_space
from .semantics import SEMANTICS

__all__ = ["execute", "ExecResult", "Mask"]

WARP = 32
_NP = {F32: np.float32, I32: np.int32, PRED: np.bool_}


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
    """Static info of one While and the last polled load (for deadlock messages)."""

    __slots__ = ("label", "limit", "writes", "last", "cond_instr")

    def __init__(self, label: str, limit: int, cond_instr: Instr | None):
        self.label, self.limit, self.cond_instr = label, limit, cond_instr
        self.writes: list[np.ndarray] = []
        self.last = None  # (buffer, index array, values array)


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
        self.writes = 0  # memory writes so far (deadlock detection)
        self._time_var: np.ndarray | None = None
        self._poll: _WhileCtx | None = None
        self.body = self._compile_body(kernel.body)

    # --- operands -------------------------------------------------------------------------
    def _src(self, s):
        if isinstance(s, RegRef):
            return self.regs[s.reg.name][s.index]
        if isinstance(s, Imm):
            return _NP[s.dtype](s.value)
        raise InputError(f"operand {s!r} is not a register or immediate")

    def _dst(self, d: RegRef) -> np.ndarray:
        return self.regs[d.reg.name][d.index]

    # --- compilation ----------------------------------------------------------------------
    def _compile_body(self, body: tuple) -> list:
        out = []
        for s in body:
            if isinstance(s, Instr):
                out.append(self._compile_instr(s))
            elif isinstance(s, Loop):
                out.append(self._compile_loop(s))
            elif isinstance(s, While):
                out.append(self._compile_while(s))
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

        def run_sync(m: Mask) -> None:  # BAR, FENCE: no functional effect in lockstep
            counts[sid] += m.warps
            if obs is not None:
                obs.on_instr(sid, m, None)
        return run_sync

    def _divisor_check(self, ins: Instr, srcs):
        from kernels_ir.ir import Op

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
        shape = (nw, WARP)

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
                machine.writes += 1
                counts[sid] += m.warps
                if obs is not None:
                    obs.on_instr(sid, m, flat if m.full else np.where(m.arr, flat, base))
            return run_store
        val = self._src(ins.srcs[1])
        dst = self._dst(ins.dsts[0])

        def run_atomic(m: Mask) -> None:
            a = address(m)
            flat = np.broadcast_to(a + (cta_off + base), shape)
            old = fn(view, flat[m.arr], np.broadcast_to(val, shape)[m.arr])
            dst[m.arr] = old
            machine.writes += 1
            counts[sid] += m.warps
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
        obs = self.obs if s.kind == "time" else None

        def run(m: Mask) -> None:
            for i in rng:
                if m.full:
                    var.fill(i)
                else:
                    np.copyto(var, i, where=m.arr, casting="unsafe")
                if obs is not None:
                    obs.on_step(i)
                for f in body:
                    f(m)
            if obs is not None:
                obs.on_step(None)
        return run

    def _compile_while(self, s: While):
        cond_instr = None
        for st in s.body:
            if isinstance(st, Instr) and any(d == s.cond for d in st.dsts):
                cond_instr = st
        ctx = _WhileCtx(s.label, s.spin_limit, cond_instr)
        wid = len(self.whiles)
        self.whiles.append(ctx)
        self.spins.append(0)
        outer_poll = self._poll
        self._poll = ctx
        body = self._compile_body(s.body)
        self._poll = outer_poll
        written = sorted({(d.reg.name, d.index) for st in _walk_instrs(s.body) for d in st.dsts})
        ctx.writes = [self.regs[n][i] for n, i in written]
        cond = self.regs[s.cond.reg.name][s.cond.index]
        spins, machine, obs = self.spins, self, self.obs

        def run(m: Mask) -> None:
            cur = m
            it = 0
            snap = None
            limit = machine.max_spin if machine.max_spin is not None else ctx.limit
            if obs is not None:
                obs.on_while(wid, "enter", cur)
            while True:
                w0 = machine.writes
                for f in body:
                    f(cur)
                it += 1
                arr = cur.arr & cond
                if not arr.any():
                    break
                same = machine.writes == w0 and np.array_equal(arr, cur.arr)
                if same:
                    now = [w.copy() for w in ctx.writes]
                    if snap is not None and all(np.array_equal(a, b)
                                                for a, b in zip(now, snap, strict=True)):
                        machine.deadlock(ctx, arr, "no progress: an iteration changed nothing")
                    snap = now
                else:
                    snap = None
                if it >= limit:
                    machine.deadlock(ctx, arr, f"spin limit {limit} reached")
                if not same:
                    cur = Mask(arr, False)
                if obs is not None:
                    obs.on_while(wid, "again", cur)
            spins[wid] += it
            if obs is not None:
                obs.on_while(wid, "exit", m)
        return run

    def _compile_if(self, s: If):
        cond = self.regs[s.cond.reg.name][s.cond.index]
        then = self._compile_body(s.then)
        orelse = self._compile_body(s.orelse)

        def run(m: Mask) -> None:
            t = m.arr & cond
            e = (m.arr & ~cond) if orelse else None
            if then and t.any():
                mt = Mask(t)
                for f in then:
                    f(mt)
            if e is not None and e.any():
                me = Mask(e)
                for f in orelse:
                    f(me)
        return run

    # --- deadlock reports -----------------------------------------------------------------
    prefix = ""
    max_spin: int | None = None

    def deadlock(self, ctx: _WhileCtx, waiting: np.ndarray, reason: str) -> None:
        W = self.k.warps_per_cta
        entries = []
        for w in np.flatnonzero(waiting.any(axis=1)):
            lanes = np.flatnonzero(waiting[w]).tolist()
            e = {"cta": int(self.cta_of_warp[w]), "warp": int(w % W), "lanes": lanes,
                 "label": ctx.label}
            if ctx.last is not None:
                buf, a, vals = ctx.last
                lane = lanes[0]
                v = vals[w, lane]
                e.update(buffer=buf.name, address=int(np.broadcast_to(a, vals.shape)[w, lane]),
                         value=_show(v))
            if ctx.cond_instr is not None:
                e["condition"] = self._cond_text(ctx.cond_instr, w, lanes[0])
            entries.append(e)
        first = entries[0]
        where = (f" on {first['buffer']}[{first['address']}], sees {first['value']}"
                 if "buffer" in first else "")
        cond = f" (spins while {first['condition']})" if "condition" in first else ""
        more = f"; {len(entries) - 1} more warps wait" if len(entries) > 1 else ""
        msg = (f"{self.prefix}deadlock in kernel {self.k.name} ({reason}): CTA {first['cta']} "
               f"warp {first['warp']} lanes {_lanes(first['lanes'])} waits at "
               f"'{ctx.label}'{where}{cond}{more}")
        raise DeadlockError(msg, entries)

    def _cond_text(self, ins: Instr, w: int, lane: int) -> str:
        parts = []
        for s in ins.srcs:
            if isinstance(s, RegRef):
                parts.append(f"{s}={_show(self.regs[s.reg.name][s.index][w, lane])}")
        return format_instr(ins) + (f" with {', '.join(parts)}" if parts else "")

    def run(self) -> None:
        for f in self.body:
            f(self.base_mask)


def _walk_instrs(body: tuple):
    from kernels_ir.ir import walk

    return (s for s in walk(body) if isinstance(s, Instr))


def _show(v) -> str:
    if isinstance(v, np.floating):
        bits = np.asarray(v, dtype=np.float32).view(np.uint32)
        return f"{float(v)!r} (0x{int(bits):08x})"
    if isinstance(v, (np.bool_, bool)):
        return "true" if v else "false"
    return str(int(v))


def _lanes(lanes: list[int]) -> str:
    if len(lanes) > 1 and lanes == list(range(lanes[0], lanes[-1] + 1)):
        return f"{lanes[0]}..{lanes[-1]}"
    return ",".join(map(str, lanes))


def execute(kernel: Kernel, inputs: dict, *, ctas: int | None = None,
            max_spin: int | None = None, spec=None, observer=None) -> ExecResult:
    """Run ``kernel`` on ``inputs`` (global buffer name -> initial words); see the module doc.

    ``ctas``: how many CTAs are co-resident (a wave); default from ``spec`` through
    :func:`gpusim.engine.residency.residency` when a spec is given, else the whole grid.
    ``max_spin``: overrides every While's ``spin_limit`` (lockstep iterations per entry).
    ``observer``: an object with ``on_instr(sid, mask, flat_addresses)``, ``on_step(step)`` and
    ``on_while(wid, event, mask)`` (used by the timing model); ``None`` for a pure functional run.
    Raises :class:`DeadlockError` when warps wait forever, :class:`InputError` on bad inputs or
    out-of-bounds / misaligned accesses, :class:`CapacityError` when a CTA does not fit.
    """
    if not isinstance(kernel, Kernel):
        raise InputError(f"execute() needs a Kernel, got {type(kernel).__name__}")
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
    ctas = min(ctas, kernel.grid)
    waves = -(-kernel.grid // ctas)
    counts = np.zeros(len(tuple(instructions(kernel))), dtype=np.int64)
    spins = None
    for wave in range(waves):
        ids = np.arange(wave * ctas, min(kernel.grid, (wave + 1) * ctas))
        m = _Machine(kernel, gmem, ids, observer if waves == 1 else None)
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
