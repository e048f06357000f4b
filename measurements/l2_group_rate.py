"""What one L2 contention group serves a cycle, by how many SMs share its lines and how many of
its lines are in use: lockstep loads of 132 CTAs on lines of G groups, one device call.

    PYTHONPATH=. python3 measurements/l2_group_rate.py --out $OUT      # GPU: l2_group_rate.json
    python measurements/l2_group_rate.py --simulate measurements/h200/l2_group_rate.json.xz

Why: the simulator prices a group's request at 0.49-0.58 cycles (by the SMs that share the line)
times ``1 + 0.1 log2(q)`` (the groups a warp load spans), rates measured by lockstep loads of few
lines that many SMs share (``l2_slice_map.py``: the hammer sets, the split and queues runs). The
H200's L1-bypassing gathers over 32 lines (``l2_gather_sweep.json``) are served faster than that
allows: 1.08-1.18 cycles a line and SM, 117 requests a cycle over the 47 groups, 0.40 cycles a
request a group at most, where the rules say 0.84. Which property of the traffic changes a
group's rate is what this probe isolates, holding the load on each group fixed. Two kernels:

``hammer`` (``l2_slice_map.py``'s, with ``nset`` = 32 x warps: a line per lane and warp; 4 loads
back to back a round, lane ``l`` at word ``l % 8`` of sector ``(load + warp) % 4``):

- ``hot``: every CTA and warp loads the same 32 lines (32 / G in each of G groups), 132 SMs a
  line, 32 lines a group at most (the hammer sets of ``l2_slice_map.py``);
- ``spread``: the (CTA, warp, lane) slots are dealt round-robin over G groups (slot ``s`` in
  group ``s % G``, so a warp load spans min(G, 32) groups) and over all the group's lines in the
  4 MiB region (about 700), so every line of the group is in use and few SMs share a line (1.5
  at G = 16 and 4 warps, more where the slots outnumber the lines);
- ``lines32``, ``lines128``: as ``spread`` over the first 32 or 128 of each group's lines: more
  SMs a line, fewer lines in use (the number of lines and of SMs a line move together here: a
  warp's lanes must stay on distinct lines, or they merge into one request);
- each at G = 1, 4, 16 and 4 or 16 warps a CTA, ``spread`` also at G = 47 (every group); and
  ``consec`` / ``random``: each warp 32 consecutive / random lines of the gathers' 1 MiB.

``rate4`` (:data:`SOURCE`): each of a warp's 4 loads a round over its own 32 lines, every lane in
one sector (0-3) or the sectors rotating from load to load, at word 0 or ``lane % 8``
(:data:`PLACES`); lines at random in 1 MiB (``rand4``), the same 32 for the 4 loads (``same1``),
32 consecutive (``consec4``) or 4 in each of 8 groups (``g8``, the groups bind); ``rand4`` also
on 16 and 66 SMs (:data:`FEW_CTAS`), where the L2 does not bind and the SM's own request rate
shows.

Per run: the median over CTAs of each CTA's ``clock64`` span a warp load (hammer) or a round
(rate4), 256 rounds, 5 launches; the requests a round on each group (:func:`group_load`,
:func:`rate4_load`), so cycles a request of the busiest group = that / its requests. On a fresh
2 MiB-aligned region after a check of the H200 map there (200 pairs). The record keeps each run's
lines as a SHA-1; :func:`all_sets` regenerates them from the seeds.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SOURCE = r"""
extern "C" __global__ void rate4(const unsigned* __restrict__ buf, const int* __restrict__ set,
                                 int iters, long long* __restrict__ span,
                                 unsigned* __restrict__ sink, int nset, int sector,
                                 int word)
{
    // slot = (CTA, thread); load s of a round reads line set[(s * gridDim.x + CTA) * nset + tid]
    // (nset = threads a CTA), in sector `sector` (0-3) or (s + warp) % 4 (sector = 4), at word
    // lane % 8 (word = 1) or 0 of the sector
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const unsigned* p[4];
    for (int s = 0; s < 4; ++s) {
        int off = (sector < 4 ? sector : ((s + w) & 3)) * 8 + (word ? (lane & 7) : 0);
        p[s] = buf + (size_t)set[((size_t)s * gridDim.x + blockIdx.x) * nset + threadIdx.x] * 32
               + off;
    }
    unsigned acc = 0;
    __syncthreads();
    long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
        unsigned a, b, c, d;
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(a) : "l"(p[0]) : "memory");
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(b) : "l"(p[1]) : "memory");
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(c) : "l"(p[2]) : "memory");
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(d) : "l"(p[3]) : "memory");
        acc += a + b + c + d;
    }
    __syncthreads();
    long long t1 = clock64();
    if (threadIdx.x == 0) span[blockIdx.x] = t1 - t0;
    if (acc == 0x7fffffffu) sink[0] = acc;
}
"""
RATE4_WARPS = (4, 16)
# (sector, word) of the rate4 runs: sector 0-3 or 4 = (load + warp) % 4; word 0 or lane % 8
PLACES = {"s0": (0, 0), "s1": (1, 0), "s2": (2, 0), "s3": (3, 0), "srot": (4, 0),
          "s0_lanew": (0, 1), "rot": (4, 1)}
RATE4_GROUPS = 8       # the group-bound runs: lines of 8 groups
FEW_CTAS = (16, 66)    # rand4 again on fewer SMs
GROUPS = (1, 4, 16)
WARPS = (4, 16)
MODES = {"hot": 0, "lines32": 32, "lines128": 128, "spread": None}   # lines a group in use
ITERS = 256
LAUNCHES = 5
CTAS = 132
SEED = 11


def run_sets(groups, seed: int = SEED) -> dict:
    """Every run's assignment: ``{name: {"mode", "g", "warps", "sets"}}``, ``sets`` of shape
    (CTA sets, 32 x warps) line indices (``hot``: one set of 32)."""
    import numpy as np

    groups = np.asarray(groups)
    rng = np.random.default_rng(seed)
    by = [rng.permutation(np.flatnonzero(groups == g)) for g in range(int(groups.max()) + 1)]
    runs = {}
    pick = {g_n: [int(x) for x in rng.choice(len(by), g_n, replace=False)]
            for g_n in GROUPS + (len(by),)}
    for warps in WARPS:
        for g_n in GROUPS + (len(by),):
            gs = pick[g_n]
            for mode in MODES:
                limit = MODES[mode]
                if (g_n == len(by) and mode != "spread") or (limit and limit <= 32 // g_n):
                    continue
                if mode == "hot":
                    per = 32 // g_n
                    sets = [[int(by[gs[lane % g_n]][lane // g_n]) for lane in range(32)]]
                else:
                    slots = CTAS * 32 * warps
                    used = [0] * g_n
                    flat = []
                    for s in range(slots):     # slot s = (CTA, warp, lane): group s % G
                        gi = s % g_n
                        lines = by[gs[gi]][:limit]
                        flat.append(int(lines[used[gi] % len(lines)]))
                        used[gi] += 1
                    sets = np.asarray(flat).reshape(CTAS, 32 * warps).tolist()
                    per = None
                arr = np.asarray(sets)
                runs[f"{mode}_g{g_n}_w{warps}"] = {
                    "mode": mode, "g": g_n, "warps": warps, "groups": gs, "sets": sets,
                    "lines_per_group": per if per is not None else -(-len(np.unique(arr)) // g_n),
                    "sms_per_line": _sms_per_line(arr)}
    span_lines = 8192                          # the gathers' 1 MiB
    for warps in WARPS:
        n = CTAS * warps
        starts = rng.integers(0, span_lines - 32, n)
        consec = (starts[:, None] + np.arange(32)[None, :]).reshape(CTAS, 32 * warps)
        rand = np.stack([rng.choice(span_lines, 32, replace=False) for _ in range(n)])
        for mode, arr in (("consec", consec), ("random", rand.reshape(CTAS, 32 * warps))):
            runs[f"{mode}_w{warps}"] = {"mode": mode, "g": None, "warps": warps,
                                        "groups": None, "sets": arr.tolist(),
                                        "lines_per_group": None,
                                        "sms_per_line": _sms_per_line(arr)}
    return runs


def rate4_sets(groups, seed: int = SEED + 1) -> dict:
    """The ``rate4`` runs: every (load, CTA, thread) slot a line, shape (4, CTAs, 32 x warps),
    each pattern at every place of :data:`PLACES`:

    - ``rand4``: each of a warp's 4 loads over its own 32 random lines of the gathers' 1 MiB;
    - ``same1``: the 4 loads over the same 32 (the hammer's pattern);
    - ``consec4``: each load over 32 consecutive lines from a random start (``gather_l2_32``);
    - ``g8``: each load over 32 random lines of :data:`RATE4_GROUPS` groups (lane ``l`` in
      group ``l % 8``, 4 lines a group), so the groups bind and their rate shows.

    ``rand4`` and ``g8`` at every place, the others at ``s0`` and ``rot`` only."""
    import numpy as np

    groups = np.asarray(groups)
    rng = np.random.default_rng(seed)
    span_lines = 8192
    runs = {}
    gs = [int(x) for x in rng.choice(int(groups.max()) + 1, RATE4_GROUPS, replace=False)]
    by = [np.flatnonzero(groups == g) for g in gs]
    for warps in RATE4_WARPS:
        n = 4 * CTAS * warps
        rand = np.stack([rng.choice(span_lines, 32, replace=False) for _ in range(n)])
        rand = rand.reshape(4, CTAS, 32 * warps)
        same = np.broadcast_to(rand[:1], rand.shape)
        starts = rng.integers(0, span_lines - 32, n)
        consec = (starts[:, None] + np.arange(32)[None, :]).reshape(4, CTAS, 32 * warps)
        per = 32 // RATE4_GROUPS          # lane l: line l // 8 of those drawn in group l % 8
        g8 = np.stack([np.stack([rng.choice(by[i], per, replace=False)
                                 for i in range(RATE4_GROUPS)]).T.reshape(-1)
                       for _ in range(n)]).reshape(4, CTAS, 32 * warps)
        for mode, arr in (("rand4", rand), ("same1", same), ("consec4", consec), ("g8", g8)):
            for place, (sector, word) in PLACES.items():
                if mode in ("same1", "consec4") and place not in ("s0", "rot"):
                    continue
                runs[f"{mode}_{place}_w{warps}"] = {
                    "mode": mode, "place": place, "sector": sector, "word": word,
                    "warps": warps, "ctas": CTAS, "sets": arr}
        for ctas in FEW_CTAS:      # fewer SMs: is the rotating sectors' cost the SM's own?
            for place in ("s0", "rot"):
                sector, word = PLACES[place]
                runs[f"rand4_{place}_w{warps}_c{ctas}"] = {
                    "mode": "rand4", "place": place, "sector": sector, "word": word,
                    "warps": warps, "ctas": ctas,
                    "sets": rand.reshape(4 * CTAS, -1)[:4 * ctas].reshape(4, ctas, -1)}
    return runs


def _count_groups(warp_loads, groups) -> dict:
    """Requests on each group of the map from ``warp_loads`` (each the 32 lanes' lines of one
    warp load; lanes on one line are one request): ``{"max", "mean", "groups", "span"}``: the
    busiest group's and the mean over the groups in use, how many are in use, and the mean
    number of groups a warp load spans."""
    import numpy as np

    groups = np.asarray(groups)
    counts = np.zeros(int(groups.max()) + 1)
    spans = []
    for lanes in warp_loads:
        g = groups[np.unique(lanes) % groups.size]
        np.add.at(counts, g, 1)
        spans.append(len(np.unique(g)))
    used = counts[counts > 0]
    return {"max": float(used.max()), "mean": float(used.mean()), "groups": int(used.size),
            "span": float(np.mean(spans))}


def rate4_load(sets, groups) -> dict:
    """:func:`group_load` of a ``rate4`` run's lines ``sets`` (shape (4, CTAs, 32 x warps)):
    requests a round (a warp's 4 loads) per group."""
    import numpy as np

    return _count_groups(np.asarray(sets).reshape(-1, 32), groups)


def _sms_per_line(arr) -> float:
    """Mean number of CTAs that load each line in use (CTA ``c`` loads row ``c % rows``)."""
    import numpy as np

    arr = np.asarray(arr)
    rows = [np.unique(arr[c % len(arr)]) for c in range(CTAS)]
    n = np.bincount(np.concatenate(rows))
    return round(float(n[n > 0].mean()), 2)


def group_load(run: dict, groups) -> dict:
    """Requests a round on each group of the map of a hammer run (a warp load of every warp;
    CTA ``c`` loads row ``c % rows`` of its sets): :func:`_count_groups`."""
    import numpy as np

    arr = np.asarray(run["sets"])
    w = run["warps"]

    def loads():
        for c in range(CTAS):
            row = arr[c % len(arr)]
            for wi in range(w):
                yield row[:32] if row.size == 32 else row[32 * wi:32 * wi + 32]
    return _count_groups(loads(), groups)


def measure(out: str, argv: list) -> dict:
    import hashlib
    import json

    import cupy as cp
    import numpy as np

    from measurements.l2_slice_map import mapped_region

    reg = mapped_region(argv)
    prov, clocks, groups = reg["prov"], reg["clocks"], reg["groups"]
    buf, sink, pairs, wrong = reg["buf"], reg["sink"], reg["pairs"], reg["wrong"]
    hammer = reg["module"].get_function("hammer")
    runs = run_sets(groups)
    span = cp.zeros(CTAS, dtype=cp.int64)
    for name, run in runs.items():
        sets = np.asarray(run["sets"], dtype=np.int32)
        run["load"] = group_load(run, groups)
        del run["sets"]
        run["lines_sha1"] = hashlib.sha1(sets.tobytes()).hexdigest()
        sdev = cp.asarray(sets.reshape(-1))
        reps = []
        for _ in range(LAUNCHES):
            hammer((CTAS,), (32 * run["warps"],), (buf, sdev, np.int32(ITERS), span, sink,
                                                   np.int32(sets.shape[1]),
                                                   np.int32(sets.shape[0])))
            cp.cuda.Device().synchronize()
            reps.append((cp.asnumpy(span) / ITERS / 4).round(2).tolist())
        per_launch = [float(np.median(r)) for r in reps]
        run["cycles_per_load_per_cta"] = reps
        run["cycles_per_load_per_sm"] = per_launch
        med = float(np.median(per_launch))
        load = run["load"]
        print(f"{name:18s} {med:9.1f} cycles a warp load; busiest group {load['max']:7.0f} "
              f"requests a round: {med / load['max']:.3f} cycles a request; "
              f"{med / (32 * run['warps']):.3f} cycles a request and SM", flush=True)
    r4mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    rate4 = r4mod.get_function("rate4")
    r4 = rate4_sets(groups)
    for name, run in r4.items():
        sets = np.asarray(run.pop("sets"), dtype=np.int32)
        run["lines_sha1"] = hashlib.sha1(sets.tobytes()).hexdigest()
        sdev = cp.asarray(sets.reshape(-1))
        reps = []
        for _ in range(LAUNCHES):
            rate4((run["ctas"],), (32 * run["warps"],), (buf, sdev, np.int32(ITERS), span, sink,
                                                  np.int32(sets.shape[2]),
                                                  np.int32(run["sector"]), np.int32(run["word"])))
            cp.cuda.Device().synchronize()
            reps.append((cp.asnumpy(span[:run["ctas"]]) / ITERS).round(2).tolist())
        per_launch = [float(np.median(r)) for r in reps]
        run["cycles_per_round_per_cta"] = reps
        run["cycles_per_round_per_sm"] = per_launch
        med = float(np.median(per_launch))
        run["load"] = load = rate4_load(sets, groups)
        print(f"{name:18s} {med:9.1f} cycles a round (4 warp loads); busiest group "
              f"{load['max']:7.0f} requests a round: {med / load['max']:.3f} cycles a request; "
              f"{med / (4 * 32 * run['warps']):.3f} cycles a request and SM", flush=True)
    clocks.stop(prov)
    rec = {"format_version": 1, "provenance": prov, "iters": ITERS, "launches": LAUNCHES,
           "ctas": CTAS, "seed": SEED, "map_check": {"pairs": len(pairs), "wrong": wrong},
           "runs": runs, "rate4_runs": r4}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "l2_group_rate.json"), "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def rate4_ir(sets, rounds: int, sector: int, word: int, warps: int, unroll: int = 1):
    """The ``rate4`` kernel in the IR, for the simulator: ``sets`` of shape (4, CTAs, 32 x
    warps); load ``s`` of each round of thread ``t`` of CTA ``c`` reads line ``sets[s, c, t]``
    in sector ``sector`` (4: ``(s + warp) % 4``; an array of the shape of ``sets``: each slot's
    own sector, read from the set buffer after the lines, as ``l2_sector_mix.py``'s kernel does)
    at word ``lane % 8`` (``word``) or 0; values summed and checked. ``unroll`` > 1 issues that
    many rounds' loads into their own registers before their sums, as nvcc compiles the CUDA
    kernel (its PTX holds 20 relaxed loads: the loop unrolled 4 times and a remainder), so a
    warp keeps 16 loads in flight; ``rounds`` must then be a multiple of it."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify
    from measurements.l2_slice_map import four_loads_summed

    sets = np.asarray(sets, dtype=np.int64)
    _, ctas, nset = sets.shape
    if nset != 32 * warps:
        raise ValueError(f"sets: {32 * warps} lines a CTA expected, got {nset}")
    n_lines = int(sets.max()) + 1
    per_slot = not np.isscalar(sector)
    if per_slot:
        sector = np.asarray(sector, dtype=np.int64)
        if sector.shape != sets.shape or sector.min() < 0 or sector.max() > 3:
            raise ValueError(f"sector: an array of sectors 0-3 of shape {sets.shape} expected")
    b = Builder("mb_l2_rate4", grid=ctas, block=nset, bench="l2_rate4", rounds=rounds)
    g_t = b.global_buffer("table", F32, n_lines * 32)
    g_s = b.global_buffer("set", I32, sets.size * (2 if per_slot else 1))
    g_out = b.global_buffer("out", F32, ctas * nset, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    wd = b.and_(lane, 7 if word else 0, dst=b.reg(I32, "wd"))
    idx = b.reg(I32, "idx", 4)
    for s_ in range(4):
        b.imad(cta, nset, tid, dst=idx[s_])
        b.iadd(idx[s_], s_ * ctas * nset, dst=idx[s_])
        b.ldg(g_s, idx[s_], dst=idx[s_])
        b.imad(idx[s_], 32, wd, dst=idx[s_])
        if per_slot:                       # + 8 * set[4 CTAs nset + slot]
            sec = b.imad(cta, nset, tid, dst=b.reg(I32, f"sec{s_}"))
            b.iadd(sec, (4 + s_) * ctas * nset, dst=sec)
            b.ldg(g_s, sec, dst=sec)
            b.imad(sec, 8, idx[s_], dst=idx[s_])
        elif sector < 4:
            b.iadd(idx[s_], 8 * sector, dst=idx[s_])
        else:                              # + 8 * ((s + warp) % 4)
            sec = b.iadd(warp, s_, dst=b.reg(I32, f"sec{s_}"))
            b.and_(sec, 3, dst=sec)
            b.imad(sec, 8, idx[s_], dst=idx[s_])
    if unroll == 1:
        four_loads_summed(b, g_t, idx, rounds, g_out,
                          lambda: b.imad(cta, nset, tid, dst=b.reg(I32, "gt")))
    else:
        if rounds % unroll:
            raise ValueError(f"rounds={rounds} is not a multiple of unroll={unroll}")
        acc = b.mov(0.0, dst=b.reg(F32, "acc"))
        val = b.reg(F32, "val", 4 * unroll)
        with b.loop("r", 0, rounds // unroll):
            for k in range(4 * unroll):
                b.ldg_volatile(g_t, idx[k % 4], dst=val[k])
            for k in range(4 * unroll):
                b.fadd(acc, val[k], dst=acc)
        b.stg(g_out, b.imad(cta, nset, tid, dst=b.reg(I32, "gt")), acc)
    kernel = verify(b.build())
    t = (np.arange(n_lines * 32) % 7).astype(np.float32)
    lanes = np.arange(nset) % 32
    warp_of = np.arange(nset) // 32
    expect = np.zeros((ctas, nset), np.float32)
    for s_ in range(4):
        sec = (sector[s_] if per_slot else sector if sector < 4 else (s_ + warp_of) % 4)
        expect += t[sets[s_] * 32 + (lanes % 8 if word else 0) + 8 * sec]
    expect = expect * rounds
    set_buf = sets.reshape(-1) if not per_slot else np.concatenate([sets.reshape(-1),
                                                                      sector.reshape(-1)])
    return Microbench("l2_rate4", kernel,
                      {"table": t, "set": set_buf.astype(np.int32),
                       "out": np.zeros(ctas * nset, np.float32)},
                      rounds, "one round: 4 relaxed loads by every warp",
                      {"rounds": rounds, "warps": warps, "ctas": ctas},
                      lambda g: bool(np.allclose(np.asarray(g["out"]), expect.reshape(-1))))


SIM_ROUNDS = (8, 24)
UNROLL = 4             # nvcc unrolls the CUDA rate4 loop 4 times (its PTX: 20 relaxed loads)


def simulated(spec, run: dict, sets) -> float:
    """The simulator's cycles of one run, in the record's unit: a warp load and SM for the
    hammer runs, a round (4 warp loads) and SM for the ``rate4`` runs (slope over
    :data:`SIM_ROUNDS`)."""
    import numpy as np

    from measurements.l2_slice_map import simulated_hammer

    if "place" not in run:
        return simulated_hammer(spec, np.asarray(sets), ctas=CTAS, warps=run["warps"])
    return rate4_simulated(spec, sets, run["sector"], run["word"], run["warps"])


def rate4_simulated(spec, sets, sector: int, word: int, warps: int, unroll: int = 1) -> float:
    """The simulator's cycles a round of :func:`rate4_ir` (slope over :data:`SIM_ROUNDS`)."""
    from measurements.probe import simulate_checked

    cyc = [simulate_checked(rate4_ir(sets, n, sector, word, warps, unroll), spec,
                            l2_warm=True).cycles for n in SIM_ROUNDS]
    return (cyc[1] - cyc[0]) / (SIM_ROUNDS[1] - SIM_ROUNDS[0])


SIM_RUNS = ("hot_g1_w4", "lines128_g1_w4", "spread_g1_w4", "hot_g4_w4", "lines32_g4_w4",
            "lines128_g4_w4", "spread_g4_w4", "hot_g16_w4", "lines32_g16_w4", "lines128_g16_w4",
            "spread_g16_w4", "spread_g47_w4", "consec_w4", "random_w4", "rand4_s0_w4",
            "rand4_rot_w4", "g8_s0_w4", "g8_rot_w4", "rand4_s0_w4_c66", "rand4_rot_w4_c66")


def all_sets(groups) -> dict:
    """Every run's lines, regenerated from the seeds (the record keeps their SHA-1 only)."""
    return {**{k: v["sets"] for k, v in run_sets(groups).items()},
            **{k: v["sets"] for k, v in rate4_sets(groups).items()}}


def checked_lines(arr, run: dict, name: str, what: str = "lines"):
    """``arr`` (a run's regenerated lines, or another of its tables ``what`` such as its
    sectors) as int32, after checking it against the SHA-1 the record keeps of it
    (``run[what + "_sha1"]``)."""
    import hashlib

    import numpy as np

    arr = np.asarray(arr, dtype=np.int32)
    if hashlib.sha1(arr.tobytes()).hexdigest() != run[f"{what}_sha1"]:
        raise ValueError(f"{name}: the regenerated {what} differ from those measured")
    return arr


def simulate_into(path: str, runs=SIM_RUNS, spec=None) -> dict:
    """Add the simulator's cycles (on the measured GPU's spec, or ``spec``) to the runs
    :data:`SIM_RUNS` of the record, the ``rate4`` runs also unrolled as nvcc compiles them
    (``simulated_unrolled``); each run's lines are regenerated and checked against the
    record's SHA-1."""
    import numpy as np

    from measurements.l2_slice_map import _load_map
    from measurements.probe import simulate_runs

    def price(spec, name, run, sets):
        arr = checked_lines(sets[name], run, name)
        out = {"simulated": simulated(spec, run, arr)}
        if "place" in run:     # the rate4 runs again, unrolled as nvcc unrolls the CUDA loop
            out["simulated_unrolled"] = rate4_simulated(spec, arr, run["sector"], run["word"],
                                                        run["warps"], UNROLL)
        return out

    return simulate_runs(path, price, names=list(runs), spec=spec,
                         table=lambda rec: {**rec["runs"], **rec["rate4_runs"]},
                         context=lambda rec: all_sets(np.asarray(
                             _load_map(rec["provenance"]["group_map"]))))


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure, simulate_into)


if __name__ == "__main__":
    sys.exit(main())
