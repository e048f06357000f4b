"""Does Nsight count bank conflicts for conflict-free shared stores when global loads share the
L1TEX data stage with them?

    PYTHONPATH=. python3 measurements/smem_store_mix.py --out $OUT   # GPU + Nsight

Why: in the campaign and the fresh draws, Nsight reports thousands to hundreds of thousands of
shared-store bank conflicts in the sparse persistent kernels at hidden >= ~3800 (and a few
hundred at some smaller layers), where ``kernels_ir.banks`` says 0. The stores are the h
staging's, which ``bank_rule.json`` found conflict-free in isolation, and the counts differ
between the barrier and Lamport variants of one layer, as a dynamic effect would. In those
kernels the staging stores run while the global h loads of the same step return through the same
L1TEX data stage.

Probe (the kernel is built here: a probe, not one of the simulator's calibration benchmarks):
132 CTAs x 8 warps, ``ROUNDS`` rounds; in each round every warp stores one conflict-free 32-bit
word a lane into shared memory (lane ``l`` at word ``256 r + 32 w + l`` modulo 2048), and,
by mode, also issues one other access per round:

- ``st``: nothing else (the control);
- ``st_lds``: a conflict-free shared load of another region;
- ``st_ldg_hit``: a global load, one word a lane over 32 lines of a 16 KiB table (L1 hits);
- ``st_ldg_miss``: the same over a 4 MiB table (L1 misses, L2 hits);
- ``st_ldg_line``: a coalesced global load (the 32 lanes on one line) over the 4 MiB table;
- ``st4``, ``st4_lds4``, ``st4_lds``: 128-bit stores instead (lane ``l`` at words
  ``4 (64 r + 8 w + l) .. + 3`` modulo 2048, as the h staging's ``STS.128``), alone, beside a
  conflict-free 128-bit shared load of the other region (as the mat-vec's ``LDS.128`` of h),
  and beside a 32-bit one.

The loaded values are summed into the value the next round stores (so nothing is dead) and the
sum is written out at the end (values checked). Nsight counts per launch the shared-store and
shared-load bank conflicts and wavefronts, the executed shared stores and the global L1 misses.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODES = ("st", "st_lds", "st_ldg_hit", "st_ldg_miss", "st_ldg_line", "st4", "st4_lds4",
         "st4_lds")
CTAS, WARPS, ROUNDS = 132, 8, 64
METRICS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
           "smsp__inst_executed_op_shared_st.sum", "smsp__inst_executed_op_shared_ld.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum",
           "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
           "l1tex__data_pipe_lsu_wavefronts_mem_lg.sum", "gpu__time_duration.sum")


def probe(mode: str, rounds: int = ROUNDS, ctas: int = CTAS, warps: int = WARPS):
    """The ``mode`` probe of the module docstring as a checked Microbench."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    if mode not in MODES:
        raise InputError(f"mode={mode!r} is unknown; accepted: {', '.join(MODES)}")
    lines = 128 if mode == "st_ldg_hit" else 32768           # 16 KiB or 4 MiB of int32
    name = f"smem_store_mix_{mode}"
    b = Builder(f"mb_{name}", grid=ctas, block=32 * warps, bench=name, rounds=rounds)
    g_t = b.global_buffer("table", I32, lines * 32)
    g_out = b.global_buffer("out", I32, ctas * 32 * warps, role="out")
    s_st = b.shared("st", I32, 2048)
    s_ld = b.shared("ld", I32, 2048)
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    if mode in ("st_lds", "st4_lds4", "st4_lds"):   # ld[i] = i % 3, by the CTA's threads
        i = b.reg(I32, "i")
        q = b.reg(I32, "q")
        for k in range(2048 // (32 * warps)):
            b.iadd(tid, k * 32 * warps, dst=i)
            b.irem(i, 3, dst=q)
            b.sts(s_ld, i, q)
        b.bar()
    acc = b.mov(0, I32, dst=b.reg(I32, "acc"))
    v = b.reg(I32, "v")
    w = b.reg(I32, "w")
    g = b.reg(I32, "g")
    # this warp's line block: (cta * warps + warp) * 32 lines (modulo the table)
    blk = b.imad(cta, warps, warp, dst=b.reg(I32, "blk"))
    b.imul(blk, 32, dst=blk)
    wide = mode.startswith("st4")
    v4 = b.reg(I32, "v4", 4) if wide else None
    with b.loop("r", 0, rounds) as r:
        b.imad(r, 32 * warps, tid, dst=w)                  # 256 r + 32 w + l
        if wide:                                           # 4 (256 r + 32 w + l) mod 2048
            w4 = b.imul(w, 4, dst=b.reg(I32, "w4"))
            b.and_(w4, 2047, dst=w4)
            b.sts(s_st, w4, (acc, acc, acc, acc))
        b.and_(w, 2047, dst=w)
        if not wide:
            b.sts(s_st, w, acc)
        if mode == "st4_lds4":
            b.lds(s_ld, w4, width=4, dst=v4)
            for k in range(4):
                b.iadd(acc, v4[k], dst=acc)
        elif mode in ("st_lds", "st4_lds"):
            b.lds(s_ld, w, dst=v)
            b.iadd(acc, v, dst=acc)
        elif mode in ("st_ldg_hit", "st_ldg_miss"):        # line (blk + 32 r + l), word l
            b.imad(r, 32, blk, dst=g)
            b.iadd(g, lane, dst=g)
            b.and_(g, lines - 1, dst=g)
            b.imad(g, 32, lane, dst=g)
            b.ldg(g_t, g, dst=v)
            b.iadd(acc, v, dst=acc)
        elif mode == "st_ldg_line":                        # line (blk + r), word l
            b.iadd(blk, r, dst=g)
            b.and_(g, lines - 1, dst=g)
            b.imad(g, 32, lane, dst=g)
            b.ldg(g_t, g, dst=v)
            b.iadd(acc, v, dst=acc)
    b.stg(g_out, b.imad(cta, 32 * warps, tid, dst=b.reg(I32, "gt")), acc)
    kernel = verify(b.build())
    t = (np.arange(lines * 32) % 5).astype(np.int32)
    ld = np.arange(2048, dtype=np.int32) % 3
    lanes = np.arange(32)
    expect = np.zeros((ctas, warps, 32), np.int64)
    for c in range(ctas):
        for wp in range(warps):
            bk = (c * warps + wp) * 32
            for rr in range(rounds):
                if mode in ("st_lds", "st4_lds"):
                    expect[c, wp] += ld[(256 * rr + 32 * wp + lanes) % 2048]
                elif mode == "st4_lds4":
                    wd = (4 * (256 * rr + 32 * wp + lanes)) % 2048
                    expect[c, wp] += sum(ld[wd + k] for k in range(4))
                elif mode in ("st_ldg_hit", "st_ldg_miss"):
                    expect[c, wp] += t[((bk + 32 * rr + lanes) % lines) * 32 + lanes]
                elif mode == "st_ldg_line":
                    expect[c, wp] += t[((bk + rr) % lines) * 32 + lanes]
    exp = expect.reshape(-1).astype(np.int32)
    return Microbench(name, kernel, {"table": t, "out": np.zeros(ctas * 32 * warps, np.int32)},
                      rounds, "one round: a shared store (and the mode's access) by every warp",
                      {"mode": mode, "rounds": rounds, "ctas": ctas, "warps": warps,
                       "lines": lines},
                      lambda gl: bool(np.array_equal(np.asarray(gl["out"]), exp)))


def worker(order_path: str) -> int:
    """Launch each probe once (run under ncu)."""
    from measurements.probe import probe_worker

    return probe_worker(order_path, [probe(mode) for mode in MODES])


def measure(out: str, argv: list) -> dict:
    from measurements.probe import ncu_probe_record

    return ncu_probe_record(out, argv, os.path.abspath(__file__), [probe(m) for m in MODES],
                            "smem_store_mix.json", METRICS)


def _simulated(spec, rec) -> dict:
    from measurements.probe import simulate_checked

    out = {}
    for mode in MODES:
        m = probe(mode)
        r = simulate_checked(m, spec, l2_warm=True)
        out[m.name] = {"bank_conflicts": r.bank_conflicts["total"],
                       "smem_wavefronts": r.smem_wavefronts["total"], "cycles": r.cycles}
        print(m.name, out[m.name], flush=True)
    return out


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure,
                      lambda path: add_simulated(path, _simulated, l2_warm=True), worker=worker)


if __name__ == "__main__":
    sys.exit(main())
