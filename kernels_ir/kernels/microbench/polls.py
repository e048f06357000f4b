"""Flags and polls through L2 (:mod:`gpusim.engine.l2`: store visibility, the per-word arrival
clock that drives polling): what a hand-off between SMs and a grid of pollers cost.

- :func:`flag_round_trip` - two CTAs (one warp each, on two SMs) ping-pong a counter through two
  global flags in different lines: CTA 0 writes ``ping = r``, waits for ``pong == r``; CTA 1 waits
  for ``ping == r`` and writes ``pong = r``. Op = one round trip (two one-way hand-offs).

Added to find what the flag round trip and Lamport polling cost (mechanism hunt, see
``measurements/README.md``):

- :func:`store_visibility` - one warp stores ``r`` to a flag and polls it (volatile loads) until it
  reads ``r``, ``rounds`` times: store issue -> the same SM's strong load sees it. Op = one
  store-then-see. Against :func:`~.l2.l2_latency` it shows whether a store reaches the point of
  coherence later than a load request does.
- :func:`flag_round_trip` with ``same_sm=True`` - the ping-pong between two warps of ONE CTA (one
  SM): against the two-SM case it separates the SM-to-SM distance from the L2 path.
- :func:`flag_round_trip` with ``delay=k`` - each poll iteration also walks ``k`` dependent shared
  loads: a longer poll period; the round trip's growth with the period shows how the hand-off
  lands in the poll phase (the simulator replays polls at their real times).
- :func:`poll_storm` - ``ctas x threads`` threads each load their ``group`` 16-byte chunks of one
  ``slot``-word vector with volatile loads, back to back, ``rounds`` dependent rounds (every CTA
  the same vector: the Lamport h staging while h is not ready, h1024-b4 by default). Op = one
  round of the whole grid: the cost of one Lamport poll round at full scale.

Poll scope (added with the switch of ``LDG_VOLATILE`` from ``ld.volatile`` = ``LDG.E.STRONG.SYS``
to ``ld.relaxed.gpu``, :data:`kernels_ir.codegen_cuda.POLL_MODES`): ``poll="volatile_sys"`` builds a
kernel whose ``meta poll`` makes the code generator emit the old system-scope form; the variants
``l2_latency_sys``, ``flag_round_trip_sys``, ``store_visibility_sys`` and ``poll_storm_sys`` are
the same benchmarks with that form, so one campaign measures both scopes side by side.
:func:`poll_storm` with ``load="plain"`` (``poll_storm_plain``) uses plain loads (``LDG``) and
``regions=32`` different 16 KiB vectors in turn (512 KiB per lap, beyond L1, inside L2), so that
every load misses L1 and hits L2; ``poll_storm_rot`` is the same address stream with relaxed polls:
the pair isolates the cost of a strong load against a plain L2 hit at full scale.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...codegen_cuda import POLL_MODES
from ...errors import InputError
from ...ir import I32, PRED
from ...verify import verify
from .core import LINE_WORDS, WARP, Microbench, _poll_meta, _positive, _suffix, _thread_ids

__all__ = ["flag_round_trip", "store_visibility", "poll_storm"]


def flag_round_trip(rounds: int = 256, spin_limit: int = 1 << 22, same_sm: bool = False,
                    delay: int = 0, poll: str = "relaxed_gpu") -> Microbench:
    """Ping-pong between two CTAs (``same_sm``: two warps of one CTA) through two flags in
    different L2 lines; ``delay`` dependent shared loads in every poll iteration."""
    rounds = _positive("rounds", rounds)
    delay = int(delay)
    if delay < 0:
        raise InputError(f"delay={delay} must be >= 0")
    name = "flag_round_trip" + ("_same_sm" if same_sm else "") + (f"_delay{delay}" if delay
                                                                    else "") + _suffix(poll)
    b = Builder(f"mb_{name}", grid=1 if same_sm else 2, block=2 * WARP if same_sm else WARP,
                bench=name, rounds=rounds, **_poll_meta(poll))
    g_flags = b.global_buffer("flags", I32, 2 * LINE_WORDS, role="inout")
    g_out = b.global_buffer("out", I32, 2, role="out")
    cta = b.sreg("warp" if same_sm else "cta", dst=b.reg(I32, "cta"))
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    is0 = b.isetp("eq", cta, 0, dst=b.reg(PRED, "is0"))
    hop = None
    if delay:
        s_zero = b.shared("zero", I32, WARP)
        b.sts(s_zero, lane, 0)          # s[lane] = 0: every hop reads s[0] = 0
        b.bar()
        hop = b.mov(0, I32, dst=b.reg(I32, "hop"))

    def wait_delay():
        if hop is not None:
            for _ in range(delay):
                b.lds(s_zero, hop, dst=hop)
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    val = b.reg(I32, "val")
    is1 = b.pnot(is0, dst=b.reg(PRED, "is1"))
    # Four phases per round, in this program order, so that a lockstep executor (all warps
    # through the same statement) and the GPU (each CTA skips the other's phases) agree:
    # A CTA 0 writes ping; B CTA 1 waits for ping; C CTA 1 writes pong; D CTA 0 waits for pong.
    with b.loop("r", 1, rounds + 1) as r:
        with b.if_(is0):
            b.stg(g_flags, 0, r)
        with b.if_(is1):
            with b.while_(spin_limit=spin_limit, label="wait_ping") as w:
                wait_delay()
                b.ldg_volatile(g_flags, hop if hop is not None else 0, dst=seen)
                w.cond = b.isetp("ne", seen, r, dst=b.reg(PRED, "ping_wait"))
            b.stg(g_flags, LINE_WORDS, r)
        with b.if_(is0):
            with b.while_(spin_limit=spin_limit, label="wait_pong") as w:
                wait_delay()
                b.ldg_volatile(g_flags, hop if hop is not None else 0, offset=LINE_WORDS,
                               dst=seen)
                w.cond = b.isetp("ne", seen, r, dst=b.reg(PRED, "pong_wait"))
    first = b.isetp("eq", lane, 0, dst=b.reg(PRED, "first"))
    with b.if_(first):
        b.mov(seen, dst=val)
        b.stg(g_out, cta, val)
    kernel = verify(b.build())
    return Microbench(name, kernel,
                      {"flags": np.zeros(2 * LINE_WORDS, np.int32), "out": np.zeros(2, np.int32)},
                      rounds, "round trip between two warps" + (" of one SM" if same_sm else
                                                                " on two SMs"),
                      {"rounds": rounds, "same_sm": same_sm, "delay": delay},
                      lambda g: bool(np.all(np.asarray(g["out"]) == rounds)))


def store_visibility(rounds: int = 256, spin_limit: int = 1 << 22,
                     poll: str = "relaxed_gpu", flags: int = 1) -> Microbench:
    """One warp: store ``r`` to a flag, then poll it (volatile loads) until it reads ``r``.

    ``flags > 1``: every round does this on ``flags`` flags in different 128-byte lines in turn
    (op = one flag), so the cost averages over the L2 partitions the lines live in instead of
    being one draw of the (undocumented) address hash."""
    rounds, flags = _positive("rounds", rounds), _positive("flags", flags)
    name = "store_visibility" + _suffix(poll) + (f"_{flags}" if flags > 1 else "")
    b = Builder(f"mb_{name}", grid=1, block=WARP, bench=name, rounds=rounds, **_poll_meta(poll))
    g_flag = b.global_buffer("flag", I32, LINE_WORDS * flags, role="inout")
    g_out = b.global_buffer("out", I32, 1, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    own_wait = None
    with b.loop("r", 1, rounds + 1) as r:
        for f in range(flags):
            b.stg(g_flag, 0, r, offset=f * LINE_WORDS)
            with b.while_(spin_limit=spin_limit, label="wait_own") as w:
                b.ldg_volatile(g_flag, 0, offset=f * LINE_WORDS, dst=seen)
                if own_wait is None:
                    own_wait = b.reg(PRED, "own_wait")
                w.cond = b.isetp("ne", seen, r, dst=own_wait)
    first = b.isetp("eq", lane, 0, dst=b.reg(PRED, "first"))
    with b.if_(first):
        b.stg(g_out, 0, seen)
    kernel = verify(b.build())
    return Microbench(name, kernel, {"flag": np.zeros(LINE_WORDS * flags, np.int32),
                                     "out": np.zeros(1, np.int32)},
                      rounds * flags, "store then see it (same warp)",
                      {"rounds": rounds, **({"flags": flags} if flags > 1 else {})},
                      lambda g: int(np.asarray(g["out"])[0]) == rounds)


def poll_storm(rounds: int = 64, ctas: int = 132, threads: int = 256, slot: int = 4096,
               group: int = 4, load: str = "relaxed_gpu", regions: int = 1) -> Microbench:
    """``rounds`` dependent rounds of ``group`` back-to-back 16-byte volatile loads per thread,
    every CTA over the same ``slot``-word vector (Lamport's h staging while h is not ready).

    ``load``: a poll mode of :data:`POLL_MODES` or ``"plain"`` (``LDG``); ``regions``: round ``r``
    reads vector ``r % regions`` of ``regions`` consecutive ones (``rounds`` a multiple of it).
    """
    rounds, ctas, threads, slot, group, regions = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("ctas", ctas), ("threads", threads), ("slot", slot),
        ("group", group), ("regions", regions)))
    if slot % (4 * threads * group):
        raise InputError(f"slot={slot} must be a multiple of 4 * threads * group = "
                         f"{4 * threads * group}")
    if rounds % regions:
        raise InputError(f"rounds={rounds} must be a multiple of regions={regions}")
    if load not in (*POLL_MODES, "plain"):
        raise InputError(f"load={load!r} is unknown; accepted: {', '.join(POLL_MODES)}, plain")
    name = "poll_storm" + {"plain": "_plain", "volatile_sys": "_sys"}.get(load, "")
    if load == "relaxed_gpu" and regions > 1:
        name += "_rot"
    meta = {} if load == "plain" else _poll_meta(load)
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds, **meta)
    g_h = b.global_buffer("h", I32, slot * regions)
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    tid, cta, gt, tid4, acc = _thread_ids(b, threads)
    idx = b.reg(I32, "idx")
    chunk = [b.reg(I32, f"c{i}", 4) for i in range(group)]
    ld = b.ldg if load == "plain" else b.ldg_volatile

    def one_round(base):
        for i in range(group):  # the data are zeros: acc stays 0, but the next round depends
            b.iadd(base, acc, dst=idx)  # on this one (the loads cannot be hoisted or merged)
            ld(g_h, idx, offset=4 * threads * i, width=4, dst=chunk[i])
        for i in range(group):
            for k in range(4):
                b.iadd(acc, chunk[i][k], dst=acc)

    if regions == 1:
        with b.loop("r", 0, rounds):
            one_round(tid4)
    else:
        base = b.reg(I32, "base")
        with b.loop("q", 0, rounds // regions):
            with b.loop("g", 0, regions * slot, slot) as g:
                b.iadd(g, tid4, dst=base)
                one_round(base)
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())
    return Microbench(name, kernel, {"h": np.zeros(slot * regions, np.int32),
                                     "out": np.ones(ctas * threads, np.int32)},
                      rounds, "poll round of the whole grid (16-byte "
                      + ("plain" if load == "plain" else POLL_MODES[load]) + " loads)",
                      {"rounds": rounds, "ctas": ctas, "threads": threads, "slot": slot,
                       "group": group, "load": load, "regions": regions},
                      lambda g: bool(np.all(np.asarray(g["out"]) == 0)))
