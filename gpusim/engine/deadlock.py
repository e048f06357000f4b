"""Deadlock detection: who can still write what a spin waits on, and the wait-for graph.

The executor (:mod:`.executor`) runs groups of warps; a group stops when it waits: at a CTA
barrier that not all of the CTA's live threads have reached, or in a spin loop whose next pass
cannot change anything (see :func:`spin_reads`). This module holds the static facts it needs
and turns the waits into one report:

- :func:`store_keys` - what a piece of program may still store to: ``(buffer, lo, hi)`` with
  ``lo, hi`` the constant word range of a store whose address is an immediate, else ``None``
  (any word of the buffer);
- :func:`spin_reads` - for a ``While``: whether its exit condition is a function of memory
  alone (no register carried from one pass to the next feeds it, and its own body stores
  nothing into what it reads), and the buffers it reads;
- :func:`report` - the wait-for graph (``networkx``): a warp at a barrier waits for the CTA's
  warps that have not arrived; a warp in a spin waits for every live warp that can still store
  to the words it polls. A spin that no live warp can write is stuck at once; otherwise, when
  every group waits, the graph has a cycle and the report names it.

A spin whose condition also depends on registers it changes every pass (a counter that bounds
the wait) is not a function of memory: the executor then falls back to "a pass that wrote
nothing and left every register as it was" and, last, the spin limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernels_ir.errors import DeadlockError
from kernels_ir.ir import If, Imm, Instr, Loop, MemRef, Op, RegRef, While, walk

__all__ = ["StoreKey", "store_keys", "is_store", "spin_reads", "SpinReads", "Wait", "report",
           "warp_name", "lanes_text"]

StoreKey = tuple  # (buffer name, lo | None, hi | None): words [lo, hi) or the whole buffer


def is_store(ins: Instr) -> bool:
    """True if ``ins`` can change memory (``atom.add`` of an immediate 0 cannot)."""
    if ins.op in (Op.STS, Op.STG):
        return True
    if ins.op is Op.ATOM_ADD:
        v = ins.srcs[1]
        return not (isinstance(v, Imm) and int(v.value) == 0)
    return False


def _key(ins: Instr) -> StoreKey:
    mem: MemRef = ins.srcs[0]
    if isinstance(mem.index, Imm):
        lo = int(mem.index.value) + mem.offset
        return (mem.buffer.name, lo, lo + int(ins.attr("width", 1)))
    return (mem.buffer.name, None, None)


def store_keys(stmts) -> frozenset:
    """Every store a statement (or a tuple of them) may perform, as :data:`StoreKey` s."""
    body = stmts if isinstance(stmts, tuple) else (stmts,)
    return frozenset(_key(s) for s in walk(body) if isinstance(s, Instr) and is_store(s))


def _elem(r: RegRef) -> tuple:
    return (r.reg.name, r.index)


def _uses(ins: Instr):
    for s in ins.srcs:
        if isinstance(s, MemRef):
            s = s.index
        if isinstance(s, RegRef):
            yield _elem(s)


@dataclass(frozen=True, slots=True)
class SpinReads:
    """Static facts of one ``While`` (see :func:`spin_reads`).

    ``memory_only``: the exit condition is a function of memory and of registers the body never
    writes, so a pass that sees the same memory decides the same. ``buffers``: what the
    condition reads (all the body loads when not ``memory_only``). ``loads``: ids of the load
    instructions the condition depends on. ``stores``: the body's stores.
    """

    memory_only: bool
    buffers: frozenset
    loads: frozenset
    stores: frozenset


def spin_reads(w: While) -> SpinReads:
    """The backward slice of ``w.cond`` within the body (data and control dependences), and
    whether a register carried around the loop, or a store of the body into a buffer the slice
    reads, feeds it."""
    defs: dict[tuple, list] = {}      # element -> [(instr or None, control conditions)]
    written: set = set()
    instrs: list = []

    def scan(stmts: tuple, ctrl: tuple) -> None:
        for s in stmts:
            if isinstance(s, Instr):
                instrs.append(s)
                for d in s.dsts:
                    defs.setdefault(_elem(d), []).append((s, ctrl))
                    written.add(_elem(d))
            elif isinstance(s, Loop):
                defs.setdefault((s.var.name, 0), []).append((None, ctrl))
                written.add((s.var.name, 0))
                scan(s.body, ctrl)
            elif isinstance(s, While):
                scan(s.body, ctrl + (_elem(s.cond),))
            elif isinstance(s, If):
                inner = ctrl + (_elem(s.cond),)
                scan(s.then, inner)
                scan(s.orelse, inner)

    scan(w.body, ())
    need, todo, sl = {_elem(w.cond)}, [_elem(w.cond)], set()
    while todo:
        e = todo.pop()
        for ins, ctrl in defs.get(e, ()):
            more = list(ctrl)
            if ins is not None and id(ins) not in sl:
                sl.add(id(ins))
                more += list(_uses(ins))
            for x in more:
                if x not in need:
                    need.add(x)
                    todo.append(x)
    load_ops = (Op.LDS, Op.LDG, Op.LDG_VOLATILE, Op.ATOM_ADD)
    loads = [i for i in instrs if i.op in load_ops]
    slice_loads = [i for i in loads if id(i) in sl]
    stores = store_keys(w.body)
    read = frozenset(i.srcs[0].buffer.name for i in slice_loads)
    carried = _carried(w, sl, need & written)
    memory_only = not carried and not any(k[0] in read for k in stores)
    if not memory_only:
        read = frozenset(i.srcs[0].buffer.name for i in loads)
    return SpinReads(memory_only, read, frozenset(id(i) for i in slice_loads), stores)


def _carried(w: While, sl: set, cand: set) -> bool:
    """True if an element of ``cand`` (written in the body, feeding the condition) is read by a
    slice instruction (or as a control condition) before this pass has defined it."""
    if not cand:
        return False
    hit = False

    def use(e: tuple, must: set) -> None:
        nonlocal hit
        if e in cand and e not in must:
            hit = True

    def run(stmts: tuple, must: set) -> set:
        for s in stmts:
            if hit:
                return must
            if isinstance(s, Instr):
                if id(s) in sl:
                    for e in _uses(s):
                        use(e, must)
                must |= {_elem(d) for d in s.dsts}
            elif isinstance(s, Loop):
                inner = run(s.body, must | {(s.var.name, 0)})
                if s.trip_count > 0:
                    must = inner
            elif isinstance(s, While):
                must = run(s.body, set(must))
                use(_elem(s.cond), must)
            elif isinstance(s, If):
                use(_elem(s.cond), must)
                a = run(s.then, set(must))
                b = run(s.orelse, set(must))
                must = a & b
        return must

    after = run(w.body, set())
    use(_elem(w.cond), after)
    return hit


# ---------------------------------------------------------------------------------------------
# Reports


def warp_name(w: tuple) -> str:
    return f"CTA {w[0]} warp {w[1]}"


def lanes_text(lanes: list[int]) -> str:
    if len(lanes) > 1 and lanes == list(range(lanes[0], lanes[-1] + 1)):
        return f"{lanes[0]}..{lanes[-1]}"
    return ",".join(map(str, lanes))


@dataclass(slots=True)
class Wait:
    """One waiting warp. ``kind``: ``"spin"`` or ``"barrier"``; ``on``: the warps it waits for
    (spin: the live warps that can still store to what it polls; barrier: the CTA's live warps
    that have not arrived)."""

    cta: int
    warp: int
    lanes: list[int]
    kind: str
    where: str                       # the spin's label, or the barrier's path and text
    on: tuple = ()
    detail: dict = field(default_factory=dict)   # spin: buffer, address, value, condition

    @property
    def node(self) -> tuple:
        return (self.cta, self.warp)

    def text(self) -> str:
        who = f"{warp_name(self.node)} lanes {lanes_text(self.lanes)}"
        if self.kind == "barrier":
            return f"{who} waits at barrier {self.where} for {_names(self.on)}"
        d = self.detail
        at = f" on {d['buffer']}[{d['address']}], sees {d['value']}" if "buffer" in d else ""
        cond = f" (spins while {d['condition']})" if "condition" in d else ""
        if d.get("limit"):
            writers = ""
        elif not self.on:
            writers = (f", which no live warp can write ({d['buffer']}[{d['address']}])"
                       if "buffer" in d else ", and no store can change its condition")
        else:
            writers = f", which only {_names(self.on)} can still write"
        return f"{who} waits at '{self.where}'{at}{cond}{writers}"

    def entry(self) -> dict:
        e = {"cta": self.cta, "warp": self.warp, "lanes": self.lanes, "kind": self.kind,
             "waits_for": [list(n) for n in self.on]}
        if self.kind == "spin":
            e["label"] = self.where
            e.update((k, v) for k, v in self.detail.items() if k != "limit")
        else:
            e["barrier"] = self.where
        return e


def _names(nodes) -> str:
    nodes = sorted(nodes)
    shown = ", ".join(warp_name(n) for n in nodes[:4])
    return shown + (f" and {len(nodes) - 4} more" if len(nodes) > 4 else "")


def report(kernel: str, waits: list[Wait], reason: str, prefix: str = "") -> DeadlockError:
    """The error for ``waits``: the stuck spins (nobody can write what they poll) if any, else
    a cycle of the wait-for graph. Its ``waiting`` lists every wait as a dict."""
    stuck = [w for w in waits if w.kind == "spin" and not w.on]
    if stuck:
        first = stuck[0]
        more = len({w.node for w in waits}) - 1
        tail = f"; {more} more warps wait" if more > 0 else ""
        msg = f"{prefix}deadlock in kernel {kernel} ({reason}): {first.text()}{tail}"
    else:
        import networkx as nx  # imported here: only a cycle needs the graph

        g = nx.DiGraph()
        by_node: dict[tuple, Wait] = {}
        for w in waits:
            by_node.setdefault(w.node, w)
            g.add_node(w.node)
            g.add_edges_from((w.node, n) for n in w.on)
        try:
            cycle = [u for u, _ in nx.find_cycle(g)]
        except nx.NetworkXNoCycle:
            cycle = []
        chain = [by_node[n] for n in cycle if n in by_node] or waits[:1]
        shown = " -> ".join(w.text() for w in chain)
        rest = len({w.node for w in waits}) - len(chain)
        tail = f"; {rest} more warps wait" if rest > 0 else ""
        loop = f" -> back to {warp_name(chain[0].node)}" if len(chain) > 1 else ""
        msg = (f"{prefix}deadlock in kernel {kernel} ({reason}): a cycle of waits: "
               f"{shown}{loop}{tail}")
    return DeadlockError(msg, [w.entry() for w in waits])
