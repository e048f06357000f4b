"""Per-op semantics against plain numpy, one test per op class, and table coverage."""

from __future__ import annotations

import numpy as np
import pytest
from engine_helpers import run_binary, run_unary

from gpusim.engine.semantics import SEMANTICS, atomic_add
from kernels_ir import F32, I32, Op
from kernels_ir.ir import OP_CLASSES

RNG = np.random.default_rng(7)
A = (RNG.standard_normal(64) * 3).astype(np.float32)
C = (RNG.standard_normal(64) * 3).astype(np.float32)
IA = RNG.integers(-1000, 1000, 64).astype(np.int32)
IB = RNG.integers(1, 50, 64).astype(np.int32) * np.where(RNG.random(64) < 0.5, -1, 1).astype(
    np.int32)


def test_every_op_has_semantics():
    assert set(SEMANTICS) == set(Op)
    covered = set().union(*OP_CLASSES.values())
    assert covered == set(Op)


@pytest.mark.parametrize("name,ref", [
    ("fadd", np.add), ("fsub", np.subtract), ("fmul", np.multiply),
    ("fmax", np.fmax), ("fmin", np.fmin),
])
def test_float_binary(name, ref):
    assert np.array_equal(run_binary(name, A, C), ref(A, C).astype(np.float32))


def test_ffma_single_rounding():
    from gpusim.engine import execute
    from kernels_ir import Builder, verify

    b = Builder("fma", grid=1, block=32)
    x = b.global_buffer("x", F32, 96)
    y = b.global_buffer("y", F32, 32, role="out")
    lane = b.sreg("lane")
    u, v, w = b.ldg(x, lane), b.ldg(x, lane, offset=32), b.ldg(x, lane, offset=64)
    b.stg(y, lane, b.ffma(u, v, w))
    # a*b + c where the unfused float32 path loses the low bits of the product
    a = np.float32(1 + 2 ** -12) * np.ones(32, np.float32)
    c = -np.float32(1 + 2 ** -11) * np.ones(32, np.float32)
    data = np.concatenate([a, a, c])
    got = execute(verify(b.build()), {"x": data}).globals["y"]
    exact = (a.astype(np.float64) * a + c).astype(np.float32)
    unfused = (a * a + c).astype(np.float32)
    assert np.array_equal(got, exact)
    assert not np.array_equal(got, unfused)  # the test can tell fused from unfused


@pytest.mark.parametrize("name,ref", [("tanh", np.tanh), ("exp", np.exp),
                                      ("sigmoid", lambda x: 1 / (1 + np.exp(-x)))])
def test_sfu(name, ref):
    got = run_unary(name, A)
    assert np.allclose(got, ref(A.astype(np.float64)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name,ref", [
    ("iadd", np.add), ("isub", np.subtract), ("imul", np.multiply), ("imin", np.minimum),
    ("imax", np.maximum), ("and_", np.bitwise_and), ("or_", np.bitwise_or),
    ("xor", np.bitwise_xor), ("idiv", np.floor_divide), ("irem", np.mod),
])
def test_int_binary(name, ref):
    got = run_binary(name, IA, IB, dtype=I32)
    assert np.array_equal(got, ref(IA, IB).astype(np.int32))


def test_int_wraps_and_shifts():
    big = np.full(64, 2 ** 31 - 1, np.int32)
    assert np.all(run_binary("iadd", big, np.ones(64, np.int32), dtype=I32) == -(2 ** 31))
    sh = np.arange(64, dtype=np.int32) % 40
    x = np.full(64, -8, np.int32)
    got = run_binary("shl", x, sh, dtype=I32)
    exp = np.where(sh >= 32, 0, np.left_shift(x, np.minimum(sh, 31)))
    assert np.array_equal(got, exp)
    got = run_binary("shr", x, sh, dtype=I32)
    assert np.array_equal(got, np.right_shift(x, np.minimum(sh, 31)))


@pytest.mark.parametrize("cmp,ref", [("lt", np.less), ("le", np.less_equal),
                                     ("gt", np.greater), ("ge", np.greater_equal),
                                     ("eq", np.equal), ("ne", np.not_equal)])
def test_compare(cmp, ref):
    c = C.copy()
    c[::3] = A[::3]
    got = run_binary("fsetp", A, c, dtype=F32, out_dtype=I32, cmp=cmp)
    assert np.array_equal(got, ref(A, c).astype(np.int32))
    got = run_binary("isetp", IA, IB, dtype=I32, cmp=cmp)
    assert np.array_equal(got, ref(IA, IB).astype(np.int32))


def test_conversions_and_bitcast():
    x = np.array([1.7, -1.7, 3e10, -3e10, np.nan, 0.0, -0.0, 2.5] * 8, np.float32)
    got = run_unary("f2i", x, out_dtype=I32)
    assert got[:8].tolist() == [1, -1, 2 ** 31 - 1, -(2 ** 31), 0, 0, 0, 2]
    assert np.array_equal(run_unary("i2f", IA, in_dtype=I32), IA.astype(np.float32))
    bits = run_unary("bitcast", x, out_dtype=I32, dtype=I32)
    assert np.array_equal(bits, x.view(np.int32))
    assert bits[6] == np.int32(-(2 ** 31))  # -0.0 is 0x80000000


def test_atomic_add_old_values_in_lane_order():
    mem = np.array([10, 20, 30], np.int32)
    old = atomic_add(mem, np.array([0, 1, 0, 0, 2]), np.array([1, 2, 3, 4, 5]))
    assert old.tolist() == [10, 20, 11, 14, 30]
    assert mem.tolist() == [18, 22, 35]
