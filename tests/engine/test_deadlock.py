"""Deadlocks: bounded spins in simulated time, and who waits on whom in the executor.

Each kernel below behaves as it would on the GPU: the ones that hang there are rejected by the
verifier or reported at once, naming the waits; the producer/consumer in the two branches of
one ``if`` runs and computes the values.
"""

import dataclasses
import time

import numpy as np
import pytest

from gpusim.engine import execute, simulate
from gpusim.specs import load_spec
from kernels_ir import F32, I32, Builder, VerifyError, verify
from kernels_ir.errors import DeadlockError

SPEC2 = dataclasses.replace(load_spec("v100"), sm_count=2)


def test_poll_slower_than_its_spin_limit_is_reported_not_truncated():
    """A poll whose data arrives (in simulated time) after spin_limit rounds: the simulator
    raises, as the real kernel would stop at its bounded spin, instead of silently counting
    fewer polls."""
    spec = SPEC2
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


def _run_both(kernel, inputs):
    """``execute`` and ``simulate`` results (or the error each raised), and their wall times."""
    out = []
    for run in (lambda: execute(kernel, inputs), lambda: simulate(kernel, inputs, SPEC2)):
        t0 = time.perf_counter()
        try:
            r = run()
        except DeadlockError as exc:
            r = exc
        out.append((r, time.perf_counter() - t0))
    return out


def test_barrier_under_warp_condition_is_rejected_before_any_work():
    b = Builder("bar_in_if", grid=1, block=64)
    flag = b.global_buffer("flag", I32, 1, role="inout")
    warp = b.sreg("warp")
    with b.if_(b.isetp("eq", warp, 0)):
        b.bar()                        # warp 1 never arrives: the CTA hangs on the GPU
        b.stg(flag, 0, 1)
    k = b.build()
    for run in (lambda: execute(k, {"flag": np.zeros(1, np.int32)}),
                lambda: simulate(k, {"flag": np.zeros(1, np.int32)}, SPEC2)):
        with pytest.raises(VerifyError, match=r"body/2/then/0 `bar`: CTA barrier under "
                                              r"divergent control.*sreg.warp"):
            run()


def _barrier_then_flag():
    """Warp 1 spins on a flag that warp 0 writes only after the barrier warp 1 never reaches."""
    b = Builder("bar_spin", grid=1, block=64)
    flag = b.global_buffer("flag", I32, 1, role="inout")
    warp = b.sreg("warp")
    with b.if_(b.isetp("eq", warp, 1)):
        with b.while_(label="wait_flag") as w:
            v = b.ldg_volatile(flag, 0)
            w.cond = b.isetp("eq", v, 0)
    b.bar()
    with b.if_(b.isetp("eq", warp, 0)):
        b.stg(flag, 0, 1)
    return verify(b.build())


def test_barrier_waiting_for_a_spinning_warp_is_a_cycle():
    for res, wall in _run_both(_barrier_then_flag(), {"flag": np.zeros(1, np.int32)}):
        assert isinstance(res, DeadlockError)
        assert wall < 5.0
        msg = str(res)
        assert "a cycle of waits" in msg
        assert ("CTA 0 warp 1 lanes 0..31 waits at 'wait_flag' on flag[0], sees 0" in msg
                and "which only CTA 0 warp 0 can still write" in msg)
        assert "CTA 0 warp 0 lanes 0..31 waits at barrier `bar` (body/3) for CTA 0 warp 1" in msg
        kinds = {(w["cta"], w["warp"]): (w["kind"], w["waits_for"]) for w in res.waiting}
        assert kinds == {(0, 1): ("spin", [[0, 0]]), (0, 0): ("barrier", [[0, 1]])}


def _producer_consumer(rounds: int = 1):
    """CTA 0 consumes in the ``if``, CTA 1 produces in the ``else`` (``rounds`` hand-offs)."""
    b = Builder("prodcons", grid=2, block=32)
    flag = b.global_buffer("flag", I32, 1, role="inout")
    data = b.global_buffer("data", F32, 32 * rounds, role="inout")
    out = b.global_buffer("out", F32, 32 * rounds, role="out")
    cta, lane = b.sreg("cta"), b.sreg("lane")
    consumer = b.isetp("eq", cta, 0)
    with b.loop("r", 0, rounds) as r:
        at = b.imad(r, 32, lane)
        with b.if_(consumer):
            with b.while_(label="wait_data") as w:
                v = b.ldg_volatile(flag, 0)
                w.cond = b.isetp("le", v, r)
            x = b.ldg_volatile(data, at)
            b.stg(out, at, b.fmul(x, 2.0))
        with b.else_():
            b.stg(data, at, b.i2f(at))
            b.fence()
            b.stg(flag, 0, b.iadd(r, 1))
    return verify(b.build())


@pytest.mark.parametrize("rounds", [1, 3])
def test_producer_in_the_else_branch_runs_as_on_the_gpu(rounds):
    inputs = {"flag": np.zeros(1, np.int32), "data": np.zeros(32 * rounds, np.float32)}
    (ex, _), (sim, _) = _run_both(_producer_consumer(rounds), inputs)
    want = 2.0 * np.arange(32 * rounds, dtype=np.float32)
    assert np.array_equal(ex.globals["out"], want)
    assert np.array_equal(sim.globals["out"], want)
    assert ex.globals["flag"][0] == rounds
    assert sim.cycles > 0


def _ping_pong_if(rounds: int):
    """Two CTAs ping-pong in the two branches of one ``if``: each waits for the other every
    round (the phased microbenchmark orders the same loads and stores for lockstep instead)."""
    b = Builder("ping_pong_if", grid=2, block=32)
    flags = b.global_buffer("flags", I32, 64, role="inout")
    out = b.global_buffer("out", I32, 2, role="out")
    cta, lane = b.sreg("cta"), b.sreg("lane")
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    is0 = b.isetp("eq", cta, 0)
    with b.loop("r", 1, rounds + 1) as r:
        with b.if_(is0):
            b.stg(flags, 0, r)
            with b.while_(label="wait_pong") as w:
                b.ldg_volatile(flags, 32, dst=seen)
                w.cond = b.isetp("ne", seen, r)
        with b.else_():
            with b.while_(label="wait_ping") as w:
                b.ldg_volatile(flags, 0, dst=seen)
                w.cond = b.isetp("ne", seen, r)
            b.stg(flags, 32, r)
    with b.if_(b.isetp("eq", lane, 0)):
        b.stg(out, cta, seen)
    return verify(b.build())


@pytest.mark.parametrize("rounds", [4, 44])
def test_ping_pong_in_one_if_runs_every_round(rounds):
    """Both CTAs see every round's flag, in the executor and in the simulator."""
    inputs = {"flags": np.zeros(64, np.int32), "out": np.zeros(2, np.int32)}
    (ex, _), (sim, _) = _run_both(_ping_pong_if(rounds), inputs)
    assert ex.globals["out"].tolist() == [rounds, rounds]
    assert sim.globals["out"].tolist() == [rounds, rounds]


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "since a replayed poll runs all three of its loop's tests (and the edges after a wait, its "
    "exit test and the time loop's, add up) the one-if form's waits end on a stale poll and "
    "replay it once almost every round (86 replays in 44 rounds; 2 before), while the phased "
    "benchmark's do not change (87 and 87): 795 against 517 cycles per round trip (517 against "
    "495 with the edges counted as before; an older engine gave 773 against 637-645). The "
    "phased benchmark is the one measured on the GPU (flag_round_trip, 1.06x); the one-if "
    "form's extra poll a wait is a phase effect of two CTAs that each delay the other, not "
    "traced further"))
def test_ping_pong_in_one_if_matches_the_phased_benchmark():
    """The simulated round trip (the slope over rounds) is the
    phased microbenchmark's within 25%: the same hand-offs, whatever the program order. Not
    equal: a CTA that must poll again starts after a phase delay drawn per CTA and wait
    (``_Timing._phase``), and the two programs meet their waits differently (the one-``if``
    form runs CTA 0's wait before CTA 1 has written, so some of its polls are timed iterations
    and others replays)."""
    from kernels_ir.kernels.microbench import flag_round_trip

    inputs = {"flags": np.zeros(64, np.int32), "out": np.zeros(2, np.int32)}
    cyc = {}
    for rounds in (4, 44):
        (_, _), (sim, _) = _run_both(_ping_pong_if(rounds), inputs)
        mb = flag_round_trip(rounds=rounds)
        cyc[rounds] = (sim.cycles, simulate(mb.kernel, mb.inputs, SPEC2).cycles)
    if_slope = (cyc[44][0] - cyc[4][0]) / 40
    phased_slope = (cyc[44][1] - cyc[4][1]) / 40
    assert if_slope == pytest.approx(phased_slope, rel=0.25)


def test_spin_that_counts_and_stores_is_reported_within_a_pass():
    """A spin that counts its passes and stores each one still waits on a flag nobody writes:
    reported after its first pass (not at the spin limit of 2**20 passes)."""
    b = Builder("count_store", grid=2, block=32)
    flag = b.global_buffer("flag", I32, 1, role="inout")
    log = b.global_buffer("log", I32, 64, role="out")
    lane, cta = b.sreg("lane"), b.sreg("cta")
    n = b.mov(0, I32, dst=b.reg(I32, "n"))
    g = b.imad(cta, 32, lane)
    with b.while_(label="spin") as w:
        b.iadd(n, 1, dst=n)
        b.stg(log, g, n)
        v = b.ldg_volatile(flag, 0)
        w.cond = b.isetp("eq", v, 0)
    k = verify(b.build())
    for res, wall in _run_both(k, {"flag": np.zeros(1, np.int32)}):
        assert isinstance(res, DeadlockError)
        assert wall < 5.0
        assert "CTA 0 warp 0 lanes 0..31 waits at 'spin' on flag[0], sees 0" in str(res)
        assert "which no live warp can write (flag[0])" in str(res)
        assert {(w["cta"], w["waits_for"] == []) for w in res.waiting} == {(0, True), (1, True)}


def test_spin_whose_writer_has_exited_is_stuck():
    """The only store to the flag is skipped at run time (its condition is false): once its
    warp has exited, nobody can write the flag."""
    b = Builder("writer_gone", grid=1, block=64)
    flag = b.global_buffer("flag", I32, 1, role="inout")
    warp = b.sreg("warp")
    with b.if_(b.isetp("eq", warp, 1)):
        with b.while_(label="wait_flag") as w:
            w.cond = b.isetp("eq", b.ldg_volatile(flag, 0), 0)
    with b.if_(b.isetp("eq", warp, 7)):              # no warp 7: the store never runs
        b.stg(flag, 0, 1)
    k = verify(b.build())
    with pytest.raises(DeadlockError, match="waits at 'wait_flag' .*which no live warp can "
                                            r"write \(flag\[0\]\)"):
        execute(k, {"flag": np.zeros(1, np.int32)})


def test_barrier_after_a_handoff_merges_the_warps_again():
    """Warp 1 waits for warp 0's flag, then both pass barriers in a loop: the values are
    right and the warps are back in one group (one warp-instruction count per warp)."""
    b = Builder("handoff_bar", grid=1, block=64)
    flag = b.global_buffer("flag", I32, 1, role="inout")
    out = b.global_buffer("out", I32, 64, role="out")
    s = b.shared("s", I32, 64)
    warp, tid = b.sreg("warp"), b.sreg("tid")
    with b.if_(b.isetp("eq", warp, 1)):
        with b.while_(label="wait_flag") as w:
            w.cond = b.isetp("eq", b.ldg_volatile(flag, 0), 0)
    with b.if_(b.isetp("eq", warp, 0)):
        b.stg(flag, 0, 5)
    acc = b.ldg_volatile(flag, 0, dst=b.reg(I32, "acc"))
    with b.loop("i", 0, 4):
        b.sts(s, tid, acc)
        b.bar()
        b.iadd(acc, b.lds(s, b.xor(tid, 32)), dst=acc)
        b.bar()
    b.stg(out, tid, acc)
    k = verify(b.build())
    res = execute(k, {"flag": np.zeros(1, np.int32)})
    assert res.globals["out"].tolist() == [80] * 64
    bars = [i for i, ins in enumerate(res.instrs) if ins.op.value == "bar"]
    assert [int(res.counts[i]) for i in bars] == [8, 8]     # 4 passes x 2 warps each
    sim = simulate(k, {"flag": np.zeros(1, np.int32)}, SPEC2)
    assert sim.globals["out"].tolist() == [80] * 64
