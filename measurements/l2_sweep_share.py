"""Do SMs that load a line at different times count as its sharers? Every warp of 132 CTAs sweeps
the same table of random lines, the SMs together on a row or spread over the table: one device
call.

    PYTHONPATH=. python3 measurements/l2_sweep_share.py --out $OUT    # GPU: l2_sweep_share.json
    python measurements/l2_sweep_share.py --simulate measurements/h200/l2_sweep_share.json

Why: the simulator prices an L2 contention group's request by how many SMs share its line
(:func:`gpusim.specs.rules.group_request_cost`: the span of a warp load costs only lines that many
SMs share) and, until this probe, counted the sharers over the whole kernel: every SM that had
loaded the line so far (a spec whose ``l2_group_share_window_cycles`` is 0 still does). The rule
was measured on loads of fixed lines (``l2_slice_map.py``, ``l2_group_rate.py``), where the SMs
that load a line over the kernel and those that load it at once are the same. A kernel that sweeps
a table (the gathers of ``gather_l2_32``, the CSR kernel's gathers of h) has every line loaded by
every SM over the kernel, but by few at once. This probe holds the lines, the group load and the
sharers over the kernel fixed and moves only the sharers at once.

The table: ``ROWS`` rows of 32 lines, row ``r`` lane ``l`` on line ``((32 r + l) x MULT) mod
LINES`` of a 2 MiB-aligned 4 MiB region (a bijection: the rows are disjoint, each of 32 lines over
about 23 of the H200's 47 groups). Each warp loads 16 rows a round, rows ``start + 16 i`` to
``start + 16 i + 15`` (mod ``ROWS``): 16 relaxed loads back to back, then their sum, one round an
iteration of a rolled loop (the IR form is the same program). ``ITERS`` rounds sweep the table 4
times, so every SM loads every line. The warps' first rows (:func:`starts`): the CTAs are dealt
into ``132 / k`` cohorts (CTA ``c`` in cohort ``c mod (132 / k)``); the cohort's warps start on the
same rows, the cohorts and the 4 warps of a CTA evenly spread over the table. So ``k`` SMs start on
each row together (132: all of them, in lockstep); as a warp takes 16 rows a round, about 8-9 SMs
load a row within a round at ``k`` = 1 and 8-12 at 4. A grid-wide start (an arrival counter) lines
the CTAs up before the clock starts. Lanes in sector 0 (``s0``, word 0) or the sectors rotating
with the load and the warp at word ``lane % 8`` (``rot``, the hammer's place).

Per run: each CTA's ``clock64`` span a round, the median over the CTAs, ``LAUNCHES`` launches
(the first a warm-up, kept); cycles a request per SM = that / (16 x 32 x 4).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOURCE = r"""
extern "C" __global__ void sweep(const unsigned* __restrict__ buf, const int* __restrict__ start,
                                 int iters, long long* __restrict__ span,
                                 unsigned* __restrict__ sink, int sector, int word,
                                 unsigned* __restrict__ arrive, unsigned* __restrict__ late)
{
    // warp w of CTA c: rows start[c * warps + w] + 16 i + s (mod ROWS), s = 0..15, in round i;
    // row r lane l: line ((32 r + l) * MULT) mod LINES; sector `sector` (0-3) or (s + w) % 4
    // (sector = 4), word lane % 8 (word = 1) or 0
    const unsigned ROWS = 1024u, LINES = 32768u, MULT = 40503u;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    unsigned r0 = (unsigned)start[blockIdx.x * (blockDim.x >> 5) + w];
    unsigned off[4];
    for (int s = 0; s < 4; ++s)
        off[s] = (sector < 4 ? sector : ((s + w) & 3)) * 8 + (word ? (lane & 7) : 0);
    if (threadIdx.x == 0) {             // grid-wide start: every CTA is resident (one an SM)
        atomicAdd(arrive, 1u);
        unsigned v = 0;
        int k = 0;
        for (; k < (1 << 22); ++k) {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(arrive) : "memory");
            if (v >= gridDim.x) break;
        }
        if (k == (1 << 22)) atomicAdd(late, 1u);
    }
    __syncthreads();
    unsigned acc = 0;
    long long t0 = clock64();
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
        unsigned v[16];
#pragma unroll
        for (int s = 0; s < 16; ++s) {
            unsigned row = (r0 + 16u * it + s) & (ROWS - 1);
            unsigned line = ((row * 32u + lane) * MULT) & (LINES - 1);
            const unsigned* p = buf + (size_t)line * 32 + off[s & 3];
            asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v[s]) : "l"(p) : "memory");
        }
#pragma unroll
        for (int s = 0; s < 16; ++s) acc += v[s];
    }
    __syncthreads();
    long long t1 = clock64();
    if (threadIdx.x == 0) span[blockIdx.x] = t1 - t0;
    if (acc == 0x7fffffffu) sink[0] = acc;
}
"""
ROWS = 1024
LINES = 32768          # the region: 4 MiB of 128-byte lines
MULT = 40503           # odd: row r lane l -> line (32 r + l) x MULT mod LINES is a bijection
LOADS = 16             # loads a warp a round
CTAS = 132
WARPS = 4
SHARE = (132, 44, 12, 4, 1)     # SMs on a row at once
PLACES = {"s0": (0, 0), "rot": (4, 1)}
ITERS = 256            # 4 sweeps of the table by every warp
LAUNCHES = 5
SIM_ROUNDS = (8, 24)


def row_lines(row):
    """The lines of row(s) ``row``, shape (..., 32): ``(32 row + lane) x MULT mod LINES``."""
    import numpy as np

    row = np.asarray(row, dtype=np.int64)
    return ((row[..., None] * 32 + np.arange(32)) * MULT) % LINES


def starts(k: int, ctas: int = CTAS, warps: int = WARPS, rows: int = ROWS):
    """Each warp's first row, shape (CTAs, warps), for ``k`` SMs a row at once: CTA ``c`` in
    cohort ``c mod (ctas / k)``; warp ``w`` of cohort ``j`` starts at row
    ``(w x cohorts + j) x rows / (warps x cohorts)`` (rounded down)."""
    import numpy as np

    if ctas % k:
        raise ValueError(f"k={k}: a divisor of the {ctas} CTAs expected")
    coh = ctas // k
    c = np.arange(ctas)[:, None]
    w = np.arange(warps)[None, :]
    return (w * coh + c % coh) * rows // (warps * coh)


def group_load(groups) -> dict:
    """Requests a round on each group of the map: every warp's 16 loads of a round are 16 rows,
    and over the rounds every warp sweeps all rows, so each group gets ``(CTAs x warps x 16 /
    ROWS)`` times its requests over one sweep (:func:`measurements.l2_group_rate._count_groups`
    of the rows)."""
    from measurements.l2_group_rate import _count_groups

    per_sweep = _count_groups(row_lines(range(ROWS)), groups)
    scale = CTAS * WARPS * LOADS / ROWS
    return {"max": per_sweep["max"] * scale, "mean": per_sweep["mean"] * scale,
            "groups": per_sweep["groups"], "span": per_sweep["span"]}


def measure(out: str, argv: list) -> dict:
    import json

    import cupy as cp
    import numpy as np

    from measurements.l2_slice_map import LINES as MAP_LINES
    from measurements.l2_slice_map import mapped_region

    assert MAP_LINES == LINES
    reg = mapped_region(argv)
    prov, clocks, groups = reg["prov"], reg["clocks"], reg["groups"]
    buf, sink, pairs, wrong = reg["buf"], reg["sink"], reg["pairs"], reg["wrong"]
    sweep = cp.RawModule(code=SOURCE, options=("-std=c++17",)).get_function("sweep")
    span = cp.zeros(CTAS, dtype=cp.int64)
    arrive = cp.zeros(1, dtype=cp.uint32)
    late = cp.zeros(1, dtype=cp.uint32)
    load = group_load(groups)
    runs = {}
    for place, (sector, word) in PLACES.items():
        for k in SHARE:
            st = cp.asarray(starts(k).reshape(-1).astype(np.int32))
            reps = []
            for _ in range(LAUNCHES):
                arrive.fill(0)
                sweep((CTAS,), (32 * WARPS,), (buf, st, np.int32(ITERS), span, sink,
                                               np.int32(sector), np.int32(word), arrive, late))
                cp.cuda.Device().synchronize()
                reps.append((cp.asnumpy(span) / ITERS).round(2).tolist())
            per = [float(np.median(r)) for r in reps]
            name = f"k{k}_{place}"
            runs[name] = {"k": k, "place": place, "sector": sector, "word": word,
                          "cycles_per_round_per_cta": reps, "cycles_per_round_per_sm": per}
            med = float(np.median(per))
            print(f"{name:9s} {med:8.1f} cycles a round; {med / (LOADS * 32 * WARPS):.3f} "
                  f"cycles a request per SM; {med / load['max']:.3f} a request of the busiest "
                  f"group", flush=True)
    clocks.stop(prov)
    rec = {"format_version": 1, "provenance": prov, "ctas": CTAS, "warps": WARPS,
           "iters": ITERS, "launches": LAUNCHES, "rows": ROWS, "lines": LINES, "mult": MULT,
           "map_check": {"pairs": len(pairs), "wrong": wrong},
           "start_late": int(late.get()[0]), "load": load, "runs": runs}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "l2_sweep_share.json"), "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def sweep_ir(k: int, rounds: int, sector: int, word: int, ctas: int = CTAS,
             warps: int = WARPS, rows: int = ROWS):
    """The ``sweep`` kernel in the IR, for the simulator (without the grid-wide start: the
    simulator starts every CTA at once): the same rows, lines, places and rolled loop of 16
    relaxed loads then their sum; values summed and checked. ``rows`` (a power of two up to
    ``ROWS``): a table of the first ``rows`` rows."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    st = starts(k, ctas, warps, rows)
    b = Builder("mb_l2_sweep", grid=ctas, block=32 * warps, bench="l2_sweep", rounds=rounds)
    g_t = b.global_buffer("table", F32, LINES * 32)
    g_s = b.global_buffer("start", I32, ctas * warps)
    g_out = b.global_buffer("out", F32, ctas * 32 * warps, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    r0 = b.imad(cta, warps, warp, dst=b.reg(I32, "r0"))
    b.ldg(g_s, r0, dst=r0)
    off = b.reg(I32, "off", 4)
    for s in range(4):
        if sector < 4:
            b.mov(8 * sector, dst=off[s])
        else:
            b.iadd(warp, s, dst=off[s])
            b.and_(off[s], 3, dst=off[s])
            b.shl(off[s], 3, dst=off[s])
        if word:
            b.iadd(off[s], b.and_(lane, 7, dst=b.reg(I32, f"w{s}")), dst=off[s])
    acc = b.mov(0.0, dst=b.reg(F32, "acc"))
    val = b.reg(F32, "val", LOADS)
    idx = b.reg(I32, "idx", LOADS)
    with b.loop("r", 0, rounds) as r:
        base = b.imad(r, LOADS, r0, dst=b.reg(I32, "base"))
        for s in range(LOADS):
            b.iadd(base, s, dst=idx[s])
            b.and_(idx[s], rows - 1, dst=idx[s])
            b.imad(idx[s], 32, lane, dst=idx[s])
            b.imul(idx[s], MULT, dst=idx[s])
            b.and_(idx[s], LINES - 1, dst=idx[s])
            b.imad(idx[s], 32, off[s % 4], dst=idx[s])
            b.ldg_volatile(g_t, idx[s], dst=val[s])
        for s in range(LOADS):
            b.fadd(acc, val[s], dst=acc)
    b.stg(g_out, b.imad(cta, 32 * warps, tid, dst=b.reg(I32, "gt")), acc)
    kernel = verify(b.build())
    t = (np.arange(LINES * 32) % 7).astype(np.float32)
    lanes = np.arange(32)
    expect = np.zeros((ctas, warps, 32), np.float32)
    for c in range(ctas):
        for w in range(warps):
            for i in range(rounds):
                for s in range(LOADS):
                    sec = sector if sector < 4 else (s + w) % 4
                    ln = row_lines((st[c, w] + LOADS * i + s) % rows)
                    expect[c, w] += t[ln * 32 + 8 * sec + (lanes % 8 if word else 0)]
    return Microbench("l2_sweep", kernel,
                      {"table": t, "start": st.reshape(-1).astype(np.int32),
                       "out": np.zeros(ctas * 32 * warps, np.float32)},
                      rounds, f"one round: {LOADS} relaxed loads by every warp",
                      {"rounds": rounds, "k": k},
                      lambda g: bool(np.allclose(np.asarray(g["out"]), expect.reshape(-1))))


def simulated(spec, k: int, sector: int, word: int, rows: int = ROWS) -> float:
    """The simulator's cycles a round and SM of a run (slope over :data:`SIM_ROUNDS`)."""
    from measurements.probe import simulate_checked

    cyc = [simulate_checked(sweep_ir(k, n, sector, word, rows=rows), spec, l2_warm=True).cycles
           for n in SIM_ROUNDS]
    return (cyc[1] - cyc[0]) / (SIM_ROUNDS[1] - SIM_ROUNDS[0])


def simulate_into(path: str) -> dict:
    """Add the simulator's cycles a round (the measured GPU's spec) to every run (a run's
    ``rows``, where it has them: ``l2_sweep_reuse.py``'s tables)."""
    from measurements.probe import simulate_runs

    return simulate_runs(path, lambda spec, name, run, ctx: {"simulated": simulated(
        spec, run["k"], run["sector"], run["word"], run.get("rows", ROWS))})


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure, simulate_into)


if __name__ == "__main__":
    sys.exit(main())
