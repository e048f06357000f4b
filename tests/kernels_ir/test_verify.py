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


# --- barriers under divergent control -----------------------------------------------------------


def _bar_under(cond_of) -> Kernel:
    b = Builder("bar", grid=2, block=64)
    b.global_buffer("flag", I32, 4, role="inout")
    with b.if_(cond_of(b)):
        b.bar()
    return b.build()


@pytest.mark.parametrize("kind", ["warp", "lane", "tid"])
def test_barrier_under_thread_dependent_if_is_rejected(kind):
    k = _bar_under(lambda b: b.isetp("eq", b.sreg(kind), 0))
    with pytest.raises(VerifyError, match=rf"body/2/then/0 `bar`: CTA barrier under divergent "
                                          rf"control: the if at body/2 branches on %r2.*"
                                          rf"`%r1 = sreg.{kind}`: the thread's {kind} id.*"
                                          rf"accepted: a barrier outside any if/while"):
        verify(k)


@pytest.mark.parametrize("kind", ["cta", "nctas", "nwarps", "nthreads"])
def test_barrier_under_cta_uniform_if_passes(kind):
    verify(_bar_under(lambda b: b.isetp("eq", b.sreg(kind), 0)))


def test_barrier_under_loop_counter_and_plain_uniform_load_passes():
    b = Builder("uni", grid=2, block=64)
    cfg = b.global_buffer("cfg", I32, 4)
    n = b.ldg(cfg, 1)                                 # the same word for every thread
    tid = b.sreg("tid")
    x = b.iadd(tid, 1)
    b.mov(3, dst=x)                                   # overwritten with a uniform value
    with b.loop("i", 0, 4) as i:
        with b.if_(b.isetp("lt", i, n)):
            b.bar()
        with b.if_(b.isetp("eq", x, 3)):
            b.bar()
    verify(b.build())


def test_barrier_inside_spin_on_polled_value_is_rejected():
    b = Builder("spin_bar", grid=2, block=64)
    flag = b.global_buffer("flag", I32, 1, role="inout")
    with b.while_(label="poll") as w:
        b.bar()
        w.cond = b.isetp("eq", b.ldg_volatile(flag, 0), 0)
    with pytest.raises(VerifyError, match=r"body/0/while poll/0 `bar`: .*the while at body/0 "
                                          r"loops while %r2.*a polled or atomic value"):
        verify(b.build())


def test_value_written_under_divergent_if_makes_a_later_if_divergent():
    b = Builder("taint", grid=1, block=64)
    x = b.mov(0, I32, dst=b.reg(I32, "x"))
    with b.if_(b.isetp("eq", b.sreg("warp"), 0)):
        b.mov(1, dst=x)
    with b.loop("i", 0, 2):
        with b.if_(b.isetp("eq", x, 1)):
            b.bar()
    with pytest.raises(VerifyError, match=r"%x written by `%x = mov 1` under the divergent if "
                                          r"at body/3"):
        verify(b.build())


def test_barrier_in_branch_on_loop_carried_divergence_is_found_by_the_fixed_point():
    # x turns divergent only in the loop's second pass (from y, which the first pass taints)
    b = Builder("carried", grid=1, block=64)
    x = b.mov(0, I32, dst=b.reg(I32, "x"))
    y = b.mov(0, I32, dst=b.reg(I32, "y"))
    with b.loop("i", 0, 3):
        with b.if_(b.isetp("eq", x, 0)):
            b.bar()
        b.mov(y, dst=x)
        b.mov(b.sreg("lane"), dst=y)
    with pytest.raises(VerifyError, match="CTA barrier under divergent control"):
        verify(b.build())


# --- resources ----------------------------------------------------------------------------------


def test_shared_array_beyond_the_target_names_array_and_limit():
    from gpusim.specs import load_spec

    spec = load_spec("v100")
    b = Builder("huge", grid=1, block=32)
    b.shared("s", F32, (1 << 30) // 4)                 # 1 GiB
    with pytest.raises(VerifyError, match=r"shared memory 1073741824 bytes exceeds the limit of "
                                          r"98304 bytes per CTA on v100 \(smem_bytes_per_cta\) "
                                          r"\(largest array: s\[268435456\]"):
        verify(b.build(), spec=spec)
    verify(b.build())                                  # no target: only what the IR can express


def test_block_beyond_the_target_and_unaddressable_buffer():
    import dataclasses

    from gpusim.specs import load_spec

    spec = dataclasses.replace(load_spec("v100"), max_threads_per_cta=256)
    b = Builder("wide", grid=1, block=512)
    with pytest.raises(VerifyError, match=r"block=512 threads; accepted: 32..256 on v100"):
        verify(b.build(), spec=spec)
    b = Builder("big", grid=1, block=32)
    b.global_buffer("g", F32, 1 << 31)
    with pytest.raises(VerifyError, match=r"buffer g has 2147483648 words; accepted: "
                                          r"1..2147483647 \(addressed by i32 word indices\)"):
        verify(b.build())


def test_duplicate_and_malformed_declarations():
    k = _base().build()
    with pytest.raises(VerifyError, match="buffer 'x' is declared twice"):
        verify(dataclasses.replace(k, buffers=k.buffers + k.buffers[:1]))
    with pytest.raises(VerifyError, match="global buffer z has role 'readonly'"):
        from kernels_ir import Buffer

        verify(dataclasses.replace(k, buffers=k.buffers + (Buffer("z", "global", F32, 4,
                                                                   "readonly"),)))
    with pytest.raises(VerifyError, match="verify\\(\\) needs a Kernel, got str"):
        verify("kernel")


# --- every kernel the project builds passes ------------------------------------------------------


@pytest.fixture(scope="module")
def targets():
    from gpusim.specs import available, load_spec

    return [load_spec(n) for n in available()]


def test_every_campaign_microbenchmark_verifies(targets):
    from kernels_ir.kernels.microbench import MICROBENCHES, build
    from measurements.campaign import MICRO_SIZES

    for name, sizes in MICRO_SIZES.items():        # the campaign's: on every target
        for size in sizes:
            k = build(name, size).kernel
            for spec in targets:
                verify(k, spec=spec)
    big = max(targets, key=lambda s: s.smem_bytes_per_cta)
    for name in sorted(set(MICROBENCHES) - set(MICRO_SIZES)):   # the probes: the largest one
        verify(build(name, 4).kernel, spec=big)


def test_every_rnn_kernel_verifies(targets):
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    layer = make_layer(256, 4, 0.1, 3, 0)
    for spec in targets:
        kernels = [build_csr_baseline(layer).kernel, build_dense_rnn(layer, spec).kernel]
        for sync in ("lamport", "barrier"):
            for wide in (True, False):
                for layout in ("naive", "greedy"):
                    kernels.append(build_sparse_rnn(layer, spec, sync=sync, wide_loads=wide,
                                                    layout=layout).kernel)
        for k in kernels:
            verify(k, spec=spec)
