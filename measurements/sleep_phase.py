"""Is the timer that ends a ``__nanosleep`` one for the whole GPU, or one per SM? GPU only.

    PYTHONPATH=. python3 measurements/sleep_phase.py --out $OUT       # sleep_phase.json

Why: ``sleep_cost.py --stairs`` (``h200/sleep_stairs.json``) shows that a wait of ``ns`` ends on
the next tick of a timer whose period is ``ns`` rounded up to a power of two (256 ns for 200,
512 for 400), not after a fixed time (``gpusim.specs.rules.sleep_wake_cycles``). In a kernel
whose CTAs wait for each other, what matters is whether every SM's timer ticks at the same
instants. This probe reads the GPU's clocks, which the kernel IR has no instruction for, so the
kernel is written here in CUDA.

132 CTAs of one warp; every round each CTA spins a pseudo-random 0 to 2047 cycles on
``clock64`` (so that its waits start at every phase), reads ``clock64`` and ``%globaltimer``,
waits ``__nanosleep(ns)`` and reads both again (lane 0 records them; ``%smid`` per CTA).
ns = 200 and 400, 48 rounds, 3 launches each.

What each hypothesis predicts: one timer for the GPU (``%globaltimer`` is one clock for the
GPU) puts every wake at the same phase of the period on the global clock, whatever the CTA, so
``%globaltimer`` read after the wake, modulo the period, is one value (up to the timer's
resolution and the read's latency); one timer per SM puts each SM's wakes at a phase of its
own. Recorded: per launch, the wake stamps' residues modulo the period (a histogram in 16
bins, and per CTA its median residue), the waits in cycles against the start's residue, and
the resolution of ``%globaltimer`` (the smallest nonzero step between two stamps).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CTAS, ROUNDS, LAUNCHES = 132, 48, 3
WAITS = (200, 400)

SOURCE = r"""
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
template <int NS>
__device__ void run(int rounds, unsigned seed, unsigned long long* g, long long* c, int* smids) {
    const int cta = blockIdx.x, lane = threadIdx.x;
    if (lane == 0) { unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); smids[cta] = s; }
    unsigned x = seed ^ (0x9E3779B9u * (unsigned)(cta + 1));
    for (int r = 0; r < rounds; r++) {
        x = x * 1664525u + 1013904223u;
        long long until = clock64() + (long long)(x >> 21);
        while (clock64() < until) { }
        __syncwarp();
        long long c0 = clock64();
        unsigned long long g0 = gtime();
        __nanosleep(NS);
        long long c1 = clock64();
        unsigned long long g1 = gtime();
        if (lane == 0) {
            size_t i = 2 * ((size_t)cta * rounds + r);
            g[i] = g0; g[i + 1] = g1; c[i] = c0; c[i + 1] = c1;
        }
    }
}
extern "C" __global__ void phase200(int rounds, unsigned seed, unsigned long long* g,
                                    long long* c, int* smids) {
    run<200>(rounds, seed, g, c, smids);
}
extern "C" __global__ void phase400(int rounds, unsigned seed, unsigned long long* g,
                                    long long* c, int* smids) {
    run<400>(rounds, seed, g, c, smids);
}
"""


def summarise(g, c, period: int) -> dict:
    """The residues of the wake stamps ``g[..., 1]`` modulo ``period`` ns (histogram, per-CTA
    medians), the globaltimer's resolution, and the waits (cycles) by the start's residue."""
    import numpy as np

    g = np.asarray(g, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    wake = g[..., 1] % period
    start = g[..., 0] % period
    steps = np.diff(np.unique(g.reshape(-1)))          # np.unique sorts
    hist = np.histogram(wake, bins=16, range=(0, period))[0]
    waits = c[..., 1] - c[..., 0]
    by_start = [float(np.median(waits[(start >= lo) & (start < lo + period // 4)]))
                if np.any((start >= lo) & (start < lo + period // 4)) else None
                for lo in range(0, period, period // 4)]
    return {"period_ns": period, "wake_residue_hist16": hist.tolist(),
            "wake_residue_per_cta_median": np.median(wake, axis=1).astype(int).tolist(),
            "globaltimer_min_step_ns": int(steps[steps > 0].min()) if np.any(steps > 0) else None,
            "wait_cycles_median": float(np.median(waits)),
            "wait_cycles_min_max": [int(waits.min()), int(waits.max())],
            "wait_cycles_median_by_start_quarter": by_start}


def measure(out: str, argv: list) -> dict:
    import cupy as cp
    import numpy as np

    from gpusim.specs.rules import sleep_period_ns
    from measurements.campaign import provenance
    from measurements.probe import save_record

    prov = provenance(argv)
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    rec = {"format_version": 1, "provenance": prov, "ctas": CTAS, "rounds": ROUNDS,
           "launches": LAUNCHES, "results": {}}
    for ns in WAITS:
        k = mod.get_function(f"phase{ns}")
        period = int(sleep_period_ns(ns))
        runs = []
        for i in range(LAUNCHES):
            g = cp.zeros((CTAS, ROUNDS, 2), dtype=cp.uint64)
            c = cp.zeros((CTAS, ROUNDS, 2), dtype=cp.int64)
            sm = cp.zeros(CTAS, dtype=cp.int32)
            k((CTAS,), (32,), (np.int32(ROUNDS), np.uint32(12345 + 7 * i), g, c, sm))
            cp.cuda.runtime.deviceSynchronize()
            gh, ch = cp.asnumpy(g).astype(np.int64), cp.asnumpy(c)
            s = summarise(gh, ch, period)
            s["smid"] = cp.asnumpy(sm).tolist()
            s["raw_g_first_ctas"] = gh[:8].tolist()
            s["raw_c_first_ctas"] = ch[:8].tolist()
            runs.append(s)
            print(f"ns {ns} launch {i}: wake residues mod {period} (16 bins) "
                  f"{s['wake_residue_hist16']}; timer step {s['globaltimer_min_step_ns']} ns; "
                  f"waits {s['wait_cycles_min_max']} cycles, by start quarter "
                  f"{s['wait_cycles_median_by_start_quarter']}", flush=True)
        rec["results"][f"sleep{ns}"] = {"ns": ns, "launches": runs}
    save_record(os.path.join(out, "sleep_phase.json"), rec)
    return rec


def main(argv: list | None = None) -> int:
    from measurements.probe import gpu_probe_main

    return gpu_probe_main(argv, __doc__, measure, "sleep_phase.json")


if __name__ == "__main__":
    raise SystemExit(main())
