"""Each timing mechanism isolated with a tiny hand-built kernel on a shrunk spec."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from engine_helpers import grid_barrier_kernel

from gpusim.engine import simulate
from gpusim.specs import load_spec
from kernels_ir import F32, I32, Builder, CapacityError, verify

V100 = dataclasses.replace(load_spec("v100"), sm_count=1)
H100 = dataclasses.replace(load_spec("h100"), sm_count=1)


def _lds_kernel(stride: int, width: int = 1):
    b = Builder("lds", grid=1, block=32)
    s = b.shared("s", F32, 32 * 4 * max(stride, 1) + 8)
    lane = b.sreg("lane")
    b.lds(s, b.imul(lane, stride), width=width)
    return verify(b.build())


def _wave(kernel):
    r = simulate(kernel, {}, V100)
    sid = next(iter(r.smem_wavefronts["per_instruction"]))
    return r.smem_wavefronts["per_instruction"][sid], r.bank_conflicts["per_instruction"][sid]


def test_two_way_bank_conflict_costs_one_extra_wavefront():
    assert _wave(_lds_kernel(1)) == (1, 0)
    assert _wave(_lds_kernel(2)) == (2, 1)    # lanes l and l+16 hit bank 2l with distinct words
    assert _wave(_lds_kernel(0)) == (1, 0)    # broadcast of one word


def test_contiguous_wide_loads_cost_one_wavefront_per_128_bytes():
    # 32 lanes x 16 bytes of consecutive words = 512 bytes: 4 wavefronts, no conflict (a 128-bit
    # load whose lanes share words is return-packed and can cost fewer: tests/test_bank_rule.py)
    wf, bc = _wave(_lds_kernel(4, width=4))
    assert wf == 4 and bc == 0
    wf2, _ = _wave(_lds_kernel(2, width=2))
    assert wf2 == 2


def _atomic_kernel(lanes: int):
    b = Builder("atom", grid=1, block=32)
    c = b.global_buffer("counter", I32, 1, role="scratch")
    lane = b.sreg("lane")
    with b.if_(b.isetp("lt", lane, lanes)):
        b.atom_add(c, 0, 1)
    return verify(b.build())


def test_same_address_atomics_serialise():
    one = simulate(_atomic_kernel(1), {}, V100)
    many = simulate(_atomic_kernel(32), {}, V100)
    assert many.globals["counter"][0] == 32
    assert many.l2_transactions["atomic"] == 32
    expect = 31 * V100.l2_atomic_same_address_cycles
    assert abs((many.cycles - one.cycles) - expect) <= 2


def test_launch_overhead_charged_once():
    r = simulate(_lds_kernel(1), {}, V100)
    assert r.time_s == pytest.approx(r.cycles / V100.clock_hz + V100.launch_overhead_s)


def _ffma_kernel(n: int, chains: int):
    b = Builder("fma", grid=1, block=32)
    acc = b.reg(F32, "acc", chains)
    for k in range(chains):
        b.mov(0.0, dst=acc[k])
    for i in range(n):
        b.ffma(1.5, acc[i % chains], acc[i % chains], dst=acc[i % chains])
    return verify(b.build())


def _per_instr(spec, chains: int) -> float:
    a = simulate(_ffma_kernel(256, chains), {}, spec).cycles
    b = simulate(_ffma_kernel(128, chains), {}, spec).cycles
    return (a - b) / 128


def test_fp32_pipe_occupancy_v100_two_cycles_h100_one():
    assert _per_instr(V100, chains=8) == pytest.approx(2.0, abs=0.05)
    assert _per_instr(H100, chains=8) == pytest.approx(1.0, abs=0.05)


def test_dependent_ffma_chain_takes_fma_latency():
    assert _per_instr(V100, chains=1) == pytest.approx(V100.fma_latency_cycles, abs=0.05)


def test_one_issue_per_cycle_per_subpartition():
    spec = dataclasses.replace(V100, subpartitions_per_sm=1, fp32_lanes_per_subpartition=32)

    def kernel(warps: int, n: int):
        b = Builder("iss", grid=1, block=32 * warps)
        acc = b.reg(F32, "acc", 8)
        for k in range(8):
            b.mov(0.0, dst=acc[k])
        for i in range(n):
            b.fadd(acc[i % 8], 1.0, dst=acc[i % 8])
        return verify(b.build())
    one = (simulate(kernel(1, 256), {}, spec).cycles - simulate(kernel(1, 128), {}, spec).cycles)
    two = (simulate(kernel(2, 256), {}, spec).cycles - simulate(kernel(2, 128), {}, spec).cycles)
    assert one / 128 == pytest.approx(1.0, abs=0.05)
    assert two / 128 == pytest.approx(2.0, abs=0.05)   # two warps share the one scheduler


def _late_flag_kernel(work: int):
    """CTA 1 computes ``work`` dependent FFMAs, then stores flag; CTA 0 polls the flag."""
    b = Builder("late", grid=2, block=32)
    flag = b.global_buffer("flag", F32, 4, role="inout")
    cta = b.sreg("cta")
    x = b.mov(1.0, F32, dst=b.reg(F32, "x"))
    with b.if_(b.isetp("eq", cta, 1)):
        for _ in range(work):
            b.ffma(x, 1.0, 0.0, dst=x)
        b.stg(flag, 0, x)
    with b.if_(b.isetp("eq", cta, 0)):
        with b.while_(label="poll") as w:
            v = b.ldg_volatile(flag, 0)
            w.cond = b.fsetp("eq", v, 0.0)
    return verify(b.build())


def test_poll_waiting_on_late_store_counts_poll_transactions():
    spec = dataclasses.replace(V100, sm_count=2)
    early = simulate(_late_flag_kernel(1), {"flag": np.zeros(4, np.float32)}, spec)
    late = simulate(_late_flag_kernel(400), {"flag": np.zeros(4, np.float32)}, spec)
    assert early.l2_transactions["poll"] <= 1  # a store racing the first poll
    # 400 x 4 cycles of work: the poller re-polls about every L2 round trip until the store
    rounds = 400 * V100.fma_latency_cycles / V100.l2_hit_latency_cycles
    assert late.l2_transactions["poll"] >= int(rounds) - 2
    assert late.cycles > 400 * V100.fma_latency_cycles


def test_cta_barrier_latency():
    def kernel(bars: int):
        b = Builder("bar", grid=1, block=64)
        for _ in range(bars):
            b.bar()
        return verify(b.build())
    d = simulate(kernel(11), {}, V100).cycles - simulate(kernel(1), {}, V100).cycles
    assert d / 10 == pytest.approx(V100.cta_barrier_latency_cycles, abs=0.05)


def test_deterministic():
    spec = dataclasses.replace(V100, sm_count=3)
    from kernels_ir.kernels.sparse_rnn import build_sparse_rnn, make_layer

    prog = build_sparse_rnn(make_layer(60, 4, 0.2, 3, seed=1), spec, sync="barrier")
    a = simulate(prog.kernel, prog.inputs, spec)
    b = simulate(prog.kernel, prog.inputs, spec)
    assert a.cycles == b.cycles and a.step_cycles == b.step_cycles
    assert a.to_json() == b.to_json()


def test_refuses_non_co_resident_spinning_grid():
    spec = dataclasses.replace(V100, sm_count=2, smem_bytes_per_sm=65536,
                               smem_bytes_per_cta=65536)
    with pytest.raises(CapacityError, match="cannot be co-resident"):
        simulate(grid_barrier_kernel(grid=4, smem_words=10000), {}, spec)


def _chase_kernel(loads: int, written: bool = False):
    """One warp: ``loads`` dependent loads of the same 32 words (``i = buf[i + lane] * 0``)."""
    b = Builder("chase", grid=1, block=32)
    buf = b.global_buffer("buf", I32, 64, role="inout" if written else "in")
    out = b.global_buffer("out", I32, 32, role="out")
    lane = b.sreg("lane")
    i = b.mov(0, dst=b.reg(I32, "i"))
    for _ in range(loads):
        addr = b.iadd(i, lane)
        v = b.ldg(buf, addr)
        b.imul(v, 0, dst=i)
    if written:
        b.stg(buf, b.iadd(lane, 32), lane)
    b.stg(out, lane, i)
    return verify(b.build())


def test_l1_serves_a_read_only_sector_the_sm_already_holds():
    inputs = {"buf": np.zeros(64, np.int32)}
    one = simulate(_chase_kernel(1), inputs, V100)
    two = simulate(_chase_kernel(2), inputs, V100)
    step = two.cycles - one.cycles
    # the second load hits L1: its latency plus the dependent integer multiply and address add
    assert step == pytest.approx(V100.l1_hit_latency_cycles + 2 * V100.alu_latency_cycles,
                                 abs=3)
    assert two.l2_transactions["data"] == one.l2_transactions["data"] == 4
    # a buffer the kernel also writes is not cached: the second load goes to L2 again
    w1 = simulate(_chase_kernel(1, written=True), inputs, V100)
    w2 = simulate(_chase_kernel(2, written=True), inputs, V100)
    assert w2.l2_transactions["data"] == 8
    assert w2.cycles - w1.cycles > V100.l2_hit_latency_cycles


def test_l2_warm_launch_skips_dram():
    inputs = {"buf": np.zeros(64, np.int32)}
    cold = simulate(_chase_kernel(1), inputs, V100)
    warm = simulate(_chase_kernel(1), inputs, V100, l2_warm=True)
    assert cold.cycles - warm.cycles == pytest.approx(
        V100.dram_latency_cycles - V100.l2_hit_latency_cycles, abs=2)


def test_l1_capacity_admits_small_read_only_buffers_first():
    from gpusim.engine.l1 import read_only_loaded, resident_buffers
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import make_layer

    k = build_csr_baseline(make_layer(256, 4, 0.5, 2, seed=0)).kernel
    assert read_only_loaded(k) == ["cols", "h_in", "perm", "rowptr", "vals", "x"]
    small = resident_buffers(k, read_only_loaded(k), 64 * 1024)
    assert "h_in" in small and "vals" not in small and "cols" not in small
