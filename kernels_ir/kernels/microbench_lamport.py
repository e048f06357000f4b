"""Microbenchmarks that take the Lamport h exchange apart, one factor at a time (``lmech_*``).

The persistent kernel's Lamport exchange (:func:`kernels_ir.kernels.sparse_rnn._stage_h`): every
thread of every CTA polls its 16-byte chunks of the next h slot with relaxed (L2-coherent) 128-bit
loads, :data:`~kernels_ir.kernels.sparse_rnn.STAGE_GROUP` chunks back to back, and re-polls the
whole group while any word is still the sentinel -0.0; the owners of h write their words with
32-bit stores while the others poll. On an H100 the persistent Lamport kernels run about 20% slower
than the simulator says, the barrier kernels do not. Each family below varies one factor of that
exchange with every other fixed, so that comparing the GPU with the simulator per family says
which factor the engine gets wrong. All are registered in
:data:`kernels_ir.kernels.microbench.MICROBENCHES` (size argument ``rounds``); op = one round.

Families (name: what varies; what stays fixed):

- ``lmech_watch_{p}[_w{k}][_{where}]`` (:func:`watch`): a ping-pong round trip between CTA 0 and
  CTA 1 (as ``flag_round_trip``) while ``p`` CTAs, CTA 1 included, poll the ping word with ``k``
  warps each (every lane the same word): does a store's visibility, or the load of the word's
  slice, grow with the pollers of the line being written? ``where``: the watchers (every polling
  warp but CTA 1's warp 0) poll a word that CTA 0's ping store also writes, in the same sector
  (``sector``), another sector of the same line (``line``) or 1 KiB away (``unit``).
- ``lmech_x_{words}`` / ``lmech_xb_{words}`` (:func:`exchange`): the persistent kernel's exchange
  with no mat-vec, at the kernels' sizes N*B = 1K..32K words: the staging is ``_stage_h`` itself
  (Lamport, or the barrier variant's counter spin + plain loads; ``xb`` also does the kernel's
  fence + atomic arrive), the stores are the kernel's (warp ``w`` writes its rows' B = 4 words,
  owner-ordered positions from the kernel's deal, 32-bit stores of lanes < B). Varies the words
  exchanged, Lamport against barrier. ``lmech_xp_{words}`` / ``lmech_xq_{words}``: the same with
  every slot written by the host before the launch (no CTA waits for another), polled with the
  L2-coherent loads (``xp``) or read with plain loads (``xq``): the loads' own cost.
- ``lmech_ws_{n}`` (:func:`writers`): every 32-byte sector of a 4096-word slot is written by ``n``
  = 1, 2, 4, 8 CTAs (pieces of 8/n words, dealt round-robin to the CTAs; one 32-bit store per lane
  of warp 0, one store instruction per CTA and round); ``lmech_ws_2_warp``: the two halves by two
  warps of one CTA; ``lmech_split_{g}``: one warp writes every sector in two stores (two words
  of every 16-byte chunk each), ``g`` dependent shared loads apart; ``lmech_delay_{g}``: one
  store of whole sectors after the same ``g`` loads (the control of ``split``). Polls: 8 warps,
  groups of 4 chunks, as the kernel.
- ``lmech_readers_{g}`` (:func:`readers`): 16 CTAs write the 4096-word slot (every thread one
  word, 32 consecutive words per warp), ``g`` = 16..132 CTAs poll it: the poll traffic on the
  lines being written, with the writers and their stores fixed.
- ``lmech_pollers_{p}`` (:func:`writers` with ``pollers``): as ``lmech_ws_1`` but only ``p`` warps
  per CTA poll (each thread polls 8/p groups); ``p = 8`` is ``lmech_ws_1``.
- ``lmech_slot_{expect,ring,reset}`` (:func:`writers` with ``slots``): as ``lmech_ws_1`` but the
  poll waits for the round's expected value (not for "no sentinel"), so that slots can be reused:
  single-use slots (``expect``; against ``lmech_ws_1`` only the check differs), a ring of 4 slots
  (``ring``), and the ring with the sentinel reset stores that re-arm a slot once every CTA has
  read it (``reset``: each owner rewrites its words of the previous slot with the sentinel after
  it has seen the current one). The persistent kernel has no reset stores: the host fills its
  T single-use slots with the sentinel before the launch.

The kernels of the ``ws``/``readers``/``pollers``/``slot`` families count their poll iterations
per thread (buffer ``polls``): the executor runs each group's poll once per round (lockstep), the
GPU as often as it has to, so the GPU's count says how many re-polls the exchange really takes.
Every kernel checks its values (:meth:`Microbench.verify_result`): the slots hold what the
writers wrote and every thread staged the last round's values.
"""

from __future__ import annotations

import numpy as np

from ..builder import Builder
from ..errors import InputError
from ..ir import F32, I32, PRED
from ..mapping import _deal
from ..verify import verify
from .microbench import LINE_WORDS, MICROBENCHES, SIZE_ARG, WARP, Microbench, _positive
from .sparse_rnn import SENTINEL_BITS, STAGE_GROUP, _stage_h

__all__ = ["watch", "exchange", "writers", "readers", "WATCH_WHERE", "REGISTRY"]

SENT = int(SENTINEL_BITS)
SPIN = 1 << 22
WATCH_WHERE = {"word": 0, "sector": 4, "line": 8, "unit": 256}   # watcher word (ping = word 0)
PONG = LINE_WORDS                                                 # the pong word (next line)


def _pow2(name: str, v: int, hi: int) -> int:
    if v not in [1 << i for i in range(hi.bit_length())] or v > hi:
        raise InputError(f"{name}={v}: accepted powers of two 1..{hi}")
    return v


# --- watch: a round trip with pollers on the written line ---------------------------------------

def watch(rounds: int = 250, pollers: int = 131, warps: int = 1, where: str = "word",
          threads: int = 256, spin_limit: int = SPIN) -> Microbench:
    """Ping-pong between CTA 0 and CTA 1 while ``pollers`` CTAs (CTA 1 and ``pollers - 1``
    watchers, grid ``pollers + 1``) poll the ping with ``warps`` warps each.

    Round ``r`` (four phases in program order, as :func:`~.microbench.flag_round_trip`): CTA 0
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


# --- exchange: the kernel's own staging and stores, no mat-vec ----------------------------------

def _owner_rows(rows: int, n_warps: int) -> np.ndarray:
    """(n_warps, R) owner-ordered h position of each warp's rows (-1: none), as
    :func:`kernels_ir.mapping.map_matrix` deals equal rows (owner order, the default)."""
    _, row_ids, _ = _deal(np.zeros(rows, np.int64), n_warps)
    owned = row_ids.reshape(-1)
    owned = owned[owned >= 0]
    pos = np.empty(rows, np.int64)
    pos[owned] = np.arange(owned.size)
    return np.where(row_ids >= 0, pos[np.maximum(row_ids, 0)], -1).astype(np.int32)


def exchange(rounds: int = 16, words: int = 4096, sync: str = "lamport", batch: int = 4,
             ctas: int = 132, threads: int = 256, present: bool = False,
             rotate: bool = False) -> Microbench:
    """The persistent kernel's h exchange of ``words`` = N x ``batch`` words without the mat-vec.

    Round ``t``: ``_stage_h`` of slot ``t`` (the kernel's code: Lamport polls, or the barrier
    variant's wait + plain loads; STS into shared memory; ``__syncthreads``); every warp stores
    its rows of slot ``t + 1`` (lane ``b < batch`` of row ``j`` stores word ``pos*batch + b``,
    value ``t + 1``), as the kernel stores h after each row; the barrier variant then does the
    kernel's ``__syncthreads`` + fence + atomic arrive. Op = one step of the exchange.

    ``present=True`` (``lmech_xp_*``, Lamport polls) and ``sync="none"`` (``lmech_xq_*``, plain
    loads, no barrier): the host writes every slot's final values before the launch, so every
    poll succeeds at once and no CTA waits for another. The CTAs run free: a round costs the
    group loads, the STS and the stores of one CTA under the load of all the others, without the
    exchange's waiting. Against ``lmech_x_*`` this separates what the polling loads cost from
    what waiting for the writers costs; ``xp`` against ``xq`` separates L2-coherent 128-bit
    polls from plain 128-bit loads.

    ``rotate=True`` (``..._rot`` names): CTA ``c`` takes its groups in the order
    ``(g + c) % groups``, so that CTAs that start a round together read different sectors at
    any moment instead of the same ones. Against the unrotated benchmark this tells whether
    many SMs reading one sector at the same time costs more (one slice serves them all, the
    simulator's rule) or less (requests merged) than reading different sectors."""
    rounds, words, batch, ctas, threads = (_positive(n, v) for n, v in (
        ("rounds", rounds), ("words", words), ("batch", batch), ("ctas", ctas),
        ("threads", threads)))
    if sync not in ("lamport", "barrier", "none"):
        raise InputError(f"sync={sync!r} is unknown; accepted: lamport, barrier, none")
    if sync == "none":
        present = True
    if present and sync == "barrier":
        raise InputError("present=True takes sync 'lamport' or 'none' (a barrier needs no data)")
    if threads % WARP:
        raise InputError(f"threads={threads} must be a multiple of 32")
    if words % (4 * threads) or words % batch:
        raise InputError(f"words={words} must be a multiple of 4 * threads = {4 * threads} and "
                         f"of batch={batch}")
    if batch > WARP:
        raise InputError(f"batch={batch} must be at most 32")
    wpc = threads // WARP
    n_warps = ctas * wpc
    table = _owner_rows(words // batch, n_warps)
    R = table.shape[1]
    tag = {"lamport": "xp" if present else "x", "barrier": "xb", "none": "xq"}[sync]
    name = f"lmech_{tag}_{words}" + ("_rot" if rotate else "")
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds, sync=sync,
                words=words, batch=batch)
    g_rows = b.global_buffer("row_ids", I32, n_warps * R)
    g_h = b.global_buffer("hseq", F32, (rounds + 1) * words, role="inout")
    g_cnt = b.global_buffer("counter", I32, 1, role="inout") if sync == "barrier" else None
    g_out = b.global_buffer("out", F32, ctas * threads, role="out")
    # present: the stores go to a buffer of their own (same count, same positions), so that no
    # poll can depend on them (the simulator's stale rule is value-blind: a store of the value a
    # slot already holds would still make an earlier poll of it a replay)
    g_dst = b.global_buffer("sink", F32, (rounds + 1) * words, role="inout") if present else g_h
    h_s = b.shared("h_s", F32, words)
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    nctas = b.sreg("nctas", dst=b.reg(I32, "nctas"))
    gw = b.imad(cta, wpc, warp, dst=b.reg(I32, "gwarp"))
    rbase = b.imul(gw, R, dst=b.reg(I32, "rbase"))
    lane_b = b.imin(lane, batch - 1, dst=b.reg(I32, "lane_b"))
    lane_ok = b.isetp("lt", lane, batch, dst=b.reg(PRED, "lane_ok"))
    rid = b.reg(I32, "rid", R)
    addr = b.reg(I32, "addr", R)
    mine = b.reg(PRED, "mine", R)
    tmp = b.reg(I32, "tmp")
    for j in range(R):                                  # as the kernel's set-up
        b.ldg(g_rows, rbase, offset=j, dst=rid[j])
        b.imax(rid[j], 0, dst=tmp)
        b.imad(tmp, batch, lane_b, dst=addr[j])
        b.isetp("ge", rid[j], 0, dst=mine[j])
        b.pand(mine[j], lane_ok, dst=mine[j])
    val = b.reg(F32, "val")
    with b.loop("t", 0, rounds, kind="time") as t:
        _stage_h(b, sync, g_h, g_cnt, h_s, t, tid, nctas, words, threads,
                 rotate=cta if rotate else None)
        hoff = b.imad(t, words, words, dst=b.reg(I32, "hoff"))    # slot t+1
        b.i2f(b.iadd(t, 1, dst=b.reg(I32, "t1")), dst=val)
        for j in range(R):
            with b.if_(mine[j]):
                b.iadd(hoff, addr[j], dst=tmp)
                b.stg(g_dst, tmp, val)
        if sync == "barrier":
            b.bar()
            with b.if_(b.isetp("eq", tid, 0, dst=b.reg(PRED, "is_t0"))):
                b.fence()
                b.atom_add(g_cnt, 0, 1, dst=b.reg(I32, "old"))
    b.bar()
    b.stg(g_out, b.imad(cta, threads, tid, dst=b.reg(I32, "gt")),
          b.lds(h_s, tid, dst=b.reg(F32, "last")))
    kernel = verify(b.build())
    hseq = np.full((rounds + 1, words), SENT, np.int32)
    hseq[0] = 0
    if present:   # every slot already holds its round's value: no poll ever waits
        hseq = np.broadcast_to(np.arange(rounds + 1, dtype=np.float32)[:, None],
                               (rounds + 1, words)).view(np.int32).copy()
    inputs = {"row_ids": table.reshape(-1), "hseq": hseq.reshape(-1).view(np.float32).copy(),
              "out": np.full(ctas * threads, -1.0, np.float32)}
    if sync == "barrier":
        inputs["counter"] = np.zeros(1, np.int32)
        inputs["hseq"] = np.zeros((rounds + 1) * words, np.float32)
    if present:
        inputs["sink"] = np.zeros((rounds + 1) * words, np.float32)
    expect = np.arange(rounds + 1, dtype=np.float32)[:, None]

    def check(g) -> bool:
        h = np.asarray(g["hseq"]).view(np.float32).reshape(rounds + 1, words)
        ok = np.all(h == expect)
        if present:   # slot 0 of the sink is never written
            sink = np.asarray(g["sink"]).view(np.float32).reshape(rounds + 1, words)
            ok = ok and np.all(sink[1:] == expect[1:])
        return bool(ok and np.all(np.asarray(g["out"]).view(np.float32) == rounds - 1))

    what = {"x": "", "xb": "", "xp": ", data present (no wait)",
            "xq": ", plain loads of present data (no sync)"}[tag]
    return Microbench(name, kernel, inputs, rounds,
                      f"{sync} exchange of {words} words (the kernel's staging and stores{what})",
                      {"rounds": rounds, "words": words, "sync": sync, "batch": batch,
                       "ctas": ctas, "threads": threads, "rows_per_warp": R,
                       "present": present, "rotate": rotate}, check)


# --- the factor families: own staging (as _stage_h) with a poll counter ------------------------

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


# --- the registry ---------------------------------------------------------------------------------

WATCH_POLLERS = (1, 8, 32, 131)
X_WORDS = (1024, 2048, 4096, 9216, 16384, 32768)   # 9216: hidden 2304 x batch 4
XP_WORDS = (1024, 4096, 9216, 32768)                # the free-running controls of X_WORDS
REGISTRY: dict = {}
for _p in WATCH_POLLERS:
    for _w in (1, 8):
        REGISTRY[f"lmech_watch_{_p}" + (f"_w{_w}" if _w > 1 else "")] = (
            lambda _p=_p, _w=_w, **kw: watch(pollers=_p, warps=_w, **kw))
for _wh in ("sector", "line", "unit"):
    REGISTRY[f"lmech_watch_131_w8_{_wh}"] = (
        lambda _wh=_wh, **kw: watch(pollers=131, warps=8, where=_wh, **kw))
for _n in X_WORDS:
    REGISTRY[f"lmech_x_{_n}"] = lambda _n=_n, **kw: exchange(words=_n, **kw)
    REGISTRY[f"lmech_xb_{_n}"] = lambda _n=_n, **kw: exchange(words=_n, sync="barrier", **kw)
for _n in XP_WORDS:
    REGISTRY[f"lmech_xp_{_n}"] = lambda _n=_n, **kw: exchange(words=_n, present=True, **kw)
    REGISTRY[f"lmech_xq_{_n}"] = lambda _n=_n, **kw: exchange(words=_n, sync="none", **kw)
for _n in (9216, 32768):   # several groups per thread: the rotation has something to rotate
    for _s, _t in (("lamport", "x"), ("barrier", "xb"), ("none", "xq")):
        REGISTRY[f"lmech_{_t}_{_n}_rot"] = (
            lambda _n=_n, _s=_s, **kw: exchange(words=_n, sync=_s, rotate=True, **kw))
for _n in (1, 2, 4, 8):
    REGISTRY[f"lmech_ws_{_n}"] = lambda _n=_n, **kw: writers(ws=_n, **kw)
REGISTRY["lmech_ws_2_warp"] = lambda **kw: writers(ws=2, layout="warp", **kw)
for _g in (0, 16):
    REGISTRY[f"lmech_split_{_g}"] = lambda _g=_g, **kw: writers(ws=2, layout="split", gap=_g,
                                                                **kw)
REGISTRY["lmech_delay_16"] = lambda **kw: writers(layout="delay", gap=16, **kw)
for _g in (16, 33, 66, 132):
    REGISTRY[f"lmech_readers_{_g}"] = lambda _g=_g, **kw: readers(ctas=_g, **kw)
for _p in (1, 2, 4):
    REGISTRY[f"lmech_pollers_{_p}"] = lambda _p=_p, **kw: writers(pollers=_p, **kw)
for _s in ("expect", "ring", "reset"):
    REGISTRY[f"lmech_slot_{_s}"] = lambda _s=_s, **kw: writers(slots=_s, **kw)

MICROBENCHES.update(REGISTRY)
SIZE_ARG.update({k: "rounds" for k in REGISTRY})
