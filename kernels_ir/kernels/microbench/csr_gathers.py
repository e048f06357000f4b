"""Microbenchmarks that take the CSR baseline's gathers apart (``cmech_*``).

The CSR row-per-warp kernel (:mod:`kernels_ir.kernels.csr_baseline`) gathers h with one warp load
per nonzero slot of a chunk: lane ``l`` loads the columns of its 4 consecutive nonzeros with 4
loads issued back to back, each warp load over up to 32 different 128-byte lines, one word per
lane at an arbitrary position in its line. ``gather_l1_k`` (:func:`.gathers.gather`) showed
k cycles of the L1TEX data stage per warp load over k lines, but in that benchmark every lane reads
the same word position of its line (one bank for all 32 lanes), each of the 4 loads in flight
touches other lines, and every load hits L1. The CSR kernel's gathers differ in all three ways.
Each family below changes one of them, everything else as ``gather_l1_32`` (264 CTAs x 1024
threads, 4 independent chases per thread, 16 KiB table, one sector per lane, op = one warp load
of the whole grid; per SM: times the SM count):

- **Word position in the line** (one line per cycle against a bank rule: does a wavefront serve
  lanes on different lines when their words lie in different banks?): ``cmech_same_32`` (every
  lane word 0: ``gather_l1_32`` rebuilt here, the control), ``cmech_spread_32`` (lane ``l`` word
  ``l``: 32 lines, 32 different banks), ``cmech_spread4_32`` (word ``4 (l % 8)``: 8 banks, 4 lanes
  each), ``cmech_rand_32`` (a fixed random word per lane: the CSR kernel's case),
  ``cmech_spread_8`` (8 lines, lane ``l`` on line ``l % 8`` at word ``l``: 4 lanes a line, 32
  banks), ``cmech_spread_32_w4`` (16 bytes a lane at chunk ``l % 8`` of its line; the control is
  ``gather_l1_32_w4``, every lane chunk 0).
- **Lines shared by the loads in flight** (does the data stage charge a line again when the
  warp's previous load read it?): ``cmech_reuse_same_32`` and ``cmech_reuse_rand_32``: the 4
  chases of a thread walk the same 32 lines (chase ``c`` at word ``w + c``), as the 4 gathers of
  a CSR chunk read neighbouring columns; against ``cmech_same_32`` / ``cmech_rand_32``.
- **L1 misses** (does a line that misses L1 pass the data stage like a hit?): ``cmech_miss_same_32``
  and ``cmech_miss_rand_32``: plain loads over a 1 MiB table (beyond L1, inside L2); against
  ``gather_l2_32`` (relaxed loads, L1 bypassed) and the hits.
- **16 bytes a lane, one load or two a sector** (the CSR kernel's gathers of h at batch 4 and 8):
  ``cmech_rand_32_w4`` / ``cmech_miss_rand_32_w4`` (one 128-bit load a lane at a random 16-byte
  chunk of its line, hits / misses) and ``cmech_pair_rand_32_w4`` / ``cmech_miss_pair_rand_32_w4``
  (two 128-bit loads a lane issued back to back, the two halves of one 32-byte sector at a random
  sector of the line, as the batch-8 kernel loads a column's 8 values; the second half of
  every sector holds 0s, all four added to the chase). Every word of these four is used (the
  first load's other three summed into ``sink``), so ptxas keeps the loads 128 bits wide.

Registered in :data:`kernels_ir.kernels.microbench.MICROBENCHES` (size argument ``rounds``).
Every kernel stores the sum of its chases' last addresses; :meth:`Microbench.verify_result` checks
it against the host's walk.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import I32
from ...verify import verify
from .core import LINE_WORDS, WARP, Microbench, _positive

__all__ = ["csr_gather", "lane_words", "REGISTRY", "PATTERNS"]

PATTERNS = ("same", "spread", "spread4", "rand")
TABLE_LINES = {"hit": 128, "miss": 8192}   # 16 KiB (L1-resident) / 1 MiB (beyond L1, in L2)
RAND_SEED = 12345


def lane_words(pattern: str, width: int = 1) -> np.ndarray:
    """The word each lane reads in its line (a multiple of ``width``)."""
    lanes = np.arange(WARP)
    if pattern == "same":
        w = np.zeros(WARP, np.int64)
    elif pattern == "spread":
        w = (lanes * width) % LINE_WORDS
    elif pattern == "spread4":
        w = 4 * (lanes % 8)
    elif pattern == "rand":
        w = np.random.default_rng(RAND_SEED).integers(0, LINE_WORDS // width, WARP) * width
    else:
        raise InputError(f"pattern={pattern!r} is unknown; accepted: {', '.join(PATTERNS)}")
    return w.astype(np.int32)


def csr_gather(rounds: int = 16, k: int = 32, pattern: str = "same", width: int = 1,
               reuse: bool = False, path: str = "hit", ctas: int = 264, threads: int = 1024,
               chains: int = 4, pair: bool = False, keep: bool | None = None,
               tag: str = "") -> Microbench:
    """Independent gathers at full occupancy, each warp load over ``k`` distinct lines (lane ``l``
    on line slot ``l % k``) at the word positions of ``pattern`` (:func:`lane_words`), ``width``
    words a lane. ``reuse``: the ``chains`` chases of a thread walk the same lines, chase ``c`` at
    word ``w + c * width`` (else each chase its own lines). ``path="hit"``: plain loads over a
    16 KiB table (L1 hits after the first lap); ``"miss"``: plain loads over 1 MiB (L1 misses,
    L2 hits). ``pair`` (``width=4`` only): each chase is two 128-bit loads issued back to back at
    the two halves of a 32-byte sector (the lane's word a multiple of 8; the table's words
    ``8 j + 4`` to ``8 j + 7`` hold 0 and the second load's four words are added to the
    pointer). Op = one warp
    load of the whole grid (of the first load, for ``pair``). ``keep``: every word of a 128-bit
    load used (default: the random-chunk ones only, as first recorded); ``tag`` ends the name."""
    rounds, k, ctas, threads, chains = (
        _positive(n, v) for n, v in (("rounds", rounds), ("k", k), ("ctas", ctas),
                                     ("threads", threads), ("chains", chains)))
    if path not in TABLE_LINES:
        raise InputError(f"path={path!r} is unknown; accepted: {', '.join(TABLE_LINES)}")
    if WARP % k:
        raise InputError(f"k={k} must divide 32")
    if width not in (1, 4):
        raise InputError(f"width={width} is not supported; accepted: 1, 4")
    if threads % WARP:
        raise InputError(f"threads={threads} must be a multiple of 32")
    if reuse and chains * width > LINE_WORDS:
        raise InputError(f"reuse with chains={chains} x width={width} exceeds a line's 32 words")
    if pair and (width != 4 or reuse):
        raise InputError("pair=True needs width=4 and no reuse")
    words = lane_words(pattern, 8 if pair else width)
    lines = TABLE_LINES[path]
    wpc = threads // WARP
    n_warps = ctas * wpc
    tab = np.zeros(lines * LINE_WORDS, np.int32)
    line_ids = np.arange(lines)
    for o in range(LINE_WORDS):
        tab[line_ids * LINE_WORDS + o] = (0 if pair and o % 8 >= 4 else
                                          ((line_ids + k) % lines) * LINE_WORDS + o)
    name = (f"cmech_{'reuse_' if reuse else ''}{'miss_' if path == 'miss' else ''}"
            f"{'pair_' if pair else ''}{pattern}_{k}" + (f"_w{width}" if width > 1 else "") + tag)
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_tab = b.global_buffer("table", I32, tab.size)
    g_words = b.global_buffer("words", I32, WARP)
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    keep_all = width == 4 and (pattern == "rand" if keep is None else keep)
    g_sink = b.global_buffer("sink", I32, ctas * threads, role="out") if keep_all else None
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    gw = b.imad(cta, wpc, warp, dst=b.reg(I32, "gw"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    slot = b.irem(lane, k, dst=b.reg(I32, "slot"))
    word = b.ldg(g_words, lane, dst=b.reg(I32, "word"))
    p = b.reg(I32, "p", chains)
    tmp = b.reg(I32, "tmp")
    wc = b.reg(I32, "wc")
    for c in range(chains):   # start line (gw * chains + c) * 37 + slot (c = 0 for reuse)
        b.imad(gw, chains * 37, slot, dst=tmp)
        if not reuse:
            b.iadd(tmp, c * 37, dst=tmp)
        b.and_(tmp, lines - 1, dst=tmp)
        b.iadd(word, c * width if reuse else 0, dst=wc)
        b.and_(wc, LINE_WORDS - 1, dst=wc)
        b.imad(tmp, LINE_WORDS, wc, dst=p[c])
    # the random-chunk 128-bit loads keep their own registers per chase, and every word is used
    # after the round's loads are all issued (summed into ``keep``, stored to ``sink``, not
    # checked), so that ptxas keeps them 128 bits wide and the chases stay independent; the
    # older width-4 benchmarks leave their last three words unused
    per = chains if keep_all else 1
    scratch = b.reg(I32, "scratch", 3 * per) if width > 1 else None
    second = b.reg(I32, "second", 4 * chains) if pair else None
    q = b.reg(I32, "q", chains) if pair else None
    keep = b.mov(0, I32, dst=b.reg(I32, "keep")) if keep_all else None
    with b.loop("r", 0, rounds):
        for c in range(chains):
            o = 3 * c if keep_all else 0
            dst = p[c] if width == 1 else (p[c], scratch[o], scratch[o + 1], scratch[o + 2])
            if pair:
                b.mov(p[c], I32, dst=q[c])
                b.ldg(g_tab, q[c], width=4, dst=dst)
                b.ldg(g_tab, q[c], offset=4, width=4,
                      dst=tuple(second[4 * c + i] for i in range(4)))
            else:
                b.ldg(g_tab, p[c], width=width, dst=dst)
        for c in range(chains if pair else 0):   # the second half of the sector holds 0s
            for i in range(4):
                b.iadd(p[c], second[4 * c + i], dst=p[c])
        for i in range(3 * per if keep_all else 0):
            b.iadd(keep, scratch[i], dst=keep)
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    for c in range(chains):
        b.iadd(acc, p[c], dst=acc)
    b.stg(g_out, gt, acc)
    if keep_all:
        b.stg(g_sink, gt, keep)
    kernel = verify(b.build())

    gw_h = np.repeat(np.arange(n_warps), WARP)
    ln = np.tile(np.arange(WARP), n_warps)
    expect = np.zeros(n_warps * WARP, np.int64)
    for c in range(chains):
        start = (gw_h * chains * 37 + ln % k + (0 if reuse else c * 37)) & (lines - 1)
        end = (start + rounds * k) % lines
        w = (words[ln] + (c * width if reuse else 0)) & (LINE_WORDS - 1)
        expect += end * LINE_WORDS + w
    expect = expect.astype(np.int32)
    bufs = {"table": tab, "words": words, "out": np.zeros(ctas * threads, np.int32)}
    if keep_all:
        bufs["sink"] = np.zeros(ctas * threads, np.int32)
    return Microbench(name, kernel, bufs,
                      rounds * chains * n_warps,
                      f"warp load over {k} lines, words '{pattern}', {width} word(s) a lane, "
                      f"{'shared' if reuse else 'own'} lines per chase, L1 {path}, all SMs"
                      + (", two loads a sector" if pair else ""),
                      {"rounds": rounds, "k": k, "pattern": pattern, "width": width,
                       "reuse": reuse, "path": path, "ctas": ctas, "threads": threads,
                       "chains": chains, "lines": lines, "pair": pair},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))


REGISTRY: dict = {}
for _pat in PATTERNS:
    REGISTRY[f"cmech_{_pat}_32"] = lambda _pat=_pat, **kw: csr_gather(pattern=_pat, **kw)
REGISTRY["cmech_spread_8"] = lambda **kw: csr_gather(k=8, pattern="spread", **kw)
REGISTRY["cmech_spread_32_w4"] = lambda **kw: csr_gather(pattern="spread", width=4, **kw)
# the 128-bit ones hold 55-64 registers a thread: one CTA of 1024 threads per SM (32 warps)
for _path in ("hit", "miss"):
    _m = "miss_" if _path == "miss" else ""
    REGISTRY[f"cmech_{_m}rand_32_w4"] = (
        lambda _path=_path, **kw: csr_gather(pattern="rand", width=4, path=_path,
                                             **{"ctas": 132, **kw}))
    REGISTRY[f"cmech_{_m}pair_rand_32_w4"] = (
        lambda _path=_path, **kw: csr_gather(pattern="rand", width=4, path=_path, pair=True,
                                             **{"ctas": 132, **kw}))
# a missed load's data stage: misses over k lines at each word pattern and width (the sectors a
# request misses: 1-32; measurements/l1_miss_pieces.py), and the random ones at 4 warps an SM;
# the 128-bit ones at 16 warps an SM (512 threads: 1024 would cap them at 64 registers, which
# spills, as cmech_rand_32_w4 and cmech_miss_rand_32_w4 do under nvcc 13 for sm_90)
for _k in (1, 2, 4, 8, 16, 32):
    for _pat in ("same", "spread", "rand"):
        REGISTRY[f"cmech_miss_{_pat}_{_k}_p"] = (
            lambda _k=_k, _pat=_pat, **kw: csr_gather(k=_k, pattern=_pat, path="miss",
                                                      tag="_p", **kw))
        REGISTRY[f"cmech_miss_{_pat}_{_k}_w4_p"] = (
            lambda _k=_k, _pat=_pat, **kw: csr_gather(k=_k, pattern=_pat, width=4, path="miss",
                                                      keep=True, tag="_p",
                                                      **{"ctas": 132, "threads": 512, **kw}))
REGISTRY["cmech_miss_rand_32_lo"] = lambda **kw: csr_gather(pattern="rand", path="miss", tag="_lo",
                                                       **{"ctas": 132, "threads": 128, **kw})
REGISTRY["cmech_miss_rand_32_w4_lo"] = lambda **kw: csr_gather(
    pattern="rand", width=4, path="miss", keep=True, tag="_lo",
    **{"ctas": 132, "threads": 128, **kw})
for _pat in ("same", "rand"):
    REGISTRY[f"cmech_reuse_{_pat}_32"] = (
        lambda _pat=_pat, **kw: csr_gather(pattern=_pat, reuse=True, **kw))
    REGISTRY[f"cmech_miss_{_pat}_32"] = (
        lambda _pat=_pat, **kw: csr_gather(pattern=_pat, path="miss", **kw))
