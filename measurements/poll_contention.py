"""Do polling warps slow the other warps of their SM? One device call, GPU only.

    PYTHONPATH=. python3 measurements/poll_contention.py --out $OUT   # poll_contention.json.gz

The dense persistent kernel at batch 1-2 waits on the GPU up to twice as long as simulated, and
an IR probe (``lamport_batch.py --rows``) showed the extra wait only when a row of 128-bit
shared loads and shuffles comes before the store, not with a chain of FFMAs. In the kernel the
warps of a CTA poll the exchange (every thread, four 16-byte ``ld.relaxed.gpu`` back to back)
as soon as their own row is stored, while later warps of the SM may still be loading h from
shared memory. The engine prices a warp's polls after every warp's row (its lockstep order), so
polls never delay a row there. This probe asks whether they do on the GPU.

One CTA per SM (132), ``S`` streaming warps then ``P`` polling warps. After a barrier each
streamer runs ``ITERS`` iterations of one kind of work and records its ``clock64`` span:

- ``lds``: a 128-bit shared load (a warp's 32 consecutive 16-byte chunks, 4 wavefronts, no
  conflict) and four FFMAs into four sums, the loads independent (the dense row's pattern);
- ``shfl``: four independent chains of a butterfly shuffle and an FFMA;
- ``ffma``: four independent chains of four FFMAs (a control that uses no shared pipe).

Each poller polls a 2 KiB region of its CTA until every word it reads is nonzero (bounded:
``SPIN_LIMIT`` passes, then an error), ``wide``: four 16-byte ``ld.relaxed.gpu`` per thread back
to back (the kernel's poll), ``narrow``: one 4-byte load per thread. The last streamer of the
CTA to finish fills the region with ones, so the pollers poll for the whole stream. Recorded per
configuration and repeat: the streamers' cycles per iteration (median and max over warps of
all CTAs) and the pollers' cycles per pass (median), plus every warp's raw values of the
first repeat.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CTAS, ITERS, REPEATS, SPIN_LIMIT = 132, 2048, 5, 1 << 22
KINDS = ("lds", "shfl", "ffma")
POLLS = ("wide", "narrow")
STREAMERS = (1, 2, 4, 6)
POLLERS = (1, 2, 4, 8)
REGION_WORDS = 512

SOURCE = r"""
#define FULL 0xffffffffu
__device__ __forceinline__ float4 ld_poll4(const float* p) {
    float4 v;
    asm volatile("ld.relaxed.gpu.global.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ float ld_poll1(const float* p) {
    float v;
    asm volatile("ld.relaxed.gpu.global.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_word(float* p, float v) {
    asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ bool nz(float4 v) {
    return v.x != 0.f && v.y != 0.f && v.z != 0.f && v.w != 0.f;
}

extern "C" __global__ void contend(int kind, int iters, int streamers, int poll, int spin_limit,
                                   float* region, int* done, long long* scyc, long long* pcyc,
                                   int* ppass, int* err, float* out) {
    __shared__ float4 buf[1024];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, cta = blockIdx.x;
    for (int i = tid; i < 1024; i += blockDim.x)
        buf[i] = make_float4(1e-3f * i, 1.f, 0.5f, 0.25f);
    __syncthreads();
    float* reg = region + cta * 512;
    const int slot = cta * 32 + warp;
    if (warp < streamers) {
        float a0 = 1e-3f * lane, a1 = a0 + 1.f, a2 = a0 + 2.f, a3 = a0 + 3.f;
        long long t0 = clock64();
        if (kind == 0) {
            #pragma unroll 8
            for (int i = 0; i < iters; i++) {
                float4 v = buf[(i * 32 + lane + warp * 8) & 1023];
                a0 = fmaf(v.x, 0.5f, a0); a1 = fmaf(v.y, 0.5f, a1);
                a2 = fmaf(v.z, 0.5f, a2); a3 = fmaf(v.w, 0.5f, a3);
            }
        } else if (kind == 1) {
            #pragma unroll 8
            for (int i = 0; i < iters; i++) {
                a0 = fmaf(__shfl_xor_sync(FULL, a0, 1), 0.5f, a0);
                a1 = fmaf(__shfl_xor_sync(FULL, a1, 2), 0.5f, a1);
                a2 = fmaf(__shfl_xor_sync(FULL, a2, 4), 0.5f, a2);
                a3 = fmaf(__shfl_xor_sync(FULL, a3, 8), 0.5f, a3);
            }
        } else {
            #pragma unroll 8
            for (int i = 0; i < iters; i++) {
                #pragma unroll
                for (int k = 0; k < 4; k++) {
                    a0 = fmaf(a0, 0.999f, 1e-3f); a1 = fmaf(a1, 0.999f, 1e-3f);
                    a2 = fmaf(a2, 0.999f, 1e-3f); a3 = fmaf(a3, 0.999f, 1e-3f);
                }
            }
        }
        long long t1 = clock64();
        out[slot * 32 + lane] = a0 + a1 + a2 + a3;
        if (lane == 0) scyc[slot] = t1 - t0;
        int last = 0;
        if (lane == 0) last = atomicAdd(done + cta, 1) == streamers - 1;
        last = __shfl_sync(FULL, last, 0);
        if (last)
            for (int k = lane; k < 512; k += 32) st_word(reg + k, 1.f);
    } else if (poll > 0) {
        int n = 0;
        long long t0 = clock64();
        if (poll == 1) {
            bool ok;
            do {
                float4 v0 = ld_poll4(reg + 4 * lane), v1 = ld_poll4(reg + 4 * (lane + 32));
                float4 v2 = ld_poll4(reg + 4 * (lane + 64)), v3 = ld_poll4(reg + 4 * (lane + 96));
                ok = nz(v0) && nz(v1) && nz(v2) && nz(v3);
                n++;
            } while (!ok && n < spin_limit);
        } else {
            float v;
            do {
                v = ld_poll1(reg + lane);
                n++;
            } while (v == 0.f && n < spin_limit);
        }
        long long t1 = clock64();
        if (n >= spin_limit) atomicAdd(err, 1);
        if (lane == 0) { pcyc[slot] = t1 - t0; ppass[slot] = n; }
    }
}
"""


def configs():
    """``(kind, poll, streamers, pollers)`` of every configuration (``poll`` None: no poller)."""
    out = []
    for kind in KINDS:
        for s in STREAMERS:
            out.append((kind, None, s, 0))
            out += [(kind, poll, s, p) for poll in POLLS for p in POLLERS]
    return out


# the rows of measurements/README.md's table: (kind, streamers)
TABLE_ROWS = (("lds", 4), ("lds", 6), ("shfl", 6), ("ffma", 6), ("lds", 1))
LABELS = {"lds": "`lds` (a 128-bit shared load and 4 FFMAs)", "shfl": "`shfl` (4 butterfly chains)",
          "ffma": "`ffma` (4 FFMA chains)"}


def stream_cycles(rec: dict) -> dict:
    """``(kind, poll, streamers, pollers)`` -> the median over the repeats of the streamers'
    median cycles per iteration."""
    import numpy as np

    runs: dict = {}
    for r in rec["runs"]:
        runs.setdefault((r["kind"], r["poll"], r["streamers"], r["pollers"]), []).append(
            r["stream_cycles_per_iter_median"])
    return {k: float(np.median(v)) for k, v in runs.items()}


def table(rec: dict) -> list[str]:
    """measurements/README.md's table rows: the streamers alone, then with 1 / 2 / 4 / 8 wide
    pollers and with 8 narrow ones (change against alone, whole percent)."""
    c = stream_cycles(rec)
    rows = []
    for kind, s in TABLE_ROWS:
        base = c[(kind, None, s, 0)]

        def pct(poll, p, base=base, kind=kind, s=s):      # whole percent, "0%" unsigned
            v = round((c[(kind, poll, s, p)] / base - 1) * 100)
            return f"{v:+d}%" if v else "0%"
        rows.append(f"| {LABELS[kind]}, {s} | {base:.1f} | "
                    f"{' / '.join(pct('wide', p) for p in POLLERS)} | {pct('narrow', 8)} |")
    return rows


def run(cp, kern, kind: str, poll: str | None, s: int, p: int) -> dict:
    """One launch of ``contend``; the streamers' cycles per iteration and the pollers' cycles
    per pass, raw per warp."""
    import numpy as np

    region = cp.zeros(CTAS * REGION_WORDS, cp.float32)
    done = cp.zeros(CTAS, cp.int32)
    scyc = cp.zeros(CTAS * 32, cp.int64)
    pcyc = cp.zeros(CTAS * 32, cp.int64)
    ppass = cp.zeros(CTAS * 32, cp.int32)
    err = cp.zeros(1, cp.int32)
    out = cp.zeros(CTAS * 32 * 32, cp.float32)
    args = (np.int32(KINDS.index(kind)), np.int32(ITERS), np.int32(s),
            np.int32(0 if poll is None else 1 + POLLS.index(poll)), np.int32(SPIN_LIMIT),
            region, done, scyc, pcyc, ppass, err, out)
    kern((CTAS,), (32 * (s + p),), args)
    cp.cuda.Device().synchronize()
    if int(err.get()[0]):
        raise RuntimeError(f"{kind}/{poll} S={s} P={p}: a poller reached the spin limit "
                           f"{SPIN_LIMIT}")
    if not bool(cp.all(region == 1.0)) or not bool(cp.all(done == s)):
        raise AssertionError(f"{kind}/{poll} S={s} P={p}: the region or the counts are wrong")
    sc = cp.asnumpy(scyc).reshape(CTAS, 32)[:, :s].astype(float) / ITERS
    pc = cp.asnumpy(pcyc).reshape(CTAS, 32)[:, s:s + p].astype(float)
    pp = cp.asnumpy(ppass).reshape(CTAS, 32)[:, s:s + p].astype(float)
    r = {"kind": kind, "poll": poll, "streamers": s, "pollers": p,
         "stream_cycles_per_iter_median": float(np.median(sc)),
         "stream_cycles_per_iter_max": float(sc.max()),
         "raw_stream_cycles_per_iter": sc.round(3).tolist()}
    if p:
        r["poll_passes_median"] = float(np.median(pp))
        r["poll_cycles_per_pass_median"] = float(np.median(pc / np.maximum(pp, 1)))
        r["raw_poll_passes"] = pp.astype(int).tolist()
        r["raw_poll_cycles"] = pc.astype(int).tolist()
    return r


def measure(out: str, argv: list) -> dict:
    import cupy as cp

    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, save_record

    prov = provenance(argv)
    clocks = ClockSampler()
    kern = cp.RawKernel(SOURCE, "contend", options=("-std=c++17",))
    t0 = time.time()
    run(cp, kern, "lds", "wide", 2, 2)                       # compile, first touch
    rec = {"format_version": 1, "provenance": prov, "ctas": CTAS, "iters": ITERS,
           "repeats": REPEATS, "spin_limit": SPIN_LIMIT, "runs": []}
    for kind, poll, s, p in configs():
        reps = [run(cp, kern, kind, poll, s, p) for _ in range(REPEATS)]
        for i, r in enumerate(reps):
            r["repeat"] = i
            if i:      # the raw per-warp values of the first repeat only
                for k in [k for k in r if k.startswith("raw_")]:
                    del r[k]
        rec["runs"].extend(reps)
        med = sorted(r["stream_cycles_per_iter_median"] for r in reps)[REPEATS // 2]
        poll_txt = "" if not p else (f"  poll pass {reps[0]['poll_cycles_per_pass_median']:6.0f} "
                                     f"cycles ({reps[0]['poll_passes_median']:.0f} passes)")
        each = ", ".join(f"{r['stream_cycles_per_iter_median']:.2f}" for r in reps)
        print(f"{kind:4s} S={s} P={p} {poll or '-':6s}: stream {med:7.2f} cycles/iter "
              f"(repeats {each}){poll_txt}", flush=True)
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, "poll_contention.json.gz"), rec)
    return rec


def main(argv: list | None = None) -> int:
    from measurements.probe import gpu_probe_main
    return gpu_probe_main(argv, __doc__, measure, "poll_contention.json.gz")


if __name__ == "__main__":
    raise SystemExit(main())
