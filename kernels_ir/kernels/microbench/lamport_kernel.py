"""``lmech_x*`` (:func:`exchange`): the persistent kernel's own h exchange (its staging
``_stage_h`` and its h stores) with no mat-vec (the Lamport family, :mod:`.lamport`).
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import F32, I32, PRED
from ...mapping import _deal
from ...verify import verify
from ..sparse_rnn import SENTINEL_BITS, _stage_h
from .core import WARP, Microbench, _positive

__all__ = ["exchange", "SENT"]

SENT = int(SENTINEL_BITS)
AFTER = ("", "store", "fence", "delay")   # what a warp does after its h stores (:func:`exchange`)
DELAY_FMAS = 160   # ``after="delay"``: dependent FFMAs, about as long as the H200's fence


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
             rotate: bool = False, fallback: str = "chunk0", after: str = "") -> Microbench:
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
    simulator's rule) or less (requests merged) than reading different sectors.

    ``fallback``: what a Lamport poll's chunk past the end of a partial last group reads
    (``sparse_rnn.FALLBACKS``); "chunk0", the kernel's form until 2026-11-30, as the registered
    benchmarks were measured.

    ``after`` (``..._<after>`` names): what every warp does right after its h stores of a round:
    "" nothing (the kernel), "store" lane 0 stores the round's value into a line of its own in a
    scratch buffer (what a probe's clock stamp adds), "fence" a ``__threadfence()``, "delay"
    :data:`DELAY_FMAS` dependent FFMAs (by a 1.0 and a 0.0 read from memory, so that the
    compiler keeps them) whose result lane 0 stores into the scratch line: the fence's wait
    without its memory ordering."""
    if after not in AFTER:
        raise InputError(f"after={after!r} is unknown; accepted: {', '.join(map(repr, AFTER))}")
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
    name = f"lmech_{tag}_{words}" + ("_rot" if rotate else "") + (f"_{after}" if after else "")
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
    g_scr = b.global_buffer("scratch", F32, n_warps * WARP, role="out") \
        if after in ("store", "delay") else None
    g_one = b.global_buffer("one", F32, 2) if after == "delay" else None
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
    if after == "delay":
        i0 = b.mov(0, I32, dst=b.reg(I32, "i0"))
        one = b.ldg(g_one, i0, dst=b.reg(F32, "one"))
        zero = b.ldg(g_one, i0, offset=1, dst=b.reg(F32, "zero"))
    with b.loop("t", 0, rounds, kind="time") as t:
        _stage_h(b, sync, g_h, g_cnt, h_s, t, tid, nctas, words, threads,
                 rotate=cta if rotate else None, fallback=fallback, unroll=False)
        hoff = b.imad(t, words, words, dst=b.reg(I32, "hoff"))    # slot t+1
        b.i2f(b.iadd(t, 1, dst=b.reg(I32, "t1")), dst=val)
        for j in range(R):
            with b.if_(mine[j]):
                b.iadd(hoff, addr[j], dst=tmp)
                b.stg(g_dst, tmp, val)
        if after == "delay":
            x = b.mov(val, dst=b.reg(F32, "dly"))
            for _ in range(DELAY_FMAS):
                b.ffma(x, one, zero, dst=x)
        if after in ("store", "delay"):
            with b.if_(b.isetp("eq", lane, 0, dst=b.reg(PRED, "is_l0"))):
                b.stg(g_scr, b.imul(gw, WARP, dst=b.reg(I32, "scr")),
                      x if after == "delay" else val)
        elif after == "fence":
            b.fence()
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
    if after in ("store", "delay"):
        inputs["scratch"] = np.zeros(n_warps * WARP, np.float32)
    if after == "delay":
        inputs["one"] = np.array([1.0, 0.0], np.float32)
    expect = np.arange(rounds + 1, dtype=np.float32)[:, None]

    def check(g) -> bool:
        h = np.asarray(g["hseq"]).view(np.float32).reshape(rounds + 1, words)
        ok = np.all(h == expect)
        if present:   # slot 0 of the sink is never written
            sink = np.asarray(g["sink"]).view(np.float32).reshape(rounds + 1, words)
            ok = ok and np.all(sink[1:] == expect[1:])
        if after in ("store", "delay"):     # lane 0 of every warp wrote the last round's value
            scr = np.asarray(g["scratch"]).view(np.float32).reshape(n_warps, WARP)
            ok = ok and np.all(scr[:, 0] == rounds)
        return bool(ok and np.all(np.asarray(g["out"]).view(np.float32) == rounds - 1))

    what = {"x": "", "xb": "", "xp": ", data present (no wait)",
            "xq": ", plain loads of present data (no sync)"}[tag]
    return Microbench(name, kernel, inputs, rounds,
                      f"{sync} exchange of {words} words (the kernel's staging and stores{what})",
                      {"rounds": rounds, "words": words, "sync": sync, "batch": batch,
                       "ctas": ctas, "threads": threads, "rows_per_warp": R,
                       "present": present, "rotate": rotate} | ({"after": after} if after else {}),
                      check)
