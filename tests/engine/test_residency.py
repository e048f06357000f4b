"""Register estimate (liveness) and co-residency limits."""

from __future__ import annotations

import dataclasses

import pytest
from engine_helpers import grid_barrier_kernel

from gpusim.engine import check_launch, register_estimate, residency
from gpusim.engine.residency import REG_OVERHEAD
from gpusim.specs import load_spec
from kernels_ir import F32, I32, Builder, CapacityError, verify

V100 = load_spec("v100")


def _array_kernel(n: int, keep_live: bool):
    """Load n values into a register array; sum them (live together) or use each at once."""
    b = Builder("arr", grid=1, block=32)
    x = b.global_buffer("x", F32, 32 * n)
    y = b.global_buffer("y", F32, 32, role="out")
    lane = b.sreg("lane")
    w = b.reg(F32, "w", n)
    acc = b.mov(0.0, F32, dst=b.reg(F32, "acc"))
    for i in range(n):
        b.ldg(x, lane, offset=32 * i, dst=w[i])
        if not keep_live:
            b.fadd(acc, w[i], dst=acc)
    with b.loop("t", 0, 4, kind="time"):
        if keep_live:
            for i in range(n):
                b.fadd(acc, w[i], dst=acc)
    b.stg(y, lane, acc)
    return verify(b.build())


def test_liveness_counts_values_live_across_the_loop():
    live = register_estimate(_array_kernel(40, keep_live=True))
    short = register_estimate(_array_kernel(40, keep_live=False))
    # 40 weights + acc + lane + loop counter live in the loop
    assert live == 40 + 3 + REG_OVERHEAD
    assert short <= 5 + REG_OVERHEAD


def test_predicates_are_not_counted():
    b = Builder("p", grid=1, block=32)
    y = b.global_buffer("y", I32, 32, role="out")
    lane = b.sreg("lane")
    p = [b.isetp("lt", lane, k) for k in range(10)]
    r = b.mov(0, I32, dst=b.reg(I32, "r"))
    for q in p:
        b.iadd(r, b.sel(q, 1, 0, dst=b.reg(I32)), dst=r)
    b.stg(y, lane, r)
    assert register_estimate(verify(b.build())) <= 4 + REG_OVERHEAD


def test_residency_limits_and_refusals():
    k = _array_kernel(40, keep_live=True)
    r = residency(k, V100)
    assert r.ctas_per_sm == V100.max_ctas_per_sm and "CTAs per SM" in r.limit
    with pytest.raises(CapacityError, match="max_regs_per_thread = 255"):
        residency(_array_kernel(300, keep_live=True), V100)
    small = dataclasses.replace(V100, sm_count=2, smem_bytes_per_sm=65536,
                                smem_bytes_per_cta=65536)
    gb = grid_barrier_kernel(grid=4, smem_words=10000)
    assert residency(gb, small).resident_ctas == 2
    with pytest.raises(CapacityError, match="cannot be co-resident"):
        check_launch(gb, small)
    assert check_launch(grid_barrier_kernel(grid=2, smem_words=10000), small).resident_ctas == 2
