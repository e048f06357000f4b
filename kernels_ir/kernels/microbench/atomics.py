"""L2 atomics and the grid barrier built on them (:mod:`gpusim.engine.l2`: atomics, fences).

- :func:`atomic_throughput` - every warp of ``ctas`` CTAs (lane 0 only: one atomic per warp
  instruction, no warp aggregation) adds 1 ``per_warp`` times to the same word (``same=True``) or
  to its own word, one 128-byte line per warp (``same=False``). The returned old values are summed
  and stored, so they are real atomics with return, not reductions. Op = one atomic.
- :func:`grid_barrier` - ``ctas`` CTAs do ``rounds`` grid barriers: ``__syncthreads``; thread 0
  fences, arrives with an atomic add on a counter and spins (volatile loads) until the counter
  reaches ``(r + 1) * nctas``; ``__syncthreads``. The same mechanism as the persistent kernel's
  ``sync="barrier"``. Op = one barrier.
- :func:`fence_cost` - what a ``__threadfence()`` costs and what it waits for: ``warps`` warps
  per CTA (``ctas`` of them) run ``rounds`` rounds of: lanes ``< stores`` of every warp each
  store the round number into a 128-byte line of their own, a CTA barrier when ``warps > 1``
  (the persistent kernel's order: every warp's h stores, ``__syncthreads``, then thread 0),
  then thread 0 fences and, with ``atomic``, adds 1 to a counter of its CTA (no return value
  used, as the grid barrier's arrive). The fence of a round
  must wait for that round's stores (and for the previous round's atomic), so the round's cost
  says whether the fence's own latency adds to the stores' round trip or overlaps it. Op = one
  round.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import I32, PRED
from ...verify import verify
from .core import LINE_WORDS, WARP, Microbench, _positive

__all__ = ["atomic_throughput", "fence_cost", "grid_barrier"]


def atomic_throughput(per_warp: int = 64, ctas: int = 132, threads: int = 256,
                      same: bool = True) -> Microbench:
    """``ctas * threads/32 * per_warp`` atomics with return, same word or one line per warp."""
    per_warp, ctas, threads = (_positive(n, v) for n, v in
                               (("per_warp", per_warp), ("ctas", ctas), ("threads", threads)))
    wpc = threads // WARP
    n_warps = ctas * wpc
    words = LINE_WORDS if same else n_warps * LINE_WORDS
    name = "atomic_same" if same else "atomic_distinct"
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, per_warp=per_warp)
    g_cnt = b.global_buffer("counters", I32, words, role="inout")
    g_out = b.global_buffer("out", I32, n_warps, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    gw = b.imad(cta, wpc, warp, dst=b.reg(I32, "gw"))
    addr = b.mov(0, I32, dst=b.reg(I32, "addr")) if same else b.imul(gw, LINE_WORDS,
                                                                     dst=b.reg(I32, "addr"))
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    old = b.reg(I32, "old")
    first = b.isetp("eq", lane, 0, dst=b.reg(PRED, "first"))
    with b.if_(first):
        with b.loop("r", 0, per_warp):
            b.atom_add(g_cnt, addr, 1, dst=old)
            b.iadd(acc, old, dst=acc)
        b.stg(g_out, gw, acc)
    kernel = verify(b.build())
    total = n_warps * per_warp

    def check(g) -> bool:
        c = np.asarray(g["counters"])
        if same:
            return int(c[0]) == total
        return bool(np.all(c.reshape(n_warps, LINE_WORDS)[:, 0] == per_warp))

    return Microbench(name, kernel, {"counters": np.zeros(words, np.int32),
                                     "out": np.zeros(n_warps, np.int32)},
                      total, "atomic add with return",
                      {"per_warp": per_warp, "ctas": ctas, "threads": threads, "same": same},
                      check)


def grid_barrier(rounds: int = 64, ctas: int = 132, threads: int = 256,
                 spin_limit: int = 1 << 22, fence: bool = True,
                 flag: bool = False) -> Microbench:
    """``rounds`` grid barriers (atomic arrive + volatile spin) over ``ctas`` CTAs; without the
    fence before the arrive when ``fence`` is False (its parts apart). With ``flag`` the
    spinners poll a flag in another line, which the last arriver (the atomic returned
    ``target - 1``) sets to the round: the same arrive, no polls of the counter's line."""
    rounds, ctas, threads = (_positive(n, v) for n, v in
                             (("rounds", rounds), ("ctas", ctas), ("threads", threads)))
    name = "grid_barrier" + ("" if fence else "_nofence") + ("_flag" if flag else "") + \
        ("" if ctas == 132 else f"_c{ctas}")
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_cnt = b.global_buffer("counter", I32, 2 * LINE_WORDS if flag else 1, role="inout")
    g_out = b.global_buffer("out", I32, ctas, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    nctas = b.sreg("nctas", dst=b.reg(I32, "nctas"))
    is0 = b.isetp("eq", tid, 0, dst=b.reg(PRED, "is0"))
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    old = b.reg(I32, "old")
    target = b.reg(I32, "target")
    with b.loop("r", 1, rounds + 1) as r:
        b.bar()
        with b.if_(is0):
            if fence:
                b.fence()
            b.atom_add(g_cnt, 0, 1, dst=old)
            b.imul(r, nctas, dst=target)
            if flag:   # the last arriver releases the others through the flag's line
                last = b.iadd(old, 1, dst=b.reg(I32, "arrived"))
                with b.if_(b.isetp("eq", last, target, dst=b.reg(PRED, "last"))):
                    b.stg(g_cnt, LINE_WORDS, r)
                b.mov(r, I32, dst=target)
            with b.while_(spin_limit=spin_limit, label="grid_barrier") as w:
                b.ldg_volatile(g_cnt, LINE_WORDS if flag else 0, dst=seen)
                w.cond = b.isetp("lt", seen, target, dst=b.reg(PRED, "behind"))
        b.bar()
    with b.if_(is0):
        b.stg(g_out, cta, seen)
    kernel = verify(b.build())
    done = rounds if flag else rounds * ctas
    return Microbench(name, kernel, {"counter": np.zeros(2 * LINE_WORDS if flag else 1, np.int32),
                                     "out": np.zeros(ctas, np.int32)},
                      rounds, "grid barrier", {"rounds": rounds, "ctas": ctas,
                                               "threads": threads, "fence": fence, "flag": flag},
                      lambda g: bool(np.all(np.asarray(g["out"]) >= done)))


def fence_cost(rounds: int = 64, ctas: int = 1, stores: int = 0, atomic: bool = False,
               warps: int = 1) -> Microbench:
    """``rounds`` rounds of (``stores`` one-line stores per warp; barrier; fence; optional
    atomic) on ``warps`` warps of each of ``ctas`` CTAs (module docstring)."""
    rounds, ctas, warps = (_positive(n, v) for n, v in
                           (("rounds", rounds), ("ctas", ctas), ("warps", warps)))
    if not 0 <= int(stores) <= WARP:
        raise InputError(f"stores={stores}: accepted 0 to {WARP} (lanes of the warp)")
    stores = int(stores)
    name = f"fence_st{stores}" + ("_atom" if atomic else "") + \
        (f"_w{warps}" if warps > 1 else "") + (f"_c{ctas}" if ctas > 1 else "")
    b = Builder(f"mb_{name}", grid=ctas, block=WARP * warps, bench=name, rounds=rounds)
    lines = max(stores, 1) * warps
    g_out = b.global_buffer("out", I32, ctas * lines * LINE_WORDS, role="inout")
    g_cnt = b.global_buffer("counter", I32, ctas * LINE_WORDS, role="inout")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    # lane l < stores of warp w writes word 0 of line (cta * lines + w * stores + l); the
    # counter of a CTA is its line of ``counter``
    line = b.imad(warp, max(stores, 1), lane, dst=b.reg(I32, "line"))
    b.imad(cta, lines, line, dst=line)
    addr = b.imul(line, LINE_WORDS, dst=b.reg(I32, "addr"))
    caddr = b.imul(cta, LINE_WORDS, dst=b.reg(I32, "caddr"))
    writes = b.isetp("lt", lane, stores, dst=b.reg(PRED, "writes"))
    tid = b.imad(warp, WARP, lane, dst=b.reg(I32, "tid"))
    is0 = b.isetp("eq", tid, 0, dst=b.reg(PRED, "is0"))
    old = b.reg(I32, "old")
    with b.loop("r", 0, rounds) as r:
        if stores:
            with b.if_(writes):
                b.stg(g_out, addr, r)
        if warps > 1:
            b.bar()
        with b.if_(is0):
            b.fence()
            if atomic:
                b.atom_add(g_cnt, caddr, 1, dst=old)
    kernel = verify(b.build())

    def check(g) -> bool:
        out = np.asarray(g["out"]).reshape(ctas, warps, lines // warps, LINE_WORDS)
        cnt = np.asarray(g["counter"]).reshape(ctas, LINE_WORDS)
        ok = not stores or bool(np.all(out[:, :, :stores, 0] == rounds - 1))
        return ok and bool(np.all(cnt[:, 0] == (rounds if atomic else 0)))

    return Microbench(name, kernel, {"out": np.full(ctas * lines * LINE_WORDS, -1, np.int32),
                                     "counter": np.zeros(ctas * LINE_WORDS, np.int32)},
                      rounds, "stores, fence" + (", atomic" if atomic else ""),
                      {"rounds": rounds, "ctas": ctas, "stores": stores, "atomic": atomic,
                       "warps": warps},
                      check)
