"""Do loads of many SMs on the same L2 sectors at the same time cost more than loads of their own?

    PYTHONPATH=. python3 measurements/l2_shared.py --out $OUT     # GPU: l2_shared.json
    L2_SHARED_STRIDE=1 PYTHONPATH=. python3 measurements/l2_shared.py --out $OUT  # the stride scan
    python measurements/l2_shared.py --simulate measurements/h100/l2_shared.json

Why: in the CSR baseline's step every SM gathers the same h (a few hundred sectors) at the same
time, and the per-warp time stamps of ``csr_trace.json`` show that these gathers take the GPU 2-4
times as long as the simulator (1740 cycles against about 700 at hidden 2824, batch 1), while
no unit is near its peak in Nsight (``csr_limit.json``). The Lamport exchange, the simulator's
other too-fast case, also has every SM load the same sectors at once. The simulator's slices
charge every request alike, whoever else asks for the same sector.

Probe (the kernel is built here: a probe, not one of the simulator's calibration benchmarks):
132 CTAs x ``warps`` warps; in each of ``rounds`` rounds a warp issues 4 relaxed loads (L1
bypassed, so every load goes to L2) back to back, then adds the 4 values to its sum (stored at
the end, values checked). Each warp has a block of 32 lines per lap; round ``r`` reads lap
``r % laps``.

- ``gather`` layout: lane ``l`` reads line ``l`` of the block, word ``l % 8`` of sector
  ``(s + l // 8) % 4`` in load ``s``: 32 one-sector requests a load, the 32 lanes in 32
  different shared banks; 4 loads cover the 32 lines. ``line`` layout: load ``s`` reads line
  ``s`` of the block, lane ``l`` word ``l``: one 4-sector request a load.
- Sharing: ``private``: every CTA has blocks of its own; ``sharedN``: CTAs with equal ``cta %
  (132 / N)`` share their blocks (N SMs ask for each sector), ``shared``: all 132 do, in the same
  order; ``shared_rot``: all 132 share 8 laps of blocks, CTA ``c`` reading lap ``(r + c) % 8``
  in round ``r`` (the same sectors, at other times).
- ``spread`` layout (the ``_spread`` runs): as ``gather``, but the lanes' 32 lines of a load lie
  8 KiB apart (64 lines) instead of next to each other; ``spreadK``: K lines apart (K = 2, 4, 8,
  16: where the lockstep cost falls off tells how many contiguous bytes share a slice).

Per SM and round the same loads and requests in every mode; only the SMs asking for a sector at
about the same time differ. Timed as the microbenchmarks are (two sizes, slope), cost per round
of the grid; per warp load and SM = that x clock / (4 warps).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CTAS, LOADS, LAPS = 132, 4, 8
SIZES = (16, 64)
SIZES_LINE = (64, 1024)   # the line layout's rounds are ~100 ns: longer runs to time them
SHARING = {"private": None, "shared4": 33, "shared16": 8, "shared": 1, "shared_rot": 1}
# (key, sharing, layout, warps, CTAs, laps of shared_rot)
RUNS = tuple((f"l2_shared_{m}" + ("" if w == 8 else f"_w{w}"), m, "gather", w, CTAS, LAPS)
             for w in (8, 4) for m in SHARING) + tuple(
    (f"l2_shared_{m}_line", m, "line", 8, CTAS, LAPS) for m in ("private", "shared", "shared_rot"))
# the lockstep shared mode on N SMs (the others idle), private controls, and 2 laps (66 SMs
# on each sector at a time)
RUNS_N = tuple((f"l2_shared_{m}_w4_n{n}", m, "gather", 4, n, LAPS)
               for n in (2, 8, 33, 66) for m in ("shared", "private")) + (
    ("l2_shared_shared_rot2_w4", "shared_rot", "gather", 4, CTAS, 2),
    ("l2_shared_shared_rot2", "shared_rot", "gather", 8, CTAS, 2))
# the same lockstep sharing with each load's 32 lines 8 KiB apart instead of consecutive (is
# the cost the sharing, or a few slices holding a small contiguous region?)
RUNS_SPREAD = tuple((f"l2_shared_{m}_spread" + ("" if w == 8 else f"_w{w}"), m, "spread", w,
                     CTAS, LAPS) for w in (4, 8) for m in ("shared", "shared16")) + tuple(
    (f"l2_shared_shared_{lay}_w4", "shared", lay, 4, CTAS, LAPS)
    for lay in ("spread2", "spread4", "spread8", "spread16"))


def probe(mode: str, rounds: int, warps: int = 8, layout: str = "gather", ctas: int = CTAS,
          laps: int = LAPS):
    """The probe of the module docstring as a checked Microbench (op = one round)."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    if mode not in SHARING:
        raise InputError(f"mode={mode!r} is unknown; accepted: {', '.join(SHARING)}")
    strides = {"gather": 1, "line": 1, "spread": 64, "spread2": 2, "spread4": 4, "spread8": 8,
               "spread16": 16}
    if layout not in strides:
        raise InputError(f"layout={layout!r} is unknown; accepted: {', '.join(strides)}")
    ls = strides[layout]                     # lines between the lanes' lines of a load
    groups = SHARING[mode] or ctas
    rot = mode == "shared_rot"
    if rot and laps not in (1, 2, 4, 8, 16):
        raise InputError(f"laps={laps}: accepted 1, 2, 4, 8, 16")
    laps = laps if rot else 1
    lines = groups * warps * laps * 32 * ls
    name = f"l2_shared_{mode}_{layout}"
    b = Builder(f"mb_{name}", grid=ctas, block=32 * warps, bench=name, rounds=rounds)
    g_t = b.global_buffer("table", F32, lines * 32)
    g_out = b.global_buffer("out", F32, ctas * 32 * warps, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    grp = b.irem(cta, groups, dst=b.reg(I32, "grp"))
    # word 0 of the warp's block of lap 0: ((grp * warps + warp) * laps * 32 * ls) * 32
    base = b.imad(grp, warps, warp, dst=b.reg(I32, "base"))
    b.imul(base, laps * 32 * ls * 32, dst=base)
    lo = b.reg(I32, "lo", LOADS)          # each load's word offset of the lane in the block
    if layout != "line":
        q = b.shr(lane, 3, dst=b.reg(I32, "q"))
        m8 = b.and_(lane, 7, dst=b.reg(I32, "m8"))
        for s in range(LOADS):            # line l, word 8 ((s + l // 8) % 4) + l % 8
            b.iadd(q, s, dst=lo[s])
            b.and_(lo[s], 3, dst=lo[s])
            b.imad(lo[s], 8, m8, dst=lo[s])
            b.imad(lane, 32 * ls, lo[s], dst=lo[s])
    else:
        for s in range(LOADS):            # line s, word l
            b.iadd(lane, 32 * s, dst=lo[s])
    acc = b.mov(0.0, dst=b.reg(F32, "acc"))
    val = b.reg(F32, "val", LOADS)
    addr = b.reg(I32, "addr")
    idx = b.reg(I32, "idx", LOADS)
    with b.loop("r", 0, rounds) as r:
        if rot:                           # lap (r + cta) % laps
            b.iadd(r, cta, dst=addr)
            b.and_(addr, laps - 1, dst=addr)
            b.imad(addr, 32 * ls * 32, base, dst=addr)
        else:
            b.mov(base, I32, dst=addr)
        for s in range(LOADS):
            b.iadd(addr, lo[s], dst=idx[s])
        for s in range(LOADS):
            b.ldg_volatile(g_t, idx[s], dst=val[s])
        for s in range(LOADS):
            b.fadd(acc, val[s], dst=acc)
    b.stg(g_out, b.imad(cta, 32 * warps, tid, dst=b.reg(I32, "gt")), acc)
    kernel = verify(b.build())
    t = (np.arange(lines * 32) % 7).astype(np.float32)
    lanes = np.arange(32)
    if layout != "line":
        offs = [lanes * 32 * ls + 8 * ((s + lanes // 8) % 4) + lanes % 8 for s in range(LOADS)]
    else:
        offs = [32 * s + lanes for s in range(LOADS)]
    expect = np.zeros((ctas, warps, 32), np.float32)
    for c in range(ctas):
        for w in range(warps):
            blk = ((c % groups) * warps + w) * laps * 32 * ls * 32
            for r in range(rounds):
                lap = (r + c) % laps if rot else 0
                for o in offs:
                    expect[c, w] += t[blk + lap * 32 * ls * 32 + o]
    return Microbench(name, kernel, {"table": t, "out": np.zeros(ctas * 32 * warps, np.float32)},
                      rounds, f"one round: {LOADS} relaxed loads by every warp",
                      {"mode": mode, "layout": layout, "rounds": rounds, "ctas": ctas,
                       "warps": warps, "lines": lines, "loads": LOADS, "laps": laps},
                      lambda g: bool(np.allclose(np.asarray(g["out"]), expect.reshape(-1))))


def measure(out: str, argv: list) -> dict:
    import json

    from gpusim.backends.cupy_backend import Runner, run_microbench
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler

    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    runs = RUNS + RUNS_N + RUNS_SPREAD
    filename = "l2_shared.json"
    if os.environ.get("L2_SHARED_STRIDE"):      # the stride scan alone, with its controls
        runs = tuple(r for r in RUNS + RUNS_SPREAD
                     if r[0] in ("l2_shared_private_w4", "l2_shared_shared_w4")
                     or r[2].startswith("spread") and r[3] == 4 and r[1] == "shared")
        filename = "l2_shared_stride.json"
    res = {"format_version": 2, "provenance": prov, "sizes": SIZES, "runs": runs, "results": {}}
    for key, mode, layout, warps, ctas, laps in runs:
        try:
            def build(n, m=mode, w=warps, lay=layout, c=ctas, la=laps):
                return probe(m, n, warps=w, layout=lay, ctas=c, laps=la)
            sizes = SIZES_LINE if layout == "line" else SIZES
            r = run_microbench(sizes, build, repeats=15, warmup=3, runner=runner)
            r["status"] = "ok"
            r["cycles_per_load_per_sm"] = r["per_op_s"] * 1.98e9 / (warps * LOADS)
            print(f"{key:28s} {r['per_op_s'] * 1e9:8.1f} ns/round "
                  f"{r['cycles_per_load_per_sm']:6.2f} cycles/load/SM", flush=True)
        except Exception as exc:   # record and go on
            r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(key, "FAILED", r["error"], flush=True)
        res["results"][key] = r
    clocks.stop(prov)
    with open(os.path.join(out, filename), "w") as f:
        json.dump(res, f, indent=1, default=float)
    return res


def simulated_per_load(spec, mode: str, layout: str, warps: int, ctas: int = CTAS,
                       laps: int = LAPS) -> float:
    """The simulator's cycles per warp load and SM of one run (slope over ``SIZES``; the line
    layout's over 16 and 64 rounds too: the simulator needs no long runs)."""
    from measurements.probe import simulate_checked

    cyc = [simulate_checked(probe(mode, n, warps=warps, layout=layout, ctas=ctas, laps=laps),
                            spec, l2_warm=True).cycles for n in SIZES]
    return (cyc[1] - cyc[0]) / (SIZES[1] - SIZES[0]) / (warps * LOADS)


def _simulated(spec, rec) -> dict:
    out = {}
    for key, mode, layout, warps, ctas, laps in rec.get("runs", RUNS):
        out[key] = {"cycles_per_load_per_sm": simulated_per_load(spec, mode, layout, warps,
                                                                 ctas, laps)}
        gpu = rec["results"].get(key, {}).get("cycles_per_load_per_sm")
        print(f"{key:28s} simulated {out[key]['cycles_per_load_per_sm']:7.2f}"
              + (f"  GPU {gpu:7.2f}" if gpu else ""), flush=True)
    return out


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure,
                      lambda path: add_simulated(path, _simulated, l2_warm=True))


if __name__ == "__main__":
    sys.exit(main())
