"""The verifier: a kernel either passes all checks or one :class:`VerifyError` names the problem.

Checks (each names the offending instruction by its path and printed form):
- use before definition (flow-sensitive over the structured control: a register element defined
  only in one branch of an ``if`` is not defined after it);
- operand and result types against :data:`kernels_ir.ir.SIGNATURES`;
- register-array indices outside ``0 .. size-1``; required attributes and their values;
- memory: constant addresses outside the declared buffer, access width vs operand count, shared
  memory over the declared (or the target's) size, stores into read-only global buffers;
- unstructured control: anything in a body that is not an Instr/Loop/While/If, writes to a loop's
  induction register inside the loop, a spin loop whose condition is not computed in its body;
- CTA barriers under divergent control: a ``bar`` inside an ``if`` or ``while`` whose condition
  can differ between the threads of a CTA (it depends on ``lane``/``warp``/``tid``, on a polled
  or atomic value, or on a value written under such a condition). On the GPU the threads that do
  not take that path never arrive and the CTA hangs; a condition uniform across the CTA (the CTA
  id, loop counters, constants, values loaded from uniform addresses) is accepted;
- resources: buffer sizes the IR can address (i32 word indices), the block size, and with a
  target ``spec`` its threads per CTA, shared memory per CTA and registers per thread (no single
  register array may exceed them).

The checks are linear in the kernel's size except the barrier analysis, which runs only when a
barrier sits inside an ``if`` or ``while`` and then iterates loops to a fixed point.
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
    SLEEP_MAX_NS,
    STATEMENT_TYPES,
    WARP_OPS,
    Buffer,
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
from .printer import format_instr

_MEM_OPS = {Op.LDS, Op.STS, Op.LDG, Op.LDG_VOLATILE, Op.STG, Op.ATOM_ADD}
WARP = 32
MAX_BLOCK = 1024           # threads per CTA, the builder's bound (a spec may lower it)
MAX_WORDS = (1 << 31) - 1  # a buffer is addressed by i32 word indices
ROLES = ("in", "out", "inout", "scratch")
_NONE: frozenset = frozenset()


class _Verifier:
    def __init__(self, kernel: Kernel, smem_limit_bytes: int | None, spec=None):
        self.k = kernel
        self.smem_limit = smem_limit_bytes
        self.spec = spec
        self.regs = {r.name: r for r in kernel.regs}
        self.buffers = {b.name: b for b in kernel.buffers}
        self.loop_vars: list[str] = []

    def fail(self, where: str, instr: Instr | None, message: str) -> None:
        text = f" `{format_instr(instr)}`" if instr is not None else ""
        raise VerifyError(f"kernel {self.k.name}: {where}{text}: {message}")

    # -- declarations --------------------------------------------------------------------------
    def check_decls(self) -> None:
        k, spec = self.k, self.spec
        name = k.name
        if not isinstance(k.grid, int) or k.grid < 1:
            raise VerifyError(f"kernel {name}: grid={k.grid!r}; accepted: an int >= 1")
        max_block = MAX_BLOCK if spec is None else int(spec.max_threads_per_cta)
        where = "" if spec is None else f" on {spec.name} (max_threads_per_cta)"
        if not isinstance(k.block, int) or not WARP <= k.block <= max_block:
            raise VerifyError(f"kernel {name}: block={k.block!r} threads; accepted: "
                              f"{WARP}..{max_block}{where}")
        if k.block % WARP:
            raise VerifyError(f"kernel {name}: block={k.block} is not a multiple of 32 "
                              f"(whole warps only)")
        seen: set[str] = set()
        for b in k.buffers:
            if b.name in seen:
                raise VerifyError(f"kernel {name}: buffer {b.name!r} is declared twice")
            seen.add(b.name)
            if b.space not in ("shared", "global"):
                raise VerifyError(f"kernel {name}: buffer {b.name} has space {b.space!r}; "
                                  f"accepted: 'shared', 'global'")
            if b.dtype not in (F32, I32):
                raise VerifyError(f"kernel {name}: buffer {b.name} has type {b.dtype}; "
                                  f"accepted: f32, i32")
            if b.space == "global" and b.role not in ROLES:
                raise VerifyError(f"kernel {name}: global buffer {b.name} has role {b.role!r}; "
                                  f"accepted: {', '.join(repr(r) for r in ROLES)}")
            if not isinstance(b.size, int) or not 1 <= b.size <= MAX_WORDS:
                raise VerifyError(f"kernel {name}: buffer {b.name} has {b.size!r} words; "
                                  f"accepted: 1..{MAX_WORDS} (addressed by i32 word indices)")
        seen.clear()
        for r in k.regs:
            if r.name in seen:
                raise VerifyError(f"kernel {name}: register %{r.name} is declared twice")
            seen.add(r.name)
            if r.dtype not in (F32, I32, PRED):
                raise VerifyError(f"kernel {name}: register %{r.name} has type {r.dtype!r}; "
                                  f"accepted: f32, i32, pred")
            top = MAX_WORDS if spec is None else int(spec.max_regs_per_thread)
            if not isinstance(r.size, int) or not 1 <= r.size <= top:
                on = "" if spec is None else \
                    f" (a thread's registers on {spec.name}, max_regs_per_thread)"
                raise VerifyError(f"kernel {name}: register %{r.name} has size {r.size!r}; "
                                  f"accepted: 1..{top}{on}")
        smem = k.shared_bytes
        limits = []
        if self.smem_limit is not None:
            limits.append((int(self.smem_limit), ""))
        if spec is not None:
            limits.append((int(spec.smem_bytes_per_cta), f" on {spec.name} (smem_bytes_per_cta)"))
        for limit, on in limits:
            if smem > limit:
                big = max(k.shared_buffers, key=lambda b: b.size)
                raise VerifyError(f"kernel {name}: shared memory {smem} bytes exceeds the "
                                  f"limit of {limit} bytes per CTA{on} (largest array: "
                                  f"{big.name}[{big.size}], {4 * big.size} bytes); accepted: "
                                  f"at most {limit} bytes of shared arrays")

    # -- operands ------------------------------------------------------------------------------
    def check_ref(self, where: str, instr: Instr, ref: RegRef, defined: set, use: bool) -> None:
        r = ref.reg
        reg = self.regs.get(r.name)
        if reg is not r and (reg is None or reg != r):
            self.fail(where, instr, f"register %{r.name} is not declared in the kernel")
        if not 0 <= ref.index < reg.size:
            self.fail(where, instr, f"index {ref.index} is out of range for %{reg.name}"
                      f"[{reg.size}] (accepted 0..{reg.size - 1})")
        if use and (r.name, ref.index) not in defined:
            self.fail(where, instr, f"{ref} is used before it is defined (accepted: a "
                      f"register set on every path before its use)")

    def operand_type(self, x) -> object:
        return x.dtype

    def check_mem(self, where: str, instr: Instr, mem: MemRef, defined: set, width: int) -> None:
        buf = self.buffers.get(mem.buffer.name)
        if buf is not mem.buffer and (buf is None or buf != mem.buffer):
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
            self.fail(where, instr, f"writes to {buf.name}, which is declared read-only ('in'); "
                      f"accepted: stores to global buffers declared 'out', 'inout' or "
                      f"'scratch'")

    def check_instr(self, where: str, instr: Instr, defined: set) -> None:
        op = instr.op
        if op not in SIGNATURES:
            self.fail(where, instr, f"unknown op {op!r}")
        required = REQUIRED_ATTRS.get(op)
        if required:
            for name, allowed in required.items():
                value = instr.attr(name)
                if value is None:
                    self.fail(where, instr, f"missing attribute {name!r}")
                if allowed is not None and value not in allowed:
                    self.fail(where, instr, f"attribute {name}={value!r}; accepted: {allowed}")
        dst_types, src_types = SIGNATURES[op]
        if op in _MEM_OPS:
            width = int(instr.attr("width", 1))
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
            if op == Op.SLEEP:
                ns = instr.srcs[0]
                if not isinstance(ns, Imm) or not 0 <= int(ns.value) <= SLEEP_MAX_NS:
                    self.fail(where, instr, f"nanosleep of {ns!r}; accepted: an immediate of 0 "
                              f"to {SLEEP_MAX_NS} ns")
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
        loop_vars = self.loop_vars
        for d in instr.dsts:
            name = d.reg.name
            if loop_vars and name in loop_vars:
                self.fail(where, instr, f"unstructured control: writes the induction register "
                          f"%{name} of an enclosing loop")
            defined.add((name, d.index))

    def check_src(self, where, instr, s, dtype, defined) -> None:
        if s.__class__ is RegRef or isinstance(s, RegRef):
            self.check_ref(where, instr, s, defined, use=True)
        elif not isinstance(s, Imm):
            self.fail(where, instr, f"operand {s!r} is not a register or immediate")
        if s.dtype is not dtype:
            self.fail(where, instr, f"type mismatch: operand {s} is {s.dtype}, {instr.op} "
                      f"expects {dtype}")

    def check_dst(self, where, instr, d, dtype) -> None:
        if not isinstance(d, RegRef):
            self.fail(where, instr, f"result {d!r} is not a register")
        self.check_ref(where, instr, d, _NONE, use=False)
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


# --- barriers under divergent control --------------------------------------------------------

_THREAD_SREGS = frozenset({"lane", "warp", "tid"})
# results that differ between threads even at one address: a polled (L2-coherent) load sees
# other CTAs' stores at different times in different warps; an atomic returns a different old
# value to every thread
_TIME_VARYING = frozenset({Op.LDG_VOLATILE, Op.ATOM_ADD})
_ACCEPTED_BAR = ("accepted: a barrier outside any if/while, or under conditions uniform across "
                 "the CTA (the CTA id, loop counters, constants, plain loads from uniform "
                 "addresses)")


def _nested_barrier(body: tuple, nested: bool = False) -> bool:
    """True if some ``bar`` sits inside an ``if`` or ``while`` (only then is the analysis run)."""
    for s in body:
        if isinstance(s, Instr):
            if nested and s.op is Op.BAR:
                return True
        elif isinstance(s, Loop):
            if _nested_barrier(s.body, nested):
                return True
        elif isinstance(s, While):
            if _nested_barrier(s.body, True):
                return True
        elif isinstance(s, If):
            if _nested_barrier(s.then, True) or _nested_barrier(s.orelse, True):
                return True
    return False


class _Divergence:
    """Which register elements may differ between the threads of one CTA: a forward
    may-analysis over the structured control (a union at joins, loops to a fixed point). A
    value is divergent when it comes from ``lane``/``warp``/``tid``, from a polled load or an
    atomic, from a divergent operand (for a load: a divergent address), or when it is written
    under divergent control. A ``bar`` under divergent control is an error."""

    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.why: dict[tuple, tuple] = {}  # element -> (instr, reason) that first made it vary

    def run(self) -> None:
        self.body(self.k.body, set(), None, "body")

    def body(self, stmts: tuple, V: set, ctrl, where: str) -> set:
        for i, s in enumerate(stmts):
            here = f"{where}/{i}"
            if isinstance(s, Instr):
                self.instr(s, V, ctrl, here)
            elif isinstance(s, Loop):
                var = (s.var.name, 0)
                entry, out = set(V), set(V)
                while True:
                    inner = set(entry)
                    if ctrl is not None:
                        inner.add(var)
                        self.why.setdefault(var, (None, ("under", ctrl)))
                    else:
                        inner.discard(var)
                    out = self.body(s.body, inner, ctrl, here + f"/loop %{s.var.name}")
                    new = entry | out
                    if new == entry:
                        break
                    entry = new
                if s.trip_count > 0:
                    V = out
            elif isinstance(s, While):
                cond = (s.cond.reg.name, s.cond.index)
                entry, cv = set(V), ctrl
                while True:
                    out = self.body(s.body, set(entry), cv, here + f"/while {s.label}")
                    if cv is None and cond in out:
                        cv = ("while", here, s.cond)   # threads leave at different passes
                        continue
                    new = entry | out
                    if new == entry:
                        break
                    entry = new
                V = out
            elif isinstance(s, If):
                cond = (s.cond.reg.name, s.cond.index)
                cv = ctrl if ctrl is not None else (("if", here, s.cond) if cond in V else None)
                a = self.body(s.then, set(V), cv, here + "/then")
                b = self.body(s.orelse, set(V), cv, here + "/else")
                V = a | b
        return V

    def instr(self, s: Instr, V: set, ctrl, where: str) -> None:
        if s.op is Op.BAR and ctrl is not None:
            self.fail_barrier(s, ctrl, where)
        reason = None
        if s.op is Op.SREG and s.attr("kind") in _THREAD_SREGS:
            reason = ("thread", s.attr("kind"))
        elif s.op in _TIME_VARYING:
            reason = ("polled",)
        else:
            srcs = s.srcs[:1] if s.op in WARP_OPS else s.srcs
            for x in srcs:
                ref = x.index if isinstance(x, MemRef) else x
                if isinstance(ref, RegRef) and (ref.reg.name, ref.index) in V:
                    reason = ("from", (ref.reg.name, ref.index), str(ref))
                    break
        if reason is None and ctrl is not None:
            reason = ("under", ctrl)
        for d in s.dsts:
            e = (d.reg.name, d.index)
            if reason is None:
                V.discard(e)
            else:
                if e not in V:
                    self.why[e] = (s, reason)
                V.add(e)

    def chain(self, ref: RegRef) -> str:
        """Why ``ref`` can differ between threads, following its sources (a few steps)."""
        parts, e, seen = [], (ref.reg.name, ref.index), set()
        name = str(ref)
        for _ in range(5):
            if e in seen or e not in self.why:
                break
            seen.add(e)
            ins, reason = self.why[e]
            text = f"`{format_instr(ins)}`" if ins is not None else "a loop counter"
            if reason[0] == "thread":
                parts.append(f"{name} from {text}: the thread's {reason[1]} id")
                break
            if reason[0] == "polled":
                parts.append(f"{name} from {text}: a polled or atomic value, which threads "
                             f"read at different times")
                break
            if reason[0] == "under":
                kind, at, cond = reason[1]
                parts.append(f"{name} written by {text} under the divergent {kind} at {at} "
                             f"(condition {cond})")
                break
            parts.append(f"{name} from {text}")
            e, name = reason[1], reason[2]
        return "; ".join(parts)

    def fail_barrier(self, s: Instr, ctrl, where: str) -> None:
        kind, at, cond = ctrl
        verb = "branches on" if kind == "if" else "loops while"
        raise VerifyError(
            f"kernel {self.k.name}: {where} `{format_instr(s)}`: CTA barrier under divergent "
            f"control: the {kind} at {at} {verb} {cond}, which can differ between the threads "
            f"of a CTA ({self.chain(cond)}); threads that do not reach this barrier never "
            f"arrive and the CTA hangs on the GPU; {_ACCEPTED_BAR}")


def _dsts(body: tuple):
    from .ir import walk

    for s in walk(body):
        if isinstance(s, Instr):
            yield from s.dsts


def verify(kernel: Kernel, smem_limit_bytes: int | None = None, *, spec=None) -> Kernel:
    """Check ``kernel``; return it unchanged or raise :class:`VerifyError` naming the problem.

    ``smem_limit_bytes``: the target's shared memory per CTA; when given, a kernel that declares
    more is rejected. ``spec``: a target GPU (a ``gpusim.specs.GPUSpec`` or any object with
    ``name``, ``smem_bytes_per_cta``, ``max_threads_per_cta`` and ``max_regs_per_thread``): its
    limits apply too. Without either, only what the IR itself can express is checked (the
    printer and tests use that).
    """
    if not isinstance(kernel, Kernel):
        raise VerifyError(f"verify() needs a Kernel, got {type(kernel).__name__}")
    for x, kind in [(b, Buffer) for b in kernel.buffers] + [(r, Reg) for r in kernel.regs]:
        if not isinstance(x, kind):
            raise VerifyError(f"kernel {kernel.name}: {x!r} is declared as a "
                              f"{kind.__name__.lower()} but is not a {kind.__name__}")
    v = _Verifier(kernel, smem_limit_bytes, spec)
    v.check_decls()
    v.body(kernel.body, set(), "body")
    if _nested_barrier(kernel.body):
        _Divergence(kernel).run()
    return kernel


__all__ = ["verify", "Buffer"]
