"""Do the warps of one SM that miss in L1 on the same sector at the same time share one L2 request?

    PYTHONPATH=. python3 measurements/l1_merge.py --out $OUT     # GPU + Nsight: l1_merge.json
    python measurements/l1_merge.py --simulate measurements/h100/l1_merge.json

The simulator's L1 (``gpusim/engine/l1.py``, "in-flight merging") sends one L2 request per
sector and SM however many warps miss on it while the fill is under way. The CSR row-per-warp
baseline leans on that: the warps of an SM gather the same h sectors at about the same time at
the start of every step (one launch per step, L1 cold), and Nsight counts 1.2-1.4 times as many
L2 read sectors per CSR step as the simulator sends (``measurements/README.md``, CSR section).

Probe (the kernel is built here: a probe, not one of the simulator's calibration benchmarks):
132 CTAs x 8 warps; in each of ``ROUNDS`` rounds every lane loads one word with a plain load
(``LDG``: cached in L1) from its own 128-byte line, 32 lines per warp-load, and adds it to a sum
that thread stores at the end (values checked). ``same``: the 8 warps of a CTA load the same 32
lines in a round (lines ``32 r .. 32 r + 31``); ``distinct``: warp ``w`` loads its own 32 (lines
``32 (8 r + w) ..``). Nsight (one launch each) counts the L2 read sectors and requests from the
SMs and the L1 sector hits and misses; the simulator's count is its L2 ``data`` transactions.
Merged: ``same`` costs 132 x 32 x ``ROUNDS`` L2 sectors, a eighth of ``distinct``; not merged:
the two cost the same.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.probe import L2_COUNT_METRICS, check_l2_count_probe  # noqa: E402

MODES = ("same", "distinct")
ROUNDS, CTAS, WARPS = 16, 132, 8
METRICS = L2_COUNT_METRICS


def probe(mode: str, rounds: int = ROUNDS, ctas: int = CTAS, warps: int = WARPS):
    """The ``mode`` probe (see the module docstring) as a checked Microbench."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    check_l2_count_probe(mode, MODES, rounds, ctas, warps)
    lines = rounds * (warps if mode == "distinct" else 1) * 32
    name = f"l1_merge_{mode}"
    b = Builder(f"mb_{name}", grid=ctas, block=32 * warps, bench=name, rounds=rounds)
    g_h = b.global_buffer("h", F32, lines * 32)
    g_out = b.global_buffer("out", F32, ctas * 32 * warps, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    acc = b.mov(0.0, dst=b.reg(F32, "acc"))
    val = b.reg(F32, "val")
    addr = b.reg(I32, "addr")
    with b.loop("r", 0, rounds) as r:
        if mode == "same":                                   # line 32 r + lane
            b.imad(r, 32, lane, dst=addr)
        else:                                                # line 32 (warps r + w) + lane
            b.imad(b.imad(r, warps, warp, dst=b.reg(I32, "rw")), 32, lane, dst=addr)
        b.imul(addr, 32, dst=addr)                           # word 0 of that line
        b.ldg(g_h, addr, dst=val)
        b.fadd(acc, val, dst=acc)
    b.stg(g_out, b.imad(cta, 32 * warps, tid, dst=b.reg(I32, "gt")), acc)
    kernel = verify(b.build())
    h = np.zeros(lines * 32, np.float32)
    h[::32] = np.arange(lines, dtype=np.float32) % 7       # word 0 of line i holds i mod 7
    lane_ = np.arange(32)
    expect = np.zeros((ctas, warps, 32), np.float32)
    for rr in range(rounds):
        for w in range(warps):
            line = 32 * (rr if mode == "same" else warps * rr + w) + lane_
            expect[:, w, :] += (line % 7).astype(np.float32)
    return Microbench(name, kernel, {"h": h, "out": np.zeros(ctas * 32 * warps, np.float32)},
                      rounds, "one round of 32-line loads by every warp",
                      {"mode": mode, "rounds": rounds, "ctas": ctas, "warps": warps,
                       "lines": lines},
                      lambda g: bool(np.array_equal(np.asarray(g["out"]), expect.reshape(-1))))


def main(argv: list | None = None) -> int:
    from measurements.probe import l2_count_probe_main

    return l2_count_probe_main(argv, __doc__, __file__, MODES, probe, "l1_merge.json", METRICS)


if __name__ == "__main__":
    sys.exit(main())
