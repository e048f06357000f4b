"""``lmech_ws_*``, ``lmech_split_*``, ``lmech_delay_*``, ``lmech_pollers_*``, ``lmech_slot_*``
(:func:`writers`) and ``lmech_readers_*`` (:func:`readers`): the Lamport exchange with its own
staging (as ``_stage_h``, counting the polls), varying the writers of a sector, the pollers and
the slots (the Lamport family, :mod:`.lamport`).
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import F32, I32, PRED
from ...verify import verify
from ..sparse_rnn import STAGE_GROUP
from .core import SPIN, WARP, Microbench, _positive
from .lamport_kernel import SENT

__all__ = ["writers", "readers", "WRITE_LAYOUTS"]


def _pow2(name: str, v: int, hi: int) -> int:
    if v not in [1 << i for i in range(hi.bit_length())] or v > hi:
        raise InputError(f"{name}={v}: accepted powers of two 1..{hi}")
    return v


class _Stage:
    """Registers of the counting staging: ``pollers`` warps per CTA stage ``words`` words in
    groups of ``group`` 16-byte chunks (the loads of a group back to back, the group re-polled
    while any word is the sentinel (``check="sentinel"``) or not the round's value
    (``"expect"``), warp-uniform exit, then STS into shared memory, as ``_stage_h``)."""

    def __init__(self, b: Builder, words: int, pollers: int, check: str):
        self.b, self.words, self.check = b, words, check
        self.pt = pollers * WARP
        chunks = words // (4 * self.pt)
        self.group = min(STAGE_GROUP, chunks)
        self.n_groups = chunks // self.group
        self.chunk = [b.reg(F32, f"chunk{i}", 4) for i in range(self.group)]
        self.first = b.reg(I32, "first")
        self.gfirst = b.reg(I32, "gfirst")
        self.bits = b.reg(I32, "bits")
        self.npoll = b.mov(0, I32, dst=b.reg(I32, "npoll"))

    def stage(self, g_h, h_s, base, tid4, want=None) -> None:
        """Poll slot ``base`` (a register) into ``h_s``; ``want``: the expected bits."""
        b, pt, group = self.b, self.pt, self.group
        for i in range(group):
            for k in range(4):
                b.mov(0.0, dst=self.chunk[i][k])
        with b.loop("g", 0, self.n_groups, kind="seq") as g:
            b.imad(g, 4 * pt * group, tid4, dst=self.first)
            b.iadd(base, self.first, dst=self.gfirst)
            with b.while_(spin_limit=SPIN, label="lamport_poll") as poll:
                for i in range(group):
                    b.ldg_volatile(g_h, self.gfirst, offset=4 * pt * i, width=4,
                                   dst=self.chunk[i])
                b.iadd(self.npoll, 1, dst=self.npoll)
                waiting = b.mov(False, PRED, dst=b.reg(PRED, "waiting"))
                one = b.reg(PRED, "sent")
                for i in range(group):
                    for k in range(4):
                        b.bitcast(self.chunk[i][k], I32, dst=self.bits)
                        if self.check == "sentinel":
                            b.isetp("eq", self.bits, SENT, dst=one)
                        else:
                            b.isetp("ne", self.bits, want, dst=one)
                        b.por(waiting, one, dst=waiting)
                poll.cond = b.vote_any(waiting, dst=b.reg(PRED, "warp_waiting"))
            for i in range(group):
                b.sts(h_s, self.first, tuple(self.chunk[i][k] for k in range(4)),
                      offset=4 * pt * i)


WRITE_LAYOUTS = ("ws", "warp", "split", "delay")


def _write_words(b: Builder, layout: str, ws: int, cta, warp, lane, ctas: int, words: int):
    """(word register(s), predicate) of the lane's store(s) per round: a list of one word
    register per store instruction (``split``: two)."""
    if layout in ("ws", "delay"):
        q = 8 // ws                                  # words per piece, piece i -> CTA i % ctas
        m = b.shr(lane, q.bit_length() - 1, dst=b.reg(I32, "m"))
        o = b.and_(lane, q - 1, dst=b.reg(I32, "o"))
        piece = b.imad(m, ctas, cta, dst=b.reg(I32, "piece"))
        word = b.imad(piece, q, o, dst=b.reg(I32, "word"))
        ok = b.pand(b.isetp("eq", warp, 0), b.isetp("lt", word, words), dst=b.reg(PRED, "wr"))
        return [word], ok
    m = b.shr(lane, 2, dst=b.reg(I32, "m"))
    o = b.and_(lane, 3, dst=b.reg(I32, "o"))
    sector = b.imad(m, ctas, cta, dst=b.reg(I32, "sector"))
    if layout == "warp":   # half `warp` of the sector by warp 0 / 1
        word = b.imad(warp, 4, o, dst=b.reg(I32, "word"))
        b.imad(sector, 8, word, dst=word)
        ok = b.pand(b.isetp("lt", warp, 2), b.isetp("lt", word, words), dst=b.reg(PRED, "wr"))
        return [word], ok
    # split: first store words {0, 1, 4, 5} of the sector, the second {2, 3, 6, 7}
    hi = b.shr(o, 1, dst=b.reg(I32, "hi"))
    lo = b.and_(o, 1, dst=b.reg(I32, "lo"))
    word = b.imad(hi, 4, lo, dst=b.reg(I32, "word"))
    b.imad(sector, 8, word, dst=word)
    word2 = b.iadd(word, 2, dst=b.reg(I32, "word2"))
    ok = b.pand(b.isetp("eq", warp, 0), b.isetp("lt", word, words), dst=b.reg(PRED, "wr"))
    return [word, word2], ok


def _layout_words(layout: str, ws: int, ctas: int, words: int, wpc: int) -> np.ndarray:
    """Host-side copy of :func:`_write_words`: (ctas, warps, 32 lanes, stores) word or -1."""
    out = np.full((ctas, wpc, WARP, 2 if layout == "split" else 1), -1, np.int64)
    lane = np.arange(WARP)
    for c in range(ctas):
        if layout in ("ws", "delay"):
            q = 8 // ws
            w = (c + ctas * (lane // q)) * q + lane % q
            out[c, 0, :, 0] = np.where(w < words, w, -1)
        elif layout == "warp":
            for wp in range(min(2, wpc)):
                w = (c + ctas * (lane // 4)) * 8 + 4 * wp + lane % 4
                out[c, wp, :, 0] = np.where(w < words, w, -1)
        else:
            o = lane % 4
            w = (c + ctas * (lane // 4)) * 8 + (o // 2) * 4 + o % 2
            ok = w < words
            out[c, 0, :, 0] = np.where(ok, w, -1)
            out[c, 0, :, 1] = np.where(ok, w + 2, -1)
    return out


def writers(rounds: int = 16, ws: int = 1, layout: str = "ws", gap: int = 0,
            pollers: int | None = None, slots: str = "fresh", words: int = 4096,
            ctas: int = 132, threads: int = 256, ring: int = 4) -> Microbench:
    """All-see-all exchange of a ``words``-word slot whose sectors have ``ws`` writers.

    Round ``r``: ``pollers`` warps per CTA (default all) stage slot ``r`` (:class:`_Stage`,
    counting polls); ``__syncthreads``; the writers store ``r + 1`` into slot ``r + 1``.
    ``layout``: ``"ws"`` one store of warp 0, ``ws`` CTAs per sector; ``"warp"`` two warps of
    one CTA per sector; ``"split"`` two stores of warp 0 per sector, ``gap`` dependent shared
    loads apart; ``"delay"`` one store (``ws = 1``) after ``gap`` dependent shared loads.
    ``slots``: ``"fresh"`` single-use slots, sentinel polls (the kernel); ``"expect"`` single-use
    slots, the poll waits for the value ``r``; ``"ring"`` the same over a ring of ``ring`` slots;
    ``"reset"`` the ring, each writer then stores the sentinel into its words of slot ``r - 1``.
    Op = one round."""
    rounds, ws, words, ctas, threads, ring = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("ws", ws), ("words", words), ("ctas", ctas), ("threads", threads),
        ("ring", ring)))
    if threads % WARP:
        raise InputError(f"threads={threads} must be a multiple of 32")
    wpc = threads // WARP
    pollers = wpc if pollers is None else _positive("pollers", pollers)
    if layout not in WRITE_LAYOUTS:
        raise InputError(f"layout={layout!r} is unknown; accepted: {', '.join(WRITE_LAYOUTS)}")
    if slots not in ("fresh", "expect", "ring", "reset"):
        raise InputError(f"slots={slots!r} is unknown; accepted: fresh, expect, ring, reset")
    _pow2("ws", ws, 8)
    if layout != "ws" and ws != (2 if layout in ("warp", "split") else 1):
        raise InputError(f"layout={layout!r} has {2 if layout != 'delay' else 1} writer(s) "
                         f"per sector; ws={ws} does not apply")
    if int(gap) < 0 or (gap and layout not in ("split", "delay")):
        raise InputError(f"gap={gap}: a number >= 0 of shared loads, for layout split or delay")
    gap = int(gap)
    if pollers > wpc:
        raise InputError(f"pollers={pollers} exceeds the {wpc} warps of a CTA")
    if ws > ctas:
        raise InputError(f"ws={ws} writers per sector need at least {ws} CTAs; ctas={ctas}")
    if slots in ("ring", "reset") and ring < 3:
        raise InputError(f"ring={ring}: a ring needs at least 3 slots")
    pt = pollers * WARP
    chunks = words // (4 * pt) if words % (4 * pt) == 0 else 0
    if not chunks or chunks % min(STAGE_GROUP, chunks):
        raise InputError(f"words={words} must be a multiple of 4 * 32 * pollers = {4 * pt} with "
                         f"whole groups of {STAGE_GROUP} chunks per polling thread")
    if words < threads:
        raise InputError(f"words={words} must be at least threads={threads}")
    lay = _layout_words(layout, ws, ctas, words, wpc)
    got = np.zeros(words, np.int64)
    np.add.at(got, lay[lay >= 0], 1)
    if not np.all(got == 1):
        raise InputError(f"words={words}, ctas={ctas}: the {layout!r} layout does not write every "
                         f"word exactly once (at most {WARP * ctas} words for ws=8)")
    if slots == "reset" and not np.all((lay >= 0).reshape(ctas, -1).any(axis=1)):
        raise InputError(f"slots='reset' needs every CTA to write (a reset is safe once every "
                         f"CTA has written the next slot); words={words}, ctas={ctas}")
    n_slots = rounds + 1 if slots in ("fresh", "expect") else ring
    if layout == "ws":
        name = f"lmech_ws_{ws}"
    elif layout == "warp":
        name = "lmech_ws_2_warp"
    else:
        name = f"lmech_{layout}_{gap}"
    if pollers != wpc:
        name = f"lmech_pollers_{pollers}"
    if slots != "fresh":
        name = f"lmech_slot_{slots}"
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_h = b.global_buffer("h", F32, n_slots * words, role="inout")
    g_out = b.global_buffer("out", F32, ctas * threads, role="out")
    g_polls = b.global_buffer("polls", I32, ctas * threads, role="out")
    h_s = b.shared("h_s", F32, words)
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    tid4 = b.imul(tid, 4, dst=b.reg(I32, "tid4"))
    polling = b.isetp("lt", tid, pt, dst=b.reg(PRED, "polling")) if pollers < wpc else None
    st = _Stage(b, words, pollers, "sentinel" if slots == "fresh" else "expect")
    wwords, wok = _write_words(b, layout, ws, cta, warp, lane, ctas, words)
    hop = None
    if gap:
        s_zero = b.shared("zero", I32, WARP)
        with b.if_(b.isetp("lt", tid, WARP, dst=b.reg(PRED, "zfill"))):
            b.sts(s_zero, tid, 0)
        b.bar()
        hop = b.mov(0, I32, dst=b.reg(I32, "hop"))
    base, nbase, addr = (b.reg(I32, n) for n in ("base", "nbase", "waddr"))
    val = b.reg(F32, "val")
    want = b.reg(I32, "want") if slots != "fresh" else None
    sent = None
    if slots == "reset":
        sent = b.bitcast(b.mov(SENT, I32, dst=b.reg(I32, "sent_bits")), F32,
                         dst=b.reg(F32, "sentinel"))
    with b.loop("r", 0, rounds, kind="time") as r:
        r1 = b.iadd(r, 1, dst=b.reg(I32, "rnext"))
        if slots in ("ring", "reset"):
            b.imul(b.irem(r, ring, dst=base), words, dst=base)
            b.imul(b.irem(r1, ring, dst=nbase), words, dst=nbase)
        else:
            b.imul(r, words, dst=base)
            b.imul(r1, words, dst=nbase)
        if want is not None:
            b.bitcast(b.i2f(r, dst=val), I32, dst=want)
        if polling is None:
            st.stage(g_h, h_s, base, tid4, want)
        else:
            with b.if_(polling):
                st.stage(g_h, h_s, base, tid4, want)
        b.bar()
        b.i2f(r1, dst=val)
        with b.if_(wok):
            for k, word in enumerate(wwords):
                if hop is not None and (k == 1 or layout == "delay"):
                    for _ in range(gap):
                        b.lds(s_zero, hop, dst=hop)
                    b.iadd(word, hop, dst=addr)
                    b.iadd(addr, nbase, dst=addr)
                else:
                    b.iadd(word, nbase, dst=addr)
                b.stg(g_h, addr, val)
            if sent is not None:
                with b.if_(b.isetp("ge", r, 1, dst=b.reg(PRED, "resets"))):
                    prev = b.iadd(r, ring - 1, dst=b.reg(I32, "prev"))
                    b.irem(prev, ring, dst=prev)
                    b.imul(prev, words, dst=prev)
                    for word in wwords:
                        b.iadd(word, prev, dst=addr)
                        b.stg(g_h, addr, sent)
    b.bar()
    b.stg(g_out, gt, b.lds(h_s, tid, dst=b.reg(F32, "last")))
    b.stg(g_polls, gt, st.npoll)
    kernel = verify(b.build())

    mem = np.full((n_slots, words), SENT, np.int32)
    mem[0] = 0
    final = mem.copy()
    for rr in range(rounds):               # what the slots hold at the end
        final[(rr + 1) % n_slots] = np.float32(rr + 1).view(np.int32)
        if slots == "reset" and rr >= 1:
            final[(rr - 1) % n_slots] = SENT
    least = np.zeros((ctas, threads), np.int64)
    least[:, :pt] = rounds * st.n_groups

    def check(g) -> bool:
        h = np.asarray(g["h"]).view(np.int32).reshape(n_slots, words)
        npl = np.asarray(g["polls"]).reshape(ctas, threads)
        return bool(np.array_equal(h, final)
                    and np.all(np.asarray(g["out"]).view(np.float32) == rounds - 1)
                    and np.all(npl >= least) and np.all(npl[:, pt:] == 0))

    what = {"ws": f"{ws} CTA(s) per sector", "warp": "2 warps of one CTA per sector",
            "split": f"one warp, two stores per sector {gap} shared loads apart",
            "delay": f"one warp, one store per sector after {gap} shared loads"}[layout]
    return Microbench(name, kernel, {"h": mem.reshape(-1).view(np.float32).copy(),
                                     "out": np.full(ctas * threads, -1.0, np.float32),
                                     "polls": np.zeros(ctas * threads, np.int32)},
                      rounds, f"Lamport exchange of {words} words ({what}; {pollers} polling "
                      f"warp(s) per CTA; {slots} slots)",
                      {"rounds": rounds, "ws": ws, "layout": layout, "gap": gap,
                       "pollers": pollers, "slots": slots, "words": words, "ctas": ctas,
                       "threads": threads, "ring": ring, "groups": st.n_groups}, check)


def readers(rounds: int = 16, ctas: int = 132, writer_ctas: int = 16, words: int = 4096,
            threads: int = 256) -> Microbench:
    """``writer_ctas`` CTAs write the slot (thread ``t`` of CTA ``c`` word ``c * threads + t``),
    all ``ctas`` CTAs poll it (8 warps, :class:`_Stage`); the writers write slot ``r + 1`` after
    they have seen slot ``r``. Varying ``ctas`` varies only the poll traffic on the lines being
    written. Op = one round."""
    rounds, ctas, writer_ctas, words, threads = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("ctas", ctas), ("writer_ctas", writer_ctas), ("words", words),
        ("threads", threads)))
    if threads % WARP:
        raise InputError(f"threads={threads} must be a multiple of 32")
    if words != writer_ctas * threads:
        raise InputError(f"words={words} must be writer_ctas * threads = {writer_ctas * threads}")
    if writer_ctas > ctas:
        raise InputError(f"writer_ctas={writer_ctas} exceeds ctas={ctas}")
    pt = threads
    chunks = words // (4 * pt) if words % (4 * pt) == 0 else 0
    if not chunks or chunks % min(STAGE_GROUP, chunks):
        raise InputError(f"words={words} must be a multiple of 4 * threads = {4 * pt} with "
                         f"whole groups of {STAGE_GROUP} chunks per thread")
    name = f"lmech_readers_{ctas}"
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_h = b.global_buffer("h", F32, (rounds + 1) * words, role="inout")
    g_out = b.global_buffer("out", F32, ctas * threads, role="out")
    g_polls = b.global_buffer("polls", I32, ctas * threads, role="out")
    h_s = b.shared("h_s", F32, words)
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    tid4 = b.imul(tid, 4, dst=b.reg(I32, "tid4"))
    writes = b.isetp("lt", cta, writer_ctas, dst=b.reg(PRED, "writes"))
    st = _Stage(b, words, threads // WARP, "sentinel")
    base, addr = b.reg(I32, "base"), b.reg(I32, "waddr")
    val = b.reg(F32, "val")
    with b.loop("r", 0, rounds, kind="time") as r:
        b.imul(r, words, dst=base)
        st.stage(g_h, h_s, base, tid4)
        b.bar()
        r1 = b.iadd(r, 1, dst=b.reg(I32, "rnext"))
        b.i2f(r1, dst=val)
        with b.if_(writes):
            b.imad(r1, words, gt, dst=addr)
            b.stg(g_h, addr, val)
    b.bar()
    b.stg(g_out, gt, b.lds(h_s, tid, dst=b.reg(F32, "last")))
    b.stg(g_polls, gt, st.npoll)
    kernel = verify(b.build())
    h = np.full((rounds + 1, words), SENT, np.int32)
    h[0] = 0
    final = np.arange(rounds + 1, dtype=np.float32)[:, None]
    least = rounds * st.n_groups

    def check(g) -> bool:
        hh = np.asarray(g["h"]).view(np.float32).reshape(rounds + 1, words)
        return bool(np.all(hh == final)
                    and np.all(np.asarray(g["out"]).view(np.float32) == rounds - 1)
                    and np.all(np.asarray(g["polls"]) >= least))

    return Microbench(name, kernel, {"h": h.reshape(-1).view(np.float32).copy(),
                                     "out": np.full(ctas * threads, -1.0, np.float32),
                                     "polls": np.zeros(ctas * threads, np.int32)},
                      rounds, f"Lamport exchange of {words} words written by {writer_ctas} "
                      f"CTAs, polled by {ctas}",
                      {"rounds": rounds, "ctas": ctas, "writer_ctas": writer_ctas,
                       "words": words, "threads": threads, "groups": st.n_groups}, check)
