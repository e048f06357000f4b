"""The kernel IR: a few plain, immutable records.

A kernel is a tree of statements executed by every thread (SIMT): straight-line instructions,
counted loops, do-while (spin) loops and ifs. Values live in per-thread registers; a register may be
an array indexed only by compile-time constants (how weights stay in the register file). Memory is
named buffers: ``shared`` arrays (per CTA, 32 banks of 4 bytes) and ``global`` buffers (kernel
parameters).

The meaning of every op is given by the per-op tables of the backends (``gpusim`` semantics, CUDA
codegen, cost classes); :data:`SIGNATURES` here fixes the operand and result types they all share.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class DType(enum.Enum):
    F32 = "f32"
    I32 = "i32"
    PRED = "pred"

    def __str__(self) -> str:
        return self.value


F32, I32, PRED = DType.F32, DType.I32, DType.PRED


class Op(enum.Enum):
    # data movement
    MOV = "mov"
    SREG = "sreg"            # special register: attrs kind in SREG_KINDS
    BITCAST = "bitcast"      # reinterpret 32 bits (f32 <-> i32)
    I2F = "i2f"
    F2I = "f2i"              # truncation toward zero
    H2F = "h2f"              # f32 from one fp16 half of an i32 word (attrs half: 0 low, 1 high)
    U16 = "u16"              # the low 16 bits of an i32 word, zero-extended
    # float arithmetic
    FADD = "fadd"
    FSUB = "fsub"
    FMUL = "fmul"
    FFMA = "ffma"            # a * b + c, one rounding
    FMAX = "fmax"
    FMIN = "fmin"
    TANH = "tanh"
    EXP = "exp"
    SIGMOID = "sigmoid"
    # integer arithmetic
    IADD = "iadd"
    ISUB = "isub"
    IMUL = "imul"
    IMAD = "imad"            # a * b + c
    IDIV = "idiv"            # floor division (operands >= 0 in practice)
    IREM = "irem"
    IMIN = "imin"
    IMAX = "imax"
    SHL = "shl"
    SHR = "shr"
    AND = "and"
    OR = "or"
    XOR = "xor"
    # compare / select / predicates
    FSETP = "fsetp"          # attrs cmp in CMPS
    ISETP = "isetp"
    SEL = "sel"              # pred ? a : b
    PAND = "pand"
    POR = "por"
    PNOT = "pnot"
    # memory
    LDS = "lds"              # shared load, attrs width in {1, 2, 4} words
    STS = "sts"
    LDG = "ldg"              # global load (through L2; L1 not modelled as coherent)
    LDG_VOLATILE = "ldg.volatile"  # L2-coherent load used for polling
    STG = "stg"
    ATOM_ADD = "atom.add"    # global atomic add at L2, returns the old value
    FENCE = "fence"          # __threadfence(): orders this thread's global writes
    SLEEP = "nanosleep"      # __nanosleep(ns): the warp waits about ns nanoseconds (an Imm)
    # warp
    SHFL_XOR = "shfl.xor"    # value from lane ^ mask
    SHFL_IDX = "shfl.idx"    # value from a given lane
    VOTE_ANY = "vote.any"
    VOTE_ALL = "vote.all"
    # CTA
    BAR = "bar"              # __syncthreads()

    def __str__(self) -> str:
        return self.value


SLEEP_MAX_NS = 1_000_000   # __nanosleep's longest wait (1 ms)
SREG_KINDS = ("lane", "warp", "tid", "cta", "nctas", "nwarps", "nthreads", "step")
CMPS = ("lt", "le", "gt", "ge", "eq", "ne")
WIDTHS = (1, 2, 4)


# Op classes: named sets that the cost and scheduling tables key on.
FLOAT_ALU = frozenset({Op.FADD, Op.FSUB, Op.FMUL, Op.FFMA, Op.FMAX, Op.FMIN, Op.FSETP, Op.H2F})
INT_ALU = frozenset({Op.MOV, Op.SREG, Op.BITCAST, Op.IADD, Op.ISUB, Op.IMUL, Op.IMAD, Op.IMIN,
                     Op.IMAX, Op.SHL, Op.SHR, Op.AND, Op.OR, Op.XOR, Op.ISETP, Op.SEL, Op.PAND,
                     Op.POR, Op.PNOT, Op.I2F, Op.F2I, Op.IDIV, Op.IREM, Op.U16})
SFU = frozenset({Op.TANH, Op.EXP, Op.SIGMOID})
SHARED_MEM = frozenset({Op.LDS, Op.STS})
GLOBAL_MEM = frozenset({Op.LDG, Op.LDG_VOLATILE, Op.STG, Op.ATOM_ADD})
WARP_OPS = frozenset({Op.SHFL_XOR, Op.SHFL_IDX, Op.VOTE_ANY, Op.VOTE_ALL})
SYNC_OPS = frozenset({Op.BAR, Op.FENCE, Op.SLEEP})
MEMORY_OPS = SHARED_MEM | GLOBAL_MEM
LOADS = frozenset({Op.LDS, Op.LDG, Op.LDG_VOLATILE})
STORES = frozenset({Op.STS, Op.STG})

OP_CLASSES = {"float_alu": FLOAT_ALU, "int_alu": INT_ALU, "sfu": SFU, "shared_mem": SHARED_MEM,
              "global_mem": GLOBAL_MEM, "warp": WARP_OPS, "sync": SYNC_OPS}


def op_class(op: Op) -> str:
    """Name of the class an op belongs to (every op is in exactly one)."""
    for name, ops in OP_CLASSES.items():
        if op in ops:
            return name
    raise KeyError(op)


# ---------------------------------------------------------------------------------------------
# Operands


@dataclass(frozen=True, slots=True)
class Reg:
    """A per-thread register (``size > 1``: an array indexed by compile-time constants)."""

    name: str
    dtype: DType
    size: int = 1

    def __getitem__(self, index: int) -> RegRef:
        return RegRef(self, index)

    def __str__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True, slots=True)
class RegRef:
    """One element of a register; ``index`` is a compile-time constant."""

    reg: Reg
    index: int = 0

    @property
    def dtype(self) -> DType:
        return self.reg.dtype

    def __str__(self) -> str:
        return f"%{self.reg.name}" if self.reg.size == 1 else f"%{self.reg.name}[{self.index}]"


@dataclass(frozen=True, slots=True)
class Imm:
    """An immediate constant."""

    value: int | float | bool
    dtype: DType

    def __str__(self) -> str:
        if self.dtype is F32:
            return repr(float(self.value))
        if self.dtype is PRED:
            return "true" if self.value else "false"
        return str(int(self.value))


@dataclass(frozen=True, slots=True)
class Buffer:
    """A named memory array: ``space`` is ``"shared"`` (per CTA) or ``"global"`` (a parameter).

    ``size`` is in 32-bit words. For global buffers ``role`` says how the host treats it:
    ``"in"`` (read only), ``"out"``, ``"inout"`` or ``"scratch"``.
    """

    name: str
    space: str
    dtype: DType
    size: int
    role: str = "in"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class MemRef:
    """Address ``buffer[index + offset]`` in 32-bit words; ``index`` is an i32 operand."""

    buffer: Buffer
    index: RegRef | Imm
    offset: int = 0

    @property
    def dtype(self) -> DType:  # the address operand has no value type of its own
        return I32

    def __str__(self) -> str:
        off = f"+{self.offset}" if self.offset else ""
        return f"{self.buffer.space}:{self.buffer.name}[{self.index}{off}]"


Operand = RegRef | Imm | MemRef


# ---------------------------------------------------------------------------------------------
# Statements


@dataclass(frozen=True, slots=True)
class Instr:
    """One instruction: ``dsts = op(srcs)`` with op-specific attributes (a sorted tuple)."""

    op: Op
    dsts: tuple[RegRef, ...]
    srcs: tuple[Operand, ...]
    attrs: tuple[tuple[str, object], ...] = ()

    def attr(self, name: str, default: object = None) -> object:
        for key, value in self.attrs:
            if key == name:
                return value
        return default


LOOP_KINDS = ("for", "time", "seq", "unroll")


@dataclass(frozen=True, slots=True)
class Loop:
    """``for var in range(start, stop, step)`` with constant bounds.

    ``kind="time"`` marks the recurrence's time loop: its induction value is the ``step`` special
    register, and the simulator accounts time per iteration of it. ``kind="seq"``: an ordinary
    loop whose iterations the GPU must issue in order, as the simulator does (the generated CUDA
    keeps it rolled); ``"for"`` leaves unrolling to the compiler; ``"unroll"``: the generated
    CUDA asks for the loop unrolled (``#pragma unroll``), and the simulator charges no loop edges
    for it, as for ``"for"``. See :data:`LOOP_KINDS`.
    """

    var: Reg
    start: int
    stop: int
    step: int
    body: tuple
    kind: str = "for"

    @property
    def trip_count(self) -> int:
        return max(0, len(range(self.start, self.stop, self.step)))


@dataclass(frozen=True, slots=True)
class While:
    """``do { body } while (cond)`` per thread; a thread leaves when its ``cond`` is false.

    ``spin_limit`` bounds the iterations: a backend that reaches it reports who waits for what
    (simulator) or sets an error flag (CUDA) instead of hanging.
    """

    body: tuple
    cond: RegRef
    spin_limit: int = 1 << 20
    label: str = "spin"


@dataclass(frozen=True, slots=True)
class If:
    """``if (cond) { then } else { orelse }`` per thread (lanes diverge under a mask)."""

    cond: RegRef
    then: tuple
    orelse: tuple = ()


Statement = Instr | Loop | While | If
STATEMENT_TYPES = (Instr, Loop, While, If)


@dataclass(frozen=True, slots=True)
class Kernel:
    """A complete kernel: launch shape, buffers, registers and the statement tree.

    ``meta`` carries what the builder knew (layer sizes, variant switches) as sorted pairs; it
    never changes semantics.
    """

    name: str
    grid: int
    block: int
    buffers: tuple[Buffer, ...]
    regs: tuple[Reg, ...]
    body: tuple
    meta: tuple[tuple[str, object], ...] = field(default=())

    @property
    def warps_per_cta(self) -> int:
        return -(-self.block // 32)

    @property
    def shared_buffers(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.space == "shared")

    @property
    def global_buffers(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.space == "global")

    @property
    def shared_bytes(self) -> int:
        return 4 * sum(b.size for b in self.shared_buffers)

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(f"kernel {self.name} has no buffer {name!r}")

    def meta_value(self, key: str, default: object = None) -> object:
        for k, v in self.meta:
            if k == key:
                return v
        return default


# ---------------------------------------------------------------------------------------------
# Operand and result types of every op. A signature is (dst types, src types); "*" marks the
# data operands of memory ops whose count equals the access width.

SIGNATURES: dict[Op, tuple[tuple, tuple]] = {
    Op.MOV: (("T",), ("T",)),
    Op.SREG: ((I32,), ()),
    Op.BITCAST: (("U",), ("V",)),
    Op.I2F: ((F32,), (I32,)),
    Op.F2I: ((I32,), (F32,)),
    Op.H2F: ((F32,), (I32,)),
    Op.U16: ((I32,), (I32,)),
    Op.FADD: ((F32,), (F32, F32)),
    Op.FSUB: ((F32,), (F32, F32)),
    Op.FMUL: ((F32,), (F32, F32)),
    Op.FFMA: ((F32,), (F32, F32, F32)),
    Op.FMAX: ((F32,), (F32, F32)),
    Op.FMIN: ((F32,), (F32, F32)),
    Op.TANH: ((F32,), (F32,)),
    Op.EXP: ((F32,), (F32,)),
    Op.SIGMOID: ((F32,), (F32,)),
    Op.IADD: ((I32,), (I32, I32)),
    Op.ISUB: ((I32,), (I32, I32)),
    Op.IMUL: ((I32,), (I32, I32)),
    Op.IMAD: ((I32,), (I32, I32, I32)),
    Op.IDIV: ((I32,), (I32, I32)),
    Op.IREM: ((I32,), (I32, I32)),
    Op.IMIN: ((I32,), (I32, I32)),
    Op.IMAX: ((I32,), (I32, I32)),
    Op.SHL: ((I32,), (I32, I32)),
    Op.SHR: ((I32,), (I32, I32)),
    Op.AND: ((I32,), (I32, I32)),
    Op.OR: ((I32,), (I32, I32)),
    Op.XOR: ((I32,), (I32, I32)),
    Op.FSETP: ((PRED,), (F32, F32)),
    Op.ISETP: ((PRED,), (I32, I32)),
    Op.SEL: (("T",), (PRED, "T", "T")),
    Op.PAND: ((PRED,), (PRED, PRED)),
    Op.POR: ((PRED,), (PRED, PRED)),
    Op.PNOT: ((PRED,), (PRED,)),
    Op.LDS: (("*",), ("addr",)),
    Op.STS: ((), ("addr", "*")),
    Op.LDG: (("*",), ("addr",)),
    Op.LDG_VOLATILE: (("*",), ("addr",)),
    Op.STG: ((), ("addr", "*")),
    Op.ATOM_ADD: ((I32,), ("addr", I32)),
    Op.FENCE: ((), ()),
    Op.SLEEP: ((), (I32,)),
    Op.SHFL_XOR: (("T",), ("T", I32)),
    Op.SHFL_IDX: (("T",), ("T", I32)),
    Op.VOTE_ANY: ((PRED,), (PRED,)),
    Op.VOTE_ALL: ((PRED,), (PRED,)),
    Op.BAR: ((), ()),
}

# Attributes each op requires (name -> allowed values, or None for any).
REQUIRED_ATTRS: dict[Op, dict[str, tuple | None]] = {
    Op.SREG: {"kind": SREG_KINDS},
    Op.H2F: {"half": (0, 1)},
    Op.FSETP: {"cmp": CMPS},
    Op.ISETP: {"cmp": CMPS},
    Op.LDS: {"width": WIDTHS},
    Op.STS: {"width": WIDTHS},
    Op.LDG: {"width": WIDTHS},
    Op.LDG_VOLATILE: {"width": WIDTHS},
    Op.STG: {"width": WIDTHS},
}

assert set(SIGNATURES) == set(Op), "every op needs a signature"
assert all(any(op in s for s in OP_CLASSES.values()) for op in Op), "every op needs a class"


def walk(body: tuple):
    """Yield every statement of a body, depth first, in program order."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, Loop) or isinstance(stmt, While):
            yield from walk(stmt.body)
        elif isinstance(stmt, If):
            yield from walk(stmt.then)
            yield from walk(stmt.orelse)


def instructions(kernel: Kernel):
    """Every instruction of a kernel in program order (loop bodies once)."""
    return (s for s in walk(kernel.body) if isinstance(s, Instr))
