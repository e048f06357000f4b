"""The verifier: a kernel either passes all checks or one :class:`VerifyError` names the problem.

Checks (each names the offending instruction by its path and printed form):
- use before definition (flow-sensitive over the structured control: a register element defined
  only in one branch of an ``if`` is not defined after it);
- operand and result types against :data:`kernels_ir.ir.SIGNATURES`;
- register-array indices outside ``0 .. size-1``; required attributes and their values;
- memory: constant addresses outside the declared buffer, access width vs operand count, shared
  memory over the declared (or the target's) size, stores into read-only global buffers;
- unstructured control: anything in a body that is not an Instr/Loop/While/If, writes to a loop's
  induction register inside the loop, a spin loop whose condition is not computed in its body.
"""

from __future__ import annotations

from .errors import VerifyError
from .ir import (
    F32,
    I32,
    LOOP_KINDS,
    PRED,
    REQUIRED_ATTRS,
    SIGNATURES,
    STATEMENT_TYPES,
    Buffer,
    If,
    Imm,
    Instr,
    Kernel,
    Loop,
    MemRef,
    Op,
    RegRef,
    While,
)
from .printer import format_instr

_MEM_OPS = {Op.LDS, Op.STS, Op.LDG, Op.LDG_VOLATILE, Op.STG, Op.ATOM_ADD}


class _Verifier:
    def __init__(self, kernel: Kernel, smem_limit_bytes: int | None):
        self.k = kernel
        self.smem_limit = smem_limit_bytes
        self.regs = {r.name: r for r in kernel.regs}
        self.buffers = {b.name: b for b in kernel.buffers}
        self.loop_vars: list[str] = []

    def fail(self, where: str, instr: Instr | None, message: str) -> None:
        text = f" `{format_instr(instr)}`" if instr is not None else ""
        raise VerifyError(f"kernel {self.k.name}: {where}{text}: {message}")

    # -- declarations --------------------------------------------------------------------------
    def check_decls(self) -> None:
        if self.k.block % 32:
            raise VerifyError(f"kernel {self.k.name}: block={self.k.block} is not a multiple of 32 "
                              f"(whole warps only)")
        for b in self.k.buffers:
            if b.space not in ("shared", "global"):
                raise VerifyError(f"kernel {self.k.name}: buffer {b.name} has space {b.space!r}; "
                                  f"accepted: 'shared', 'global'")
        smem = self.k.shared_bytes
        if self.smem_limit is not None and smem > self.smem_limit:
            raise VerifyError(f"kernel {self.k.name}: shared memory {smem} bytes exceeds the "
                              f"limit of {self.smem_limit} bytes per CTA")

    # -- operands ------------------------------------------------------------------------------
    def check_ref(self, where: str, instr: Instr, ref: RegRef, defined: set, use: bool) -> None:
        reg = self.regs.get(ref.reg.name)
        if reg is None or reg != ref.reg:
            self.fail(where, instr, f"register %{ref.reg.name} is not declared in the kernel")
        if not 0 <= ref.index < reg.size:
            self.fail(where, instr, f"index {ref.index} is out of range for %{reg.name}"
                      f"[{reg.size}] (accepted 0..{reg.size - 1})")
        if use and (reg.name, ref.index) not in defined:
            self.fail(where, instr, f"{ref} is used before it is defined")

    def operand_type(self, x) -> object:
        return x.dtype

    def check_mem(self, where: str, instr: Instr, mem: MemRef, defined: set, width: int) -> None:
        buf = self.buffers.get(mem.buffer.name)
        if buf is None or buf != mem.buffer:
            self.fail(where, instr, f"buffer {mem.buffer.name!r} is not declared in the kernel")
        space = "shared" if instr.op in (Op.LDS, Op.STS) else "global"
        if buf.space != space:
            self.fail(where, instr, f"{instr.op} needs a {space} buffer, {buf.name} is {buf.space}")
        if isinstance(mem.index, RegRef):
            self.check_ref(where, instr, mem.index, defined, use=True)
            if mem.index.dtype is not I32:
                self.fail(where, instr, f"address index {mem.index} is {mem.index.dtype}, not i32")
        elif isinstance(mem.index, Imm):
            end = int(mem.index.value) + mem.offset + width
            if int(mem.index.value) + mem.offset < 0 or end > buf.size:
                what = "shared memory" if buf.space == "shared" else "global buffer"
                self.fail(where, instr, f"address {int(mem.index.value) + mem.offset}..{end - 1} "
                          f"is outside the {what} {buf.name}[{buf.size}] as declared")
        if width > 1 and mem.offset % width:
            self.fail(where, instr,
                      f"offset {mem.offset} is not aligned to the {width}-word access")
        if instr.op in (Op.STG, Op.ATOM_ADD) and buf.role == "in":
            self.fail(where, instr, f"writes to {buf.name}, which is declared read-only ('in')")

    def check_instr(self, where: str, instr: Instr, defined: set) -> None:
        if instr.op not in SIGNATURES:
            self.fail(where, instr, f"unknown op {instr.op!r}")
        for name, allowed in REQUIRED_ATTRS.get(instr.op, {}).items():
            value = instr.attr(name)
            if value is None:
                self.fail(where, instr, f"missing attribute {name!r}")
            if allowed is not None and value not in allowed:
                self.fail(where, instr, f"attribute {name}={value!r}; accepted: {allowed}")
        dst_types, src_types = SIGNATURES[instr.op]
        width = int(instr.attr("width", 1))
        if instr.op in _MEM_OPS:
            mems = [s for s in instr.srcs if isinstance(s, MemRef)]
            if len(mems) != 1 or not isinstance(instr.srcs[0], MemRef):
                self.fail(where, instr, "a memory op takes exactly one address, as first operand")
            self.check_mem(where, instr, instr.srcs[0], defined, width)
            data_srcs, n_data_dst = instr.srcs[1:], len(instr.dsts)
            buf_dtype = instr.srcs[0].buffer.dtype
            if instr.op in (Op.STS, Op.STG):
                if len(data_srcs) != width:
                    self.fail(where, instr, f"a {32 * width}-bit store takes {width} values, "
                              f"got {len(data_srcs)}")
                for s in data_srcs:
                    self.check_src(where, instr, s, buf_dtype, defined)
            elif instr.op == Op.ATOM_ADD:
                if buf_dtype is not I32:
                    self.fail(where, instr, f"atom.add needs an i32 buffer, {instr.srcs[0].buffer}"
                              f" is {buf_dtype}")
                self.check_src(where, instr, data_srcs[0], I32, defined)
                n_data_dst = -1
            else:
                if n_data_dst != width:
                    self.fail(where, instr, f"a {32 * width}-bit load writes {width} registers, "
                              f"got {n_data_dst}")
                for d in instr.dsts:
                    self.check_dst(where, instr, d, buf_dtype)
            if instr.op == Op.ATOM_ADD:
                for d in instr.dsts:
                    self.check_dst(where, instr, d, I32)
        else:
            if len(instr.srcs) != len(src_types):
                self.fail(where, instr, f"{instr.op} takes {len(src_types)} operands, "
                          f"got {len(instr.srcs)}")
            if len(instr.dsts) != len(dst_types):
                self.fail(where, instr, f"{instr.op} writes {len(dst_types)} registers, "
                          f"got {len(instr.dsts)}")
            generic = {}
            for s, t in zip(instr.srcs, src_types, strict=True):
                if isinstance(s, MemRef):
                    self.fail(where, instr, f"{instr.op} takes no memory operand")
                if t in ("T", "U", "V"):
                    if t in generic and generic[t] is not s.dtype:
                        self.fail(where, instr, f"operand {s} is {s.dtype}, expected {generic[t]}")
                    generic.setdefault(t, s.dtype)
                    self.check_src(where, instr, s, s.dtype, defined)
                else:
                    self.check_src(where, instr, s, t, defined)
            for d, t in zip(instr.dsts, dst_types, strict=True):
                if t in ("T", "U", "V"):
                    if t in generic and generic[t] is not d.dtype:
                        self.fail(where, instr, f"result {d} is {d.dtype}, expected {generic[t]}")
                    generic.setdefault(t, d.dtype)
                    self.check_dst(where, instr, d, d.dtype)
                else:
                    self.check_dst(where, instr, d, t)
            if instr.op == Op.BITCAST and {instr.dsts[0].dtype, instr.srcs[0].dtype} != {F32, I32}:
                self.fail(where, instr, "bitcast converts between f32 and i32 only")
        for d in instr.dsts:
            if d.reg.name in self.loop_vars:
                self.fail(where, instr, f"unstructured control: writes the induction register "
                          f"%{d.reg.name} of an enclosing loop")
            defined.add((d.reg.name, d.index))

    def check_src(self, where, instr, s, dtype, defined) -> None:
        if isinstance(s, RegRef):
            self.check_ref(where, instr, s, defined, use=True)
        elif not isinstance(s, Imm):
            self.fail(where, instr, f"operand {s!r} is not a register or immediate")
        if s.dtype is not dtype:
            self.fail(where, instr, f"type mismatch: operand {s} is {s.dtype}, {instr.op} "
                      f"expects {dtype}")

    def check_dst(self, where, instr, d, dtype) -> None:
        if not isinstance(d, RegRef):
            self.fail(where, instr, f"result {d!r} is not a register")
        self.check_ref(where, instr, d, set(), use=False)
        if d.dtype is not dtype:
            self.fail(where, instr, f"type mismatch: result {d} is {d.dtype}, {instr.op} "
                      f"produces {dtype}")

    # -- statements ----------------------------------------------------------------------------
    def body(self, stmts: tuple, defined: set, where: str) -> set:
        if not isinstance(stmts, tuple):
            raise VerifyError(f"kernel {self.k.name}: {where}: unstructured control: a body must "
                              f"be a tuple of statements, got {type(stmts).__name__}")
        for i, s in enumerate(stmts):
            here = f"{where}/{i}"
            if not isinstance(s, STATEMENT_TYPES):
                raise VerifyError(f"kernel {self.k.name}: {here}: unstructured control: "
                                  f"{s!r} is not an Instr, Loop, While or If")
            if isinstance(s, Instr):
                self.check_instr(here, s, defined)
            elif isinstance(s, Loop):
                if s.var.name not in self.regs or s.var.dtype is not I32:
                    raise VerifyError(f"kernel {self.k.name}: {here}: loop variable %{s.var.name} "
                                      f"must be a declared i32 register")
                if s.step == 0:
                    raise VerifyError(f"kernel {self.k.name}: {here}: loop step 0 never ends")
                if s.kind not in LOOP_KINDS:
                    raise VerifyError(f"kernel {self.k.name}: {here}: loop kind {s.kind!r}; "
                                      f"accepted {', '.join(repr(k) for k in LOOP_KINDS)}")
                inner = set(defined) | {(s.var.name, 0)}
                self.loop_vars.append(s.var.name)
                after = self.body(s.body, inner, here + f"/loop %{s.var.name}")
                self.loop_vars.pop()
                if s.trip_count > 0:
                    defined |= after - {(s.var.name, 0)}
            elif isinstance(s, While):
                after = self.body(s.body, set(defined), here + f"/while {s.label}")
                if s.cond.dtype is not PRED:
                    raise VerifyError(f"kernel {self.k.name}: {here}: while {s.label}: condition "
                                      f"{s.cond} is {s.cond.dtype}, not pred")
                if (s.cond.reg.name, s.cond.index) not in after - defined and \
                        not any(d.reg.name == s.cond.reg.name for d in _dsts(s.body)):
                    raise VerifyError(f"kernel {self.k.name}: {here}: unstructured control: while "
                                      f"{s.label} never computes its condition {s.cond} in its "
                                      f"body, so it cannot end")
                if (s.cond.reg.name, s.cond.index) not in after:
                    raise VerifyError(f"kernel {self.k.name}: {here}: while {s.label}: condition "
                                      f"{s.cond} is used before it is defined")
                if s.spin_limit < 1:
                    raise VerifyError(f"kernel {self.k.name}: {here}: while {s.label}: "
                                      f"spin_limit={s.spin_limit}; need >= 1")
                defined |= after
            elif isinstance(s, If):
                if s.cond.dtype is not PRED:
                    raise VerifyError(f"kernel {self.k.name}: {here}: if condition {s.cond} is "
                                      f"{s.cond.dtype}, not pred")
                if (s.cond.reg.name, s.cond.index) not in defined:
                    raise VerifyError(f"kernel {self.k.name}: {here}: if condition {s.cond} is "
                                      f"used before it is defined")
                a = self.body(s.then, set(defined), here + "/then")
                b = self.body(s.orelse, set(defined), here + "/else")
                defined |= a & b
        return defined


def _dsts(body: tuple):
    from .ir import walk

    for s in walk(body):
        if isinstance(s, Instr):
            yield from s.dsts


def verify(kernel: Kernel, smem_limit_bytes: int | None = None) -> Kernel:
    """Check ``kernel``; return it unchanged or raise :class:`VerifyError` naming the problem.

    ``smem_limit_bytes``: the target's shared memory per CTA; when given, a kernel that declares
    more is rejected.
    """
    v = _Verifier(kernel, smem_limit_bytes)
    v.check_decls()
    v.body(kernel.body, set(), "body")
    return kernel


__all__ = ["verify", "Buffer"]
