"""Does the L1 merge a warp's two 16-byte loads of one sector when the buffer is too large to stay
in L1?

    PYTHONPATH=. python3 measurements/l1_pair.py --out $OUT     # GPU + Nsight: l1_pair.json
    python measurements/l1_pair.py --simulate measurements/h100/l1_pair.json

The CSR row-per-warp kernel at batch 8 loads each column's h (8 words, one 32-byte sector) with
two back-to-back 128-bit loads of the same sector. The simulator's L1 (``gpusim/engine/l1.py``)
keeps only the read-only buffers that fit in it together (smallest first); for a buffer left
out, it sent every request to L2, the second load of a sector too. At hidden 6688, batch 8 (the
fresh draw s15) h is 214 KB and did not fit beside the row pointers: the simulator sent twice
the L2 read sectors that Nsight counts, and priced the step 64-68% too slow.

Probe (the kernel is built here: a probe, not one of the simulator's calibration benchmarks):
132 CTAs x 8 warps; in each of ``ROUNDS`` rounds every lane reads its own 32-byte sector of a
17 MB buffer (no sector is read by two lanes, warps, CTAs or rounds: nothing can be reused), with
``single`` one 128-bit plain load (words 0-3 of the sector) and with ``pair`` two (words 0-3, then
words 4-7, as the CSR kernel's batch-8 gather), summed and stored (values checked). Nsight (one
launch each) counts the L2 read sectors and requests from the SMs and the L1 sector lookups,
hits and misses; the simulator's count is its L2 ``data`` transactions. Merged: ``pair`` costs
the L2 what ``single`` does; not merged: twice.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.probe import L2_COUNT_METRICS, check_l2_count_probe  # noqa: E402

MODES = ("single", "pair")
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
    threads = ctas * warps * 32
    sectors = rounds * threads
    name = f"l1_pair_{mode}"
    b = Builder(f"mb_{name}", grid=ctas, block=32 * warps, bench=name, rounds=rounds)
    g_h = b.global_buffer("h", F32, sectors * 8)
    g_out = b.global_buffer("out", F32, threads, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    gt = b.imad(cta, 32 * warps, tid, dst=b.reg(I32, "gt"))
    acc = b.mov(0.0, dst=b.reg(F32, "acc"))
    v = b.reg(F32, "v", 8)
    addr = b.reg(I32, "addr")
    with b.loop("r", 0, rounds) as r:
        b.imad(r, threads, gt, dst=addr)                     # sector r * threads + gt
        b.imul(addr, 8, dst=addr)
        b.ldg(g_h, addr, width=4, dst=tuple(v[i] for i in range(4)))
        if mode == "pair":
            b.ldg(g_h, addr, offset=4, width=4, dst=tuple(v[i] for i in range(4, 8)))
        for i in range(8 if mode == "pair" else 4):
            b.fadd(acc, v[i], dst=acc)
    b.stg(g_out, gt, acc)
    kernel = verify(b.build())
    h = (np.arange(sectors * 8) % 5).astype(np.float32)
    words = h.reshape(rounds, threads, 8)[:, :, :8 if mode == "pair" else 4]
    expect = words.sum(axis=(0, 2), dtype=np.float64).astype(np.float32)
    return Microbench(name, kernel, {"h": h, "out": np.zeros(threads, np.float32)},
                      rounds, "one round of sector loads by every lane",
                      {"mode": mode, "rounds": rounds, "ctas": ctas, "warps": warps,
                       "sectors": sectors},
                      lambda g: bool(np.array_equal(np.asarray(g["out"]), expect)))


def main(argv: list | None = None) -> int:
    from measurements.probe import l2_count_probe_main

    return l2_count_probe_main(argv, __doc__, __file__, MODES, probe, "l1_pair.json", METRICS)


if __name__ == "__main__":
    sys.exit(main())
