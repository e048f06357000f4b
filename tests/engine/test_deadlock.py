"""Bounded spins in simulated time: a poll the data cannot satisfy within its spin limit."""

import numpy as np
import pytest


def test_poll_slower_than_its_spin_limit_is_reported_not_truncated():
    """A poll whose data arrives (in simulated time) after spin_limit rounds: the simulator
    raises, as the real kernel would stop at its bounded spin, instead of silently counting
    fewer polls."""
    import dataclasses

    from gpusim.engine import simulate
    from gpusim.specs import load_spec
    from kernels_ir import F32, I32, Builder, verify
    from kernels_ir.errors import DeadlockError

    spec = dataclasses.replace(load_spec("v100"), sm_count=2)
    b = Builder("late_flag", grid=2, block=32)
    flag = b.global_buffer("flag", I32, 1, role="inout")
    sink = b.global_buffer("sink", F32, 64, role="inout")
    cta, lane = b.sreg("cta"), b.sreg("lane")
    producer = b.isetp("eq", cta, 1)
    with b.if_(producer):
        acc = b.mov(1.0, F32)
        for _ in range(200):                       # a long dependent chain before the store
            b.ffma(acc, 1.0001, 0.5, dst=acc)
        b.stg(sink, lane, acc)
        b.stg(flag, 0, 1)
    with b.else_():
        with b.while_(spin_limit=2, label="wait_flag") as w:
            v = b.ldg_volatile(flag, 0)
            w.cond = b.isetp("eq", v, 0)
    k = verify(b.build())
    with pytest.raises(DeadlockError, match="wait at 'wait_flag' after its spin_limit=2"):
        simulate(k, {"flag": np.zeros(1, np.int32), "sink": np.zeros(64, np.float32)}, spec)
