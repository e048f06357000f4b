"""IR -> CUDA C: one ``extern "C" __global__`` function per kernel, generated from a per-op table.

The generated source includes no headers (it compiles the same with ``nvcc -cubin`` and with
NVRTC through CuPy) and follows these rules (docs/cuda_notes.md s1.4, s2.4, s4):

- **Registers.** Every IR register becomes a local scalar; an array register ``%w[size]`` becomes
  ``size`` separate scalars ``r_w_0 .. r_w_{size-1}``. The IR only indexes arrays with constants,
  so the weights and indices stay in the register file (no local memory); the compile tests check
  this in SASS (no LDL/STL) and in the ptxas report (no spills).
- **Launch bounds.** ``__launch_bounds__(block, 1)``: one CTA per SM, all 255 registers allowed.
- **Shared memory** is one dynamic ``extern __shared__`` array; each shared buffer starts at a
  multiple of 128 bytes, so word ``i`` of a buffer is in bank ``i % 32`` exactly as the simulator
  and :mod:`kernels_ir.banks` assume. The host must allow :attr:`CudaSource.smem_bytes` of dynamic
  shared memory.
- **Arithmetic** is exact to the IR: ``FADD/FSUB/FMUL`` use the ``__f*_rn`` intrinsics so that the
  compiler cannot contract them into FMAs; ``FFMA`` is ``__fmaf_rn``. CuPy adds ``-ftz=true``, so
  denormals flush (compare with a tolerance).
- **Polling loads** (``LDG_VOLATILE``) are ``ld.relaxed.gpu.global`` (``.v2``/``.v4`` for width
  2/4; sm_70+) in ``asm volatile`` with a ``"memory"`` clobber: served by L2, never hoisted out of a
  loop. One GPU needs only GPU scope (docs/cuda_notes.md s2.3: ``.sys`` only across GPUs or with
  the host). ``generate(kernel, poll="volatile_sys")`` (or the kernel's ``meta poll``) emits the
  former ``ld.volatile.global`` instead, which ptxas makes ``LDG.E.STRONG.SYS`` (system scope);
  the ``*_sys`` microbenchmarks measure both forms (:data:`POLL_MODES`).
- **Spin loops** (``While``) are bounded: after ``spin_limit`` iterations with the condition still
  true the thread records ``(code=1, cta, warp, label id, lane)`` in the extra ``__err`` buffer
  (first failure wins, :data:`ERR_WORDS` ints) and leaves the loop, so the kernel always ends; the
  host reads the flag and raises. Every 1024 iterations a spinning thread also reads ``__err[0]``
  and gives up at once when another thread already failed (a failure then costs one spin, not one
  per step).
- **Warp ops** (``SHFL_*``, ``VOTE_*``) use the full mask ``0xffffffff``: the generated code
  assumes all 32 lanes of a warp execute them together, i.e. they never sit inside a
  lane-divergent ``If`` (the kernels in ``kernels_ir.kernels`` respect this; a warp-uniform ``If``
  is fine). Predicates are shuffled as ``int``.
- ``SREG``: ``lane`` = ``threadIdx.x & 31``, ``warp`` = warp in the CTA, ``tid`` = thread in the
  CTA, ``cta`` = ``blockIdx.x``, ``nctas`` = ``gridDim.x``, ``nwarps`` = warps per CTA,
  ``nthreads`` = threads per CTA, ``step`` = induction value of the enclosing time loop.
- Loops: ``kind="time"`` and ``kind="seq"`` get ``#pragma unroll 1`` (the step loop stays a
  loop; a ``seq`` loop's iterations issue in order, as in the simulator: unrolled, ptxas would
  hoist later iterations' loads above earlier ones); ``"unroll"`` gets ``#pragma unroll``;
  ``"for"`` loops are left to the compiler.
  Global buffers of role ``"in"`` are ``const T* __restrict__``; the others are plain pointers
  (they are written and polled).
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InputError, IRError
from .ir import (
    F32,
    I32,
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
    RegRef,
    While,
)

__all__ = ["CudaSource", "generate", "CODEGEN", "ERR_WORDS", "ERR_SPIN_LIMIT", "POLL_MODES",
           "c_name"]

ERR_WORDS = 8            # __err layout: [code, cta, warp, label id, lane, 0, 0, 0]
ERR_SPIN_LIMIT = 1       # code written when a While reaches its spin_limit
# compare-and-branch pairs of a generated spin loop's pass that does not exit: its condition,
# the spin limit and the error poll's period (one when the pass exits)
SPIN_TESTS = 3
_SMEM_ALIGN_BYTES = 128  # a shared buffer starts at a 32-bank boundary
_ERR_POLL_PERIOD = 1024  # spins between reads of __err[0]

_CTYPE = {F32: "float", I32: "int", PRED: "bool"}
# PTX of a polling load per ``poll`` mode (``generate(kernel, poll=...)``).
POLL_MODES = {"relaxed_gpu": "ld.relaxed.gpu.global", "volatile_sys": "ld.volatile.global"}
_VEC = {(F32, 2): "float2", (F32, 4): "float4", (I32, 2): "int2", (I32, 4): "int4"}
_FIELDS = ("x", "y", "z", "w")


@dataclass(frozen=True, slots=True)
class CudaSource:
    """Generated CUDA C for one kernel and what the host needs to launch it.

    ``params`` are the global buffer names in kernel-parameter order; the last parameter is always
    ``int* __err`` (:data:`ERR_WORDS` ints, zeroed by the host). ``spin_labels[i]`` is the label of
    the While with id ``i`` (reported in ``__err[3]``).
    """

    name: str
    code: str
    params: tuple[str, ...]
    grid: int
    block: int
    smem_bytes: int
    spin_labels: tuple[str, ...]


def c_name(name: str) -> str:
    """A C identifier for an IR name (non-alphanumerics become ``_``)."""
    return re.sub(r"[^0-9A-Za-z_]", "_", name)


# ---------------------------------------------------------------------------------------------
# Operand rendering


def _reg(ref: RegRef) -> str:
    base = f"r_{c_name(ref.reg.name)}"
    return base if ref.reg.size == 1 else f"{base}_{ref.index}"


def _f32_literal(x: float) -> str:
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    if math.isnan(x) or math.isinf(x) or (x == 0.0 and math.copysign(1.0, x) < 0):
        return f"__int_as_float(0x{bits:08x})"
    value = struct.unpack("<f", struct.pack("<I", bits))[0]  # rounded to f32
    text = repr(value)
    if "e" not in text and "." not in text and "inf" not in text:
        text += ".0"
    return f"{text}f"


def _imm(imm: Imm) -> str:
    if imm.dtype is F32:
        return _f32_literal(float(imm.value))
    if imm.dtype is PRED:
        return "true" if imm.value else "false"
    v = int(imm.value)
    if v == -(1 << 31):
        return "(int)0x80000000"
    return f"({v})" if v < 0 else str(v)


class _Ctx:
    """Per-kernel generation state (buffers, the time-loop variable, spin-loop ids)."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.step_var: list[str] = []
        self.spin_labels: list[str] = []
        self.tmp = 0
        self.poll = "relaxed_gpu"

    def val(self, x) -> str:
        if isinstance(x, RegRef):
            return _reg(x)
        if isinstance(x, Imm):
            return _imm(x)
        raise IRError(f"kernel {self.kernel.name}: operand {x} cannot be used as a value")

    def fresh(self) -> str:
        self.tmp += 1
        return f"t_{self.tmp}"


def _addr(mem: MemRef, ctx: _Ctx) -> str:
    idx = ctx.val(mem.index)
    if mem.offset:
        idx = f"{idx} + {mem.offset}"
    prefix = "s_" if mem.buffer.space == "shared" else "g_"
    return f"{prefix}{c_name(mem.buffer.name)}[{idx}]"


def _convert(expr: str, src: DType, dst: DType) -> str:
    """Reinterpret 32 bits when a memory word's type differs from the register's."""
    if src is dst:
        return expr
    if src is F32 and dst is I32:
        return f"__float_as_int({expr})"
    if src is I32 and dst is F32:
        return f"__int_as_float({expr})"
    return f"({_CTYPE[dst]})({expr})"


# ---------------------------------------------------------------------------------------------
# The per-op table: Op -> function(instr, ctx) -> list of C statements


def _un(fmt: str) -> Callable:
    def gen(ins: Instr, ctx: _Ctx) -> list[str]:
        return [f"{_reg(ins.dsts[0])} = {fmt.format(*(ctx.val(s) for s in ins.srcs))};"]
    return gen


def _h2f(ins: Instr, ctx: _Ctx) -> list[str]:
    """``cvt.f32.f16`` of one half of the word, as volatile inline PTX: the packed weights are
    loop-invariant, and a plain conversion would be hoisted out of the time loop by the compiler
    (one unpacked register per weight: the registers fp16 was meant to save)."""
    half = "h" if int(ins.attr("half")) else "l"
    return [f'asm volatile("{{ .reg .b16 l, h; mov.b32 {{l, h}}, %1; cvt.f32.f16 %0, {half}; }}" '
            f': "=f"({_reg(ins.dsts[0])}) : "r"({ctx.val(ins.srcs[0])}));']


def _u16(ins: Instr, ctx: _Ctx) -> list[str]:
    """The low half as volatile inline PTX, for the same reason as :func:`_h2f`."""
    return [f'asm volatile("and.b32 %0, %1, 65535;" : "=r"({_reg(ins.dsts[0])}) '
            f': "r"({ctx.val(ins.srcs[0])}));']


_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _setp(ins: Instr, ctx: _Ctx) -> list[str]:
    a, b = (ctx.val(s) for s in ins.srcs)
    return [f"{_reg(ins.dsts[0])} = ({a} {_CMP[str(ins.attr('cmp'))]} {b});"]


def _sreg(ins: Instr, ctx: _Ctx) -> list[str]:
    kind = ins.attr("kind")
    exprs = {"lane": "(int)(threadIdx.x & 31u)", "warp": "(int)(threadIdx.x >> 5)",
             "tid": "(int)threadIdx.x", "cta": "(int)blockIdx.x", "nctas": "(int)gridDim.x",
             "nwarps": "(int)(blockDim.x >> 5)", "nthreads": "(int)blockDim.x"}
    if kind == "step":
        if not ctx.step_var:
            raise IRError(f"kernel {ctx.kernel.name}: sreg step outside a time loop")
        return [f"{_reg(ins.dsts[0])} = {ctx.step_var[-1]};"]
    return [f"{_reg(ins.dsts[0])} = {exprs[str(kind)]};"]


def _bitcast(ins: Instr, ctx: _Ctx) -> list[str]:
    src = ins.srcs[0]
    return [f"{_reg(ins.dsts[0])} = {_convert(ctx.val(src), src.dtype, ins.dsts[0].dtype)};"]


def _mov(ins: Instr, ctx: _Ctx) -> list[str]:
    return [f"{_reg(ins.dsts[0])} = {ctx.val(ins.srcs[0])};"]


def _load(ins: Instr, ctx: _Ctx) -> list[str]:
    mem: MemRef = ins.srcs[0]
    width = int(ins.attr("width", 1))
    bt = mem.buffer.dtype
    if width == 1:
        return [f"{_reg(ins.dsts[0])} = {_convert(_addr(mem, ctx), bt, ins.dsts[0].dtype)};"]
    vt = _VEC[(bt, width)]
    t = ctx.fresh()
    out = [f"{vt} {t} = *reinterpret_cast<const {vt}*>(&{_addr(mem, ctx)});"]
    for i, d in enumerate(ins.dsts):
        out.append(f"{_reg(d)} = {_convert(f'{t}.{_FIELDS[i]}', bt, d.dtype)};")
    return out


def _load_volatile(ins: Instr, ctx: _Ctx) -> list[str]:
    """A polling load: ``ld.relaxed.gpu.global`` or (``poll="volatile_sys"``) ``ld.volatile``."""
    mem: MemRef = ins.srcs[0]
    width = int(ins.attr("width", 1))
    bt = mem.buffer.dtype
    suffix, cons = ("f32", "f") if bt is F32 else ("b32", "r")
    t = ctx.fresh()
    names = [f"{t}_{i}" for i in range(width)]
    vec = "" if width == 1 else f".v{width}"
    ops = ", ".join(f"%{i}" for i in range(width))
    regs = ops if width == 1 else "{" + ops + "}"
    outs = ", ".join(f'"={cons}"({n})' for n in names)
    out = [f"{_CTYPE[bt]} {', '.join(names)};",
           f'asm volatile("{POLL_MODES[ctx.poll]}{vec}.{suffix} {regs}, [%{width}];" : {outs} '
           f': "l"(&{_addr(mem, ctx)}) : "memory");']
    for n, d in zip(names, ins.dsts, strict=True):
        out.append(f"{_reg(d)} = {_convert(n, bt, d.dtype)};")
    return out


def _store(ins: Instr, ctx: _Ctx) -> list[str]:
    mem: MemRef = ins.srcs[0]
    vals = ins.srcs[1:]
    bt = mem.buffer.dtype
    conv = [_convert(ctx.val(v), v.dtype, bt) for v in vals]
    if len(vals) == 1:
        return [f"{_addr(mem, ctx)} = {conv[0]};"]
    vt = _VEC[(bt, len(vals))]
    return [f"*reinterpret_cast<{vt}*>(&{_addr(mem, ctx)}) = make_{vt}({', '.join(conv)});"]


def _atom(ins: Instr, ctx: _Ctx) -> list[str]:
    mem: MemRef = ins.srcs[0]
    ptr = f"&{_addr(mem, ctx)}"
    if mem.buffer.dtype is not I32:
        ptr = f"reinterpret_cast<int*>({ptr})"
    return [f"{_reg(ins.dsts[0])} = atomicAdd({ptr}, {ctx.val(ins.srcs[1])});"]


def _shfl(fn: str) -> Callable:
    def gen(ins: Instr, ctx: _Ctx) -> list[str]:
        a, b = (ctx.val(s) for s in ins.srcs)
        d = ins.dsts[0]
        if d.dtype is PRED:
            return [f"{_reg(d)} = ({fn}(0xffffffffu, (int){a}, {b}) != 0);"]
        return [f"{_reg(d)} = {fn}(0xffffffffu, {a}, {b});"]
    return gen


CODEGEN: dict[Op, Callable[[Instr, _Ctx], list[str]]] = {
    Op.MOV: _mov,
    Op.SREG: _sreg,
    Op.BITCAST: _bitcast,
    Op.I2F: _un("__int2float_rn({0})"),
    Op.F2I: _un("__float2int_rz({0})"),
    Op.H2F: _h2f,
    Op.U16: _u16,
    Op.FADD: _un("__fadd_rn({0}, {1})"),
    Op.FSUB: _un("__fsub_rn({0}, {1})"),
    Op.FMUL: _un("__fmul_rn({0}, {1})"),
    Op.FFMA: _un("__fmaf_rn({0}, {1}, {2})"),
    Op.FMAX: _un("fmaxf({0}, {1})"),
    Op.FMIN: _un("fminf({0}, {1})"),
    Op.TANH: _un("tanhf({0})"),
    Op.EXP: _un("expf({0})"),
    Op.SIGMOID: _un("1.0f / (1.0f + expf(-({0})))"),
    Op.IADD: _un("{0} + {1}"),
    Op.ISUB: _un("{0} - {1}"),
    Op.IMUL: _un("{0} * {1}"),
    Op.IMAD: _un("{0} * {1} + {2}"),
    Op.IDIV: _un("{0} / {1}"),
    Op.IREM: _un("{0} % {1}"),
    Op.IMIN: _un("min({0}, {1})"),
    Op.IMAX: _un("max({0}, {1})"),
    Op.SHL: _un("{0} << {1}"),
    Op.SHR: _un("{0} >> {1}"),
    Op.AND: _un("{0} & {1}"),
    Op.OR: _un("{0} | {1}"),
    Op.XOR: _un("{0} ^ {1}"),
    Op.FSETP: _setp,
    Op.ISETP: _setp,
    Op.SEL: _un("{0} ? {1} : {2}"),
    Op.PAND: _un("{0} && {1}"),
    Op.POR: _un("{0} || {1}"),
    Op.PNOT: _un("!{0}"),
    Op.LDS: _load,
    Op.STS: _store,
    Op.LDG: _load,
    Op.LDG_VOLATILE: _load_volatile,
    Op.STG: _store,
    Op.ATOM_ADD: _atom,
    Op.FENCE: lambda ins, ctx: ["__threadfence();"],
    Op.SLEEP: lambda ins, ctx: [f"__nanosleep({ctx.val(ins.srcs[0])});"],
    Op.SHFL_XOR: _shfl("__shfl_xor_sync"),
    Op.SHFL_IDX: _shfl("__shfl_sync"),
    Op.VOTE_ANY: _un("__any_sync(0xffffffffu, {0})"),
    Op.VOTE_ALL: _un("__all_sync(0xffffffffu, {0})"),
    Op.BAR: lambda ins, ctx: ["__syncthreads();"],
}

assert set(CODEGEN) == set(Op), "every op needs a CUDA rule"


# ---------------------------------------------------------------------------------------------
# Statements


def _body(stmts: tuple, ctx: _Ctx, depth: int) -> list[str]:
    pad = "    " * depth
    out: list[str] = []
    for s in stmts:
        if isinstance(s, Instr):
            out += [pad + line for line in CODEGEN[s.op](s, ctx)]
        elif isinstance(s, Loop):
            v = _reg(s.var[0])
            cmp = "<" if s.step > 0 else ">"
            if s.kind in ("time", "seq"):
                out.append(pad + "#pragma unroll 1")
            elif s.kind == "unroll":
                out.append(pad + "#pragma unroll")
            if s.kind == "time":
                ctx.step_var.append(v)
            out.append(pad + f"for ({v} = {s.start}; {v} {cmp} {s.stop}; {v} += {s.step}) {{")
            out += _body(s.body, ctx, depth + 1)
            out.append(pad + "}")
            if s.kind == "time":
                ctx.step_var.pop()
        elif isinstance(s, While):
            sid = len(ctx.spin_labels)
            ctx.spin_labels.append(s.label)
            n = f"spin_{sid}"
            cond = _reg(s.cond)
            out.append(pad + f"/* spin loop {sid}: {s.label} (limit {s.spin_limit}) */")
            out.append(pad + f"for (unsigned int {n} = 1;; ++{n}) {{")
            out += _body(s.body, ctx, depth + 1)
            p2 = pad + "    "
            out.append(p2 + f"if (!{cond}) break;")
            out.append(p2 + f"if ({n} >= {s.spin_limit}u) {{ err_report(g___err, {ERR_SPIN_LIMIT}, "
                       f"{sid}); break; }}")
            out.append(p2 + f"if (({n} & {_ERR_POLL_PERIOD - 1}u) == 0u && err_seen(g___err)) "
                       f"break;")
            out.append(pad + "}")
        elif isinstance(s, If):
            out.append(pad + f"if ({_reg(s.cond)}) {{")
            out += _body(s.then, ctx, depth + 1)
            if s.orelse:
                out.append(pad + "} else {")
                out += _body(s.orelse, ctx, depth + 1)
            out.append(pad + "}")
        else:
            raise IRError(f"kernel {ctx.kernel.name}: cannot generate {type(s).__name__}")
    return out


_PRELUDE = """\
// Generated by kernels_ir.codegen_cuda from the IR kernel {name!r}; do not edit.
// grid={grid} block={block} dynamic shared memory={smem} bytes
__device__ __forceinline__ void err_report(int* err, int code, int label) {{
    if (atomicCAS(err, 0, code) == 0) {{
        err[1] = (int)blockIdx.x; err[2] = (int)(threadIdx.x >> 5);
        err[3] = label; err[4] = (int)(threadIdx.x & 31u);
        __threadfence();
    }}
}}
__device__ __forceinline__ bool err_seen(int* err) {{
    int v;
    asm volatile("{poll_ld}.b32 %0, [%1];" : "=r"(v) : "l"(err) : "memory");
    return v != 0;
}}
"""


def _smem_layout(kernel: Kernel) -> tuple[dict[str, int], int]:
    offsets, off = {}, 0
    for b in kernel.shared_buffers:
        offsets[b.name] = off
        off += -(-4 * b.size // _SMEM_ALIGN_BYTES) * _SMEM_ALIGN_BYTES
    return offsets, off


def _param(b: Buffer) -> str:
    t = _CTYPE[b.dtype]
    if b.role == "in":
        return f"const {t}* __restrict__ g_{c_name(b.name)}"
    return f"{t}* g_{c_name(b.name)}"


def generate(kernel: Kernel, poll: str | None = None) -> CudaSource:
    """CUDA C for ``kernel`` (which should have passed :func:`kernels_ir.verify`).

    ``poll``: the PTX of polling loads, a key of :data:`POLL_MODES`; ``None`` takes the kernel's
    ``meta poll`` when it has one, else ``"relaxed_gpu"``.
    """
    if poll is None:
        poll = str(kernel.meta_value("poll", "relaxed_gpu"))
    if poll not in POLL_MODES:
        raise InputError(f"poll={poll!r} is unknown; accepted: {', '.join(POLL_MODES)}")
    ctx = _Ctx(kernel)
    ctx.poll = poll
    name = c_name(kernel.name)
    gbufs = kernel.global_buffers
    if any(b.name == "__err" for b in kernel.buffers):
        raise IRError(f"kernel {kernel.name}: buffer name '__err' is reserved for the error flag")
    offsets, smem = _smem_layout(kernel)
    params = [_param(b) for b in gbufs] + ["int* g___err"]
    lines = [_PRELUDE.format(name=kernel.name, grid=kernel.grid, block=kernel.block, smem=smem,
                             poll_ld=POLL_MODES[poll])]
    lines.append(f'extern "C" __global__ void __launch_bounds__({kernel.block}, 1)')
    lines.append(f"{name}({', '.join(params)})")
    lines.append("{")
    if kernel.shared_buffers:
        lines.append("    extern __shared__ __align__(128) unsigned char smem_raw[];")
        for b in kernel.shared_buffers:
            t = _CTYPE[b.dtype]
            lines.append(f"    {t}* s_{c_name(b.name)} = reinterpret_cast<{t}*>(smem_raw + "
                         f"{offsets[b.name]});  // {b.size} words")
    for r in kernel.regs:
        t = _CTYPE[r.dtype]
        base = f"r_{c_name(r.name)}"
        names = [base] if r.size == 1 else [f"{base}_{i}" for i in range(r.size)]
        for i in range(0, len(names), 16):
            lines.append(f"    {t} {', '.join(names[i:i + 16])};")
    lines += _body(kernel.body, ctx, 1)
    lines.append("}")
    return CudaSource(name=name, code="\n".join(lines) + "\n",
                      params=tuple(b.name for b in gbufs), grid=kernel.grid, block=kernel.block,
                      smem_bytes=smem, spin_labels=tuple(ctx.spin_labels))
