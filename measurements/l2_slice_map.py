"""Which L2 slice holds which line: per-SM hit latencies of every line, and lockstep contention.

    PYTHONPATH=. python3 measurements/l2_slice_map.py --out $OUT     # GPU: l2_slice_map.json + .npz
    L2_SLICE_MERGE=1 PYTHONPATH=. python3 measurements/l2_slice_map.py --out $OUT   # merge runs
    L2_SLICE_SPLIT=1 L2_SLICE_MERGE=1 ... --out $OUT    # l2_slice_split.json: SMs split over sets
    L2_SLICE_GROUP_PAIRS=1 L2_SLICE_MERGE=1 ... --out $OUT   # l2_slice_group_pairs.json
    L2_SLICE_QUEUES=1 L2_SLICE_MERGE=1 ... --out $OUT        # l2_slice_queues.json
    python measurements/l2_slice_map.py --simulate-queues measurements/h100/l2_slice_queues.json
    python measurements/l2_slice_map.py --write-map measurements/h100/l2_slice_map.npz
    python measurements/l2_slice_map.py --simulate measurements/h100/l2_slice_map.json

Why: lockstep one-sector loads of all SMs on the same 16 KiB cost 2.5-3 times private ones
(``l2_shared.json``), and the cost depends on how far apart a load's lines lie, but not
monotonically (``l2_shared_stride.json``: 192 / 113 / 223 / 111 / 86 / 190 cycles at 1 / 2 / 4 /
8 / 16 / 64 lines apart). That is the signature of a few slices taking the whole GPU's requests
at once, under an undocumented address-to-slice map. The simulator's fold spreads any
contiguous region evenly. This probe recovers the map and measures a slice's rate on its own.

1. **Latency signatures** (``sig``): one thread per SM (132 CTAs) reads every line of a
   ``LINES``-line region (2 MiB-aligned, so its low 21 address bits are physical ones), with
   ``ld.global.cg`` (L2, not L1) after a warm pass, each load timed with ``clock64`` around a
   branch on its value; the SMs start at different lines (``SM_STAGGER`` apart) so that no two
   ask for one line at once. The minimum over ``REPS`` passes is kept per SM and line. The hit
   latency of a line depends on where its slice sits relative to the SM (near or far partition,
   and the distance on the die), so lines of one slice share one vector over the 132 SMs.
2. **Contention** (``hammer``): all 132 CTAs x 4 warps load the same 32 lines in lockstep, one
   sector per lane (lane ``l`` line ``set[l]``, word ``l % 8`` of sector ``(s + w) % 4`` in load
   ``s``; 4 loads back to back, ``ITERS`` rounds), for several line sets: the stride scan's
   (consecutive lines ``K`` apart from the region's start) and sets picked from the signature
   classes (all 32 lines in 1, 2, 4, 8, 16, 32 classes). If a class is a slice, the cost follows
   the most-loaded class, whatever the stride.

Cycles per round are each CTA's ``clock64`` span over the rounds (median over CTAs), per warp load
= that / 4. Written in CUDA here (the kernel IR has no clock or SM id): a probe, not a simulator
benchmark.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LINES = 32768          # 4 MiB: two 2 MiB pages
REPS = 3
SM_STAGGER = 257       # lines between the SMs' starting points
ITERS = 256
STRIDES = (1, 2, 4, 8, 16, 32, 64, 128)
GROUP_COUNTS = (1, 2, 4, 8, 16, 32)
PAIR_ITERS = 32
THRESHOLD = 490.0      # cycles a load between the pair scan's two levels (about 300 and 680)
CHECK_PAIRS = 4000
SOURCE = r"""
extern "C" __global__ void sig(const unsigned* __restrict__ buf, int lines, int reps,
                               int stagger, unsigned short* __restrict__ lat,
                               int* __restrict__ smids, unsigned* __restrict__ sink)
{
    if (threadIdx.x != 0) return;
    unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    smids[blockIdx.x] = (int)sm;
    unsigned v = 0, acc = 0;
    int start = (blockIdx.x * stagger) % lines;
    for (int i = 0; i < lines; ++i) {      // warm pass: every line into L2
        const unsigned* p = buf + (size_t)((start + i) % lines) * 32 + v;
        asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
        acc += v;
    }
    unsigned short* row = lat + (size_t)blockIdx.x * lines;
    for (int r = 0; r < reps; ++r) {
        for (int i = 0; i < lines; ++i) {
            int line = (start + i) % lines;
            const unsigned* p = buf + (size_t)line * 32 + (v & 7);
            long long t0 = clock64();
            asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
            if (v == 0x7fffffffu) sink[1] = line;    // waits for the value
            long long t1 = clock64();
            unsigned d = (unsigned)(t1 - t0);
            d = d > 65535u ? 65535u : d;
            if (r == 0 || d < row[line]) row[line] = (unsigned short)d;
            acc += v;
        }
    }
    if (acc == 0x7fffffffu) sink[0] = acc;
}

extern "C" __global__ void hammer(const unsigned* __restrict__ buf, const int* __restrict__ set,
                                  int iters, long long* __restrict__ span,
                                  unsigned* __restrict__ sink, int nset, int cta_sets)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int k = (blockIdx.x % cta_sets) * nset + (w * 32 + lane) % nset;
    const unsigned* p = buf + (size_t)set[k] * 32 + (lane & 7);
    unsigned acc = 0;
    __syncthreads();
    long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
        unsigned a, b, c, d;
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                     : "=r"(a) : "l"(p + ((0 + w) & 3) * 8) : "memory");
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                     : "=r"(b) : "l"(p + ((1 + w) & 3) * 8) : "memory");
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                     : "=r"(c) : "l"(p + ((2 + w) & 3) * 8) : "memory");
        asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                     : "=r"(d) : "l"(p + ((3 + w) & 3) * 8) : "memory");
        acc += a + b + c + d;
    }
    __syncthreads();
    long long t1 = clock64();
    if (threadIdx.x == 0) span[blockIdx.x] = t1 - t0;
    if (acc == 0x7fffffffu) sink[0] = acc;
}
"""


def line_sets(labels, seed: int = 0):
    """The hammered sets: the stride scan's, and 32 lines drawn from k groups (round-robin)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    sets = {f"stride{k}": [i * k for i in range(32)] for k in STRIDES}
    by = {k: np.flatnonzero(labels == k) for k in np.unique(labels)}
    big = [k for k, ix in by.items() if len(ix) >= 32]
    for n in GROUP_COUNTS:
        if len(big) < n:
            continue
        for t in range(2):
            ks = rng.choice(big, size=n, replace=False)
            picks = [int(rng.choice(by[ks[i % n]])) for i in range(32)]
            while len(set(picks)) < 32:
                picks = [int(rng.choice(by[ks[i % n]])) for i in range(32)]
            sets[f"groups{n}_{'ab'[t]}"] = picks
    for t in range(4):
        sets[f"random_{t}"] = [int(x) for x in rng.choice(len(labels), size=32, replace=False)]
    return sets


def pair_scan(hammer, buf, pairs, sink):
    """Cycles per warp load and SM with lanes 0-15 on line a and 16-31 on line b, every pair in
    its own launch (the CTAs start together), median over the CTAs."""
    import cupy as cp
    import numpy as np

    sets = cp.asarray(np.asarray([[a] * 16 + [b] * 16 for a, b in pairs], dtype=np.int32))
    span = cp.zeros((len(pairs), 132), dtype=cp.int64)
    for i in range(len(pairs)):
        hammer((132,), (128,), (buf, sets[i], np.int32(PAIR_ITERS), span[i], sink,
                                np.int32(32), np.int32(1)))
    cp.cuda.Device().synchronize()
    return np.median(cp.asnumpy(span), axis=1) / PAIR_ITERS / 4


MAX_GROUPS = 256       # a scan that finds more stops: the threshold does not split the levels


def group_map(hammer, buf, sink, lines: int, threshold: float):
    """Every line's contention group: take the lowest line not yet placed, pair it with every
    other line not yet placed, and put with it those whose pair costs more than ``threshold``
    cycles a load (the pair scan's two levels lie near 300 and 680 on the H100). Raises after
    :data:`MAX_GROUPS` groups (the threshold then does not separate the GPU's two levels; the
    first scan's cost percentiles are printed to choose another)."""
    import numpy as np

    labels = -np.ones(lines, dtype=np.int64)
    costs = np.zeros(lines)
    g = 0
    while (labels < 0).any():
        if g >= MAX_GROUPS:
            raise RuntimeError(f"more than {MAX_GROUPS} groups: threshold {threshold} cycles "
                               f"does not separate the pair costs")
        left = np.flatnonzero(labels < 0)
        r, rest = int(left[0]), left[1:]
        labels[r] = g
        if len(rest):
            cyc = pair_scan(hammer, buf, [(r, int(x)) for x in rest], sink)
            if g == 0:
                pct = np.percentile(cyc, [1, 10, 50, 90, 95, 99]).round(1).tolist()
                print(f"first scan: cycles a load percentiles 1/10/50/90/95/99 {pct}",
                      flush=True)
            hit = cyc > threshold
            labels[rest[hit]] = g
            costs[rest] = cyc
        print(f"group {g}: line {r}, {int((labels == g).sum())} lines, {len(rest)} tested",
              flush=True)
        g += 1
    return labels, costs


def merge_runs(hammer, buf, sink, groups, mode: str = "merge"):
    """Lockstep loads of one group's lines, cycles per warp load and SM (median of 5):

    - ``merge``: does one SM's traffic to one line count once at its group? 32 or 128 lines of
      one group (or of 2 / 32 groups), by 4 warps per CTA sharing 32 lines or each with 32 of
      its own, or by 1 or 2 warps per CTA;
    - ``split``: the CTAs split into m sets of 32 lines of one group (CTA ``c`` uses set
      ``c % m``): does the cost per request depend on how many SMs ask for one line?
    - ``group_pairs``: :func:`group_pairs`;
    - ``queues``: :func:`queue_sets`: the same load on every group, each warp load spread over
      ``q`` groups (1 to 16): does a warp load wait for the slowest of its groups' queues?"""
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(7)
    by = [np.flatnonzero(groups == g) for g in range(int(groups.max()) + 1)]
    one = [int(x) for x in rng.choice(by[0], 128, replace=False)]
    two = [int(x) for g in (1, 2) for x in rng.choice(by[g], 64, replace=False)]
    two = [two[(i % 2) * 64 + i // 2] for i in range(128)]          # alternate the groups
    spread = [int(rng.choice(by[g % 32])) for g in range(128)]      # 4 lines in each of 32
    if mode == "group_pairs":
        return group_pairs(hammer, buf, sink, by, rng)
    if mode == "queues":
        return queue_runs(hammer, buf, sink, by, rng)
    if mode == "split":
        if len(by[0]) < 32 * 24:
            raise RuntimeError(f"split mode needs {32 * 24} lines of one group; the map's group "
                               f"0 has {len(by[0])}")
        many = [int(x) for x in rng.choice(by[0], 32 * 24, replace=False)]
        cases = {f"one_split{m}_w4": (many[:32 * m], 4, m) for m in (1, 2, 4, 8, 16, 24)}
        cases.update({f"one_split{m}_w1": (many[:32 * m], 1, m) for m in (1, 4, 24)})
    else:      # (lines, warps per CTA, sets the CTAs split into)
        cases = {"one_shared_w4": (one[:32], 4, 1), "one_own_w4": (one, 4, 1),
                 "one_w1": (one[:32], 1, 1), "one_w2_shared": (one[:32], 2, 1),
                 "one_own_w2": (one[:64], 2, 1), "two_shared_w4": (two[:32], 4, 1),
                 "two_own_w4": (two, 4, 1), "spread_own_w4": (spread, 4, 1),
                 "spread_shared_w4": (spread[:32], 4, 1)}
    span = cp.zeros(132, dtype=cp.int64)
    res = {}
    for name, (lines, warps, ctas_sets) in cases.items():
        sdev = cp.asarray(np.asarray(lines, dtype=np.int32))
        reps = []
        for _ in range(5):
            hammer((132,), (32 * warps,), (buf, sdev, np.int32(ITERS), span, sink,
                                           np.int32(len(lines) // ctas_sets), np.int32(ctas_sets)))
            cp.cuda.Device().synchronize()
            reps.append(float(np.median(cp.asnumpy(span))) / ITERS / 4)
        res[name] = {"lines": lines, "warps": warps, "cta_sets": ctas_sets,
                     "cycles_per_load_per_sm": reps}
        print(f"{name:18s} {np.median(reps):8.1f} cycles a warp load and SM", flush=True)
    return res


QUEUE_CTAS = 128       # 16 groups x 8 CTAs: every group gets the same load at every q
QUEUE_SPREADS = (1, 2, 4, 8, 16)
QUEUE_WARPS = (2, 8)    # the load levels: q = 1 and 16 again at 512 and 2048 requests a group


def queue_sets(by, rng, q: int, groups_used=None) -> list[list[int]]:
    """``16 / q`` sets of 32 lines over 16 groups: set ``j`` holds ``32 / q`` distinct lines of each
    of the groups ``j q .. j q + q - 1`` (lane ``l``: group ``l % q``). CTA ``c`` hammers set
    ``c % (16 / q)``, so with :data:`QUEUE_CTAS` every group serves 8 CTAs x 4 warps x 32 = 1024
    one-sector requests a round, whatever ``q``; only the number of groups a warp load spans
    changes."""
    gs = groups_used if groups_used is not None else [int(g) for g in
                                                      rng.choice(len(by), 16, replace=False)]
    per = 32 // q
    sets = []
    for j in range(16 // q):
        picks = {g: [int(x) for x in rng.choice(by[g], per, replace=False)]
                 for g in gs[j * q:(j + 1) * q]}
        sets.append([picks[gs[j * q + lane % q]][lane // q] for lane in range(32)])
    return sets


def queue_runs(hammer, buf, sink, by, rng):
    """:func:`queue_sets` for q in :data:`QUEUE_SPREADS`, two draws of groups and lines each,
    :data:`QUEUE_CTAS` CTAs x 4 warps, 5 launches; then q = 1 and 16 with the warps of
    :data:`QUEUE_WARPS` (names ``q1_a_w2`` ...): per run every CTA's cycles a warp load."""
    import cupy as cp
    import numpy as np

    res = {}
    span = cp.zeros(QUEUE_CTAS, dtype=cp.int64)
    runs = [(draw, q, 4) for draw in "ab" for q in QUEUE_SPREADS]
    runs += [(draw, q, w) for w in QUEUE_WARPS for draw in "ab" for q in (1, 16)]
    gsets = {draw: [int(g) for g in rng.choice(len(by), 16, replace=False)] for draw in "ab"}
    sets_of: dict = {}
    for draw, q, warps in runs:
        if (draw, q) not in sets_of:
            sets_of[draw, q] = queue_sets(by, rng, q, gsets[draw])
        sets = sets_of[draw, q]
        sdev = cp.asarray(np.asarray([x for st in sets for x in st], dtype=np.int32))
        reps = []
        for _ in range(5):
            hammer((QUEUE_CTAS,), (32 * warps,), (buf, sdev, np.int32(ITERS), span, sink,
                                                  np.int32(32), np.int32(len(sets))))
            cp.cuda.Device().synchronize()
            reps.append((cp.asnumpy(span) / ITERS / 4).round(2).tolist())
        med = float(np.median(np.median(np.asarray(reps), axis=0)))
        name = f"q{q}_{draw}" + ("" if warps == 4 else f"_w{warps}")
        requests = 8 * warps * 32
        res[name] = {"q": q, "warps": warps, "groups": gsets[draw], "sets": sets,
                     "requests_per_group": requests, "cycles_per_load_per_cta": reps,
                     "cycles_per_load_per_sm": [float(np.median(r)) for r in reps]}
        print(f"{name}: {med:8.1f} cycles a warp load and SM ({requests} requests a group a "
              f"round: {med / requests:.3f} cycles a request)", flush=True)
    return res


def group_pairs(hammer, buf, sink, by, rng):
    """Every pair of groups (a, b): 16 lines of each, alternating over the lanes, 4 warps
    sharing them, 32 rounds a launch: do two busy groups slow each other down? Returns
    {"pairs": [[a, b], ...], "cycles_per_load_per_sm": [...]} (median over the CTAs)."""
    import cupy as cp
    import numpy as np

    lines = {g: [int(x) for x in rng.choice(ix, 16, replace=False)] for g, ix in enumerate(by)}
    pairs = [(a, b) for a in range(len(by)) for b in range(a + 1, len(by))]
    sets = cp.asarray(np.asarray([[lines[(a, b)[i % 2]][i // 2] for i in range(32)]
                                  for a, b in pairs], dtype=np.int32))
    span = cp.zeros((len(pairs), 132), dtype=cp.int64)
    for _ in range(2):                      # the second pass is the one kept (warm)
        for i in range(len(pairs)):
            hammer((132,), (128,), (buf, sets[i], np.int32(PAIR_ITERS), span[i], sink,
                                    np.int32(32), np.int32(1)))
        cp.cuda.Device().synchronize()
    cyc = np.median(cp.asnumpy(span), axis=1) / PAIR_ITERS / 4
    print(f"group pairs: {len(pairs)}; cycles a load percentiles 1/10/50/90/99 "
          f"{np.percentile(cyc, [1, 10, 50, 90, 99]).round(0).tolist()}", flush=True)
    return {"pairs": [list(p) for p in pairs], "lines": {str(g): v for g, v in lines.items()},
            "cycles_per_load_per_sm": cyc.round(2).tolist()}


def _region():
    """A 2 MiB-aligned ``LINES``-line region of zeros (words), a sink, and the probe's compiled
    module: ``(raw, buf, sink, module)``; ``raw`` owns the memory ``buf`` views."""
    import cupy as cp

    page = 2 << 20
    raw = cp.zeros(LINES * 128 + page, dtype=cp.uint8)
    off = (-raw.data.ptr) % page
    buf = raw[off:off + LINES * 128].view(cp.uint32)
    sink = cp.zeros(4, dtype=cp.uint32)
    return raw, buf, sink, cp.RawModule(code=SOURCE, options=("-std=c++17",))


def _load_map(name: str):
    """A map file by name beside the specs, or by path (a map just measured, not yet there)."""
    import json

    from gpusim.specs import load_group_map
    if os.path.sep in name and os.path.exists(name):
        with open(name) as f:
            return json.load(f)["map"]
    return load_group_map(name)


FOLLOW_UPS = {"merge": "l2_slice_merge.json", "split": "l2_slice_split.json",
              "group_pairs": "l2_slice_group_pairs.json", "queues": "l2_slice_queues.json"}


def check_pairs(groups, n: int, seed: int = 3) -> list:
    """Pairs of lines to check a map on a fresh region with: ``n`` pairs in one group, then
    ``n`` random pairs."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = len(groups)
    same = []
    while len(same) < n:
        a = int(rng.integers(lines))
        same.append((a, int(rng.choice(np.flatnonzero((groups == groups[a])
                                                      & (np.arange(lines) != a))))))
    return same + [tuple(int(v) for v in rng.choice(lines, 2, replace=False)) for _ in range(n)]


def mapped_region(argv: list) -> dict:
    """The common start of a probe on the GPU's own map: the provenance (with the map's file),
    a running :class:`measurements.probe.ClockSampler`, the map, a fresh region
    (:func:`_region`) and the map checked there (:func:`map_check`, 100 pairs of each kind):
    ``{"prov", "clocks", "groups", "buf", "sink", "module", "raw", "pairs", "wrong"}``."""
    import numpy as np

    from gpusim.measurements import spec_name_for_gpu
    from gpusim.specs import load_spec
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler

    prov = provenance(argv)
    clocks = ClockSampler()
    map_file = load_spec(spec_name_for_gpu(prov["gpu_name"])).l2_group_map
    prov["group_map"] = map_file
    groups = np.asarray(_load_map(map_file))
    raw, buf, sink, mod = _region()
    pairs, wrong = map_check(mod.get_function("hammer"), buf, sink, groups, 100)
    return {"prov": prov, "clocks": clocks, "groups": groups, "buf": buf, "sink": sink,
            "module": mod, "raw": raw, "pairs": pairs, "wrong": wrong}


def map_check(hammer, buf, sink, groups, n: int) -> tuple[list, int]:
    """The map checked on a fresh region: :func:`check_pairs` scanned, ``(pairs, wrong)``, the
    number whose cost falls on the other side of :data:`THRESHOLD` than the map says."""
    import numpy as np

    pairs = check_pairs(groups, n)
    cyc = pair_scan(hammer, buf, pairs, sink)
    pred = np.asarray([groups[a] == groups[b] for a, b in pairs])
    wrong = int(((cyc > THRESHOLD) != pred).sum())
    print(f"map check on a fresh region: {len(pairs)} pairs, {wrong} predicted wrongly", flush=True)
    return pairs, wrong


def measure_merge(out: str, argv: list, mode: str = "merge") -> dict:
    """The follow-up runs of ``mode`` (:func:`merge_runs`) on a fresh 2 MiB-aligned region, after
    checking the recorded map there (400 pairs): the record :data:`FOLLOW_UPS` names."""
    import json

    import numpy as np

    from gpusim.measurements import spec_name_for_gpu
    from gpusim.specs import load_spec
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler

    prov = provenance(argv)
    clocks = ClockSampler()
    # the map to check and use: L2_SLICE_GROUPS (a name beside the specs or a path), by default
    # the one the measured GPU's spec names
    map_file = os.environ.get("L2_SLICE_GROUPS") or load_spec(
        spec_name_for_gpu(prov["gpu_name"])).l2_group_map
    prov["group_map"] = os.path.basename(map_file)
    groups = np.asarray(_load_map(map_file))
    _raw, buf, sink, mod = _region()
    hammer = mod.get_function("hammer")
    pairs, wrong = map_check(hammer, buf, sink, groups, 200)
    res = merge_runs(hammer, buf, sink, groups, mode)
    clocks.stop(prov)
    rec = {"format_version": 1, "provenance": prov, "iters": ITERS, "pair_iters": PAIR_ITERS,
           "map_check": {"pairs": len(pairs), "wrong": wrong}, "runs": res}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, FOLLOW_UPS[mode]), "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def measure(out: str, argv: list) -> dict:
    import json

    import cupy as cp
    import numpy as np

    from measurements.campaign import provenance
    from measurements.probe import ClockSampler

    prov = provenance(argv)
    clocks = ClockSampler()
    _raw, buf, sink, mod = _region()
    sig, hammer = mod.get_function("sig"), mod.get_function("hammer")
    lat = cp.zeros((132, LINES), dtype=cp.uint16)
    smids = cp.zeros(132, dtype=cp.int32)
    sig((132,), (32,), (buf, np.int32(LINES), np.int32(REPS), np.int32(SM_STAGGER), lat, smids,
                        sink))
    cp.cuda.Device().synchronize()
    lat_h, sm_h = cp.asnumpy(lat), cp.asnumpy(smids)
    groups, map_cycles = group_map(hammer, buf, sink, LINES, THRESHOLD)
    sizes = np.bincount(groups)
    print(f"contention groups: {len(sizes)}; lines per group min {sizes.min()} max {sizes.max()}",
          flush=True)
    # check: random pairs, predicted same / different group against their measured cost
    rng = np.random.default_rng(1)
    same = [tuple(int(v) for v in rng.choice(np.flatnonzero(groups == rng.integers(len(sizes))),
                                             2, replace=False)) for _ in range(CHECK_PAIRS // 2)]
    diff = [tuple(int(v) for v in rng.choice(LINES, 2, replace=False))
            for _ in range(CHECK_PAIRS // 2)]
    pairs = same + diff
    check = pair_scan(hammer, buf, pairs, sink)
    pred = np.asarray([groups[a] == groups[b] for a, b in pairs])
    wrong = int(((check > THRESHOLD) != pred).sum())
    print(f"check pairs: {len(pairs)}, predicted wrongly {wrong}", flush=True)
    sets = line_sets(groups)
    span = cp.zeros(132, dtype=cp.int64)
    hres = {}
    for name, lines in sets.items():
        s = cp.asarray(np.asarray(lines, dtype=np.int32))
        reps = []
        for _ in range(5):
            hammer((132,), (128,), (buf, s, np.int32(ITERS), span, sink, np.int32(32),
                                       np.int32(1)))
            cp.cuda.Device().synchronize()
            reps.append(float(np.median(cp.asnumpy(span))) / ITERS / 4)
        counts = np.bincount(groups[np.asarray(lines)])
        hres[name] = {"lines": lines, "cycles_per_load_per_sm": reps,
                      "groups": int((counts > 0).sum()), "max_per_group": int(counts.max())}
        print(f"{name:14s} {np.median(reps):7.1f} cycles  groups {hres[name]['groups']:3d} "
              f"max/group {hres[name]['max_per_group']:3d}", flush=True)
    clocks.stop(prov)
    rec = {"format_version": 1, "provenance": prov, "lines": LINES, "reps": REPS,
           "sm_stagger": SM_STAGGER, "iters": ITERS, "region_offset_mod_2MiB": 0,
           "threshold": THRESHOLD, "smids": sm_h.tolist(), "groups": int(len(sizes)),
           "group_sizes": sizes.tolist(), "check": {"pairs": len(pairs), "wrong": wrong},
           "hammer": hres}
    os.makedirs(out, exist_ok=True)
    np.savez_compressed(os.path.join(out, "l2_slice_map.npz"), groups=groups.astype(np.int16),
                        map_cycles=map_cycles.astype(np.float32), smids=sm_h,
                        check_pairs=np.asarray(pairs, dtype=np.int32),
                        check_cycles=check.astype(np.float32),
                        lat_first_2048_lines=lat_h[:, :2048])
    with open(os.path.join(out, "l2_slice_map.json"), "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def four_loads_summed(b, table, idx, rounds: int, out, out_index) -> None:
    """The hammer's loop in the IR: ``rounds`` rounds of 4 relaxed loads back to back (word
    ``idx[s]`` of ``table``), their values summed, the sum stored at ``out_index()`` of
    ``out`` (built after the loop, as the kernel computes it)."""
    from kernels_ir.ir import F32

    acc = b.mov(0.0, dst=b.reg(F32, "acc"))
    val = b.reg(F32, "val", 4)
    with b.loop("r", 0, rounds):
        for s in range(4):
            b.ldg_volatile(table, idx[s], dst=val[s])
        for s in range(4):
            b.fadd(acc, val[s], dst=acc)
    b.stg(out, out_index(), acc)


def hammer_ir(lines, rounds: int, warps: int = 4, ctas: int = 132):
    """The ``hammer`` kernel in the IR, for the simulator: 132 CTAs x ``warps`` warps, lane
    ``l`` loads word ``l % 8`` of sector ``(s + w) % 4`` of line ``lines[l]`` in load ``s`` of
    each of ``rounds`` rounds (4 relaxed loads back to back), values summed and checked. The
    table starts the kernel's global space, so its lines are the map's lines. ``lines`` may
    also be several sets of 32 (an array of shape (m, 32)): CTA ``c`` then hammers set ``c % m``
    (the GPU kernel's ``cta_sets``); or sets of ``32 x warps`` lines (shape (m, 32 warps)): lane
    ``l`` of warp ``w`` then loads line ``set[32 w + l]`` (the GPU kernel's ``nset``)."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    sets = np.asarray(lines, dtype=np.int64)
    if sets.ndim != 2 or sets.shape[1] != 32 * warps:
        sets = sets.reshape(-1, 32) if np.size(lines) % 32 == 0 else sets
    nset = sets.shape[1] if sets.ndim == 2 else 0
    if nset not in (32, 32 * warps) or sets.min() < 0:
        raise ValueError(f"lines: sets of 32 or {32 * warps} line indices >= 0 expected, got "
                         f"{np.shape(lines)}")
    m = sets.shape[0]
    n_lines = int(sets.max()) + 1
    b = Builder("mb_l2_hammer", grid=ctas, block=32 * warps, bench="l2_hammer", rounds=rounds)
    g_t = b.global_buffer("table", F32, n_lines * 32)
    g_s = b.global_buffer("set", I32, nset * m)
    g_out = b.global_buffer("out", F32, ctas * 32 * warps, role="out")
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.sreg("warp", dst=b.reg(I32, "warp"))
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    slot = lane if nset == 32 else tid      # the lane's place in its set
    if m == 1:
        ln = b.ldg(g_s, slot, dst=b.reg(I32, "ln"))
    else:                                   # set (cta % m), slot
        sel = b.irem(cta, m, dst=b.reg(I32, "sel"))
        ln = b.ldg(g_s, b.imad(sel, nset, slot, dst=sel), dst=b.reg(I32, "ln"))
    m8 = b.and_(lane, 7, dst=b.reg(I32, "m8"))
    base = b.imad(ln, 32, m8, dst=b.reg(I32, "base"))
    idx = b.reg(I32, "idx", 4)
    for s in range(4):                      # + 8 * ((s + warp) % 4)
        b.iadd(warp, s, dst=idx[s])
        b.and_(idx[s], 3, dst=idx[s])
        b.imad(idx[s], 8, base, dst=idx[s])
    four_loads_summed(b, g_t, idx, rounds, g_out,
                      lambda: b.imad(cta, 32 * warps, tid, dst=b.reg(I32, "gt")))
    kernel = verify(b.build())
    t = (np.arange(n_lines * 32) % 7).astype(np.float32)
    lanes = np.arange(32)
    expect = np.zeros((ctas, warps, 32), np.float32)
    for c in range(ctas):
        for w in range(warps):
            for s in range(4):
                row = sets[c % m] if nset == 32 else sets[c % m, 32 * w:32 * w + 32]
                expect[c, w] += t[row * 32 + lanes % 8 + 8 * ((s + w) % 4)]
    expect = expect * rounds
    return Microbench("l2_hammer", kernel,
                      {"table": t, "set": sets.reshape(-1).astype(np.int32),
                       "out": np.zeros(ctas * 32 * warps, np.float32)},
                      rounds, "one round: 4 relaxed loads by every warp",
                      {"rounds": rounds, "warps": warps, "ctas": ctas},
                      lambda g: bool(np.allclose(np.asarray(g["out"]), expect.reshape(-1))))


SIM_ROUNDS = (8, 24)


def simulated_hammer(spec, lines, ctas: int = 132, warps: int = 4) -> float:
    """The simulator's cycles per warp load and SM of a hammered set, or of several sets dealt
    to the CTAs (slope over SIM_ROUNDS)."""
    from measurements.probe import simulate_checked

    cyc = [simulate_checked(hammer_ir(lines, n, warps=warps, ctas=ctas), spec,
                            l2_warm=True).cycles for n in SIM_ROUNDS]
    return (cyc[1] - cyc[0]) / (SIM_ROUNDS[1] - SIM_ROUNDS[0]) / 4


def simulate_into(path: str, gpu: str = "h100") -> dict:
    """Add the simulator's cycles for every hammered set to the record at ``path``."""
    import json

    from gpusim.specs import load_spec

    spec = load_spec(gpu)
    with open(path) as f:
        rec = json.load(f)
    for name, r in rec["hammer"].items():
        r["simulated_cycles_per_load_per_sm"] = simulated_hammer(spec, r["lines"])
        gpu_c = sorted(r["cycles_per_load_per_sm"])[len(r["cycles_per_load_per_sm"]) // 2]
        print(f"{name:14s} GPU {gpu_c:7.1f}  simulated "
              f"{r['simulated_cycles_per_load_per_sm']:7.1f}", flush=True)
    with open(path, "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def simulate_queues_into(path: str, gpu: str = "h100") -> dict:
    """Add the simulator's cycles to every run of a ``queues`` record (``l2_slice_queues.json``)."""
    import json

    import numpy as np

    from gpusim.specs import load_spec

    spec = load_spec(gpu)
    with open(path) as f:
        rec = json.load(f)
    for name, r in rec["runs"].items():
        r["simulated_cycles_per_load_per_sm"] = simulated_hammer(spec, r["sets"], QUEUE_CTAS,
                                                                 r.get("warps", 4))
        print(f"{name:8s} GPU {np.median(r['cycles_per_load_per_sm']):7.1f}  simulated "
              f"{r['simulated_cycles_per_load_per_sm']:7.1f}", flush=True)
    with open(path, "w") as f:
        json.dump(rec, f, indent=1)
    return rec


def map_path(gpu: str) -> str:
    """Where the simulator's map of ``gpu`` lives (the spec's ``l2_group_map``)."""
    return f"gpusim/specs/{gpu}_l2_groups.json"


def write_map(npz: str, path: str | None = None, gpu: str = "h100") -> dict:
    """The measured groups as the simulator's map file (``l2_group_map`` of the ``gpu`` spec),
    at ``path`` (default ``gpusim/specs/<gpu>_l2_groups.json``)."""
    import json

    import numpy as np

    groups = np.load(npz)["groups"]
    doc = {"gpu": gpu, "line_bytes": 128, "lines": int(groups.size),
           "groups": int(groups.max()) + 1,
           "source": f"measurements/l2_slice_map.py on an {gpu.upper()} (record "
                     f"measurements/{gpu}/l2_slice_map.json): the contention group of every "
                     "128-byte line of a 2 MiB-aligned 4 MiB region, from lockstep loads of "
                     "all 132 SMs on line pairs; lines beyond the region repeat it (the GPU's "
                     "second 2 MiB page is not a relabelling of the first: an approximation)",
           "map": [int(g) for g in groups]}
    with open(path or map_path(gpu), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    return doc


def main(argv: list | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="measure on the GPU, write the record and its .npz here")
    ap.add_argument("--simulate", metavar="JSON",
                    help="add the simulator's cycles of every hammered set to the record")
    ap.add_argument("--simulate-queues", metavar="JSON",
                    help="add the simulator's cycles to a queues record (l2_slice_queues.json)")
    ap.add_argument("--write-map", metavar="NPZ",
                    help="write the groups of a recorded .npz to --map-file")
    ap.add_argument("--map-file",
                    help="where --write-map writes (default gpusim/specs/<gpu>_l2_groups.json)")
    ap.add_argument("--gpu", default="h100", choices=("h100", "h200"),
                    help="the GPU measured: the spec --simulate and --simulate-queues use, the "
                         "label --write-map gives the map")
    a = ap.parse_args(argv)
    mode = ("queues" if os.environ.get("L2_SLICE_QUEUES")
            else "group_pairs" if os.environ.get("L2_SLICE_GROUP_PAIRS")
            else "split" if os.environ.get("L2_SLICE_SPLIT")
            else "merge" if os.environ.get("L2_SLICE_MERGE") else None)
    if a.out and mode:
        measure_merge(a.out, sys.argv if argv is None else argv, mode)
    elif a.out:
        measure(a.out, sys.argv if argv is None else argv)
    if a.write_map:
        path = a.map_file or map_path(a.gpu)
        doc = write_map(a.write_map, path, a.gpu)
        print(f"{path}: {doc['lines']} lines in {doc['groups']} groups")
    if a.simulate:
        simulate_into(a.simulate, a.gpu)
    if a.simulate_queues:
        simulate_queues_into(a.simulate_queues, a.gpu)
    if not (a.out or a.write_map or a.simulate or a.simulate_queues):
        ap.error("give --out DIR (GPU), --write-map NPZ or --simulate JSON")
    return 0


if __name__ == "__main__":
    sys.exit(main())
