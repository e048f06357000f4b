"""A grid larger than the co-resident CTAs runs in waves in the timing model: a later wave's CTAs
take the slots that free first and start when their slot's CTA has exited."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpusim.engine import simulate
from gpusim.engine.residency import launch_residency, residency
from gpusim.specs import load_spec
from kernels_ir import F32, I32, Builder, ptxas, verify

H200 = load_spec("h200")
# two SMs that hold one CTA each (the CTA's shared memory fills an SM)
TWO_SMS = dataclasses.replace(H200, sm_count=2, smem_bytes_per_sm=65536,
                              smem_bytes_per_cta=65536)
CHAIN = 256
LINK = H200.fma_latency_cycles    # cycles a link of the chain at least


def _chain_kernel(grid: int, long_ctas=()):
    """Each thread runs a chain of CHAIN dependent FFMAs (CTAs in ``long_ctas``: four chains)
    and stores its result; every CTA holds 48 KiB of shared memory, so one fits an SM of
    TWO_SMS."""
    b = Builder("chain", grid=grid, block=64)
    b.shared("pad", F32, 12288)
    y = b.global_buffer("y", F32, grid * 64, role="out")
    tid, cta = b.sreg("tid"), b.sreg("cta")
    gid = b.imad(cta, 64, tid, dst=b.reg(I32, "gid"))
    acc = b.mov(1.0, F32, dst=b.reg(F32, "acc"))
    with b.loop("i", 0, CHAIN):
        b.ffma(acc, 0.5, 0.5, dst=acc)
    for c in long_ctas:
        is_c = b.isetp("eq", cta, c)
        with b.if_(is_c):
            with b.loop(f"j{c}", 0, 3 * CHAIN):
                b.ffma(acc, 0.5, 0.5, dst=acc)
    b.stg(y, gid, acc)
    return verify(b.build())


def _cycles(kernel, spec=TWO_SMS):
    res = simulate(kernel, {}, spec)
    assert np.allclose(res.globals["y"], 1.0)        # 0.5 * 1 + 0.5 is 1, chain after chain
    return res.simulated_cycles


def test_a_grid_past_the_resident_ctas_runs_in_waves():
    one = _chain_kernel(2)
    assert residency(one, TWO_SMS).resident_ctas == 2
    t1, t2, t3 = (_cycles(_chain_kernel(2 * w)) for w in (1, 2, 3))
    # each wave starts when the one before has exited on its SM: every wave adds one CTA's
    # chain (the store's acknowledgement, at the end of the launch, is paid once)
    assert t2 - t1 >= CHAIN * LINK, (t1, t2)
    assert abs((t3 - t2) - (t2 - t1)) <= 0.05 * (t2 - t1), (t1, t2, t3)


def test_a_later_wave_takes_the_slot_that_frees_first():
    # CTA 0 runs four chains, CTA 1 one: CTA 2 (the second wave) takes CTA 1's slot when CTA 1
    # exits and ends before CTA 0 does; in CTA 0's slot it would end a chain after it
    long = _cycles(_chain_kernel(2, long_ctas=(0,)))
    both = _cycles(_chain_kernel(3, long_ctas=(0,)))
    assert both <= long + 0.1 * CHAIN * LINK, (both, long)


@pytest.mark.skipif(not ptxas.available("sm_90"),
                    reason="no compiler for sm_90 here (nvcc or NVRTC)")
def test_the_wave_count_uses_ptxas_registers():
    # the CSR kernel at batch 4 of a recorded H200 case (s45, hidden 7144): the liveness estimate
    # says 37 registers (6 CTAs of 256 threads an SM: two waves of its 893 CTAs); ptxas
    # allocates 31 (the campaign's num_regs), 8 an SM, one wave
    from kernels_ir.kernels.csr_baseline import build_csr_baseline
    from kernels_ir.kernels.sparse_rnn import make_layer

    k = build_csr_baseline(make_layer(7144, 4, 0.0115, 2, seed=4600137)).kernel
    assert k.grid == 893
    assert residency(k, H200).resident_ctas == 6 * 132
    r = launch_residency(k, H200)
    assert r.regs_per_thread <= 32 and r.resident_ctas == k.grid
