"""The exchange with narrower polling, in the kernel IR: the GPU and the simulator on the same
curve of round time against the number of writers a CTA waits for.

    PYTHONPATH=. python3 measurements/lamport_ring.py --out $OUT    # GPU: lamport_ring_ir.json
    python measurements/lamport_ring.py --simulate measurements/h100/lamport_ring_ir.json

``lamport_clock.py --ring`` (CUDA, GPU only) found that when every SM writes its own line and
waits for the lines of ``k`` others, the round grows from 466 ns (k = 1) to 1505 ns (k = 132).
This probe (built here, a probe: not one of the simulator's calibration benchmarks) is the same
exchange written in the IR, so the simulator runs the very kernel the GPU runs: 132 CTAs x 256
threads; slot ``r`` holds two copies of 132 lines (``2 x 4224`` words, so that a CTA's lines are
one run of addresses without a modulo); round ``r``: thread ``t`` polls the 16-byte chunks
``t + 256 q`` (q < 4 per group, groups back to back) of the ``8 k`` chunks of lines ``c + 1 + i
* (132 / k)`` (i < k) with L2-coherent loads, re-polling a group while any word is the sentinel
-0.0 (a chunk past the ``8 k`` polls chunk 0 again); ``__syncthreads``; warp 0 writes ``r + 1``
into its line ``c`` of slot ``r + 1`` (both copies). k = 1, 4, 12, 33, 132, and a control at
k = 132 in which every CTA polls the lines in the same order (from line 0), as the persistent
kernel does; and both again with every line written by 4 SMs, one sector each (``writes=
"sectors"``, the layout of ``lmech_ws_1``). Op = one round.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CTAS, THREADS, LINE = 132, 256, 32
WORDS = 2 * CTAS * LINE            # one slot: two copies of the 132 lines
LINES = (1, 4, 12, 33, 132)
# (key, k, order) of every experiment: the rotated curve and the same-order control at k = 132
EXPERIMENTS = tuple((str(k), k, "rotated", "line") for k in LINES) + (
    ("132_same", 132, "same", "line"), ("132_sec", 132, "rotated", "sectors"),
    ("132_same_sec", 132, "same", "sectors"), ("4_sec", 4, "rotated", "sectors"),
    ("132_warps", 132, "rotated", "warps"), ("132_rows", 132, "rotated", "rows"),
    ("4_rows", 4, "rotated", "rows"), ("132_same_rows", 132, "same", "rows")) + tuple(
    (f"132_sec{m}", 132, "rotated", f"sectors{m}") for m in (4, 12, 32)) + (
    ("33_same", 33, "same", "line"), ("33_same_few", 33, "same", "line_few"),
    ("33_same_few_warps", 33, "same", "warps_few"), ("33_exact_few", 33, "exact", "line_few"),
    ("132_exact", 132, "exact", "line"), ("33_exact_few_warps", 33, "exact", "warps_few"),
    ("33_exact_few_warps_c1", 33, "exact", "warps_few_c1"))
WRITES = {"line": "", "sectors": "_sec", "warps": "_warps", "rows": "_rows",
          "sectors4": "_sec4", "sectors12": "_sec12", "sectors32": "_sec32",
          "line_few": "_few", "warps_few": "_few_warps", "warps_few_c1": "_few_warps_c1",
          # measurements/lamport_pollers.py: whole lines with the kernel's check, and (_solo) only
          # the writer CTAs polling
          "line_c1": "_c1", "warps_c1": "_warps_c1", "line_few_c1": "_few_c1",
          "line_few_c1_solo": "_few_c1_solo", "warps_few_c1_solo": "_few_warps_c1_solo",
          "warps_few_c1_p66": "_few_warps_c1_p66",
          # measurements/lamport_pollers.py --merge: the 99 CTAs that only poll load one sector
          # of each line (_q1), or back off after every failed poll (_bo)
          "warps_few_c1_q1": "_few_warps_c1_q1", "warps_few_c1_bo": "_few_warps_c1_bo",
          # measurements/poll_count.py: the writers' stores n dependent FFMAs later (_sd<n>)
          **{f"warps_few_c1_sd{n}": f"_few_warps_c1_sd{n}" for n in (16, 32, 64, 128)}}
GPU_ROUNDS, SIM_ROUNDS = (64, 256), (4, 8)
REPEATS, WARMUP = 9, 2


def ring(rounds: int, k: int, order: str = "rotated", writes: str = "line"):
    """The probe with ``k`` lines waited for, ``rounds`` rounds, as a checked Microbench.
    ``order="same"`` (k = 132 only): every CTA polls the lines from line 0 on, all in the same
    order, as the persistent kernel's staging does; ``"rotated"``: CTA ``c`` from ``c + 1``.
    ``writes="sectors"``: warp 0 of CTA ``c`` writes sector ``q`` of line ``c - 33 q`` (mod 132)
    instead of its own whole line, so that every line has 4 writer SMs, one per sector (as
    ``lmech_ws_1`` deals them). ``writes="warps"``: lanes 0-3 of every warp of CTA ``c`` write
    words ``4 w + l`` of its own line ``c`` (one line, one SM, 8 warps, 32 one-word stores).
    ``writes="rows"``: lane ``l < 4`` of warp ``w`` of CTA ``c`` writes word ``4 w + l`` of line
    ``c + 33 l`` (mod 132), so every line has 4 writer SMs whose words alternate (word ``j``
    from the SM of ``j mod 4``), each word its own warp's store: the way the persistent kernel
    at batch 1 deals its rows to warps and so its h lines to SMs. ``writes="sectors<m>"`` (m =
    4, 12, 32): only the lines of the first ``m / 4`` groups ``{g, g + 33, g + 66, g + 99}`` are
    dealt by sectors (their 4 CTAs swap sectors), the others are written whole: ``m``
    lines with 4 writer SMs among 132, every line still polled by every CTA. ``writes="line_few"``
    / ``"warps_few"`` (same order): as ``"line"`` / ``"warps"``, but only the ``k`` CTAs whose
    lines are waited for write (the others only poll), as in the persistent kernel's exchange
    of a small layer (``lmech_x_1024``: 32 of 132 CTAs write, 8 warps each). ``order="exact"``:
    as ``"same"``, but a lane whose chunk lies past the ``8 k`` chunks does not poll (in
    ``"same"`` and ``"rotated"`` it polls chunk 0 again, which in the same order puts most of
    the later polls of every CTA on line 0's first sector). A ``writes`` ending in ``"_c1"``
    checks one word of each polled 16-byte chunk for the sentinel, as the kernel's staging
    does (a chunk's four words are written by one store instruction), instead of all four. A
    ``_few`` ``writes`` ending in ``"_solo"``: the CTAs that do not write do not poll either
    (they only pass the round's barrier), so each line has only its ``k`` waiting CTAs as
    pollers (``measurements/lamport_pollers.py``); ending in ``"_p66"``: only the even CTAs
    poll (66 pollers; with ``k`` 33 they include the writers); ending in ``"_q1"``: the CTAs
    that do not write load only the first 32-byte sector of each line (a quarter of the bytes,
    the same line requests); ending in ``"_bo"``: they wait :data:`BACKOFF_FFMAS` dependent
    FFMAs (about 4 cycles each on the H100) after every failed poll, about halving their poll
    rate (the simulator cannot time this one: a replayed poll repeats the recorded iteration,
    in which the back-off never ran); ending in ``"_sd<n>"``: the writer lanes run ``n``
    dependent FFMAs between the round's barrier and their stores (about ``4 n`` cycles on the
    H100), so the CTAs that only poll start polling that much before the words are stored.
    Any ``writes`` followed by ``"_w<ns>"``: every thread sleeps ``ns`` nanoseconds
    (``__nanosleep``) after the round's stores, before it polls the next round's lines, as
    the Lamport kernel closes its step (``lamport_pollers.py --wait``); ``"_wh<ns>"``: only the
    threads of the even CTAs sleep, the odd CTAs poll the next round's lines at once, while
    the words are still being written (``lamport_pollers.py --half``)."""
    import re

    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import F32, I32, PRED
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.kernels.microbench.lamport_kernel import SENT
    from kernels_ir.verify import verify

    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise InputError(f"rounds={rounds!r}: accepted whole numbers >= 1")
    if k not in LINES + (66,):
        raise InputError(f"k={k!r}: accepted {', '.join(map(str, LINES + (66,)))}")
    if order not in ("rotated", "same", "exact") or (order != "rotated"
                                                     and k not in (33, 66, CTAS)):
        raise InputError(f"order={order!r} with k={k}: accepted 'rotated', or 'same' / 'exact' "
                         f"with k=33, 66 or {CTAS}")
    first = 1 if order == "rotated" else 0
    # a trailing ``_w<ns>``: every thread sleeps that long after the round's stores (``_wh``:
    # only the even CTAs' threads)
    waited_ns = re.fullmatch(r"(.+)_w(h?)([0-9]+)", writes)
    wait = int(waited_ns.group(3)) if waited_ns else 0
    half = bool(waited_ns and waited_ns.group(2))
    writes = waited_ns.group(1) if waited_ns else writes
    if writes not in WRITES:
        raise InputError(f"writes={writes!r}: accepted {', '.join(map(repr, WRITES))}, each "
                         f"optionally followed by _w<ns> or _wh<ns>")
    # who polls: everyone, only the writers (_solo) or every second CTA (_p66)
    solo = writes.endswith("_solo")
    p66 = writes.endswith("_p66")
    q1 = writes.endswith("_q1")
    backoff = writes.endswith("_bo")
    delay = int(writes.rsplit("_sd", 1)[1]) if "_sd" in writes else 0
    bare = writes.rsplit("_sd", 1)[0].removesuffix("_solo").removesuffix("_p66") \
        .removesuffix("_q1").removesuffix("_bo")
    one_word = bare.endswith("_c1")   # one word per chunk, as the kernel
    few = bare.removesuffix("_c1").endswith("_few")
    if few and order == "rotated":
        raise InputError(f"writes={writes!r} with order={order!r}: accepted with 'same' or "
                         f"'exact' only")
    key = writes
    writes = bare.removesuffix("_c1").removesuffix("_few")
    stride, chunks = CTAS // k, 8 * k
    groups = -(-chunks // (4 * THREADS))
    name = f"ring_{k}" + {"rotated": "", "same": "_same", "exact": "_exact"}[order] + \
        WRITES[key] + (f"_w{'h' if half else ''}{wait}" if wait else "")
    b = Builder(f"mb_{name}", grid=CTAS, block=THREADS, bench=name, rounds=rounds)
    g_h = b.global_buffer("h", F32, (rounds + 1) * WORDS, role="inout")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    # per group and chunk q: the chunk's word offset within a slot (fixed for the launch)
    offs, ins = [], []
    for g in range(groups):
        for q in range(4):
            ch = b.iadd(tid, THREADS * (4 * g + q), dst=b.reg(I32, f"ch{g}_{q}"))
            inside = b.isetp("lt", ch, chunks, dst=b.reg(PRED, f"in{g}_{q}"))
            ins.append(inside)
            b.sel(inside, ch, b.mov(0, I32, dst=b.reg(I32, f"zero{g}_{q}")), dst=ch)
            line = b.shr(ch, 3, dst=b.reg(I32, f"line{g}_{q}"))
            if order == "rotated":
                b.imad(line, stride, cta, dst=line)
                b.iadd(line, first, dst=line)
            else:
                b.imul(line, stride, dst=line)
            word = b.and_(ch, 7, dst=b.reg(I32, f"w{g}_{q}"))
            b.imul(word, 4, dst=word)
            offs.append(b.imad(line, LINE, word, dst=b.reg(I32, f"off{g}_{q}")))
    if writes == "line":
        own = b.imad(cta, LINE, lane, dst=b.reg(I32, "own"))
    elif writes in ("warps", "rows"):   # word 4 warp + lane of line cta (+ 33 lane: rows)
        wl = cta
        if writes == "rows":
            wl = b.imad(lane, CTAS // 4, cta, dst=b.reg(I32, "wline"))
            over = b.isetp("ge", wl, CTAS, dst=b.reg(PRED, "wover"))
            b.sel(over, b.iadd(wl, -CTAS, dst=b.reg(I32, "wwrap")), wl, dst=wl)
        own = b.imad(wl, LINE, b.imad(warp, 4, lane, dst=b.reg(I32, "wword")),
                     dst=b.reg(I32, "own"))
    else:   # sector q = lane / 8 of line (cta - 33 q) mod 132
        q8 = b.shr(lane, 3, dst=b.reg(I32, "q8"))
        wl = b.imad(q8, -(CTAS // 4), cta, dst=b.reg(I32, "wline"))
        neg = b.isetp("lt", wl, 0, dst=b.reg(PRED, "wneg"))
        b.sel(neg, b.iadd(wl, CTAS, dst=b.reg(I32, "wwrap")), wl, dst=wl)
        if writes != "sectors":   # only the first m / 4 groups: cta mod 33 < m / 4
            grp = b.irem(cta, CTAS // 4, dst=b.reg(I32, "grp"))
            dealt = b.isetp("lt", grp, int(writes[len("sectors"):]) // 4,
                            dst=b.reg(PRED, "dealt"))
            b.sel(dealt, wl, cta, dst=wl)
        own = b.imad(wl, LINE, lane, dst=b.reg(I32, "own"))
    is_writer = (b.isetp("lt", lane, 4, dst=b.reg(PRED, "writes")) if writes in ("warps", "rows")
                 else b.isetp("eq", warp, 0, dst=b.reg(PRED, "writes")))
    waited = None
    if few:   # only the CTAs whose lines are waited for: cta % stride == 0
        waited = b.isetp("eq", b.irem(cta, stride, dst=b.reg(I32, "cmod")), 0,
                         dst=b.reg(PRED, "waited"))
        b.pand(is_writer, waited, dst=is_writer)
    polls = b.isetp("eq", b.irem(cta, 2, dst=b.reg(I32, "cmod2")), 0,
                    dst=b.reg(PRED, "polls")) if p66 else None
    if q1:   # the CTAs that do not write: only the chunks of a line's first sector
        for i, off in enumerate(offs):
            sec0 = b.isetp("lt", b.and_(off, LINE - 1, dst=b.reg(I32, f"lw{i}")), 8,
                           dst=b.reg(PRED, f"sec0_{i}"))
            b.por(sec0, waited, dst=sec0)
            ins[i] = b.pand(ins[i], sec0, dst=b.reg(PRED, f"inq{i}"))
    slow = b.pnot(waited, dst=b.reg(PRED, "slow")) if backoff else None
    v = [b.reg(F32, f"v{q}", 4) for q in range(4)]
    bits = b.reg(I32, "bits")
    waiting, one = b.reg(PRED, "waiting"), b.reg(PRED, "sent")
    warp_waiting = b.reg(PRED, "warp_waiting")
    base, addr = b.reg(I32, "base"), b.reg(I32, "addr")
    val = b.reg(F32, "val")
    if order == "exact":    # chunks a lane does not poll read as "no sentinel"
        for q in range(4):
            for x in range(4):
                b.mov(0.0, dst=v[q][x])
    with b.loop("r", 0, rounds, kind="time") as r:
        b.imul(r, WORDS, dst=base)
        for g in range(groups):
            args = (b, g, order, one_word, offs, ins, base, addr, g_h, v, bits, waiting, one,
                    warp_waiting, slow)
            if solo or p66:   # the CTAs that do not write (_p66: every second) skip the polls
                with b.if_(waited if solo else polls):
                    _ring_poll(*args)
            else:
                _ring_poll(*args)
        b.bar()
        r1 = b.iadd(r, 1, dst=b.reg(I32, "rnext"))
        b.i2f(r1, dst=val)
        with b.if_(is_writer):
            if delay:   # a chain fed by a polled word: finite, so fma(x, 0, val) is val, but
                x = b.fadd(v[0][0], 1.0, dst=b.reg(F32, "sd"))   # only the chain can tell
                for _ in range(delay):
                    b.ffma(x, 1.0001, 0.5, dst=x)
                b.ffma(x, 0.0, val, dst=val)
            b.imad(r1, WORDS, own, dst=addr)
            b.stg(g_h, addr, val)
            b.stg(g_h, addr, val, offset=CTAS * LINE)
        if wait and half:   # the even CTAs sleep, the odd ones poll at once
            even = b.isetp("eq", b.irem(cta, 2, dst=b.reg(I32, "ceven")), 0,
                           dst=b.reg(PRED, "sleeps"))
            with b.if_(even):
                b.nanosleep(wait)
        elif wait:   # as the Lamport kernel closes its step (sparse_rnn.LAMPORT_STEP_WAIT_NS)
            b.nanosleep(wait)
    kernel = verify(b.build())
    h = np.full((rounds + 1, WORDS), SENT, np.int32)
    h[0] = 0
    want = np.arange(rounds + 1, dtype=np.float32)[:, None] * np.ones(WORDS, np.float32)
    want = want.view(np.int32).copy()
    if few:   # the lines of the CTAs that do not write keep the sentinel
        silent = np.repeat(np.arange(CTAS) % stride != 0, LINE)
        want[1:, np.concatenate([silent, silent])] = SENT

    def check(g) -> bool:
        return bool(np.array_equal(np.asarray(g["h"]).view(np.int32).reshape(rounds + 1, WORDS),
                                   want))

    return Microbench(name, kernel, {"h": h.reshape(-1).view(np.float32).copy()},
                      rounds, f"one round: every CTA writes ({writes}) after seeing {k} lines "
                      f"({order} order)",
                      {"rounds": rounds, "k": k, "order": order, "writes": writes, "ctas": CTAS,
                       "threads": THREADS, **({"wait_ns": wait} if wait else {}),
                       **({"wait_half": True} if half else {})}, check)


BACKOFF_FFMAS = 96   # ring(..., writes="..._bo"): the back-off after a failed poll


def _ring_poll(b, g, order, one_word, offs, ins, base, addr, g_h, v, bits, waiting, one,
               warp_waiting, slow=None) -> None:
    """Group ``g``'s poll loop of :func:`ring`: its 4 chunks' 16-byte L2-coherent loads
    (``exact``: only the chunks inside the waited lines), re-polled while any checked word of
    the warp is the sentinel; with ``slow`` (a predicate), the lanes where it holds back off
    after a failed poll (a chain of dependent FFMAs fed by a polled word, whose result can
    never end the loop but which the compiler cannot remove)."""
    from kernels_ir.ir import F32, I32, PRED
    from kernels_ir.kernels.microbench.lamport_kernel import SENT

    with b.while_(spin_limit=1 << 22, label="ring_poll") as poll:
        for q in range(4):
            b.iadd(base, offs[4 * g + q], dst=addr)
            if order == "exact":
                with b.if_(ins[4 * g + q]):
                    b.ldg_volatile(g_h, addr, width=4, dst=v[q])
            else:
                b.ldg_volatile(g_h, addr, width=4, dst=v[q])
        b.mov(False, PRED, dst=waiting)
        for q in range(4):
            for x in range(1 if one_word else 4):
                b.bitcast(v[q][x], I32, dst=bits)
                b.isetp("eq", bits, SENT, dst=one)
                b.por(waiting, one, dst=waiting)
        poll.cond = b.vote_any(waiting, dst=warp_waiting)
        if slow is not None:
            back = b.pand(slow, warp_waiting, dst=b.reg(PRED, f"back{g}"))
            with b.if_(back):
                x = b.fadd(v[0][0], 1.0, dst=b.reg(F32, f"bo{g}"))
                for _ in range(BACKOFF_FFMAS):
                    b.ffma(x, 1.0001, 0.5, dst=x)
                # a payload no FFMA chain of finite values produces: never true, but only the
                # chain can tell, so the compiler keeps it (it would end the wait if it held)
                nan = b.isetp("eq", b.bitcast(x, I32, dst=b.reg(I32, f"bob{g}")), 0x7FC00001,
                              dst=b.reg(PRED, f"bon{g}"))
                stay = b.pnot(b.vote_any(nan, dst=b.reg(PRED, f"bov{g}")),
                              dst=b.reg(PRED, f"bos{g}"))
                b.pand(warp_waiting, stay, dst=warp_waiting)


def measure(out: str, argv: list) -> dict:
    from measurements.probe import record_rounds

    return record_rounds(out, argv, "lamport_ring_ir.json", [
        (key, lambda s, k=k, o=order, w=writes: ring(s, k, o, w))
        for key, k, order, writes in EXPERIMENTS], label="ring_")


def simulate_k(spec, k: int, order: str = "rotated", writes: str = "line") -> dict:
    """The simulator's ns per round (slope between the two round counts, buffers warm in L2,
    both partition assignments averaged), values checked."""
    from gpusim.engine import simulate

    flips = (False, True) if spec.l2_partitions > 1 and spec.l2_far_extra_cycles else (False,)
    cyc = []
    for s in SIM_ROUNDS:
        m = ring(s, k, order, writes)
        runs = [simulate(m.kernel, m.inputs, spec, l2_warm=True, l2_flip=f) for f in flips]
        if not all(m.verify_result(x.globals) for x in runs):
            raise AssertionError(f"ring_{k} (rounds {s}): the simulator's values fail the check")
        cyc.append(sum(x.cycles for x in runs) / len(runs))
    per = (cyc[1] - cyc[0]) / (SIM_ROUNDS[1] - SIM_ROUNDS[0]) / spec.clock_hz
    return {"per_op_s": per, "cycles": dict(zip(map(str, SIM_ROUNDS), cyc, strict=True))}


def _simulated(spec, rec) -> dict:
    res = {}
    for key, k, order, writes in EXPERIMENTS:
        res[key] = simulate_k(spec, k, order, writes)
        g = rec.get("results", {}).get(key, {}).get("per_op_s")
        print(f"ring_{key:8s}: simulated {res[key]['per_op_s'] * 1e9:7.1f} ns per round"
              + (f"   GPU {g * 1e9:7.1f}" if g else ""), flush=True)
    return res


# the experiments whose lines have several writer SMs: l2_line_handover_cycles is fitted to them
HANDOVER_FIT = ("132_sec", "132_sec12", "132_sec32", "132_rows", "4_sec", "4_rows")
HANDOVER_GRID = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5)


def grid_fit(field: str, grid, experiments, gpu: dict, spec_name: str = "h100") -> dict:
    """The value of ``grid`` for spec parameter ``field`` whose simulated ns per round of
    ``experiments`` (:data:`EXPERIMENTS`-style tuples ``(key, k, order, writes)``) have the
    smallest mean absolute log error against ``gpu`` (seconds per round by key), every other
    parameter as in the spec ``spec_name``: ``{"value", "grid"}``, each grid row with its error
    and simulated seconds."""
    import dataclasses
    import math

    from gpusim.specs import load_spec

    spec = load_spec(spec_name)
    rows = []
    for value in grid:
        s = dataclasses.replace(spec, **{field: float(value)})
        sims = {key: simulate_k(s, k, o, w)["per_op_s"] for key, k, o, w in experiments}
        err = sum(abs(math.log(sims[x] / gpu[x])) for x in sims) / len(sims)
        rows.append({"value": value, "mean_abs_log_error": err, "simulated_s": sims})
        print(f"  {value:5.2f}: mean |log error| {err:.3f}  "
              + "  ".join(f"{x} {sims[x] * 1e9:.0f}/{gpu[x] * 1e9:.0f}" for x in sims),
              flush=True)
    best = min(rows, key=lambda r: r["mean_abs_log_error"])
    print(f"{field} = {best['value']}")
    return {"value": best["value"], "grid": rows}


def fit_handover(path: str, grid=HANDOVER_GRID) -> dict:
    """``l2_line_handover_cycles`` (:mod:`gpusim.engine.l2`) from the record ``path``: the value
    of ``grid`` whose simulated ns per round of :data:`HANDOVER_FIT` have the smallest mean
    absolute log error against the GPU's (:func:`grid_fit`)."""
    import json

    with open(path) as f:
        rec = json.load(f)
    exps = {e[0]: e for e in EXPERIMENTS}
    gpu = {k: rec["results"][k]["per_op_s"] for k in HANDOVER_FIT}
    fit = grid_fit("l2_line_handover_cycles", grid, [exps[k] for k in HANDOVER_FIT], gpu)
    return {**fit, "benchmarks": list(HANDOVER_FIT)}


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--fit-handover"]:
        if len(argv) != 2:
            print("usage: lamport_ring.py --fit-handover RECORD.json", file=sys.stderr)
            return 2
        fit_handover(argv[1])
        return 0
    return probe_main(argv, __doc__, "measurements/lamport_ring.py", measure,
                      lambda path: add_simulated(path, _simulated, l2_warm=True))


if __name__ == "__main__":
    raise SystemExit(main())
