"""Polls beside the rows, written in the IR: do a CTA's polling warps slow its warps that stream
128-bit shared loads? One device call, or the simulator.

    PYTHONPATH=. python3 measurements/poll_beside_rows.py --out $OUT   # GPU: poll_beside_rows.json
    python measurements/poll_beside_rows.py --simulate measurements/h200/poll_beside_rows.json

``poll_contention.py`` asked this in CUDA written for the purpose (``h200/poll_contention.json.gz``:
up to +14-18% on a stream of 128-bit shared loads beside 4-8 wide pollers). This is the same
experiment as an IR kernel (:func:`build`), so that the GPU and the simulator run the same
program: one CTA per SM (132 x 256 threads), ``S`` streaming warps and ``P`` polling warps.

- A streamer runs ``iters`` iterations of a 128-bit shared load (the warp's 32 consecutive
  16-byte chunks, 4 wavefronts, no conflict; the chunks move by one warp's width an iteration so
  that no compiler hoists the load) and four FFMAs into four sums (the dense row's pattern);
  then it stores its sums and fills its part of the CTA's 2 KiB region with ones.
- A poller polls the region (four 16-byte L2-coherent loads a thread, back to back, the kernel's
  poll) until no word is zero, i.e. until every streamer of its CTA has finished.
- Parts of the region that belong to no streamer hold ones from the start.

Op = one iteration of the streamers; the slope between two iteration counts removes the launch
and the pollers' last round trip. ``(S, 0)`` is the stream alone. The GPU record keeps the raw
repeats; ``--simulate`` adds the simulator's values (H200 spec, buffers warm in L2).
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REGION = 512                 # words of a CTA's polled region (2 KiB)
PARTS = 8                    # one part of the region per warp slot
SMEM_WORDS = 4096            # the streamed shared buffer (16 KiB)
UNROLL = 4                   # loads in flight per streaming warp
SIZES = (2048, 16384)        # iterations on the GPU
SIM_SIZES = (256, 1024)      # iterations in the simulator
REPEATS, WARMUP, ROUNDS = 5, 2, 6
POLLS = ("wide", "first", "narrow", "paced")
PACE = 8                     # dependent tanh after each of a paced poller's passes
# (streamers, pollers, poll): the CUDA probe's configurations that load the shared pipe; the
# pollers' pass taken apart (fewer compares; fewer bytes and compares; fewer passes); and two
# streamers with pollers on the other two schedulers only (warps 2, 3) or on all four (2-7)
CONFIGS = ((4, 0, "wide"), (4, 1, "wide"), (4, 2, "wide"), (4, 4, "wide"), (6, 0, "wide"),
           (6, 2, "wide"), (1, 0, "wide"), (1, 7, "wide"), (4, 4, "first"), (4, 4, "narrow"),
           (6, 2, "first"), (6, 2, "narrow"), (4, 1, "narrow"), (1, 7, "narrow"), (4, 1, "paced"),
           (4, 4, "paced"), (6, 2, "paced"), (1, 7, "paced"), (2, 0, "wide"), (2, 2, "wide"),
           (2, 6, "wide"))


def build(iters: int, streamers: int, pollers: int, poll: str = "wide", ctas: int = 132,
          threads: int = 256):
    """The probe kernel (module docstring) as a :class:`~kernels_ir.kernels.microbench.core
    .Microbench` of ``iters`` operations. ``poll``: ``"wide"`` four 16-byte loads a thread and
    every word checked (the kernels' poll), ``"first"`` the same loads with the first word of
    each chunk checked (a quarter of the compares), ``"narrow"`` one 4-byte load a thread and
    one compare: the bytes and the instructions of a poll pass taken apart; ``"paced"`` the
    narrow pass followed by a chain of ``PACE`` dependent tanh (about twice the pass's time on
    the H200), which halves the passes and keeps their loads."""
    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import F32, I32, PRED
    from kernels_ir.kernels.microbench.core import SPIN, WARP, Microbench
    from kernels_ir.verify import verify

    wpc = threads // WARP
    if not (1 <= streamers and 0 <= pollers and streamers + pollers <= wpc) or \
            iters < UNROLL or iters % UNROLL:
        raise InputError(f"streamers={streamers}, pollers={pollers}, iters={iters}: accepted "
                         f"1 <= streamers, 0 <= pollers, streamers + pollers <= {wpc}, "
                         f"iters a multiple of {UNROLL}")
    if poll not in POLLS:
        raise InputError(f"poll={poll!r}: accepted {', '.join(POLLS)}")
    name = f"pbr_s{streamers}_p{pollers}" + ("" if poll == "wide" else f"_{poll}")
    b = Builder(name, grid=ctas, block=threads, bench=name, rounds=iters)
    g_region = b.global_buffer("region", F32, ctas * REGION, role="inout")
    g_out = b.global_buffer("out", F32, ctas * threads, role="out")
    buf = b.shared("buf", F32, SMEM_WORDS)
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    lane = b.sreg("lane", dst=b.reg(I32, "lane"))
    warp = b.shr(tid, 5, dst=b.reg(I32, "warp"))
    gt = b.imad(cta, threads, tid, dst=b.reg(I32, "gt"))
    tid4 = b.imul(tid, 4, dst=b.reg(I32, "tid4"))
    base = b.imul(cta, REGION, dst=b.reg(I32, "base"))
    val = b.i2f(tid, dst=b.reg(F32, "val"))
    b.fmul(val, 1e-3, dst=val)
    idx = b.reg(I32, "idx")
    for i in range(SMEM_WORDS // (4 * threads)):          # fill the shared buffer
        b.iadd(tid4, 4 * threads * i, dst=idx)
        b.sts(buf, idx, (val, val, val, val))
    b.bar()
    sums = [b.mov(0.0, dst=b.reg(F32, f"sum{k}")) for k in range(4)]
    chunks = [b.reg(F32, f"chunk{j}", 4) for j in range(UNROLL)]
    with b.if_(b.isetp("lt", warp, streamers, dst=b.reg(PRED, "streams"))):
        b.mov(tid4, dst=idx)
        # UNROLL loads back to back, then their FFMAs: the order ptxas keeps (SASS checked by
        # tests/test_poll_beside_rows.py), so that the GPU and the simulator run one schedule
        # and a few warps keep the shared pipe busy
        with b.loop("it", 0, iters // UNROLL, kind="seq"):
            for j in range(UNROLL):    # the warp's next 32 chunks, one warp's width on, wrapped
                b.lds(buf, idx, width=4, dst=chunks[j])
                b.and_(b.iadd(idx, 4 * WARP, dst=idx), SMEM_WORDS - 1, dst=idx)
            for j in range(UNROLL):
                for k in range(4):
                    b.ffma(chunks[j][k], 0.5, sums[k], dst=sums[k])
        total = b.fadd(b.fadd(sums[0], sums[1]), b.fadd(sums[2], sums[3]),
                       dst=b.reg(F32, "total"))
        b.stg(g_out, gt, (total,))
        # the warp's part of the region: lanes 0..15, one 16-byte chunk each
        part = b.imad(warp, REGION // PARTS, b.imul(lane, 4), dst=b.reg(I32, "part"))
        b.iadd(part, base, dst=part)
        one = b.mov(1.0, dst=b.reg(F32, "one"))
        with b.if_(b.isetp("lt", lane, REGION // PARTS // 4, dst=b.reg(PRED, "fills"))):
            b.stg(g_region, part, (one, one, one, one))
    with b.else_():
        with b.if_(b.isetp("lt", warp, streamers + pollers, dst=b.reg(PRED, "polls"))):
            narrow = poll in ("narrow", "paced")
            width = 1 if narrow else 4
            # narrow: one word a lane, every 16th of the region (four in each warp's part)
            at = b.imad(lane, REGION // WARP if narrow else 4, base, dst=b.reg(I32, "at"))
            got = [b.reg(F32, f"got{k}", width)
                   for k in range(1 if narrow else REGION // (4 * WARP))]
            pace = b.mov(val, dst=b.reg(F32, "pace")) if poll == "paced" else None
            with b.while_(spin_limit=SPIN, label="poll_region") as poll_loop:
                for k, g in enumerate(got):
                    b.ldg_volatile(g_region, at, offset=width * WARP * k, width=width, dst=g)
                waiting = b.mov(False, PRED, dst=b.reg(PRED, "waiting"))
                zero = b.reg(PRED, "zero")
                for g in got:
                    for j in range(4 if poll == "wide" else 1):
                        b.fsetp("eq", g[j], 0.0, dst=zero)
                        b.por(waiting, zero, dst=waiting)
                if poll == "paced":
                    for _ in range(PACE):
                        b.tanh(b.fadd(pace, got[0][0], dst=pace), dst=pace)
                    # never true (tanh stays within -1..1): keeps the chain in the loop
                    b.por(waiting, b.fsetp("gt", pace, 2.0, dst=zero), dst=waiting)
                poll_loop.cond = b.vote_any(waiting, dst=b.reg(PRED, "warp_waiting"))
    kernel = verify(b.build())
    region = np.zeros(ctas * REGION, np.float32)
    for c in range(ctas):
        for w in range(streamers, PARTS):
            lo = c * REGION + w * (REGION // PARTS)
            region[lo:lo + REGION // PARTS] = 1.0

    def check(g) -> bool:
        reg = np.asarray(g["region"]).view(np.float32)
        out = np.asarray(g["out"]).view(np.float32).reshape(ctas, threads)
        return bool(np.all(reg == 1.0) and np.all(np.isfinite(out)) and
                    np.all(out[:, :streamers * WARP] > 0))

    return Microbench(name, kernel, {"region": region, "out": np.zeros(ctas * threads,
                                                                       np.float32)},
                      iters, "one streamer iteration (a 128-bit LDS + 4 FFMA)",
                      {"iters": iters, "streamers": streamers, "pollers": pollers,
                       "ctas": ctas, "threads": threads}, check)


def _key(streamers: int, pollers: int, poll: str) -> str:
    return f"s{streamers}_p{pollers}" + ("" if poll == "wide" else f"_{poll}")


def base_key(key: str) -> str:
    """The configuration's stream alone (same streamers, no pollers)."""
    return key.split("_")[0] + "_p0"


def measure(out: str, argv: list) -> dict:
    """``ROUNDS`` rounds, each over every configuration in turn, so that a drift of the GPU's
    state between configurations (about 5% between two calls) falls on both sides of a ratio:
    the effect of the pollers is the median over the rounds of the round's kernel time at the
    larger iteration count over its stream alone."""
    from measurements.probe import measure_interleaved, save_record

    rec = measure_interleaved(argv, [(_key(s, p, q), lambda n, c=(s, p, q): build(n, *c))
                                     for s, p, q in CONFIGS], SIZES, repeats=REPEATS,
                              warmup=WARMUP, passes=ROUNDS, field="rounds",
                              unit="cycles_per_iter", format_version=2)
    for key, r in rec["results"].items():
        r["effect"] = effect(rec, key)
        print(f"{key:14s} {r['cycles_per_iter']:7.2f} cycles an iteration, pollers' effect "
              f"{100 * r['effect']:+5.1f}%", flush=True)
    save_record(os.path.join(out, "poll_beside_rows.json"), rec)
    return rec


def long_times(rec: dict, key: str) -> list[float]:
    """A configuration's median kernel time at the larger iteration count, round by round."""
    return [x["sizes"][str(SIZES[1])]["t"]["median"] for x in rec["results"][key]["rounds"]]


def effect(rec: dict, key: str) -> float:
    """How much the pollers lengthen the stream on the GPU: median over rounds of the paired
    ratio of kernel times at the larger iteration count, minus one."""
    ratios = [a / b - 1 for a, b in zip(long_times(rec, key),
                                                long_times(rec, base_key(key)), strict=True)]
    return float(np.median(ratios))


def simulate_into(path: str) -> None:
    from measurements.probe import simulate_slopes_into

    simulate_slopes_into(path, [(_key(s, p, q), lambda n, c=(s, p, q): build(n, *c))
                                for s, p, q in CONFIGS], SIM_SIZES, "cycles_per_iter",
                         "an iteration", l2_warm=True)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main

    return probe_main(argv, __doc__, "measurements/poll_beside_rows.py", measure,
                      simulate_into)


if __name__ == "__main__":
    sys.exit(main())
