"""Who waits for whom in an all-to-all Lamport exchange: per-CTA, per-round GPU timestamps.

    PYTHONPATH=. python3 measurements/lamport_clock.py --out $OUT      # GPU: lamport_clock.json
    PYTHONPATH=. python3 measurements/lamport_clock.py --out $OUT --ring   # lamport_ring.json

The simulator's Lamport exchange waits 150-800 ns less per round than the GPU's, and the GPU's
wait grows with the number of SMs that write (``lmech_ws_1``, 132 writers, against
``lmech_readers_132``, 16 writers: 300-400 ns apart on the GPU, 48 ns in the simulator). Round
times alone cannot say whether every CTA sees the data late (a latency the simulator lacks), or
a few SMs are always last (SMs that differ), or the last writer is a different SM every round (a
spread of detection times). This probe records it, on the GPU only (it reads the GPU's clocks,
which the kernel IR has no instruction for, so the kernel is written here in CUDA; the
simulator's counterpart is the IR's ``lmech_ws_1`` and ``lmech_readers_*``).

The exchange, as the persistent kernel's (``kernels_ir/kernels/sparse_rnn.py``, ``_stage_h``):
132 CTAs x 256 threads, slots of ``WORDS`` words, slot 0 written before the launch and the others
holding the sentinel -0.0. Round ``r``: every thread polls its chunks of slot ``r`` (16-byte
``ld.relaxed.gpu``, 4 chunks back to back per group, the group re-polled while any word is the
sentinel), ``__syncthreads``, then the CTAs ``c < writers`` write their ``WORDS / writers``
words of slot ``r + 1`` (``st.relaxed.gpu``, one word per thread). Recorded per CTA and round
(``%globaltimer``, ns, one clock for the whole GPU but ticking in 256 ns steps on the H100,
and ``clock64`` of the CTA's SM, placed on the common axis by :func:`aligned`): when the
CTA had seen all of slot ``r`` (``seen``) and when its stores of slot ``r + 1`` were issued
(``stored``); per CTA its SM (``%smid``); per thread its polls and their cycles. ``writers`` =
132, 66, 33, 16, and -1, -2, -4 (every CTA writes 4 whole sectors, every sector one writer,
every 128-byte line 1, 2 or 4 writer SMs).

Beside it: ``xring`` (every CTA writes its own line after seeing the lines of ``k`` other CTAs,
k = 1 to 132: how the round grows with the breadth of what a CTA waits for), ``free_polls`` (a
group poll of a written slot, 1 or 132 CTAs polling), ``pingload``
(a two-CTA flag hand-over while the other CTAs load the L2 with polls or stores) and ``pingpos``
(the hand-over at 16 random placements of the two flags, every round trip timed).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CTAS, THREADS, WORDS, ROUNDS = 132, 256, 4224, 64
WRITERS = (132, 66, 33, 16)
LINE_WRITERS = (-1, -2, -4)     # every sector one writer, every line 1, 2 or 4 (writers = -k)
REPEATS = 5

SOURCE = r"""
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t;
}
__device__ __forceinline__ float4 ld_poll(const float* p) {
    float4 v;
    asm volatile("ld.relaxed.gpu.global.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_word(float* p, float v) {
    asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory");
}
__device__ __forceinline__ bool sent(float x) { return __float_as_uint(x) == 0x80000000u; }

extern "C" __global__ void xch(float* h, int words, int rounds, int writers,
                               unsigned long long* seen, unsigned long long* stored,
                               long long* seen_clk, long long* stored_clk,
                               int* smids, int* polls, float* out, long long* lat) {
    const int cta = blockIdx.x, tid = threadIdx.x, nt = blockDim.x, nc = gridDim.x;
    const int chunks = words / 4, per = words / writers;
    int npoll = 0;
    long long lat_sum = 0;
    float acc = 0.f;
    if (tid == 0) { unsigned s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); smids[cta] = s; }
    for (int r = 0; r < rounds; r++) {
        const float* slot = h + (size_t)r * words;
        for (int g0 = tid; g0 < chunks; g0 += 4 * nt) {
            bool done = false;
            while (!done) {
                float4 v[4];
                long long t0 = clock64();
                #pragma unroll
                for (int k = 0; k < 4; k++) {
                    int ch = g0 + k * nt;
                    v[k] = ch < chunks ? ld_poll(slot + 4 * ch) : make_float4(0.f, 0.f, 0.f, 0.f);
                }
                npoll++;
                done = true;
                #pragma unroll
                for (int k = 0; k < 4; k++)
                    done = done && !sent(v[k].x) && !sent(v[k].y) && !sent(v[k].z) && !sent(v[k].w);
                lat_sum += clock64() - t0;
                if (done) {
                    #pragma unroll
                    for (int k = 0; k < 4; k++) acc += v[k].x + v[k].y + v[k].z + v[k].w;
                }
            }
        }
        __syncthreads();
        if (tid == 0) { seen[r * nc + cta] = gtime(); seen_clk[r * nc + cta] = clock64(); }
        if (writers > 0 && cta < writers) {
            for (int w = tid; w < per; w += nt)
                st_word(h + (size_t)(r + 1) * words + cta * per + w, (float)(r + 1));
        } else if (writers < 0 && tid < 32) {
            // -k: every CTA writes 4 whole 32-byte sectors (warp 0, word i by lane i); sector q
            // of line L is written by CTA (L + (q % k) * (nc / k)) % nc, so every sector has one
            // writer and every 128-byte line k writers (words = 32 x nc)
            const int k = -writers, q = tid >> 3, L = (cta - (q % k) * (nc / k) + nc) % nc;
            st_word(h + (size_t)(r + 1) * words + L * 32 + tid, (float)(r + 1));
        }
        __syncthreads();
        if (tid == 0) { stored[r * nc + cta] = gtime(); stored_clk[r * nc + cta] = clock64(); }
    }
    polls[cta * nt + tid] = npoll;
    out[cta * nt + tid] = acc;
    lat[cta * nt + tid] = lat_sum;
}

// CTA 0 and CTA 1 hand a flag back and forth ``rounds`` times (thread 0 of each: store, then
// poll the other's word) while CTAs 2.. load the L2 until CTA 0 is done: ``mode`` 0 idle, 1
// group polls of one written slot (all loaders the same data), 2 group polls of their own
// regions, 3 16-byte stores to their own regions. flag[0] = ping, flag[32] = pong, flag[64] =
// stop (each in its own 128-byte line). Returns CTA 0's cycles per round trip.
extern "C" __global__ void pingload(float* flag, float* data, int words, int rounds, int mode,
                                    long long* cyc, long long* work) {
    const int cta = blockIdx.x, tid = threadIdx.x, nt = blockDim.x, chunks = words / 4;
    if (cta < 2) {
        if (tid != 0) return;
        float* mine = flag + (cta == 0 ? 0 : 32);
        float* other = flag + (cta == 0 ? 32 : 0);
        long long t0 = clock64();
        for (int r = 1; r <= rounds; r++) {
            if (cta == 0) st_word(mine, (float)r);
            while (ld_poll(other).x != (float)(r)) { }
            if (cta == 1) st_word(mine, (float)r);
        }
        if (cta == 0) { cyc[0] = clock64() - t0; st_word(flag + 64, 1.f); }
        return;
    }
    float* region = data + (size_t)(mode == 1 ? 0 : cta) * words;
    float acc = 0.f;
    long long n = 0;
    if (mode == 0) { while (ld_poll(flag + 64).x == 0.f) { n++; } }
    else {
        while (true) {
            bool stop = ld_poll(flag + 64).x != 0.f;
            if (__syncthreads_or(stop)) break;
            for (int g0 = tid; g0 < chunks; g0 += 4 * nt) {
                if (mode == 3) {
                    #pragma unroll
                    for (int k = 0; k < 4; k++) {
                        int ch = g0 + k * nt;
                        if (ch < chunks) {
                            float* q = region + 4 * ch;
                            asm volatile("st.relaxed.gpu.global.v4.f32 [%0], {%1,%2,%3,%4};"
                                         :: "l"(q), "f"(1.f), "f"(1.f), "f"(1.f), "f"(1.f)
                                         : "memory");
                        }
                    }
                } else {
                    float4 v[4];
                    #pragma unroll
                    for (int k = 0; k < 4; k++) {
                        int ch = g0 + k * nt;
                        v[k] = ch < chunks ? ld_poll(region + 4 * ch)
                                           : make_float4(0.f, 0.f, 0.f, 0.f);
                    }
                    acc += v[0].x + v[1].y + v[2].z + v[3].w;
                }
            }
            n++;
        }
    }
    if (tid == 0) work[cta] = n + (acc == 12345.f);
}

// CTA 0 and CTA 1 hand a flag back and forth: the ping at word ``at_ping`` and the pong at word
// ``at_pong`` of ``flag``; thread 0 of CTA 0 records every round trip's cycles
extern "C" __global__ void pingpos(float* flag, int at_ping, int at_pong, int rounds,
                                   long long* each) {
    const int cta = blockIdx.x;
    if (threadIdx.x != 0 || cta > 1) return;
    float* mine = flag + (cta == 0 ? at_ping : at_pong);
    float* other = flag + (cta == 0 ? at_pong : at_ping);
    long long t = clock64();
    for (int r = 1; r <= rounds; r++) {
        if (cta == 0) st_word(mine, (float)r);
        while (ld_poll(other).x != (float)(r)) { }
        if (cta == 1) st_word(mine, (float)r);
        if (cta == 0) { long long u = clock64(); each[r - 1] = u - t; t = u; }
    }
}

// the exchange with narrower polling: every CTA writes its own line (32 words, warp 0) of slot
// r + 1 once it has seen, in slot r, the ``k`` lines of CTAs c + 1 + i * (nc / k) (i < k; the
// whole slot when k = nc); records each CTA's cycles per round (its own clock)
extern "C" __global__ void xring(float* h, int rounds, int k, long long* per_round,
                                 float* out) {
    const int cta = blockIdx.x, tid = threadIdx.x, nc = gridDim.x, words = 32 * nc;
    const int chunks = 8 * k, stride = nc / k;
    float acc = 0.f;
    long long t0 = 0;
    for (int r = 0; r < rounds; r++) {
        if (r == 8) t0 = clock64();
        const float* slot = h + (size_t)r * words;
        for (int g0 = tid; g0 < chunks; g0 += 4 * blockDim.x) {
            bool done = false;
            while (!done) {
                float4 v[4];
                #pragma unroll
                for (int q = 0; q < 4; q++) {
                    int ch = g0 + q * blockDim.x;
                    int line = (cta + 1 + (ch >> 3) * stride) % nc;
                    v[q] = ch < chunks ? ld_poll(slot + line * 32 + 4 * (ch & 7))
                                       : make_float4(0.f, 0.f, 0.f, 0.f);
                }
                done = true;
                #pragma unroll
                for (int q = 0; q < 4; q++)
                    done = done && !sent(v[q].x) && !sent(v[q].y) && !sent(v[q].z) && !sent(v[q].w);
                if (done) acc += v[0].x;
            }
        }
        __syncthreads();
        if (tid < 32) st_word(h + (size_t)(r + 1) * words + cta * 32 + tid, (float)(r + 1));
    }
    if (tid == 0) per_round[cta] = (clock64() - t0) / (rounds - 8);
    out[cta * blockDim.x + tid] = acc;
}

// every CTA polls a slot written before the launch, ``rounds`` times: the poll's latency with
// ``gridDim.x`` CTAs polling and nobody waiting (1 CTA: unloaded)
extern "C" __global__ void free_polls(const float* h, int words, int rounds, long long* lat,
                                      int* polls, float* out) {
    const int tid = threadIdx.x, nt = blockDim.x, chunks = words / 4;
    long long lat_sum = 0;
    int n = 0;
    float acc = 0.f;
    for (int r = 0; r < rounds; r++) {
        for (int g0 = tid; g0 < chunks; g0 += 4 * nt) {
            float4 v[4];
            long long t0 = clock64();
            #pragma unroll
            for (int k = 0; k < 4; k++) {
                int ch = g0 + k * nt;
                v[k] = ch < chunks ? ld_poll(h + 4 * ch) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            bool ok = true;
            #pragma unroll
            for (int k = 0; k < 4; k++)
                ok = ok && !sent(v[k].x) && !sent(v[k].y) && !sent(v[k].z) && !sent(v[k].w);
            lat_sum += clock64() - t0;
            n++;
            if (ok) acc += v[0].x + v[1].x + v[2].x + v[3].x;
        }
        __syncthreads();
    }
    lat[blockIdx.x * nt + tid] = lat_sum;
    polls[blockIdx.x * nt + tid] = n;
    out[blockIdx.x * nt + tid] = acc;
}
"""


def run(cp, kern, writers: int) -> dict:
    """One launch of the exchange with ``writers`` writer CTAs: its timestamps, checked."""
    import numpy as np

    if writers > 0 and WORDS % writers:
        raise ValueError(f"writers={writers} must divide {WORDS}")
    if writers < 0 and (WORDS != 32 * CTAS or CTAS % -writers or -writers not in (1, 2, 4)):
        raise ValueError(f"writers={writers}: -1, -2 or -4 with {WORDS} = 32 x {CTAS} words")
    h = np.full((ROUNDS + 1, WORDS), -0.0, np.float32)
    h[0] = 0.0
    dh = cp.asarray(h)
    n = ROUNDS * CTAS
    bufs = [cp.zeros(n, cp.uint64), cp.zeros(n, cp.uint64), cp.zeros(n, cp.int64),
            cp.zeros(n, cp.int64), cp.zeros(CTAS, cp.int32), cp.zeros(CTAS * THREADS, cp.int32),
            cp.zeros(CTAS * THREADS, cp.float32), cp.zeros(CTAS * THREADS, cp.int64)]
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    kern((CTAS,), (THREADS,), (dh, np.int32(WORDS), np.int32(ROUNDS), np.int32(writers), *bufs))
    stop.record()
    stop.synchronize()
    seen, stored, seen_clk, stored_clk, smids, polls, out, lat = (cp.asnumpy(b) for b in bufs)
    got = cp.asnumpy(dh)
    want = np.arange(ROUNDS + 1, dtype=np.float32)[:, None] * np.ones(WORDS, np.float32)
    if not np.array_equal(got[:ROUNDS], want[:ROUNDS]):
        raise AssertionError(f"writers={writers}: the slots hold wrong values")
    # every thread summed the slots it polled: the chunks it owns, rounds 0..R-1
    chunks = WORDS // 4
    mine = np.array([len(range(t, chunks, THREADS)) for t in range(THREADS)], np.float32)
    total = mine * 4 * float(sum(range(ROUNDS)))
    if not np.allclose(out.reshape(CTAS, THREADS), total[None, :]):
        raise AssertionError(f"writers={writers}: a thread staged wrong values")
    g0 = int(min(seen.min(), stored.min()))
    c0 = np.minimum(seen_clk.reshape(ROUNDS, CTAS)[0], stored_clk.reshape(ROUNDS, CTAS)[0])
    return {"writers": writers, "kernel_s": cp.cuda.get_elapsed_time(start, stop) * 1e-3,
            # globaltimer (ns) from the launch's first stamp; clock64 (cycles of the CTA's SM)
            # from the CTA's own first stamp
            "seen_ns": (seen.astype(np.int64) - g0).reshape(ROUNDS, CTAS).tolist(),
            "stored_ns": (stored.astype(np.int64) - g0).reshape(ROUNDS, CTAS).tolist(),
            "seen_clk": (seen_clk.reshape(ROUNDS, CTAS) - c0).tolist(),
            "stored_clk": (stored_clk.reshape(ROUNDS, CTAS) - c0).tolist(),
            "smid": smids.tolist(),
            "polls_per_cta": polls.reshape(CTAS, THREADS).sum(axis=1).tolist(),
            # cycles from a group poll's issue to its check, summed per CTA (over its threads)
            "poll_cycles_per_cta": lat.reshape(CTAS, THREADS).sum(axis=1).tolist()}


def free(cp, kern, ctas: int, rounds: int = 32) -> dict:
    """Poll latency with ``ctas`` CTAs polling a written slot and nobody waiting."""
    import numpy as np

    h = cp.zeros(WORDS, cp.float32)
    lat = cp.zeros(ctas * THREADS, cp.int64)
    polls = cp.zeros(ctas * THREADS, cp.int32)
    out = cp.zeros(ctas * THREADS, cp.float32)
    kern((ctas,), (THREADS,), (h, np.int32(WORDS), np.int32(rounds), lat, polls, out))
    cp.cuda.Device().synchronize()
    lat, polls = cp.asnumpy(lat), cp.asnumpy(polls)
    return {"ctas": ctas, "rounds": rounds, "poll_cycles_mean": float(lat.sum() / polls.sum())}


def aligned(rec: dict):
    """The CTAs' clock64 stamps on one time axis (ns): ``%globaltimer`` ticks in 256 ns steps on
    the H100, too coarse alone, so each CTA's cycle counter is placed by the mean of its
    (globaltimer - cycles / f) over its 2 x rounds stamps (the stamps fall at every phase of a
    tick, so the quantisation averages out), with f the median over the CTAs of their
    cycles-per-ns slope. Returns ``(seen, stored, f_ghz)``, arrays (rounds, ctas) in ns."""
    import numpy as np

    gs = np.asarray(rec["seen_ns"], np.float64)
    gt = np.asarray(rec["stored_ns"], np.float64)
    cs = np.asarray(rec["seen_clk"], np.float64)
    ct = np.asarray(rec["stored_clk"], np.float64)
    g = np.concatenate([gs, gt])
    c = np.concatenate([cs, ct])
    cm, gm = c - c.mean(axis=0), g - g.mean(axis=0)
    f = float(np.median((cm * gm).sum(axis=0) / (gm * gm).sum(axis=0)))   # cycles per ns
    off = (g - c / f).mean(axis=0)
    return cs / f + off, ct / f + off, f


def summary(rec: dict, skip: int = 8) -> dict:
    """Per launch, on the aligned clocks: the round time, when each CTA saw a slot after its last
    writer stored it (``lag``, ns, by CTA), how spread the stores were, which SMs were last."""
    import numpy as np

    seen, stored, f = aligned(rec)
    w = rec["writers"] if rec["writers"] > 0 else CTAS
    last_store = stored[:-1, :w].max(axis=1)            # slot r+1 complete at the latest
    lag = seen[1:] - last_store[:, None]                 # (rounds-1, ctas)
    rounds = np.diff(last_store)
    lag, rounds = lag[skip:], rounds[skip:]
    smid = np.asarray(rec["smid"])
    st = stored[skip:-1, :w]
    last_writer = smid[np.argmax(st, axis=1)]
    late = np.argsort(-lag.mean(axis=0))[:8]
    polls = np.asarray(rec["polls_per_cta"], dtype=np.float64)
    groups = sum(len(range(t, WORDS // 4, 4 * THREADS)) for t in range(THREADS))
    return {"writers": rec["writers"], "clock_ghz": f, "round_ns_median": float(np.median(rounds)),
            "lag_ns_median": float(np.median(lag)), "lag_ns_p90": float(np.percentile(lag, 90)),
            "first_seen_ns_median": float(np.median(lag.min(axis=1))),
            "last_seen_ns_median": float(np.median(lag.max(axis=1))),
            "store_spread_ns_median": float(np.median(st.max(axis=1) - st.min(axis=1))),
            "seen_to_store_ns_median": float(np.median(stored[skip:] - seen[skip:])),
            "last_writer_sms_distinct": int(len(set(last_writer.tolist()))),
            "lag_by_sm_ns": {int(smid[c]): float(lag[:, c].mean()) for c in range(lag.shape[1])},
            "latest_ctas_by_mean_lag": [{"cta": int(c), "sm": int(smid[c]),
                                         "lag_ns": float(lag[:, c].mean())} for c in late],
            "polls_per_group_round": float(polls.sum() / ROUNDS / (CTAS * groups)),
            "poll_ns_mean": float(np.sum(rec["poll_cycles_per_cta"]) / polls.sum() / f)}


LOAD_MODES = {0: "idle", 1: "polls, one shared slot", 2: "polls, own regions",
              3: "stores, own regions"}


def ping_under_load(cp, kern, mode: int, ctas: int, rounds: int = 2000) -> dict:
    """Round trip of a flag between CTAs 0 and 1 while ``ctas - 2`` CTAs load the L2."""
    import numpy as np

    flag = cp.zeros(96, cp.float32)
    data = cp.zeros(max(ctas, 2) * WORDS, cp.float32)
    cyc = cp.zeros(1, cp.int64)
    work = cp.zeros(ctas, cp.int64)
    kern((ctas,), (THREADS,), (flag, data, np.int32(WORDS), np.int32(rounds), np.int32(mode),
                               cyc, work))
    cp.cuda.Device().synchronize()
    c = float(cp.asnumpy(cyc)[0])
    iters = cp.asnumpy(work)[2:]
    return {"mode": mode, "load": LOAD_MODES[mode], "ctas": ctas, "rounds": rounds,
            "cycles_per_round_trip": c / rounds,
            "loader_iterations_mean": float(iters.mean()) if iters.size else 0.0}


def ping_positions(cp, kern, n_pos: int = 16, rounds: int = 1000, seed: int = 0) -> list[dict]:
    """Round-trip cycles of a two-CTA flag hand-over for ``n_pos`` random placements of the two
    flags (each in its own 128-byte line of a 64 MiB buffer, so in different L2 slices and
    partitions): per placement the median, 10th, 90th and 99th percentile of the rounds."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = (64 << 20) // 128
    flag = cp.zeros(lines * 32, cp.float32)
    out = []
    for _ in range(n_pos):
        a, b = (int(x) * 32 for x in rng.choice(lines, 2, replace=False))
        flag[a] = 0.0
        flag[b] = 0.0
        each = cp.zeros(rounds, cp.int64)
        kern((2,), (32,), (flag, np.int32(a), np.int32(b), np.int32(rounds), each))
        cp.cuda.Device().synchronize()
        e = cp.asnumpy(each)[10:].astype(np.float64)
        out.append({"ping_word": a, "pong_word": b, "median": float(np.median(e)),
                    "p10": float(np.percentile(e, 10)), "p90": float(np.percentile(e, 90)),
                    "p99": float(np.percentile(e, 99)), "max": float(e.max())})
    return out


RING_LINES = (1, 4, 12, 33, 132)   # lines each CTA waits for per round (132: all of them)


def ring(cp, kern, k: int, rounds: int = 200) -> dict:
    """Every CTA writes its own line per round after seeing ``k`` other CTAs' lines: cycles per
    round (median over the CTAs of each CTA's own clock) and the values check."""
    import numpy as np

    words = 32 * CTAS
    h = np.full((rounds + 1, words), -0.0, np.float32)
    h[0] = 0.0
    dh = cp.asarray(h)
    per = cp.zeros(CTAS, cp.int64)
    out = cp.zeros(CTAS * THREADS, cp.float32)
    kern((CTAS,), (THREADS,), (dh, np.int32(rounds), np.int32(k), per, out))
    cp.cuda.Device().synchronize()
    got = cp.asnumpy(dh)
    if not np.array_equal(got, np.arange(rounds + 1, dtype=np.float32)[:, None]
                          * np.ones(words, np.float32)):
        raise AssertionError(f"ring k={k}: the slots hold wrong values")
    p = cp.asnumpy(per).astype(np.float64)
    return {"lines": k, "rounds": rounds, "cycles_per_round_median": float(np.median(p)),
            "cycles_per_round_max": float(p.max())}


def measure(out: str, argv: list) -> dict:
    import cupy as cp

    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, save_record

    prov = provenance(argv)
    clocks = ClockSampler()
    kern = cp.RawKernel(SOURCE, "xch", options=("-std=c++17",))
    rec = {"format_version": 1, "provenance": prov, "ctas": CTAS, "threads": THREADS,
           "words": WORDS, "rounds": ROUNDS, "repeats": REPEATS, "runs": []}
    t0 = time.time()
    run(cp, kern, 132)                                  # warm-up (compile, first touch)
    fk = cp.RawKernel(SOURCE, "free_polls", options=("-std=c++17",))
    free(cp, fk, 1)
    rec["free"] = [free(cp, fk, n) for n in (1, 132) for _ in range(3)]
    for r in rec["free"]:
        print(f"free polls, {r['ctas']:3d} CTAs: {r['poll_cycles_mean']:6.0f} cycles per group "
              f"poll", flush=True)
    qk = cp.RawKernel(SOURCE, "pingpos", options=("-std=c++17",))
    rec["ping_positions"] = ping_positions(cp, qk)
    for r in rec["ping_positions"]:
        print(f"ping-pong at words {r['ping_word']:9d} / {r['pong_word']:9d}: median "
              f"{r['median']:5.0f} p10 {r['p10']:5.0f} p90 {r['p90']:5.0f} p99 {r['p99']:5.0f} "
              f"max {r['max']:6.0f} cycles", flush=True)
    pk = cp.RawKernel(SOURCE, "pingload", options=("-std=c++17",))
    ping_under_load(cp, pk, 0, 2, 100)
    rec["ping"] = []
    for mode in LOAD_MODES:
        for ctas in ((2, 132) if mode == 0 else (34, 66, 132)):
            for _ in range(3):
                r = ping_under_load(cp, pk, mode, ctas)
                rec["ping"].append(r)
                print(f"ping-pong, {ctas - 2:3d} loaders ({r['load']}): "
                      f"{r['cycles_per_round_trip']:6.0f} cycles per round trip "
                      f"({r['loader_iterations_mean']:.0f} loader passes)", flush=True)
    for w in WRITERS + LINE_WRITERS:
        for i in range(REPEATS):
            r = run(cp, kern, w)
            r["repeat"] = i
            r["summary"] = summary(r)
            rec["runs"].append(r)
            s = r["summary"]
            print(f"writers {w:3d} #{i}: round {s['round_ns_median']:6.0f} ns  lag median "
                  f"{s['lag_ns_median']:5.0f} p90 {s['lag_ns_p90']:5.0f}  first "
                  f"{s['first_seen_ns_median']:5.0f} last {s['last_seen_ns_median']:5.0f}  "
                  f"store spread {s['store_spread_ns_median']:5.0f}  seen->stored "
                  f"{s['seen_to_store_ns_median']:4.0f}  poll {s['poll_ns_mean']:4.0f} ns  "
                  f"polls/group {s['polls_per_group_round']:.2f}  last writers on "
                  f"{s['last_writer_sms_distinct']} SMs", flush=True)
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, "lamport_clock.json"), rec)
    return rec


def measure_ring(out: str, argv: list) -> dict:
    """``xring`` alone (``--ring``): lamport_ring.json."""
    import cupy as cp

    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, save_record

    prov = provenance(argv)
    clocks = ClockSampler()
    rk = cp.RawKernel(SOURCE, "xring", options=("-std=c++17",))
    ring(cp, rk, 1, 20)
    rec = {"format_version": 1, "provenance": prov, "ctas": CTAS, "threads": THREADS,
           "runs": [ring(cp, rk, k) for k in RING_LINES for _ in range(3)]}
    for r in rec["runs"]:
        print(f"ring, {r['lines']:3d} lines waited for: {r['cycles_per_round_median']:6.0f} "
              f"cycles per round (max over CTAs {r['cycles_per_round_max']:.0f})", flush=True)
    clocks.stop(prov)
    save_record(os.path.join(out, "lamport_ring.json"), rec)
    return rec


def main(argv: list | None = None) -> int:
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="GPU run: write lamport_clock.json here")
    ap.add_argument("--ring", action="store_true",
                    help="only the xring experiment (lamport_ring.json)")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    args = [sys.argv[0]] + (argv if argv is not None else sys.argv[1:])
    (measure_ring if a.ring else measure)(a.out, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
