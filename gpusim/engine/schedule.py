"""ptxas's schedule: the order in which a warp issues its instructions, which is the SASS's,
not the IR's.

The hardware issues a warp's instructions in order; the order is the one ptxas chose. Read off
the SASS (nvcc 13, sm_90) of ``measurements/body_probe.py`` and of the sparse kernels
(``sparse_barrier_wide_optimal`` at hidden 1400 and 3000, batch 2 and 4; the LSTM and GRU
kernels at hidden 1400 and 3000, batch 1 and 2):

- within straight-line code ptxas list-schedules: the loads of a row slot's later chunks go above
  the FFMAs of its earlier ones;
- a row slot's shared loads and arithmetic go above the previous slot's branch region
  (``BSSY`` ... ``BSYNC``, the epilogue under ``if (lane < B)``), among that slot's shuffles,
  but not above the region before it: the slots are pipelined one ahead;
- shuffles, global stores and a region's own instructions keep their order;
- nothing moves across a barrier, fence, atomic, global load, shared store or poll, across a
  loop's edges, or above a region that calls a subroutine (a gated cell's epilogue, whose
  sigmoids' IEEE divisions call their slow path).

The timing model (:mod:`.timing`) therefore does not time an instruction when the executor runs
it. :class:`Pending` keeps the straight-line instructions until their place in the issue order
is known, then hands them to the timing model in that order, where each issues in order behind
the one before it. So an instruction that ptxas placed early and that waits for its operand
stalls everything after it, as on the GPU.

The order within a group of instructions that may mix is a list schedule (:func:`list_order`):
cycle by cycle, of the instructions whose operands are ready by their nominal latencies, the one
with the longest latency path to the group's end, ties to the IR's order; a memory-pipe
instruction no sooner than ``mio_issue_interval_cycles`` after the one before (the stall count
ptxas puts between them). Global stores keep their order, and so do shuffles: ptxas interleaves
the shuffles of independent rows (two row slots without a region between them, a gated unit's
gate rows), but interleaved the engine prices them 13-19% faster than the H200 runs them
(``measurements/h200/body_probe.json``, the two-slot bodies without a region), in the IR's order
within 6%; what the GPU loses there is not known (the stall counts of :mod:`.timing` do not
recover it: interleaved, gated units stay 5-10% faster than in the IR's order). Registers are
renamed as ptxas renames them: an instruction moved above an earlier reader of the register it
writes does not change what that reader waits for (each instruction's sources are taken from the
instruction that wrote them in the IR's order). Each shuffle takes one of the warp's
``dependency_barriers`` (the lowest free one, or the one taken last when none is free, as in the
SASS), and an instruction that waits for a shuffle waits for every shuffle on its barrier.
Shared loads take none here. In the SASS they do (the dense kernel at hidden 1024, batch 1: a
row's first four loads take barriers 0-3, the next ones all share barrier 4, and the FFMA that
reads the fifth load waits for every one of them issued so far), but ptxas leaves many without
one (where a wait for a later load or shuffle covers them, the memory pipe completing in order)
and pairs the rest with its own order; given barriers by the same rule over this schedule, the
loads of ``measurements/h100/shfl_pipe.json`` cost the engine 8-25% more than the GPU (within 4%
without), so the rule is not applied to them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Entry", "Pending", "list_order"]


class Entry:
    """One executed warp-instruction waiting for its place in the issue order: static id,
    mask, addresses, and the entries that wrote its sources (None: written before the current
    group of straight-line code)."""

    __slots__ = ("sid", "m", "flat", "src_from", "out", "sb", "sbgen")

    def __init__(self, sid: int, m, flat, src_from: tuple):
        self.sid, self.m, self.flat, self.src_from = sid, m, flat, src_from
        self.out = None
        self.sb = -1          # the dependency barrier its result is tracked by (-1: none)
        self.sbgen = 0


def list_order(entries: list, static, cache: dict, interval: int = 1, extra: int = 0) -> list:
    """The issue order of ``entries`` (in IR order): a list schedule with nominal latencies,
    one instruction a cycle (an instruction that the SASS does not issue takes none) and a
    memory-pipe instruction no sooner than ``interval`` cycles after the one before (the
    stall count ptxas puts between them) and ``extra`` cycles later than an arithmetic reader
    after a fixed-latency source, the longest latency path to the group's end first,
    ties to the IR order. Global stores and shuffles keep their order among themselves (module
    docstring). Cached by the static ids."""
    key = tuple(e.sid for e in entries)
    order = cache.get(key)
    if order is not None:
        return [entries[i] for i in order]
    n = len(entries)
    pos = {id(e): i for i, e in enumerate(entries)}
    sts = [static[e.sid] for e in entries]
    preds: list[list] = [[] for _ in range(n)]
    succs: list[list] = [[] for _ in range(n)]
    prev = {"stg": -1, "shfl": -1}
    for i, e in enumerate(entries):
        for p in e.src_from:
            j = pos.get(id(p)) if p is not None else None
            if j is not None:
                w = sts[j].nominal + (extra if sts[j].fixed and sts[i].mio else 0)
                preds[i].append((j, w))
                succs[j].append((i, w))
        k = sts[i].kind
        if k in prev:
            if prev[k] >= 0:
                preds[i].append((prev[k], 1))
                succs[prev[k]].append((i, 1))
            prev[k] = i
    height = [0.0] * n
    for i in range(n - 1, -1, -1):
        h = float(sts[i].nominal)
        for s, w in succs[i]:
            h = max(h, w + height[s])
        height[i] = h
    left = [len(p) for p in preds]
    earliest = [0.0] * n
    ready = [i for i in range(n) if left[i] == 0]
    done: list[int] = []
    t = 0.0
    mio_t = 0.0
    while ready:
        at = [max(earliest[i], mio_t) if sts[i].mio else earliest[i] for i in ready]
        now = [i for i, a in zip(ready, at, strict=True) if a <= t]
        if not now:
            t = min(at)
            continue
        i = max(now, key=lambda k: (height[k], -k))
        ready.remove(i)
        done.append(i)
        for s, w in succs[i]:
            earliest[s] = max(earliest[s], t + w)
            left[s] -= 1
            if left[s] == 0:
                ready.append(s)
        if sts[i].mio:
            mio_t = t + interval
        if not sts[i].folded:
            t += 1.0
    cache[key] = tuple(done)     # every entry: the edges follow the IR order
    return [entries[i] for i in done]


class Pending:
    """The instructions not yet timed, in the groups that decide their issue order.

    ``P``: what is left of the code after the latest emitted region (it mixes with the next
    segment's movable instructions); ``R``: the latest closed region and its reconvergence,
    ``(entries, reached, split)``, not yet emitted because the next segment's movable
    instructions go above it; ``S``: the segment after ``R``; ``cur``: the region being
    collected. ``emit(entry, extra)`` times one instruction (``extra``: the ready cycles, per
    warp, of the other results on its dependency barriers, or None); ``reconverge(reached,
    split)`` applies a region's reconvergence once its instructions are timed."""

    def __init__(self, static, rows: tuple, emit, reconverge, interval: int = 1,
                 barriers: int = 0, extra: int = 0):
        # ``rows``: the timing model's arrays with one row per register (ready cycle, category,
        # nominal ready cycle), which the renaming saves and restores
        self.static, self.rows, self.interval, self.extra = static, rows, interval, extra
        # the warp's dependency barriers (scoreboards): a shuffle's result takes one, the
        # latest one's when none is free, and an instruction that waits for one of them waits
        # for every result on that barrier
        self.n_sb = barriers
        self.sb_live: list = [None] * barriers
        self.sb_gen = [0] * barriers
        self.sb_last = 0
        self._emit_one, self._reconverge = emit, reconverge
        self.P: list = []
        self.R = None
        self.S: list = []
        self.cur: list | None = None
        self.writer: dict = {}      # register row -> the entry that wrote it last (IR order)
        self.base: dict = {}        # register row -> its ``rows`` before this group's writes
        self.cache: dict = {}

    def add(self, sid: int, m, flat) -> None:
        st = self.static[sid]
        e = Entry(sid, m, flat, tuple(self.writer.get(r) for r in st.srcs))
        for d in st.dsts:
            self.writer[d] = e
        (self.cur if self.cur is not None else self.S).append(e)

    def _split(self, seg: list) -> tuple[list, list]:
        """The entries of ``seg`` that may go above the region before it (a shared load or
        arithmetic whose sources in ``seg`` may too), and the rest."""
        inside = {id(e) for e in seg}
        up, ids, rest = [], set(), []
        for e in seg:
            st = self.static[e.sid]
            if (st.hoist or st.folded) and all(p is None or id(p) not in inside or id(p) in ids
                                               for p in e.src_from):
                up.append(e)
                ids.add(id(e))
            else:
                rest.append(e)
        return up, rest

    def region(self, calls: bool) -> None:
        """A branch region starts (``calls``: it holds a subroutine call)."""
        if calls:
            self.flush()
        elif self.R is None:
            self.P = self.P + self.S
            self.S = []
        else:
            self.P, self.S, self.R = self._close(), [], None
        self.cur = []

    def reconverged(self, reached, split, calls: bool) -> None:
        """The region ends (one that no lane entered ends without starting)."""
        if self.cur is None:
            self.region(calls)
        self.R = (self.cur, reached, split)
        self.cur = None
        if calls:
            self.flush()

    def flush(self) -> None:
        """Time everything pending, in its issue order; the register rows take their IR-last
        writers' values and the renaming starts afresh."""
        if self.R is not None:
            self._emit(self._close())
        else:
            self._emit(self.P + self.S)
        if self.cur:          # an instruction that nothing passes, inside a region
            for e in self.cur:
                self._time(e)
            self.cur = []
        self.P, self.S, self.R = [], [], None
        rows = self.rows
        for r, e in self.writer.items():
            if e.out is not None and r in e.out:
                for a, v in zip(rows, e.out[r], strict=True):
                    a[r] = v
        self.writer.clear()
        self.base.clear()
        self.sb_live = [None] * self.n_sb

    def _close(self) -> list:
        """Time the code before the pending region with what of ``S`` goes above it, then the
        region; return the rest of ``S``."""
        up, rest = self._split(self.S)
        self._emit(self.P + up)
        self._emit_region(self.R)
        return rest

    def _emit(self, group: list) -> None:
        if not group:
            return
        order = list_order(group, self.static, self.cache, self.interval, self.extra) \
            if len(group) > 1 else group
        for e in order:
            self._time(e)

    def _emit_region(self, R) -> None:
        entries, reached, split = R
        for e in entries:
            self._time(e)
        self._reconverge(reached, split)

    def _time(self, e: Entry) -> None:
        st = self.static[e.sid]
        rows, base = self.rows, self.base
        for r, p in zip(st.srcs, e.src_from, strict=True):
            v = p.out[r] if p is not None and p.out is not None else \
                base.get(r) if p is None else None
            if v is not None:
                for a, x in zip(rows, v, strict=True):
                    a[r] = x
        for d in st.dsts:
            if d not in base:
                base[d] = tuple(a[d].copy() for a in rows)
        self._emit_one(e, self._barrier_wait(e) if self.n_sb else None)
        e.out = {d: tuple(a[d].copy() for a in rows) for d in st.dsts}
        if self.n_sb and st.kind == "shfl":
            live = self.sb_live
            free = [b for b in range(self.n_sb) if live[b] is None]
            b = free[0] if free else self.sb_last
            live[b] = [e] if live[b] is None else live[b] + [e]
            e.sb, e.sbgen, self.sb_last = b, self.sb_gen[b], b

    def _barrier_wait(self, e: Entry):
        """The ready cycle (per warp) of every result on the barriers that ``e``'s sources are
        tracked by; those barriers are free again after it. None when it waits for none that
        another result shares."""
        extra = None
        live = self.sb_live
        for p in e.src_from:
            if p is None or p.sb < 0 or p.sbgen != self.sb_gen[p.sb] or live[p.sb] is None:
                continue
            b = p.sb
            if len(live[b]) > 1:
                for q in live[b]:
                    for arr, *_ in q.out.values():
                        extra = arr.copy() if extra is None else np.maximum(extra, arr)
            live[b] = None
            self.sb_gen[b] += 1
        return extra
