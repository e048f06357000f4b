"""The verifier rejects each kind of malformed IR with a message naming the instruction."""

from __future__ import annotations

import dataclasses

import pytest

from kernels_ir import (
    F32,
    I32,
    PRED,
    Builder,
    Imm,
    Instr,
    Kernel,
    MemRef,
    Op,
    Reg,
    RegRef,
    VerifyError,
    While,
    format_kernel,
    verify,
)


def _base() -> Builder:
    b = Builder("k", grid=2, block=64)
    b.global_buffer("x", F32, 128)
    b.global_buffer("y", F32, 128, role="out")
    b.shared("s", F32, 64)
    return b


def _replace_body(kernel: Kernel, *stmts) -> Kernel:
    return dataclasses.replace(kernel, body=kernel.body + tuple(stmts))


def test_valid_kernel_passes_and_prints_stably():
    b = _base()
    x, y, s = (b._buffers[n] for n in ("x", "y", "s"))
    tid = b.sreg("tid")
    v = b.ldg(x, tid)
    with b.loop("t", 0, 3, kind="time"):
        b.fadd(v, 1.0, dst=v)
        with b.if_(b.isetp("lt", tid, 32)):
            b.sts(s, tid, v)
        with b.else_():
            b.stg(y, tid, v)
    k = verify(b.build())
    assert format_kernel(k) == format_kernel(k)
    text = format_kernel(k)
    assert "loop.time %t = 0 .. 3 {" in text
    assert "sts.32 shared:s[%r1], %r2" in text


def test_use_before_definition_names_instruction():
    b = _base()
    y = b._buffers["y"]
    v = b.reg(F32, "v")
    tid = b.sreg("tid")
    b.stg(y, tid, v)
    with pytest.raises(VerifyError, match=r"stg.32 global:y\[%r1\], %v`: %v is used before"):
        verify(b.build())


def test_defined_in_one_branch_only_is_not_defined_after():
    b = _base()
    y = b._buffers["y"]
    tid = b.sreg("tid")
    v = b.reg(F32, "v")
    with b.if_(b.isetp("lt", tid, 3)):
        b.mov(1.0, dst=v)
    b.stg(y, tid, v)
    with pytest.raises(VerifyError, match="used before it is defined"):
        verify(b.build())


def test_type_mismatch():
    b = _base()
    tid = b.sreg("tid")
    f = b.reg(F32, "f")
    b.emit(Op.FADD, (f,), (tid, Imm(1.0, F32)))
    with pytest.raises(VerifyError,
                       match=r"%f = fadd %r1, 1.0`: type mismatch: operand %r1 is i32"):
        verify(b.build())


def test_out_of_range_register_index():
    b = _base()
    arr = b.reg(F32, "w", size=4)
    k = b.build()
    bad = Instr(Op.MOV, (RegRef(arr, 4),), (Imm(0.0, F32),))
    with pytest.raises(VerifyError, match=r"mov 0.0`: index 4 is out of range for %w\[4\]"):
        verify(_replace_body(k, bad))


def test_shared_memory_over_declared_size():
    b = _base()
    s = b._buffers["s"]
    b.sts(s, 62, (1.0, 2.0, 3.0, 4.0))  # words 62..65 of a 64-word array
    with pytest.raises(VerifyError, match=r"outside the shared memory s\[64\] as declared"):
        verify(b.build())


def test_shared_memory_over_target_limit():
    b = Builder("big", grid=1, block=32)
    b.shared("s", F32, 30000)
    with pytest.raises(VerifyError, match="shared memory 120000 bytes exceeds the limit of "
                                          "98304 bytes"):
        verify(b.build(), smem_limit_bytes=98304)


def test_unstructured_control_raw_jump():
    k = _base().build()
    with pytest.raises(VerifyError, match="unstructured control: .*'goto'"):
        verify(_replace_body(k, ("goto", "label0")))


def test_unstructured_control_write_to_induction_variable():
    b = _base()
    with b.loop("i", 0, 4) as i:
        b.iadd(i, 1, dst=i)
    with pytest.raises(VerifyError, match="writes the induction register %i"):
        verify(b.build())


def test_unstructured_control_spin_without_condition_update():
    b = _base()
    p = b.isetp("eq", b.sreg("tid"), 0)
    k = b.build()
    spin = While((), p, 10, "stuck")
    with pytest.raises(VerifyError, match="never computes its condition"):
        verify(_replace_body(k, spin))


def test_memory_width_and_operand_count():
    b = _base()
    x = b._buffers["x"]
    r = b.reg(F32, "r", 2)
    b.emit(Op.LDG, (r[0], r[1]), (MemRef(x, Imm(0, I32), 0),), width=4)
    with pytest.raises(VerifyError, match="a 128-bit load writes 4 registers, got 2"):
        verify(b.build())


def test_store_to_read_only_buffer():
    b = _base()
    x = b._buffers["x"]
    b.stg(x, 0, 1.0)
    with pytest.raises(VerifyError, match="declared read-only"):
        verify(b.build())


def test_missing_attribute():
    b = _base()
    p = b.reg(PRED, "p")
    b.emit(Op.ISETP, (p,), (Imm(1, I32), Imm(2, I32)))
    with pytest.raises(VerifyError, match="missing attribute 'cmp'"):
        verify(b.build())


def test_undeclared_register():
    k = _base().build()
    ghost = Reg("ghost", F32)
    with pytest.raises(VerifyError, match="register %ghost is not declared"):
        verify(_replace_body(k, Instr(Op.MOV, (ghost[0],), (Imm(1.0, F32),))))


def test_every_op_has_signature_and_class():
    from kernels_ir.ir import OP_CLASSES, SIGNATURES

    for op in Op:
        assert op in SIGNATURES
        assert sum(op in ops for ops in OP_CLASSES.values()) == 1, op
