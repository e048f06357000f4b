"""``lmech_watch_*`` (:func:`watch`): a flag round trip between two SMs while other CTAs poll the
line, sector or slice being written (the Lamport family, :mod:`.lamport`).
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import I32, PRED
from ...verify import verify
from .core import LINE_WORDS, SPIN, WARP, Microbench, _positive

__all__ = ["watch", "WATCH_WHERE"]

WATCH_WHERE = {"word": 0, "sector": 4, "line": 8, "unit": 256}   # watcher word (ping = word 0)
PONG = LINE_WORDS                                                 # the pong word (next line)


def watch(rounds: int = 250, pollers: int = 131, warps: int = 1, where: str = "word",
          threads: int = 256, spin_limit: int = SPIN) -> Microbench:
    """Ping-pong between CTA 0 and CTA 1 while ``pollers`` CTAs (CTA 1 and ``pollers - 1``
    watchers, grid ``pollers + 1``) poll the ping with ``warps`` warps each.

    Round ``r`` (four phases in program order, as :func:`~.polls.flag_round_trip`): CTA 0
    warp 0 stores ``r`` to the ping word (and to the watchers' word, ``where`` not ``"word"``);
    every polling warp waits until its word is ``>= r`` (relaxed 32-bit loads, all lanes the same
    word); CTA 1 warp 0 stores ``r`` to the pong word; CTA 0 warp 0 waits for it. Op = one round
    trip; the watchers are not on its path, only on the ping's line, sector or slice."""
    rounds, pollers, warps, threads = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("pollers", pollers), ("warps", warps), ("threads", threads)))
    if threads % WARP:
        raise InputError(f"threads={threads} must be a multiple of 32")
    if warps > threads // WARP:
        raise InputError(f"warps={warps} exceeds the {threads // WARP} warps of a CTA")
    if where not in WATCH_WHERE:
        raise InputError(f"where={where!r} is unknown; accepted: {', '.join(WATCH_WHERE)}")
    off = WATCH_WHERE[where]
    ctas = pollers + 1
    wpc = threads // WARP
    name = (f"lmech_watch_{pollers}" + (f"_w{warps}" if warps > 1 else "")
            + ("" if where == "word" else f"_{where}"))
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_f = b.global_buffer("flags", I32, 2 * max(off, PONG) + LINE_WORDS, role="inout")
    g_out = b.global_buffer("out", I32, ctas * wpc, role="out")
    g_polls = b.global_buffer("polls", I32, ctas * wpc, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    gw = b.imad(cta, wpc, warp, dst=b.reg(I32, "gw"))
    w0 = b.isetp("eq", warp, 0, dst=b.reg(PRED, "w0"))
    is_ping = b.pand(b.isetp("eq", cta, 0), w0, dst=b.reg(PRED, "is_ping"))
    is_pong = b.pand(b.isetp("eq", cta, 1), w0, dst=b.reg(PRED, "is_pong"))
    polls = b.pand(b.isetp("ge", cta, 1), b.isetp("lt", warp, warps), dst=b.reg(PRED, "polls"))
    word = b.sel(is_pong, 0, off, dst=b.reg(I32, "word"))          # CTA 1's warp 0 polls word 0
    stores = b.pand(is_ping, b.isetp("lt", lane, 1 if off == 0 else 2),
                    dst=b.reg(PRED, "stores"))
    sword = b.sel(b.isetp("eq", lane, 0), 0, off, dst=b.reg(I32, "sword"))
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    npoll = b.mov(0, I32, dst=b.reg(I32, "npoll"))
    with b.loop("r", 1, rounds + 1) as r:
        with b.if_(stores):
            b.stg(g_f, sword, r)
        with b.if_(polls):
            with b.while_(spin_limit=spin_limit, label="watch_ping") as w:
                b.ldg_volatile(g_f, word, dst=seen)
                b.iadd(npoll, 1, dst=npoll)
                w.cond = b.isetp("lt", seen, r, dst=b.reg(PRED, "ping_wait"))
        with b.if_(is_pong):
            b.stg(g_f, PONG, r)
        with b.if_(is_ping):
            with b.while_(spin_limit=spin_limit, label="wait_pong") as w:
                b.ldg_volatile(g_f, PONG, dst=seen)
                b.iadd(npoll, 1, dst=npoll)
                w.cond = b.isetp("lt", seen, r, dst=b.reg(PRED, "pong_wait"))
    with b.if_(b.isetp("eq", lane, 0, dst=b.reg(PRED, "first"))):
        b.stg(g_out, gw, seen)
        b.stg(g_polls, gw, npoll)
    kernel = verify(b.build())
    active = np.zeros((ctas, wpc), bool)
    active[1:, :warps] = True
    active[0, 0] = True
    active = active.reshape(-1)

    def check(g) -> bool:
        out, npl = np.asarray(g["out"]), np.asarray(g["polls"])
        return bool(np.all(out[active] == rounds) and np.all(out[~active] == 0)
                    and np.all(npl[active] >= rounds) and np.all(npl[~active] == 0))

    return Microbench(name, kernel, {"flags": np.zeros(g_f.size, np.int32),
                                     "out": np.zeros(ctas * wpc, np.int32),
                                     "polls": np.zeros(ctas * wpc, np.int32)},
                      rounds, f"round trip between two SMs, {pollers} CTA(s) x {warps} warp(s) "
                      f"polling the ping ({where})",
                      {"rounds": rounds, "pollers": pollers, "warps": warps, "where": where,
                       "threads": threads}, check)
