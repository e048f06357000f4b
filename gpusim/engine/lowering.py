"""Where the SASS that ptxas makes of a kernel issues fewer instructions than its IR.

The simulator issues the IR's instructions; the GPU issues the SASS that ptxas compiled the
generated CUDA to. Two IR patterns have no SASS instruction of their own (read off the SASS of
the generated kernels for sm_90; ``tests/engine/test_lowering.py`` compiles them and counts):

- ``BITCAST`` (the same 32 bits read as f32 or i32): SASS reads the register as either type.
- A predicate AND / OR (``PAND``, ``POR``) that combines the predicate written by the
  instruction right before it, an ``ISETP``, with another one: SASS's compare takes a second
  predicate and the combining operation (``ISETP.EQ.OR P1, PT, R4, -0x80000000, P1``). So the
  Lamport poll's check, ``BITCAST``, ``ISETP``, ``POR`` per word in the IR, is one ``ISETP`` a
  word in SASS (the ragged slot's ``ISETP``, ``PAND`` (folded), ``POR`` two), and a store guard
  ``ISETP`` + ``PAND`` one.
- A constant moved into a predicate (``MOV`` of ``false`` into the poll's ``waiting``): SASS
  uses the constant predicate ``PT`` as an operand (``ISETP.NE.AND P1, PT, R9, ..., PT``).
- A ``MOV`` of 0 into the odd element of a vector register right after one into the element
  before it: SASS zeroes the register pair with one ``CS2R R8, SRZ`` (the staging chunks'
  initial values, four ``CS2R`` for two 128-bit chunks).

One more is in what an instruction moves, not in how many issue: a plain global vector load
(``LDG`` of 64 or 128 bits) whose later words no instruction reads is narrowed by the compiler
(NVVM, already in the PTX) to the words that are read: the generated CUDA of the 16-byte
gather benchmarks that keep only the first word (``gather_l1_*_w4``, ``cmech_spread_32_w4``)
has ``ld.global.nc.u32`` where the IR has a 128-bit load, and on the H200 their LSU writeback is
one cycle a request, as for 32-bit loads, against 4.3-4.7 for 128-bit loads whose words are all
read (``measurements/h200/csr_mech.json``, ``tests/engine/test_l1tex.py``).
:func:`narrowed_loads` gives those loads' widths; the simulator prices the narrowed load.

A folded instruction takes no issue slot and no pipe; its destinations are ready when its
latest source is (:meth:`gpusim.engine.timing._Timing._instr`). The executor still computes its
values: the functional semantics do not change, only what the timing model charges.
"""

from __future__ import annotations

from kernels_ir.ir import PRED, If, Imm, Instr, Kernel, Loop, Op, RegRef, While

__all__ = ["folded_instructions", "narrowed_loads"]

_COMBINES = (Op.PAND, Op.POR)


def folded_instructions(kernel: Kernel) -> frozenset[int]:
    """Static instruction ids (the order of :func:`kernels_ir.ir.instructions`) that SASS does
    not issue: every ``BITCAST``, a ``PAND`` / ``POR`` right after (in the same block) the
    ``ISETP`` whose predicate it reads, a constant ``MOV`` into a predicate, and the second
    ``MOV`` of 0 of a register pair."""
    out: set[int] = set()
    counter = [0]

    def visit(body: tuple) -> None:
        prev: Instr | None = None
        for stmt in body:
            if isinstance(stmt, Instr):
                sid = counter[0]
                counter[0] += 1
                if (stmt.op is Op.BITCAST or (stmt.op in _COMBINES and _reads_result(stmt, prev))
                        or _constant_predicate(stmt) or _pair_zero(stmt, prev)):
                    out.add(sid)
                prev = stmt
                continue
            prev = None        # a block boundary: the next instruction starts a new stretch
            if isinstance(stmt, (Loop, While)):
                visit(stmt.body)
            elif isinstance(stmt, If):
                visit(stmt.then)
                visit(stmt.orelse)

    visit(kernel.body)
    return frozenset(out)


def narrowed_loads(kernel: Kernel) -> dict[int, int]:
    """Static instruction id -> width (32-bit words) of each plain global vector load whose
    later words no instruction of the kernel reads: the first word only read -> 1, the first
    two -> 2 (the module docstring). A register read anywhere (an operand, an address, a
    branch or spin condition) counts as read, so a load is narrowed only when the words it
    drops are dead."""
    from kernels_ir.ir import instructions, walk

    read: set[tuple[str, int]] = set()
    for ins in instructions(kernel):
        for s in ins.srcs:
            ref = s if isinstance(s, RegRef) else getattr(s, "index", None)
            if isinstance(ref, RegRef):
                read.add((ref.reg.name, ref.index))
    for stmt in walk(kernel.body):
        cond = getattr(stmt, "cond", None)
        if isinstance(stmt, (If, While)) and isinstance(cond, RegRef):
            read.add((cond.reg.name, cond.index))
    out = {}
    for sid, ins in enumerate(instructions(kernel)):
        width = int(ins.attr("width", 1))
        if ins.op is not Op.LDG or width == 1:
            continue
        used = [k for k, d in enumerate(ins.dsts) if (d.reg.name, d.index) in read]
        last = max(used, default=0)
        narrow = 1 if last == 0 else 2 if last == 1 else width
        if narrow < width:
            out[sid] = narrow
    return out


def _reads_result(ins: Instr, prev: Instr | None) -> bool:
    """``ins`` reads the predicate that ``prev``, an ISETP, has just written."""
    if prev is None or prev.op is not Op.ISETP:
        return False
    written = {(d.reg.name, d.index) for d in prev.dsts}
    return any(isinstance(s, RegRef) and (s.reg.name, s.index) in written for s in ins.srcs)


def _constant_predicate(ins: Instr) -> bool:
    return (ins.op is Op.MOV and isinstance(ins.srcs[0], Imm)
            and all(d.dtype is PRED for d in ins.dsts))


def _zero_mov(ins: Instr | None) -> bool:
    return (ins is not None and ins.op is Op.MOV and isinstance(ins.srcs[0], Imm)
            and ins.srcs[0].value == 0 and ins.srcs[0].dtype is not PRED)


def _pair_zero(ins: Instr, prev: Instr | None) -> bool:
    """``ins`` zeroes element 2k+1 of a vector register right after ``prev`` zeroed element 2k
    (one ``CS2R`` for the pair)."""
    if not (_zero_mov(ins) and _zero_mov(prev)):
        return False
    d, p = ins.dsts[0], prev.dsts[0]
    return d.reg == p.reg and d.index % 2 == 1 and p.index == d.index - 1
