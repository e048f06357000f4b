"""Do L1 misses of many SMs on the same sectors cost more than misses on sectors of their own?

    PYTHONPATH=. python3 measurements/l2_shared.py --out $OUT     # GPU: l2_shared.json
    python measurements/l2_shared.py --simulate measurements/h100/l2_shared.json

Why: in the CSR baseline's step every SM gathers the same h (a few hundred sectors) at the same
time, and the per-warp time stamps of ``csr_trace.json`` show that these gathers take the GPU 2-4
times as long as the simulator (1740 cycles against about 700 at hidden 2824, batch 1), while
no unit is near its peak in Nsight (``csr_limit.json``). The Lamport exchange, the simulator's
other too-fast case, also has every SM load the same sectors at once. The simulator's slices
charge every request alike, whoever else asks for the same sector.

Probe (the kernel is built here: a probe, not one of the simulator's calibration benchmarks):
132 CTAs x 4 warps; in each of ``rounds`` rounds a warp issues 4 plain loads back to back
(over them, every sector of its 32 lines of the round, one sector a lane and the 32 lanes in
32 different shared banks: 32 one-sector requests and one data-stage wavefront a load),
then adds the 4 values to its sum (stored at the end, values checked). No sector is loaded twice
by one SM, so every load misses L1 and hits L2 (the tables are L2-resident: 13 MB at most).
``private``: every CTA has lines of its own; ``shared``: all 132 CTAs load the same lines in the
same order; ``shared16``: CTAs with equal ``cta % 8`` share lines (16-17 SMs per sector). Per SM
and round the same loads, lookups and L1 misses in all three; only the SMs asking for a sector
at about the same time differ. Timed as the microbenchmarks are (two sizes, slope), so cost per
round of the grid; per warp load and SM = that x clock / 16.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODES = ("private", "shared", "shared16")
PATHS = ("l1", "l2")
CTAS, WARPS, LOADS = 132, 4, 4
# (key suffix, path, warps, sizes): plain loads over new lines every round (13 MB of private
# lines at 12 rounds), and relaxed loads (L1 bypassed) over the same lines every round
RUNS = (("", "l1", 4, (4, 12)), ("_l2", "l2", 8, (16, 64)), ("_l2_w4", "l2", 4, (16, 64)))


def probe(mode: str, rounds: int, ctas: int = CTAS, warps: int = WARPS, path: str = "l1"):
    """The ``mode`` probe of the module docstring as a checked Microbench (op = one round)."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    if mode not in MODES:
        raise InputError(f"mode={mode!r} is unknown; accepted: {', '.join(MODES)}")
    if path not in PATHS:
        raise InputError(f"path={path!r} is unknown; accepted: {', '.join(PATHS)}")
    groups = {"private": ctas, "shared": 1, "shared16": 8}[mode]
    laps = rounds if path == "l1" else 1          # rounds over new lines, or the same lines
    lines = groups * warps * laps * 32
    name = f"l2_shared_{mode}" + ("" if path == "l1" else "_l2")
    b = Builder(f"mb_{name}", grid=ctas, block=32 * warps, bench=name, rounds=rounds)
    g_t = b.global_buffer("table", F32, lines * 32)
    g_out = b.global_buffer("out", F32, ctas * 32 * warps, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    grp = b.irem(cta, groups, dst=b.reg(I32, "grp"))
    # first line of this warp: ((grp * warps + warp) * rounds) * 32, word 0
    base = b.imad(grp, warps, warp, dst=b.reg(I32, "base"))
    b.imul(base, laps * 32, dst=base)
    b.iadd(base, lane, dst=base)
    b.imul(base, 32, dst=base)                   # word 0 of line base + lane
    # lane l reads word l % 8 of sector (s + l // 8) % 4 of its line in load s: the 32 lanes of
    # a load fall in 32 different banks (one data-stage wavefront), and 4 loads cover the line
    lo = b.reg(I32, "lo", LOADS)
    q = b.shr(lane, 3, dst=b.reg(I32, "q"))
    m8 = b.and_(lane, 7, dst=b.reg(I32, "m8"))
    for s_ in range(LOADS):
        b.iadd(q, s_, dst=lo[s_])
        b.and_(lo[s_], 3, dst=lo[s_])
        b.imad(lo[s_], 8, m8, dst=lo[s_])
    acc = b.mov(0.0, dst=b.reg(F32, "acc"))
    val = b.reg(F32, "val", LOADS)
    addr = b.reg(I32, "addr")
    idx = b.reg(I32, "idx", LOADS)
    with b.loop("r", 0, rounds) as r:
        if path == "l1":
            b.imad(r, 32 * 32, base, dst=addr)   # line base + 32 r + lane
        else:
            b.mov(base, I32, dst=addr)           # line base + lane, every round
        for s_ in range(LOADS):
            b.iadd(addr, lo[s_], dst=idx[s_])
        for s_ in range(LOADS):
            (b.ldg if path == "l1" else b.ldg_volatile)(g_t, idx[s_], dst=val[s_])
        for s_ in range(LOADS):
            b.fadd(acc, val[s_], dst=acc)
    b.stg(g_out, b.imad(cta, 32 * warps, tid, dst=b.reg(I32, "gt")), acc)
    kernel = verify(b.build())
    t = (np.arange(lines * 32) % 7).astype(np.float32)
    lanes = np.arange(32)
    expect = np.zeros((ctas, warps, 32), np.float32)
    for c in range(ctas):
        for wp in range(warps):
            first = ((c % groups) * warps + wp) * laps * 32
            ln = first + lanes[None, :] + (32 * np.arange(rounds)[:, None] if path == "l1" else
                                           np.zeros((rounds, 1), np.int64))
            for s_ in range(LOADS):
                word = ln * 32 + 8 * ((s_ + lanes // 8) % 4) + lanes % 8
                expect[c, wp] += (word % 7).astype(np.float32).sum(axis=0)
    return Microbench(name, kernel, {"table": t, "out": np.zeros(ctas * 32 * warps, np.float32)},
                      rounds, f"one round: {LOADS} one-sector-a-lane loads by every warp",
                      {"mode": mode, "rounds": rounds, "ctas": ctas, "warps": warps,
                       "lines": lines, "loads": LOADS, "path": path},
                      lambda g: bool(np.allclose(np.asarray(g["out"]), expect.reshape(-1))))


def measure(out: str, argv: list) -> dict:
    import json

    from gpusim.backends.cupy_backend import Runner, run_microbench
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler

    runner = Runner()
    prov = provenance(argv)
    clocks = ClockSampler()
    res = {"format_version": 1, "provenance": prov, "runs": RUNS, "results": {}}
    for suffix, path, warps, sizes in RUNS:
        for mode in MODES:
            key = f"l2_shared_{mode}{suffix}"
            try:
                def build(n, m=mode, w=warps, p=path):
                    return probe(m, n, warps=w, path=p)
                r = run_microbench(sizes, build, repeats=15, warmup=3, runner=runner)
                r["status"] = "ok"
                r["cycles_per_load_per_sm"] = r["per_op_s"] * 1.98e9 / (warps * LOADS)
                r["path"], r["warps"] = path, warps
                print(f"{key:28s} {r['per_op_s'] * 1e9:8.1f} ns/round "
                      f"{r['cycles_per_load_per_sm']:6.2f} cycles/load/SM", flush=True)
            except Exception as exc:   # record and go on
                r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
                print(key, "FAILED", r["error"], flush=True)
            res["results"][key] = r
    clocks.stop(prov)
    with open(os.path.join(out, "l2_shared.json"), "w") as f:
        json.dump(res, f, indent=1, default=float)
    return res


def _simulated(spec, rec) -> dict:
    from gpusim.engine import simulate

    out = {}
    for suffix, path, warps, sizes in RUNS:
        for mode in MODES:
            key = f"l2_shared_{mode}{suffix}"
            cyc = []
            for n in sizes:
                m = probe(mode, n, warps=warps, path=path)
                r = simulate(m.kernel, m.inputs, spec, l2_warm=True)
                if not m.verify_result(r.globals):
                    raise AssertionError(f"{m.name}: the simulator's values fail the check")
                cyc.append(r.cycles)
            per_round = (cyc[1] - cyc[0]) / (sizes[1] - sizes[0])
            out[key] = {"cycles": cyc, "cycles_per_round": per_round,
                        "cycles_per_load_per_sm": per_round / (warps * LOADS)}
            print(key, out[key], flush=True)
    return out


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure,
                      lambda path: add_simulated(path, _simulated, l2_warm=True))


if __name__ == "__main__":
    sys.exit(main())
