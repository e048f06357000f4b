"""How much one L2 round trip varies on the H100: per-hop latencies of a pointer chase (GPU only).

    PYTHONPATH=. python3 measurements/l2_jitter.py --out $OUT     # -> l2_jitter.json

Why: inside the Lamport kernel (``h100/lamport_trace.json``) the time a warp needs to see a
written slot is spread far wider on the GPU than in the simulator, whose L2 round trip takes one
of two values (near or far partition) plus queueing. This probe measures the spread of single
round trips, and how much of it belongs to the line (the same line always slower: distance from
the SM to the line's slice) and how much to the moment.

Kernel (CUDA written here: the IR has no clock): lane 0 of warp 0 of each chasing CTA follows a
random cycle over ``LINES`` 128-byte lines of its own region with L2-coherent loads
(``ld.relaxed.gpu``, as the polls; L1 is not used), ``HOPS`` dependent loads, and stores the
``clock64`` at each load's issue; hop latency = the difference of consecutive stamps (the next
load can only issue when the previous one's value is back). The first lap warms L2 and is
dropped. Configurations: ``alone`` (CTA 0 chases, 131 CTAs idle), ``all`` (132 CTAs chase their
own regions at once), ``loaded`` (CTA 0 chases while 131 CTAs stream 16-byte L2-coherent loads of
one shared 16 KiB vector, as the exchange's polls do).
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LINES, HOPS, CTAS, THREADS = 256, 4096, 132, 256
CONFIGS = ("alone", "all", "loaded")
SOURCE = r"""
extern "C" __global__ void chase(const unsigned int* __restrict__ nxt, int* stamps,
                                 const float* vec, float* sink, int mode, int hops, int lines) {
    const int cta = blockIdx.x;
    const bool chaser = (mode == 1) || cta == 0;
    if (chaser) {
        if (threadIdx.x != 0) return;
        const unsigned int* base = nxt + (size_t)cta * lines * 32;
        unsigned int p = 0;
        for (int i = 0; i < hops; ++i) {
            unsigned int v;
            asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];"
                         : "=r"(v) : "l"(base + p) : "memory");
            long long t = clock64();
            stamps[(size_t)cta * hops + i] = (int)t;
            p = v;
        }
        sink[cta] = (float)p;
        return;
    }
    if (mode != 2) return;
    float acc = 0.f;
    for (int r = 0; r < 200; ++r) {
        for (int q = threadIdx.x; q < 1024; q += blockDim.x) {
            float a, b, c, d;
            asm volatile("ld.relaxed.gpu.global.v4.f32 {%0,%1,%2,%3}, [%4];"
                         : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(vec + 4 * q) : "memory");
            acc += a + b + c + d;
        }
    }
    sink[cta * blockDim.x + threadIdx.x + CTAS_OFF] = acc;
}
"""


def cycles(rng, lines: int):
    """``next`` words for every CTA: word ``32 * line`` holds the word index of the next line
    of one random cycle through the CTA's ``lines`` lines (the other words unused)."""
    import numpy as np
    out = np.zeros((CTAS, lines * 32), np.uint32)
    for c in range(CTAS):
        perm = rng.permutation(lines)
        nxt = np.empty(lines, np.int64)
        nxt[perm] = np.roll(perm, -1)
        out[c, np.arange(lines) * 32] = nxt * 32
    return out


def measure(out: str, argv: list) -> dict:
    import cupy as cp
    import numpy as np

    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, save_record

    prov = provenance(argv)
    clocks = ClockSampler()
    rng = np.random.default_rng(11)
    nxt = cycles(rng, LINES)
    src = SOURCE.replace("CTAS_OFF", str(CTAS))
    fn = cp.RawModule(code=src).get_function("chase")
    d_nxt = cp.asarray(nxt.reshape(-1))
    d_vec = cp.ones(4096, cp.float32)
    d_sink = cp.zeros(CTAS + CTAS * THREADS, cp.float32)
    rec = {"format_version": 1, "provenance": prov, "lines": LINES, "hops": HOPS,
           "configs": {}}
    t0 = time.time()
    for mode, name in enumerate(CONFIGS):
        d_st = cp.zeros(CTAS * HOPS, cp.int32)
        for _ in range(3):      # the last launch is kept (the first ones warm L2)
            fn((CTAS,), (THREADS,), (d_nxt, d_st, d_vec, d_sink, np.int32(mode),
                                     np.int32(HOPS), np.int32(LINES)))
            cp.cuda.Device().synchronize()
        st = cp.asnumpy(d_st).reshape(CTAS, HOPS).astype(np.int64)
        lat = (np.diff(st, axis=1) + 2 ** 31) % 2 ** 32 - 2 ** 31     # hop i+1's latency
        chasers = list(range(CTAS)) if name == "all" else [0]
        lat = lat[chasers][:, LINES:]          # drop the first lap
        # the line each hop loaded: follow the cycle from line 0
        res = {"chasers": len(chasers)}
        flat = lat.reshape(-1)
        res["percentiles_cycles"] = {str(q): float(np.percentile(flat, q))
                                     for q in (1, 10, 25, 50, 75, 90, 99, 99.9)}
        res["mean_cycles"] = float(flat.mean())
        # per line: the hops that loaded the same line (line of hop i = the i-th of the cycle)
        per_line = []
        for k, c in enumerate(chasers):
            seq = np.empty(HOPS, np.int64)      # the word each hop loads: p_0 = 0, p_i+1 = next
            p = 0
            for i in range(HOPS):
                seq[i] = p
                p = int(nxt[c, p])
            order = seq[LINES:HOPS - 1] // 32    # lat[:, j] is hop LINES + j's latency
            means = np.array([lat[k][order == ln].mean() for ln in range(LINES)
                              if (order == ln).any()])
            per_line.append(means)
        pl = np.concatenate(per_line)
        res["per_line_mean_std_cycles"] = float(pl.std())
        res["within_line_std_cycles"] = float(np.sqrt(max(0.0, flat.var() - pl.var())))
        res["per_line_mean_percentiles_cycles"] = {str(q): float(np.percentile(pl, q))
                                                   for q in (1, 10, 50, 90, 99)}
        res["histogram_cycles"] = np.histogram(flat, bins=np.arange(200, 1600, 20))[0].tolist()
        res["sample_cycles"] = lat[0, :512].tolist()
        rec["configs"][name] = res
        print(name, json.dumps({k: v for k, v in res.items()
                                if k not in ("histogram_cycles", "sample_cycles")}), flush=True)
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, "l2_jitter.json"), rec)
    return rec


def main(argv: list | None = None) -> int:
    from measurements.probe import gpu_probe_main
    return gpu_probe_main(argv, __doc__, measure, "l2_jitter.json")


if __name__ == "__main__":
    raise SystemExit(main())
