"""Gathers through the SM's L1TEX (the tag and data stages of :mod:`gpusim.engine.smem`, the L1
of :mod:`gpusim.engine.l1`): what one warp load over ``k`` distinct 128-byte lines costs.

- :func:`gather` (``gather_l1_{k}[_s{n}][_w4]``, ``gather_l2_{k}``) - independent chases at full
  occupancy, each warp load over ``k`` lines, as the CSR baseline's column gathers. Op = one warp
  load of the whole grid. :mod:`.csr_gathers` takes the CSR kernel's gathers apart further.
"""

from __future__ import annotations

import numpy as np

from ...builder import Builder
from ...errors import InputError
from ...ir import I32
from ...verify import verify
from .core import LINE_WORDS, WARP, Microbench, _positive

__all__ = ["gather", "GATHER_LINES"]

GATHER_LINES = {"l1": 128, "l2": 8192}  # 16 KiB (L1-resident) / 1 MiB (beyond L1, in L2)


def gather(rounds: int = 16, k: int = 32, sectors: int = 1, width: int = 1, path: str = "l1",
           ctas: int = 264, threads: int = 1024, chains: int = 4,
           lines: int | None = None) -> Microbench:
    """Independent gathers at full occupancy: what one warp load over ``k`` distinct 128-byte
    lines costs the SM (the L1TEX tag and data stages; the CSR baseline's column gathers).

    Lane ``l`` reads line slot ``l % k``, in sector ``(l // k) % sectors`` of its line, ``width``
    words. Each thread follows ``chains`` independent chases (``chains`` loads in flight per
    warp); a load returns the address of the same lane position ``k`` lines further, so the
    ``k`` lines of one warp load stay distinct. ``path="l1"``: plain loads over a 16 KiB table
    (every load after the first lap hits L1); ``path="l2"``: relaxed (L1-bypassing) loads over
    1 MiB. Op = one warp load of the whole grid (per SM: times the SM count)."""
    rounds, k, sectors, ctas, threads, chains = (
        _positive(n, v) for n, v in (("rounds", rounds), ("k", k), ("sectors", sectors),
                                     ("ctas", ctas), ("threads", threads), ("chains", chains)))
    if path not in GATHER_LINES:
        raise InputError(f"path={path!r} is unknown; accepted: {', '.join(GATHER_LINES)}")
    if WARP % k or k * sectors > WARP or sectors > 4:
        raise InputError(f"k={k}, sectors={sectors}: k must divide 32, sectors be 1..4 and "
                         f"k * sectors <= 32")
    if width not in (1, 4):
        raise InputError(f"width={width} is not supported; accepted: 1, 4")
    lines = int(lines or GATHER_LINES[path])
    if lines < 2 * k or lines & (lines - 1):
        raise InputError(f"lines={lines} must be a power of two >= 2k = {2 * k}")
    if threads % WARP:
        raise InputError(f"threads={threads} must be a multiple of 32")
    wpc = threads // WARP
    n_warps = ctas * wpc
    # lane -> word within its line: sector (p % sectors), then width-word steps in the sector
    lane_ids = np.arange(WARP)
    pos = lane_ids // k
    off = (pos % sectors) * 8 + ((pos // sectors) * width) % 8
    tab = np.zeros(lines * LINE_WORDS, np.int32)
    line_ids = np.arange(lines)
    for o in range(LINE_WORDS):
        tab[line_ids * LINE_WORDS + o] = ((line_ids + k) % lines) * LINE_WORDS + o
    name = f"gather_{path}_{k}" + (f"_s{sectors}" if sectors > 1 else "") + \
        (f"_w{width}" if width > 1 else "")
    b = Builder(f"mb_{name}", grid=ctas, block=threads, bench=name, rounds=rounds)
    g_tab = b.global_buffer("table", I32, tab.size)
    g_out = b.global_buffer("out", I32, ctas * threads, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    gw = b.imad(cta, wpc, warp, dst=b.reg(I32, "gw"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    slot = b.irem(lane, k, dst=b.reg(I32, "slot"))
    lpos = b.idiv(lane, k, dst=b.reg(I32, "lpos"))
    o1 = b.irem(lpos, sectors, dst=b.reg(I32, "o1"))
    o2 = b.idiv(lpos, sectors, dst=b.reg(I32, "o2"))
    b.imul(o2, width, dst=o2)
    b.and_(o2, 7, dst=o2)
    word = b.imad(o1, 8, o2, dst=b.reg(I32, "word"))
    p = b.reg(I32, "p", chains)
    tmp = b.reg(I32, "tmp")
    for c in range(chains):   # start line (gw * chains + c) * 37 + slot, mod lines
        b.imad(gw, chains * 37, slot, dst=tmp)
        b.iadd(tmp, c * 37, dst=tmp)
        b.and_(tmp, lines - 1, dst=tmp)
        b.imad(tmp, LINE_WORDS, word, dst=p[c])
    scratch = b.reg(I32, "scratch", 3) if width > 1 else None
    load = b.ldg if path == "l1" else b.ldg_volatile
    with b.loop("r", 0, rounds):
        for c in range(chains):
            dst = p[c] if width == 1 else (p[c], scratch[0], scratch[1], scratch[2])
            load(g_tab, p[c], width=width, dst=dst)
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    for c in range(chains):
        b.iadd(acc, p[c], dst=acc)
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())

    gw_h = np.repeat(np.arange(n_warps), WARP)
    ln = np.tile(lane_ids, n_warps)
    word_h = off[ln]
    expect = np.zeros(n_warps * WARP, np.int64)
    for c in range(chains):
        start = ((gw_h * chains * 37 + ln % k + c * 37) & (lines - 1))
        end = (start + rounds * k) % lines
        expect += end * LINE_WORDS + word_h
    expect = expect.astype(np.int32)   # wraps like the kernel's 32-bit sum (no overflow here)
    return Microbench(name, kernel, {"table": tab, "out": np.zeros(ctas * threads, np.int32)},
                      rounds * chains * n_warps,
                      f"warp load over {k} lines ({sectors} sector(s) each, {width} word(s) a "
                      f"lane, {path}), all SMs together",
                      {"rounds": rounds, "k": k, "sectors": sectors, "width": width,
                       "path": path, "ctas": ctas, "threads": threads, "chains": chains,
                       "lines": lines},
                      lambda g: bool(np.all(np.asarray(g["out"]) == expect)))
