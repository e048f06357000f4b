"""Random small kernels from the builder: the verifier, the executor and the timing model agree.

Property: either :func:`verify` rejects the kernel with one :class:`VerifyError`, and then
``execute`` and ``simulate`` reject it with the same message before any work; or it passes, and
``execute`` and ``simulate`` run deterministically (the same values twice; the same values as
each other) or stop with :class:`InputError` (a bad address at run time, a division by zero) or
:class:`DeadlockError` (warps that wait forever) -- never another exception, and in bounded time.

The generator mixes valid programs with the errors the verifier must catch: registers used
before they are set, operands of the wrong type, stores to read-only buffers, barriers under
thread-dependent branches, spins on flags that may never be written, divisions by zero.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpusim.engine import execute, simulate
from gpusim.specs import load_spec
from kernels_ir import F32, I32, Builder, DeadlockError, Imm, InputError, Op, VerifyError
from kernels_ir import verify as verify_kernel

SPEC = dataclasses.replace(load_spec("v100"), sm_count=2)
WORDS = 64
INT_OPS = ("iadd", "isub", "imul", "and_", "or_", "xor", "imin", "imax", "shl", "shr")
FLOAT_OPS = ("fadd", "fsub", "fmul", "fmax", "fmin")


class _Gen:
    """Draws one kernel, statement by statement, from ``data``."""

    def __init__(self, data):
        self.d = data
        grid = data.draw(st.sampled_from([1, 2]), label="grid")
        block = data.draw(st.sampled_from([32, 64]), label="block")
        b = self.b = Builder("rand", grid=grid, block=block)
        self.inb = b.global_buffer("inb", I32, WORDS)
        self.fin = b.global_buffer("fin", F32, WORDS)
        self.out = b.global_buffer("out", I32, WORDS, role="inout")
        self.fout = b.global_buffer("fout", F32, WORDS, role="out")
        self.flag = b.global_buffer("flag", I32, 4, role="inout")
        self.s = b.shared("s", I32, WORDS)
        self.ints = [b.sreg(k) for k in ("lane", "tid", "warp", "cta")]
        self.floats = [b.i2f(self.ints[1])]
        self.preds = [b.isetp("lt", self.ints[0], 16)]
        self.budget = 40

    def pick(self, pool, label):
        return pool[self.d.draw(st.integers(0, len(pool) - 1), label=label)]

    def int_operand(self):
        if self.d.draw(st.integers(0, 4), label="imm?") == 0:
            return self.d.draw(st.integers(-3, 70), label="imm")
        return self.pick(self.ints, "int")

    def index(self):
        """An address inside the buffers, except sometimes (a run-time bounds error)."""
        x = self.pick(self.ints, "addr")
        if self.d.draw(st.integers(0, 9), label="raw addr?") == 0:
            return x
        return self.b.and_(x, WORDS - 1)

    def stmt(self, depth: int) -> None:
        self.budget -= 1
        b, d = self.b, self.d
        kinds = ["int", "float", "cmp", "sel", "conv", "ldg", "stg", "sts_lds", "atom", "warp",
                 "div", "bar", "fence"]
        if depth < 2:
            kinds += ["if", "loop", "spin", "count"]
        if d.draw(st.integers(0, 11), label="error?") == 5:   # now and then (not an end value)
            kinds = ["bad_type", "undef", "bad_store"]
        k = d.draw(st.sampled_from(kinds), label="stmt")
        if k == "int":
            op = d.draw(st.sampled_from(INT_OPS), label="iop")
            self.ints.append(getattr(b, op)(self.int_operand(), self.int_operand()))
        elif k == "float":
            op = d.draw(st.sampled_from(FLOAT_OPS), label="fop")
            self.floats.append(getattr(b, op)(self.pick(self.floats, "f"), 0.5))
        elif k == "cmp":
            self.preds.append(b.isetp(d.draw(st.sampled_from(["lt", "eq", "ne"]), label="cmp"),
                                      self.int_operand(), self.int_operand()))
        elif k == "sel":
            self.ints.append(b.sel(self.pick(self.preds, "p"), self.int_operand(),
                                   self.int_operand()))
        elif k == "conv":
            self.floats.append(b.i2f(self.int_operand()))
            self.ints.append(b.f2i(self.pick(self.floats, "f")))
        elif k == "ldg":
            self.ints.append(b.ldg(self.inb, self.index()))
            self.floats.append(b.ldg(self.fin, self.index()))
        elif k == "stg":
            b.stg(self.out, self.index(), self.int_operand())
            b.stg(self.fout, self.index(), self.pick(self.floats, "f"))
        elif k == "sts_lds":
            b.sts(self.s, self.index(), self.int_operand())
            self.ints.append(b.lds(self.s, self.index()))
        elif k == "atom":
            self.ints.append(b.atom_add(self.flag, d.draw(st.integers(0, 3), label="fi"), 1))
        elif k == "warp":
            self.ints.append(b.shfl_xor(self.pick(self.ints, "v"), 1))
            self.preds.append(b.vote_any(self.pick(self.preds, "p")))
        elif k == "div":
            self.ints.append(b.idiv(self.int_operand(), self.int_operand()))
        elif k == "bad_type":                         # an i32 register into a float op
            f = b.reg(F32)
            b.emit(Op.FADD, (f,), (self.pick(self.ints, "i"), Imm(1.0, F32)))
            self.floats.append(f)
        elif k == "undef":                            # a register nobody set, read
            self.ints.append(b.iadd(b.reg(I32), 1))
        elif k == "bad_store":                        # a store to a read-only buffer
            b.stg(self.inb, self.index(), self.int_operand())
        elif k == "bar":
            b.bar()
        elif k == "fence":
            b.fence()
        elif k == "if":
            p = self.pick(self.preds, "p")
            with b.if_(p):
                if d.draw(st.integers(0, 3), label="bar in if?") == 2:
                    b.bar()                           # fine only if p is uniform in the CTA
                self.block(depth + 1)
            if d.draw(st.booleans(), label="else?"):
                with b.else_():
                    self.block(depth + 1)
        elif k == "loop":
            with b.loop(f"i{self.budget}_{depth}", 0, d.draw(st.integers(0, 3), label="trip")) \
                    as i:
                self.ints.append(i)
                self.block(depth + 1)
                self.ints.remove(i)
        elif k == "spin":                             # wait for a flag word (may never come)
            fi = d.draw(st.integers(0, 3), label="flag")
            n = b.mov(0, I32, dst=b.reg(I32)) if d.draw(st.booleans(), label="count?") \
                else None
            with b.while_(spin_limit=64, label=f"spin{self.budget}") as w:
                if n is not None:                     # counts its passes (and stores them)
                    b.iadd(n, 1, dst=n)
                    b.stg(self.out, self.index(), n)
                v = b.ldg_volatile(self.flag, fi)
                w.cond = b.isetp("eq", v, 0)
            self.ints.append(v)
        else:                                         # a loop that counts to a bound
            n = b.mov(0, I32, dst=b.reg(I32))
            lim = d.draw(st.integers(1, 5), label="bound")
            with b.while_(spin_limit=64, label=f"count{self.budget}") as w:
                b.iadd(n, 1, dst=n)
                w.cond = b.isetp("lt", n, lim)
            self.ints.append(n)

    def block(self, depth: int) -> None:
        ints, floats, preds = list(self.ints), list(self.floats), list(self.preds)
        for _ in range(self.d.draw(st.integers(0, 4), label="len")):
            if self.budget <= 0:
                break
            self.stmt(depth)
        # values set inside a block are not defined after it on every path: forget them
        self.ints, self.floats, self.preds = ints, floats, preds

    def build(self):
        for _ in range(self.d.draw(st.integers(1, 8), label="top")):
            if self.budget <= 0:
                break
            self.stmt(0)
        b = self.b
        b.stg(self.out, self.b.and_(self.ints[1], WORDS - 1), self.pick(self.ints, "last"))
        return b.build()


def _inputs(data):
    rng = np.random.default_rng(data.draw(st.integers(0, 3), label="seed"))
    return {"inb": rng.integers(-4, 80, WORDS).astype(np.int32),
            "fin": rng.standard_normal(WORDS).astype(np.float32),
            "out": np.zeros(WORDS, np.int32),
            "flag": np.array(data.draw(st.lists(st.integers(0, 1), min_size=4, max_size=4),
                                       label="flags"), np.int32)}


def _outcome(run):
    """What a run gives: ("ok", globals) or (error type name, message)."""
    try:
        r = run()
    except (DeadlockError, InputError) as exc:
        return (type(exc).__name__, str(exc))
    return ("ok", {k: v.tobytes() for k, v in r.globals.items()})


@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_random_kernels_verify_or_run_deterministically(data):
    kernel = _Gen(data).build()
    inputs = _inputs(data)
    t0 = time.perf_counter()
    try:
        verify_kernel(kernel)
        verdict = None
    except VerifyError as exc:
        verdict = str(exc)
    if verdict is not None:
        for run in (lambda: execute(kernel, inputs), lambda: simulate(kernel, inputs, SPEC)):
            try:
                run()
            except VerifyError as exc:
                assert str(exc) == verdict
            else:
                raise AssertionError("a kernel the verifier rejects ran")
        return
    first = _outcome(lambda: execute(kernel, inputs))
    assert _outcome(lambda: execute(kernel, inputs)) == first
    sim = _outcome(lambda: simulate(kernel, inputs, SPEC))
    assert _outcome(lambda: simulate(kernel, inputs, SPEC)) == sim
    if first[0] == "ok" and sim[0] == "ok":
        assert sim[1] == first[1]                 # the timing model never changes a value
    elif first[0] != "ok":
        assert sim[0] == first[0]                 # the same failure, seen by both
    assert time.perf_counter() - t0 < 20.0


def test_generator_covers_every_outcome():
    """The generator reaches each outcome class (so the property is not vacuous)."""
    seen = set()

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def probe(data):
        kernel = _Gen(data).build()
        try:
            verify_kernel(kernel)
        except VerifyError as exc:
            text = str(exc)
            for what in ("used before it is defined", "type mismatch", "read-only",
                         "divergent control"):
                if what in text:
                    seen.add(what)
            return
        seen.add(_outcome(lambda: execute(kernel, _inputs(data)))[0])

    probe()
    assert {"used before it is defined", "type mismatch", "read-only", "divergent control",
            "ok", "DeadlockError", "InputError"} <= seen
