"""The functional executor: divergence, shuffles, votes, loops, errors and deadlocks."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from engine_helpers import grid_barrier_kernel, poll_kernel

from gpusim.engine import execute
from gpusim.specs import load_spec
from kernels_ir import F32, I32, Builder, DeadlockError, InputError, verify

V100 = load_spec("v100")


def _lane_kernel(body, block=64, grid=1, out_dtype=I32):
    b = Builder("k", grid=grid, block=block)
    out = b.global_buffer("out", out_dtype, grid * block, role="out")
    tid = b.sreg("tid")
    cta = b.sreg("cta")
    g = b.imad(cta, block, tid)
    r = body(b, tid)
    b.stg(out, g, r)
    return verify(b.build())


def test_if_else_divergence_within_a_warp():
    def body(b, tid):
        r = b.reg(I32, "r")
        odd = b.isetp("eq", b.and_(tid, 1), 1)
        with b.if_(odd):
            b.imul(tid, 10, dst=r)
        with b.else_():
            b.isub(0, tid, dst=r)
        return r
    out = execute(_lane_kernel(body), {}).globals["out"]
    t = np.arange(64)
    assert np.array_equal(out, np.where(t % 2 == 1, 10 * t, -t))


def test_while_divergent_trip_counts():
    # lane l counts up to l: lanes leave the loop at different iterations
    def body(b, tid):
        i = b.mov(0, I32, dst=b.reg(I32, "i"))
        lane = b.sreg("lane")
        with b.while_(label="count") as w:
            b.iadd(i, 1, dst=i)
            w.cond = b.isetp("lt", i, lane)
        return i
    res = execute(_lane_kernel(body), {})
    lane = np.arange(64) % 32
    assert np.array_equal(res.globals["out"], np.maximum(lane, 1))
    assert res.spins == (("count", 31),)


def test_shuffle_reduction_and_idx():
    def body(b, tid):
        v = b.i2f(tid)
        for m in (16, 8, 4, 2, 1):
            v = b.fadd(v, b.shfl_xor(v, m))
        x = b.shfl_idx(b.sreg("lane"), 5)  # every lane gets lane 5's value
        return b.fadd(v, b.i2f(x))
    out = execute(_lane_kernel(body, out_dtype=F32), {}).globals["out"]
    warp_sums = np.repeat([sum(range(32)), sum(range(32, 64))], 32)
    assert np.array_equal(out, (warp_sums + 5).astype(np.float32))


def test_shuffle_from_inactive_lane_returns_own_value():
    def body(b, tid):
        r = b.mov(-1, I32, dst=b.reg(I32, "r"))
        lane = b.sreg("lane")
        low = b.isetp("lt", lane, 16)
        with b.if_(low):  # lanes 0..15 active; xor 16 reads inactive lanes
            b.shfl_xor(lane, 16, dst=r)
        with b.if_(b.isetp("lt", lane, 8)):
            b.shfl_xor(lane, 1, dst=r)  # source active: neighbour's lane id
        return r
    out = execute(_lane_kernel(body, block=32), {}).globals["out"]
    lane = np.arange(32)
    exp = np.where(lane < 8, lane ^ 1, np.where(lane < 16, lane, -1))
    assert np.array_equal(out, exp)


def test_vote_over_active_lanes():
    def body(b, tid):
        lane = b.sreg("lane")
        r = b.mov(0, I32, dst=b.reg(I32, "r"))
        with b.if_(b.isetp("ge", lane, 4)):
            anyv = b.vote_any(b.isetp("eq", lane, 3))   # lane 3 inactive -> false
            allv = b.vote_all(b.isetp("ge", lane, 4))   # true over active lanes
            b.iadd(b.sel(anyv, 1, 0, dst=b.reg(I32)), b.sel(allv, 10, 0, dst=b.reg(I32)), dst=r)
        return r
    out = execute(_lane_kernel(body, block=32), {}).globals["out"]
    assert np.array_equal(out, np.where(np.arange(32) >= 4, 10, 0))


def test_step_register_and_shared_memory_per_cta():
    b = Builder("steps", grid=3, block=32)
    out = b.global_buffer("out", I32, 3 * 4, role="out")
    s = b.shared("s", I32, 32)
    lane, cta = b.sreg("lane"), b.sreg("cta")
    with b.loop("t", 0, 4, kind="time"):
        step = b.sreg("step")
        b.sts(s, lane, b.imad(cta, 100, step))
        b.bar()
        v = b.lds(s, b.xor(lane, 1))
        with b.if_(b.isetp("eq", lane, 0)):
            b.stg(out, b.imad(cta, 4, step), v)
    res = execute(verify(b.build()), {})
    assert res.globals["out"].reshape(3, 4).tolist() == [[100 * c + t for t in range(4)]
                                                        for c in range(3)]


def test_vector_loads_and_stores():
    b = Builder("vec", grid=1, block=32)
    x = b.global_buffer("x", F32, 128)
    y = b.global_buffer("y", F32, 128, role="out")
    s = b.shared("s", F32, 128)
    lane = b.sreg("lane")
    a4 = b.imul(lane, 4)
    vals = b.ldg(x, a4, width=4)
    b.sts(s, a4, vals)
    lo = b.lds(s, b.imul(lane, 2), width=2)
    b.stg(y, b.imul(lane, 2), lo)
    b.stg(y, b.iadd(b.imul(lane, 2), 64), tuple(reversed(lo)))
    data = np.arange(128, dtype=np.float32)
    out = execute(verify(b.build()), {"x": data}).globals["y"]
    assert np.array_equal(out[:64], data[:64])
    assert np.array_equal(out[64:], data[:64].reshape(32, 2)[:, ::-1].ravel())


def test_out_of_bounds_and_misaligned_are_named():
    b = Builder("oob", grid=1, block=32)
    x = b.global_buffer("x", F32, 32)
    y = b.global_buffer("y", F32, 32, role="out")
    lane = b.sreg("lane")
    b.stg(y, lane, b.ldg(x, b.iadd(lane, 1)))
    with pytest.raises(InputError, match=r"out of bounds access x\[32\].*lane 31"):
        execute(verify(b.build()), {"x": np.zeros(32, np.float32)})
    b = Builder("mis", grid=1, block=32)
    x = b.global_buffer("x", F32, 256)
    lane = b.sreg("lane")
    b.ldg(x, b.iadd(b.imul(lane, 4), 2), width=4)
    with pytest.raises(InputError, match="misaligned"):
        execute(verify(b.build()), {"x": np.zeros(256, np.float32)})


def test_bad_inputs_are_named():
    k = poll_kernel()
    with pytest.raises(InputError, match="'nope' is not a global buffer"):
        execute(k, {"nope": np.zeros(2)})
    with pytest.raises(InputError, match=r"expected shape \(2,\)"):
        execute(k, {"flag": np.zeros(3, np.int32)})


def test_counts_are_warp_instructions():
    k = grid_barrier_kernel(grid=2, smem_words=64)
    res = execute(k, {})
    assert res.globals["counter"][0] == 2
    # the atomic runs in one warp per CTA; the store in both warps of both CTAs
    ops = [i.op.value for i in res.instrs]
    assert res.counts[ops.index("atom.add")] == 2
    assert res.counts[ops.index("stg")] == 4


def test_poll_nobody_satisfies_is_a_deadlock_naming_the_warp():
    t0 = time.perf_counter()
    with pytest.raises(DeadlockError) as exc:
        execute(poll_kernel(grid=2, label="wait_flag"), {"flag": np.zeros(2, np.int32)})
    assert time.perf_counter() - t0 < 1.0
    msg = str(exc.value)
    assert "CTA 0 warp 0 lanes 0..31 waits at 'wait_flag' on flag[0], sees 0" in msg
    assert {(w["cta"], w["warp"]) for w in exc.value.waiting} == {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_partial_poll_only_waiting_cta_is_named():
    with pytest.raises(DeadlockError) as exc:
        execute(poll_kernel(grid=2), {"flag": np.array([5, 0], np.int32)})
    assert {w["cta"] for w in exc.value.waiting} == {1}


def test_spin_limit_and_max_spin():
    # the exit condition depends on a register the loop changes every pass (a counter that
    # bounds the wait), so no pass repeats the one before: only the spin limit ends it
    b = Builder("count", grid=1, block=32)
    flag = b.global_buffer("flag", I32, 1)
    i = b.mov(0, I32, dst=b.reg(I32, "i"))
    with b.while_(spin_limit=50, label="forever") as w:
        b.iadd(i, 1, dst=i)
        v = b.ldg_volatile(flag, 0)
        w.cond = b.pand(b.isetp("eq", v, 0), b.isetp("lt", i, 1000))
    k = verify(b.build())
    with pytest.raises(DeadlockError, match="spin limit 50"):
        execute(k, {"flag": np.zeros(1, np.int32)})
    with pytest.raises(DeadlockError, match="spin limit 7"):
        execute(k, {"flag": np.zeros(1, np.int32)}, max_spin=7)
    res = execute(k, {"flag": np.zeros(1, np.int32)}, max_spin=1000)
    assert res.spins == (("forever", 1000),)


def test_counting_spin_nobody_writes_is_reported_at_once():
    # counting passes does not feed the exit condition: the first pass shows it never ends
    b = Builder("count", grid=1, block=32)
    flag = b.global_buffer("flag", I32, 1)
    i = b.mov(0, I32, dst=b.reg(I32, "i"))
    with b.while_(label="forever") as w:
        b.iadd(i, 1, dst=i)
        v = b.ldg_volatile(flag, 0)
        w.cond = b.isetp("eq", v, 0)
    with pytest.raises(DeadlockError, match=r"waits at 'forever' on flag\[0\], sees 0 .*which "
                                            r"no live warp can write"):
        execute(verify(b.build()), {"flag": np.zeros(1, np.int32)})


def test_grid_barrier_works_when_co_resident():
    spec = dataclasses.replace(V100, sm_count=4)
    res = execute(grid_barrier_kernel(grid=4), {}, spec=spec)
    assert res.waves == 1 and res.globals["counter"][0] == 4


def test_residency_deadlock_names_non_resident_ctas():
    spec = dataclasses.replace(V100, sm_count=2, smem_bytes_per_sm=65536,
                               smem_bytes_per_cta=65536)
    k = grid_barrier_kernel(grid=4, smem_words=10000)  # 40 KB shared: 1 CTA per SM
    t0 = time.perf_counter()
    with pytest.raises(DeadlockError) as exc:
        execute(k, {}, spec=spec)
    assert time.perf_counter() - t0 < 1.0
    msg = str(exc.value)
    assert msg.startswith("CTAs 2..3 are not resident: 1 CTA/SM x 2 SMs")
    assert "shared memory" in msg
    assert "CTA 0 warp 0 lanes 0 waits at 'grid_barrier' on counter[0], sees 2" in msg
    assert "%r" in msg or "isetp.lt" in msg
