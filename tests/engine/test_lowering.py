"""The IR instructions that SASS does not issue (``gpusim.engine.lowering``): the rules on small
kernels, the SASS of the Lamport poll check against what the engine issues, and the timing model
charging a folded instruction nothing."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpusim.engine import simulate
from gpusim.engine.lowering import folded_instructions
from gpusim.specs import load_spec
from kernels_ir import sass
from kernels_ir.builder import Builder
from kernels_ir.codegen_cuda import generate
from kernels_ir.ir import F32, I32, PRED, If, Instr, Op, While, instructions
from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer

NVCC = shutil.which("nvcc")
CUOBJDUMP = sass.find_cuobjdump()


def _kernel(body):
    """A one-warp kernel whose body ``body(b, x)`` builds from a float register ``x``."""
    b = Builder("lower", grid=1, block=32)
    out = b.global_buffer("out", F32, 32, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    x = b.i2f(tid, dst=b.reg(F32, "x"))
    body(b, x)
    b.stg(out, tid, x)
    return b.build()


def _ops(kernel):
    ins = list(instructions(kernel))
    return [ins[i].op for i in sorted(folded_instructions(kernel))]


def test_bitcast_and_a_combine_right_after_its_compare_are_folded():
    def body(b, x):
        bits = b.bitcast(x, I32, dst=b.reg(I32, "bits"))
        one = b.isetp("eq", bits, 7, dst=b.reg(PRED, "one"))
        acc = b.por(one, one, dst=b.reg(PRED, "acc"))          # right after its ISETP
        b.pand(acc, one, dst=acc)                              # after a POR: issued
    assert _ops(_kernel(body)) == [Op.BITCAST, Op.POR]


def test_a_block_boundary_or_another_instruction_between_keeps_the_combine():
    def body(b, x):
        bits = b.bitcast(x, I32, dst=b.reg(I32, "bits"))
        one = b.isetp("eq", bits, 7, dst=b.reg(PRED, "one"))
        with b.if_(one):
            b.por(one, one, dst=b.reg(PRED, "inside"))        # first of its block
        two = b.isetp("lt", bits, 3, dst=b.reg(PRED, "two"))
        b.iadd(bits, 1, dst=bits)
        b.por(two, one, dst=b.reg(PRED, "late"))              # an IADD between
    assert _ops(_kernel(body)) == [Op.BITCAST]


def test_constant_predicates_and_zeroed_register_pairs_are_folded():
    def body(b, x):
        b.mov(False, PRED, dst=b.reg(PRED, "waiting"))        # the PT operand
        v = b.reg(F32, "v", 4)
        for k in range(4):                                    # two CS2R
            b.mov(0.0, dst=v[k])
        w = b.reg(F32, "w", 2)
        b.mov(1.0, dst=w[0])
        b.mov(0.0, dst=w[1])                                  # its pair is not 0: issued
        b.fadd(v[3], w[1], dst=x)
    assert _ops(_kernel(body)) == [Op.MOV, Op.MOV, Op.MOV]


def test_a_folded_instruction_costs_no_issue_and_no_latency():
    """A chain of N dependent BITCASTs is free; the same chain of IADDs costs N latencies."""
    spec = load_spec("h100")

    def chain(op):
        def body(b, x):
            r = b.bitcast(x, I32, dst=b.reg(I32, "r"))
            f = b.reg(F32, "f")
            for _ in range(16):
                if op == "bitcast":
                    b.bitcast(b.bitcast(r, F32, dst=f), I32, dst=r)
                else:
                    b.iadd(r, 0, dst=r)
            b.i2f(r, dst=x)
        return _kernel(body)

    free, paid = (simulate(chain(op), {}, spec).cycles for op in ("bitcast", "iadd"))
    assert paid - free >= 16 * spec.alu_latency_cycles - 1


def _engine_checks(kernel) -> tuple[int, int]:
    """(issued, all) IR instructions of the Lamport poll loop's check, after its loads."""
    inside: list[bool] = []

    def visit(body, poll):
        for st in body:
            if isinstance(st, Instr):
                inside.append(poll)
            elif isinstance(st, If):
                visit(st.then, poll)
                visit(st.orelse, poll)
            else:
                visit(st.body, poll or (isinstance(st, While) and st.label == "lamport_poll"))

    visit(kernel.body, False)
    ins = list(instructions(kernel))
    folded = folded_instructions(kernel)
    check = [i for i, x in enumerate(ins) if inside[i]
             and x.op not in (Op.LDG_VOLATILE, Op.VOTE_ANY, Op.IADD, Op.SEL)]
    return sum(i not in folded for i in check), len(check)


def _sass_checks(kernel, tmp_path) -> int:
    """ISETP and PLOP3 between the first poll's last 128-bit load and its VOTE.ANY (sm_90)."""
    cu, cubin = tmp_path / "k.cu", tmp_path / "k.cubin"
    cu.write_text(generate(kernel).code)
    p = subprocess.run([NVCC, "-cubin", "-arch=sm_90", str(cu), "-o", str(cubin)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    ins = sass.parse(sass.disassemble(cubin, cuobjdump=CUOBJDUMP))
    vote = next(i.index for i in ins if i.opcode.startswith("VOTE.ANY"))
    last = max(i.index for i in ins[:vote] if i.opcode.startswith("LDG.E.128.STRONG"))
    return sum(1 for i in ins[last + 1:vote] if i.opcode.startswith(("ISETP", "PLOP3")))


@pytest.mark.skipif(NVCC is None or CUOBJDUMP is None, reason="needs nvcc and cuobjdump")
@pytest.mark.parametrize("hidden,batch", [(1024, 4), (312, 4), (400, 1)])
def test_the_poll_check_issues_what_its_sass_issues(hidden, batch, tmp_path):
    """hidden 1024 x batch 4 fills its staging groups: one ISETP a word in SASS, as the engine
    issues. 312 x 4 and 400 x 1 end inside a group, and the IR guards every word
    (``ISETP``, ``PAND`` with the chunk's ``inside``, ``POR``): the engine issues two a word,
    while ptxas also factors the guard out of a chunk's words ((a & g) | (b & g) = (a | b) & g:
    400 x 1, 5 SASS instructions for 4 words against the engine's 8). So the fold closes most
    of the gap, not all of it."""
    kernel = build_sparse_rnn(make_layer(hidden, batch, 0.1, 4, 0), load_spec("h100"),
                              sync="lamport", wide_loads=True).kernel
    issued, every = _engine_checks(kernel)
    want = _sass_checks(kernel, tmp_path)
    assert every >= 2 * want                      # the IR alone would charge twice as many
    assert abs(issued - want) <= 0.25 * abs(every - want), (issued, every, want)
    if hidden * batch % 4096 == 0:                # no guard: the same count within one
        assert abs(issued - want) <= 1, (issued, want)
