"""``execute`` and ``simulate`` verify the kernel before any work: a malformed kernel gets one
:class:`VerifyError` (an :class:`InputError`) naming the instruction, register or buffer."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest

from gpusim.engine import execute, simulate
from gpusim.specs import load_spec
from kernels_ir import F32, I32, Builder, Imm, InputError, Op, VerifyError

SPEC2 = dataclasses.replace(load_spec("v100"), sm_count=2)


def _use_before_define():
    b = Builder("ubd", grid=1, block=32)
    y = b.global_buffer("y", F32, 32, role="out")
    v = b.reg(F32, "v")
    b.stg(y, b.sreg("lane"), v)
    return b.build(), {}, r"stg.32 global:y\[%r1\], %v`: %v is used before it is defined"


def _i32_into_fadd():
    b = Builder("mix", grid=1, block=32)
    y = b.global_buffer("y", F32, 32, role="out")
    lane = b.sreg("lane")
    f = b.reg(F32, "f")
    b.emit(Op.FADD, (f,), (lane, Imm(1.0, F32)))
    b.stg(y, lane, f)
    return b.build(), {}, r"`%f = fadd %r1, 1.0`: type mismatch: operand %r1 is i32, fadd " \
                          r"expects f32"


def _store_to_input():
    b = Builder("ro", grid=1, block=32)
    x = b.global_buffer("x", F32, 32)
    b.stg(x, b.sreg("lane"), 1.0)
    return b.build(), {"x": np.zeros(32, np.float32)}, \
        r"`stg.32 global:x\[%r1\], 1.0`: writes to x, which is declared read-only \('in'\)"


def _huge_shared():
    b = Builder("huge", grid=2, block=32)
    s = b.shared("s", F32, (1 << 30) // 4)                 # 1 GiB per CTA
    b.sts(s, b.sreg("lane"), 1.0)
    return b.build(), {}, r"shared memory 1073741824 bytes exceeds the limit of \d+ bytes " \
                          r"per CTA on \w+ \(smem_bytes_per_cta\)"


@pytest.mark.parametrize("make", [_use_before_define, _i32_into_fadd, _store_to_input,
                                  _huge_shared])
@pytest.mark.parametrize("how", ["execute", "simulate"])
def test_malformed_kernel_is_rejected_before_any_work(make, how):
    kernel, inputs, match = make()
    t0 = time.perf_counter()
    with pytest.raises(VerifyError, match=match) as exc:
        if how == "execute":
            execute(kernel, inputs)
        else:
            simulate(kernel, inputs, SPEC2)
    assert isinstance(exc.value, InputError)
    assert time.perf_counter() - t0 < 2.0


def test_execute_with_spec_checks_that_targets_limits():
    b = Builder("wide", grid=1, block=512)
    y = b.global_buffer("y", I32, 512, role="out")
    b.stg(y, b.sreg("tid"), 1)
    k = b.build()
    assert execute(k, {}).globals["y"].sum() == 512
    small = dataclasses.replace(SPEC2, max_threads_per_cta=256)
    with pytest.raises(VerifyError, match="block=512 threads; accepted: 32..256 on v100"):
        execute(k, {}, spec=small)
