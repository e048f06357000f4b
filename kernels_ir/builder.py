"""A builder whose context managers mirror CUDA blocks.

    b = Builder("axpy", grid=2, block=64)
    x = b.global_buffer("x", F32, 128)
    tid = b.sreg("tid")
    with b.loop("i", 0, 4) as i:
        ...
    with b.if_(p):
        ...
    with b.else_():
        ...
    with b.while_(label="poll") as w:
        v = b.ldg_volatile(x, tid)
        w.cond = b.fsetp("eq", v, 0.0)
    kernel = b.build()

Instruction methods take registers (:class:`Reg` for scalars, :class:`RegRef` for array
elements), Python numbers (made immediates of the op's type) or memory references, and return the
destination (a fresh temporary unless ``dst=`` is given).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .errors import IRError
from .ir import (
    F32,
    I32,
    LOOP_KINDS,
    PRED,
    Buffer,
    DType,
    If,
    Imm,
    Instr,
    Kernel,
    Loop,
    MemRef,
    Op,
    Reg,
    RegRef,
    While,
)


class _WhileHandle:
    """Yielded by :meth:`Builder.while_`; set ``cond`` inside the body."""

    def __init__(self) -> None:
        self.cond: RegRef | None = None


class Builder:
    """Builds one :class:`Kernel`; call :meth:`build` once at the end."""

    def __init__(self, name: str, grid: int, block: int, **meta: object):
        if grid < 1 or block < 1 or block > 1024:
            raise IRError(f"kernel {name}: grid={grid}, block={block}; need grid >= 1 and "
                          f"1 <= block <= 1024")
        self.name, self.grid, self.block = name, grid, block
        self.meta = dict(meta)
        self._buffers: dict[str, Buffer] = {}
        self._regs: dict[str, Reg] = {}
        self._stack: list[list] = [[]]
        self._pending_if: If | None = None
        self._tmp = 0

    # --- declarations -------------------------------------------------------------------------
    def global_buffer(self, name: str, dtype: DType, size: int, role: str = "in") -> Buffer:
        return self._buffer(Buffer(name, "global", dtype, int(size), role))

    def shared(self, name: str, dtype: DType, size: int) -> Buffer:
        return self._buffer(Buffer(name, "shared", dtype, int(size), "scratch"))

    def _buffer(self, buf: Buffer) -> Buffer:
        if buf.name in self._buffers:
            raise IRError(f"kernel {self.name}: buffer {buf.name!r} declared twice")
        if buf.size < 1:
            raise IRError(f"kernel {self.name}: buffer {buf.name!r} has size {buf.size}; need >= 1")
        self._buffers[buf.name] = buf
        return buf

    def reg(self, dtype: DType, name: str | None = None, size: int = 1) -> Reg:
        """Declare a register (an array when ``size > 1``)."""
        if name is None:
            self._tmp += 1
            name = f"r{self._tmp}"
        if name in self._regs:
            raise IRError(f"kernel {self.name}: register %{name} declared twice")
        r = Reg(name, dtype, int(size))
        self._regs[name] = r
        return r

    # --- emission -----------------------------------------------------------------------------
    def _ref(self, x: Reg | RegRef) -> RegRef:
        return x[0] if isinstance(x, Reg) else x

    def _operand(self, x: object, dtype: DType | str) -> RegRef | Imm | MemRef:
        if isinstance(x, Reg):
            return x[0]
        if isinstance(x, (RegRef, MemRef, Imm)):
            return x
        if isinstance(x, bool):
            return Imm(x, PRED)
        if isinstance(x, (int, float)):
            dt = dtype if isinstance(dtype, DType) else (F32 if isinstance(x, float) else I32)
            return Imm(float(x) if dt is F32 else int(x), dt)
        raise IRError(f"kernel {self.name}: cannot use {x!r} as an operand")

    def emit(self, op: Op, dsts: tuple = (), srcs: tuple = (), **attrs: object) -> Instr:
        """Append one instruction; operands are coerced with the op's signature types."""
        from .ir import SIGNATURES

        _, src_types = SIGNATURES[op]
        typed = []
        for i, s in enumerate(srcs):
            t = src_types[i] if i < len(src_types) else "*"
            typed.append(self._operand(s, t if isinstance(t, DType) else self._guess(srcs, dsts)))
        instr = Instr(op, tuple(self._ref(d) for d in dsts), tuple(typed),
                      tuple(sorted(attrs.items())))
        self._stack[-1].append(instr)
        self._pending_if = None
        return instr

    @staticmethod
    def _guess(srcs: tuple, dsts: tuple) -> DType:
        for x in (*dsts, *srcs):
            if isinstance(x, (Reg, RegRef)):
                return x.dtype if isinstance(x, RegRef) else x.dtype
        return F32

    def _dst(self, dst: Reg | RegRef | None, dtype: DType) -> RegRef:
        return self.reg(dtype)[0] if dst is None else self._ref(dst)

    def _binary(self, op: Op, dtype: DType, a, b, dst=None) -> RegRef:
        d = self._dst(dst, dtype)
        self.emit(op, (d,), (a, b))
        return d

    # float
    def fadd(self, a, b, dst=None): return self._binary(Op.FADD, F32, a, b, dst)
    def fsub(self, a, b, dst=None): return self._binary(Op.FSUB, F32, a, b, dst)
    def fmul(self, a, b, dst=None): return self._binary(Op.FMUL, F32, a, b, dst)
    def fmax(self, a, b, dst=None): return self._binary(Op.FMAX, F32, a, b, dst)
    def fmin(self, a, b, dst=None): return self._binary(Op.FMIN, F32, a, b, dst)

    def ffma(self, a, b, c, dst=None) -> RegRef:
        d = self._dst(dst, F32)
        self.emit(Op.FFMA, (d,), (a, b, c))
        return d

    def _unary(self, op: Op, dtype: DType, a, dst=None) -> RegRef:
        d = self._dst(dst, dtype)
        self.emit(op, (d,), (a,))
        return d

    def tanh(self, a, dst=None): return self._unary(Op.TANH, F32, a, dst)
    def exp(self, a, dst=None): return self._unary(Op.EXP, F32, a, dst)
    def sigmoid(self, a, dst=None): return self._unary(Op.SIGMOID, F32, a, dst)
    def i2f(self, a, dst=None): return self._unary(Op.I2F, F32, a, dst)
    def f2i(self, a, dst=None): return self._unary(Op.F2I, I32, a, dst)
    def pnot(self, a, dst=None): return self._unary(Op.PNOT, PRED, a, dst)
    def u16(self, a, dst=None): return self._unary(Op.U16, I32, a, dst)

    def h2f(self, a, half: int, dst=None) -> RegRef:
        """f32 of the fp16 value in half ``half`` (0: bits 0-15, 1: bits 16-31) of ``a``."""
        d = self._dst(dst, F32)
        self.emit(Op.H2F, (d,), (a,), half=half)
        return d

    def bitcast(self, a, dtype: DType, dst=None) -> RegRef:
        return self._unary(Op.BITCAST, dtype, a, dst)

    def mov(self, a, dtype: DType | None = None, dst=None) -> RegRef:
        if dtype is None:
            dtype = self._ref(dst).dtype if dst is not None else self._guess((a,), ())
        d = self._dst(dst, dtype)
        self.emit(Op.MOV, (d,), (self._operand(a, dtype),))
        return d

    # integer
    def iadd(self, a, b, dst=None): return self._binary(Op.IADD, I32, a, b, dst)
    def isub(self, a, b, dst=None): return self._binary(Op.ISUB, I32, a, b, dst)
    def imul(self, a, b, dst=None): return self._binary(Op.IMUL, I32, a, b, dst)
    def idiv(self, a, b, dst=None): return self._binary(Op.IDIV, I32, a, b, dst)
    def irem(self, a, b, dst=None): return self._binary(Op.IREM, I32, a, b, dst)
    def imin(self, a, b, dst=None): return self._binary(Op.IMIN, I32, a, b, dst)
    def imax(self, a, b, dst=None): return self._binary(Op.IMAX, I32, a, b, dst)
    def shl(self, a, b, dst=None): return self._binary(Op.SHL, I32, a, b, dst)
    def shr(self, a, b, dst=None): return self._binary(Op.SHR, I32, a, b, dst)
    def and_(self, a, b, dst=None): return self._binary(Op.AND, I32, a, b, dst)
    def or_(self, a, b, dst=None): return self._binary(Op.OR, I32, a, b, dst)
    def xor(self, a, b, dst=None): return self._binary(Op.XOR, I32, a, b, dst)
    def pand(self, a, b, dst=None): return self._binary(Op.PAND, PRED, a, b, dst)
    def por(self, a, b, dst=None): return self._binary(Op.POR, PRED, a, b, dst)

    def imad(self, a, b, c, dst=None) -> RegRef:
        d = self._dst(dst, I32)
        self.emit(Op.IMAD, (d,), (a, b, c))
        return d

    # compare / select
    def fsetp(self, cmp: str, a, b, dst=None) -> RegRef:
        d = self._dst(dst, PRED)
        self.emit(Op.FSETP, (d,), (a, b), cmp=cmp)
        return d

    def isetp(self, cmp: str, a, b, dst=None) -> RegRef:
        d = self._dst(dst, PRED)
        self.emit(Op.ISETP, (d,), (a, b), cmp=cmp)
        return d

    def sel(self, p, a, b, dst=None) -> RegRef:
        dtype = self._ref(dst).dtype if dst is not None else self._guess((a, b), ())
        d = self._dst(dst, dtype)
        self.emit(Op.SEL, (d,), (p, self._operand(a, dtype), self._operand(b, dtype)))
        return d

    def sreg(self, kind: str, dst=None) -> RegRef:
        d = self._dst(dst, I32)
        self.emit(Op.SREG, (d,), (), kind=kind)
        return d

    # memory
    def _mem(self, buf: Buffer, index, offset: int) -> MemRef:
        return MemRef(buf, self._operand(index, I32), int(offset))

    def _load(self, op: Op, buf: Buffer, index, offset: int, width: int, dst) -> tuple[RegRef, ...]:
        if dst is None:
            r = self.reg(buf.dtype, size=width)
            dsts = tuple(r[i] for i in range(width))
        elif isinstance(dst, Reg) and dst.size == width:
            dsts = tuple(dst[i] for i in range(width))
        else:
            dsts = tuple(self._ref(d) for d in (dst if isinstance(dst, (tuple, list)) else (dst,)))
        self.emit(op, dsts, (self._mem(buf, index, offset),), width=width)
        return dsts if width > 1 else dsts[0]

    def lds(self, buf, index, offset=0, width=1, dst=None):
        return self._load(Op.LDS, buf, index, offset, width, dst)

    def ldg(self, buf, index, offset=0, width=1, dst=None):
        return self._load(Op.LDG, buf, index, offset, width, dst)

    def ldg_volatile(self, buf, index, offset=0, width=1, dst=None):
        return self._load(Op.LDG_VOLATILE, buf, index, offset, width, dst)

    def _store(self, op: Op, buf: Buffer, index, values, offset: int) -> Instr:
        vals = tuple(values) if isinstance(values, (tuple, list)) else (values,)
        srcs = (self._mem(buf, index, offset),) + tuple(self._operand(v, buf.dtype) for v in vals)
        return self.emit(op, (), srcs, width=len(vals))

    def sts(self, buf, index, values, offset=0):
        return self._store(Op.STS, buf, index, values, offset)

    def stg(self, buf, index, values, offset=0):
        return self._store(Op.STG, buf, index, values, offset)

    def atom_add(self, buf, index, value, offset=0, dst=None) -> RegRef:
        d = self._dst(dst, I32)
        self.emit(Op.ATOM_ADD, (d,), (self._mem(buf, index, offset), self._operand(value, I32)))
        return d

    def fence(self) -> Instr: return self.emit(Op.FENCE)

    def nanosleep(self, ns: int) -> Instr:
        """``__nanosleep(ns)``: the warp issues nothing for about ``ns`` nanoseconds."""
        return self.emit(Op.SLEEP, (), (Imm(int(ns), I32),))

    def bar(self) -> Instr: return self.emit(Op.BAR)

    # warp
    def shfl_xor(self, a, mask: int, dst=None) -> RegRef:
        dtype = self._guess((a,), ())
        d = self._dst(dst, dtype)
        self.emit(Op.SHFL_XOR, (d,), (a, Imm(int(mask), I32)))
        return d

    def shfl_idx(self, a, lane, dst=None) -> RegRef:
        dtype = self._guess((a,), ())
        d = self._dst(dst, dtype)
        self.emit(Op.SHFL_IDX, (d,), (a, self._operand(lane, I32)))
        return d

    def vote_any(self, p, dst=None): return self._unary(Op.VOTE_ANY, PRED, p, dst)
    def vote_all(self, p, dst=None): return self._unary(Op.VOTE_ALL, PRED, p, dst)

    # --- structured control -------------------------------------------------------------------
    @contextlib.contextmanager
    def _block(self) -> Iterator[list]:
        self._stack.append([])
        try:
            yield self._stack[-1]
        finally:
            self._stack.pop()

    @contextlib.contextmanager
    def loop(self, name: str, start: int, stop: int, step: int = 1,
             kind: str = "for") -> Iterator[RegRef]:
        """A counted loop; yields its induction register (i32)."""
        if kind not in LOOP_KINDS:
            raise IRError(f"kernel {self.name}: loop kind {kind!r}; use "
                          f"{', '.join(repr(k) for k in LOOP_KINDS)}")
        var = self.reg(I32, name)
        with self._block() as body:
            yield var[0]
        self._stack[-1].append(Loop(var, int(start), int(stop), int(step), tuple(body), kind))
        self._pending_if = None

    @contextlib.contextmanager
    def while_(self, spin_limit: int = 1 << 20, label: str = "spin") -> Iterator[_WhileHandle]:
        """A do-while loop; assign ``handle.cond`` (a predicate) inside the body."""
        handle = _WhileHandle()
        with self._block() as body:
            yield handle
        if handle.cond is None:
            raise IRError(f"kernel {self.name}: while loop {label!r} never set its condition")
        self._stack[-1].append(While(tuple(body), self._ref(handle.cond), int(spin_limit), label))
        self._pending_if = None

    @contextlib.contextmanager
    def if_(self, cond) -> Iterator[None]:
        with self._block() as body:
            yield
        stmt = If(self._ref(cond), tuple(body), ())
        self._stack[-1].append(stmt)
        self._pending_if = stmt

    @contextlib.contextmanager
    def else_(self) -> Iterator[None]:
        prev = self._pending_if
        if prev is None or not self._stack[-1] or self._stack[-1][-1] is not prev:
            raise IRError(f"kernel {self.name}: else_() must directly follow an if_() block")
        with self._block() as body:
            yield
        self._stack[-1][-1] = If(prev.cond, prev.then, tuple(body))
        self._pending_if = None

    def build(self) -> Kernel:
        if len(self._stack) != 1:
            raise IRError(f"kernel {self.name}: build() called inside an open block")
        meta = tuple(sorted((k, v) for k, v in self.meta.items()))
        return Kernel(self.name, self.grid, self.block, tuple(self._buffers.values()),
                      tuple(self._regs.values()), tuple(self._stack[0]), meta)
