"""The persistent kernels' h exchange without the mat-vec, at full scale: every CTA reads what
the others wrote just before (L2 stores, polls and the grid barrier together).

- :func:`lamport_exchange` (``lamport_{one,interleaved,contiguous}[_delay16]``) - the Lamport
  exchange: single-use slots filled with the sentinel, the owners write, every thread polls its
  chunks until no word is the sentinel (H1/H2 of the README). Op = one exchange round.
- :func:`broadcast` (``broadcast_{fresh,same}_{words}[_{stage}]``) - the barrier variant's
  exchange: write a share, grid barrier, read the whole vector. Op = one round.

The ``lmech_*`` family (:mod:`.lamport`) takes the Lamport exchange apart one factor at a time.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import I32, PRED
from ...verify import verify
from .core import LINE_WORDS, WARP, Microbench, _positive, _thread_ids

__all__ = ["lamport_exchange", "broadcast", "LAMPORT_OWNERS", "LAMPORT_SENTINEL"]

LAMPORT_OWNERS = ("one", "interleaved", "contiguous")
LAMPORT_SENTINEL = -(1 << 31)  # 0x80000000: the sentinel bit pattern of the Lamport kernel


def lamport_exchange(rounds: int = 16, ctas: int = 132, threads: int = 256, slot: int = 4096,
                     owner: str = "interleaved", delay: int = 0,
                     spin_limit: int = 1 << 22) -> Microbench:
    """The persistent kernel's Lamport h exchange without the mat-vec (H1/H2 of the README).

    ``rounds`` single-use slots of ``slot`` words, all the sentinel at launch. Round ``r``:
    the owners write ``r`` into their words of slot ``r``; then every thread of every CTA polls
    its ``4`` 16-byte chunks of slot ``r`` (relaxed 128-bit loads, back to back, re-polled while
    any word is the sentinel, warp-uniform ``vote.any`` exit: ``_stage_h``); ``__syncthreads``.
    ``owner``: ``"interleaved"`` - CTA ``c`` owns the 16-byte chunks ``q = c (mod ctas)`` (every
    32-byte sector written by two CTAs, as the snake-dealt rows of h1024-b4); ``"contiguous"`` -
    CTA ``c`` owns whole sectors ``[c*S/ctas, (c+1)*S/ctas)`` (one writer per sector); both:
    warp 0 writes, one 32-bit store per lane. Every CTA writes slot ``r + 1`` only after it has
    seen all of slot ``r``: op = one all-see-all exchange. ``"one"``: CTA 0 writes the whole
    slot (16-byte stores) after it has seen, on an arrival counter, that every CTA saw slot
    ``r - 1`` (thread 0 of each CTA adds 1 after its poll): op = one producer store -> last
    consumer's exit, plus the one-word fan-in back. ``delay`` dependent shared loads in every
    poll iteration lengthen the poll period (the phase wait grows with it, if there is one).
    """
    rounds, ctas, threads, slot = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("ctas", ctas), ("threads", threads), ("slot", slot)))
    group = 4
    if slot != 4 * threads * group:
        raise InputError(f"slot={slot} must be 4 * threads * {group} = {4 * threads * group}")
    if owner not in LAMPORT_OWNERS:
        raise InputError(f"owner={owner!r} is unknown; accepted: {', '.join(LAMPORT_OWNERS)}")
    delay = int(delay)
    if delay < 0:
        raise InputError(f"delay={delay} must be >= 0")
    chunks, sectors = slot // 4, slot // 8
    if owner != "one" and (threads < WARP or -(-chunks // ctas) > WARP // 4
                           or 2 * -(-sectors // ctas) > WARP // 4):
        raise InputError(f"owner={owner!r}: warp 0 must hold every CTA's chunks "
                         f"(slot={slot}, ctas={ctas})")
    name = f"lamport_{owner}" + (f"_delay{delay}" if delay else "")
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_h = b.global_buffer("h", I32, rounds * slot, role="inout")
    g_cnt = b.global_buffer("counter", I32, LINE_WORDS, role="inout")
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    tid, cta, gt, tid4, acc = _thread_ids(b, threads)
    base = b.reg(I32, "base")
    idx = b.reg(I32, "idx")
    bits = b.reg(I32, "bits")
    chunk = [b.reg(I32, f"c{i}", 4) for i in range(group)]
    hop = None
    if delay:
        s_zero = b.shared("zero", I32, WARP)
        with b.if_(b.isetp("lt", tid, WARP, dst=b.reg(PRED, "zfill"))):
            b.sts(s_zero, tid, 0)       # s[i] = 0: every hop reads s[0] = 0
        b.bar()
        hop = b.mov(0, I32, dst=b.reg(I32, "hop"))
    if owner == "one":
        is_p = b.isetp("eq", cta, 0, dst=b.reg(PRED, "is_p"))
        is_t0 = b.isetp("eq", tid, 0, dst=b.reg(PRED, "is_t0"))
        is_p0 = b.pand(is_p, is_t0, dst=b.reg(PRED, "is_p0"))
        target = b.reg(I32, "target")
        nctas = b.sreg("nctas", dst=b.reg(I32, "nctas"))
        val = b.reg(I32, "val", 4)
    else:  # warp 0 of each CTA: lane -> chunk k = tid // 4, word tid % 4
        k = b.shr(tid, 2, dst=b.reg(I32, "k"))
        w = b.and_(tid, 3, dst=b.reg(I32, "w"))
        q = b.reg(I32, "q")
        if owner == "interleaved":
            b.imad(k, ctas, cta, dst=q)
            lim = b.mov(chunks, I32, dst=b.reg(I32, "lim"))
        else:
            s0 = b.imul(cta, sectors, dst=b.reg(I32, "s0"))
            b.idiv(s0, ctas, dst=s0)
            s1 = b.iadd(cta, 1, dst=b.reg(I32, "s1"))
            b.imul(s1, sectors, dst=s1)
            b.idiv(s1, ctas, dst=s1)
            b.imad(s0, 2, k, dst=q)
            lim = b.imul(s1, 2, dst=b.reg(I32, "lim"))
        mine = b.isetp("lt", q, lim, dst=b.reg(PRED, "mine"))
        in_w0 = b.isetp("lt", tid, WARP, dst=b.reg(PRED, "in_w0"))
        b.pand(mine, in_w0, dst=mine)
        woff = b.imad(q, 4, w, dst=b.reg(I32, "woff"))
        widx = b.reg(I32, "widx")
    with b.loop("r", 0, rounds) as r:
        b.imad(r, slot, tid4, dst=base)
        if owner == "one":
            with b.if_(is_p0):  # wait until every CTA saw slot r - 1 (round 0: target 0)
                b.imul(r, nctas, dst=target)
                with b.while_(spin_limit=spin_limit, label="fan_in") as fw:
                    seen = b.ldg_volatile(g_cnt, 0, dst=b.reg(I32, "seen"))
                    fw.cond = b.isetp("lt", seen, target, dst=b.reg(PRED, "behind"))
            b.bar()
            with b.if_(is_p):
                for i in range(4):
                    b.mov(r, dst=val[i])
                for i in range(group):
                    b.stg(g_h, base, tuple(val[j] for j in range(4)), offset=4 * threads * i)
        else:
            with b.if_(mine):
                b.imad(r, slot, woff, dst=widx)
                b.stg(g_h, widx, r)
        with b.while_(spin_limit=spin_limit, label="lamport_poll") as poll:
            if hop is not None:
                for _ in range(delay):
                    b.lds(s_zero, hop, dst=hop)
                b.iadd(base, hop, dst=idx)
            for i in range(group):
                b.ldg_volatile(g_h, idx if hop is not None else base, offset=4 * threads * i,
                               width=4, dst=chunk[i])
            waiting = b.mov(False, PRED, dst=b.reg(PRED, "waiting"))
            one = b.reg(PRED, "sent")
            for i in range(group):
                for j in range(4):
                    b.isetp("eq", chunk[i][j], LAMPORT_SENTINEL, dst=one)
                    b.por(waiting, one, dst=waiting)
            poll.cond = b.vote_any(waiting, dst=b.reg(PRED, "warp_waiting"))
        for i in range(group):
            for j in range(4):
                b.mov(chunk[i][j], dst=bits)
                b.iadd(acc, bits, dst=acc)
        b.bar()
        if owner == "one":
            with b.if_(is_t0):
                b.atom_add(g_cnt, 0, 1, dst=b.reg(I32, "old"))
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())
    expect = 4 * group * rounds * (rounds - 1) // 2
    return Microbench(name, kernel,
                      {"h": np.full(rounds * slot, LAMPORT_SENTINEL, np.int32),
                       "counter": np.zeros(LINE_WORDS, np.int32),
                       "out": np.ones(ctas * threads, np.int32)},
                      rounds, "Lamport exchange round of the whole grid ("
                      + {"one": "one producer CTA + fan-in",
                         "interleaved": "all CTAs write, sectors shared",
                         "contiguous": "all CTAs write, one writer per sector"}[owner] + ")",
                      {"rounds": rounds, "ctas": ctas, "threads": threads, "slot": slot,
                       "owner": owner, "delay": delay},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))


def broadcast(rounds: int = 16, ctas: int = 132, threads: int = 256, words: int = 4096,
              fresh: bool = True, stage: str = "none", spin_limit: int = 1 << 22
              ) -> Microbench:
    """Every CTA reads a ``words``-word vector that the other CTAs wrote just before (``fresh``)
    or that nobody writes (``fresh=False``), behind a grid barrier: the barrier variant's h
    exchange without the mat-vec, at any size (:mod:`measurements.exchange_scan` located the
    cost per word exchanged; this isolates it).

    Round ``r``: CTA ``c`` writes its sector-aligned share of region ``r`` (``fresh``; else the
    same stores go to a scratch region and the reads always use region 0, unchanged); grid
    barrier (as :func:`grid_barrier`); every thread reads its ``words / (4 threads)`` 16-byte
    chunks with relaxed loads in dependent groups of 4 (as ``_stage_h``); ``__syncthreads``.
    ``stage`` (the persistent kernel's other differences): ``"sts"`` stores every group's chunks
    into a ``words``-word shared buffer, as ``_stage_h`` does; ``"smem"`` only declares that
    buffer (the same shared-memory carve-out, no stores but one word).
    Op = one round.
    """
    rounds, ctas, threads, words = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("ctas", ctas), ("threads", threads), ("words", words)))
    if stage not in ("none", "sts", "smem"):
        raise InputError(f"stage={stage!r} is unknown; accepted: none, sts, smem")
    if words % (4 * threads):
        raise InputError(f"words={words} must be a multiple of 4 * threads = {4 * threads}")
    per = words // (4 * threads)           # 16-byte chunks per thread
    share = -(-words // ctas)
    share = -(-share // 8) * 8             # words per CTA, whole 32-byte sectors
    if share > threads:
        raise InputError(f"words={words}: a CTA's share ({share} words) exceeds "
                         f"threads={threads}")
    name = f"broadcast_{'fresh' if fresh else 'same'}_{words}"
    if stage != "none":
        name += f"_{stage}"
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    s_h = b.shared("h_s", I32, words) if stage != "none" else None
    g_h = b.global_buffer("h", I32, (rounds + 1) * words, role="inout")
    g_w = b.global_buffer("w", I32, (rounds + 1) * words, role="inout")
    g_cnt = b.global_buffer("counter", I32, 1, role="inout")
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    nctas = b.sreg("nctas", dst=b.reg(I32, "nctas"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    tid4 = b.imul(tid, 4, dst=b.reg(I32, "tid4"))
    is0 = b.isetp("eq", tid, 0, dst=b.reg(PRED, "is0"))
    mine = b.imad(cta, share, tid, dst=b.reg(I32, "mine"))       # the word this thread writes
    writes = b.pand(b.isetp("lt", tid, share), b.isetp("lt", mine, words),
                    dst=b.reg(PRED, "writes"))
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    seen = b.mov(0, I32, dst=b.reg(I32, "seen"))
    target, base, idx, waddr = (b.reg(I32, n) for n in ("target", "base", "idx", "waddr"))
    chunk = [b.reg(I32, f"c{i}", 4) for i in range(4)]
    with b.loop("r", 1, rounds + 1) as r:
        b.imad(r, words, mine, dst=waddr)
        with b.if_(writes):
            b.stg(g_h if fresh else g_w, waddr, acc)             # acc is 0: the data stay 0
        b.bar()
        with b.if_(is0):
            b.fence()
            b.atom_add(g_cnt, 0, 1)
            b.imul(r, nctas, dst=target)
            with b.while_(spin_limit=spin_limit, label="grid_barrier") as w:
                b.ldg_volatile(g_cnt, 0, dst=seen)
                w.cond = b.isetp("lt", seen, target, dst=b.reg(PRED, "behind"))
        b.bar()
        if fresh:
            b.imad(r, words, tid4, dst=base)
        else:
            b.mov(tid4, dst=base)
        for g0 in range(0, per, 4):
            n = min(4, per - g0)
            for i in range(n):
                b.iadd(base, acc, dst=idx)
                b.ldg_volatile(g_h, idx, offset=4 * threads * (g0 + i), width=4, dst=chunk[i])
            if stage == "sts":
                for i in range(n):
                    b.sts(s_h, tid4, tuple(chunk[i][k] for k in range(4)),
                          offset=4 * threads * (g0 + i))
            for i in range(n):
                for k in range(4):
                    b.iadd(acc, chunk[i][k], dst=acc)
        b.bar()
    if stage == "smem":
        b.sts(s_h, tid, acc)
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())
    return Microbench(name, kernel, {"h": np.zeros((rounds + 1) * words, np.int32),
                                     "w": np.zeros((rounds + 1) * words, np.int32),
                                     "counter": np.zeros(1, np.int32),
                                     "out": np.ones(ctas * threads, np.int32)},
                      rounds, "write share, grid barrier, read all (16-byte relaxed loads)",
                      {"rounds": rounds, "ctas": ctas, "threads": threads, "words": words,
                       "fresh": fresh},
                      lambda g: bool(np.all(np.asarray(g["out"]) == 0)))
