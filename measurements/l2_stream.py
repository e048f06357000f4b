"""The L2's read bandwidth for data each SM reads alone, on the GPU and in the simulator.

    PYTHONPATH=. python3 measurements/l2_stream.py --out $OUT      # GPU: l2_stream.json
    python measurements/l2_stream.py --simulate measurements/h100/l2_stream.json

The simulator's L2 slices serve ``l2_bytes_per_cycle_per_slice`` each (the H100's 64 B/clk is
inferred, type I); a published measurement of the H100-SXM gives 4.86 TB/s of L2 read bandwidth
(docs/hardware_sources.md s6). The CSR step moves the data the simulator says and still takes
longer on the GPU (measurements/README.md), and the exchange benchmarks where every SM reads the
same data run faster than that bandwidth (requests for one sector from several SMs are merged).
This probe (built here, not one of the calibration benchmarks) measures the case without
sharing: 132 CTAs x ``THREADS`` threads, CTA ``c`` reads its own ``REGION`` bytes (128 KiB;
all of them 17 MB, L2-resident after the first pass) with coalesced 128-bit L2-coherent loads
(``ld.relaxed.gpu``, the polls' load, which bypasses L1), ``rounds`` times over, every thread
summing what it loads (values checked). Plain loads cannot measure it: the L1 keeps a 128 KiB
region (184 TB/s), and a 320 KiB one still mostly hits (17.6 TB/s). Cost per round = the slope
of the launch times between two ``rounds`` (one launch between two events, ``REPEATS``
repeats); bandwidth = 132 x ``REGION`` / that cost.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CTAS, THREADS, REGION = 132, 1024, 128 * 1024
GPU_ROUNDS, SIM_ROUNDS = (8, 40), (1, 2)
REPEATS, WARMUP = 11, 2


def stream(rounds: int, ctas: int = CTAS, threads: int = THREADS, region: int = REGION):
    """The probe at ``rounds`` as a checked Microbench (op = one round)."""
    import numpy as np

    from kernels_ir.builder import Builder
    from kernels_ir.errors import InputError
    from kernels_ir.ir import F32, I32
    from kernels_ir.kernels.microbench import Microbench
    from kernels_ir.verify import verify

    for n, v in (("rounds", rounds), ("ctas", ctas), ("threads", threads), ("region", region)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{n}={v!r}: accepted whole numbers >= 1")
    if threads % 32 or threads > 1024 or region % (16 * threads):
        raise InputError(f"threads={threads}, region={region}: threads a multiple of 32 up to "
                         f"1024, region a multiple of 16 x threads bytes")
    words = region // 4
    per = words // (4 * threads)                 # 128-bit loads per thread and round
    b = Builder("mb_l2_stream", grid=ctas, block=threads, bench="l2_stream", rounds=rounds)
    g_d = b.global_buffer("data", F32, ctas * words)
    g_out = b.global_buffer("out", F32, ctas * threads, role="out")
    tid = b.sreg("tid", dst=b.reg(I32, "tid"))
    cta = b.sreg("cta", dst=b.reg(I32, "cta"))
    base = b.imad(cta, words, b.imul(tid, 4, dst=b.reg(I32, "t4")), dst=b.reg(I32, "base"))
    acc = b.mov(0.0, dst=b.reg(F32, "acc"))
    v = b.reg(F32, "v", 4)
    addr = b.reg(I32, "addr")
    with b.loop("r", 0, rounds):
        with b.loop("i", 0, per) as i:
            b.imad(i, 4 * threads, base, dst=addr)
            b.ldg_volatile(g_d, addr, width=4, dst=v)
            for k in range(4):
                b.fadd(acc, v[k], dst=acc)
    b.stg(g_out, b.imad(cta, threads, tid, dst=b.reg(I32, "gt")), acc)
    kernel = verify(b.build())
    data = (np.arange(ctas * words) % 5).astype(np.float32)
    d4 = data.reshape(ctas, per, threads, 4).sum(axis=(1, 3)) * rounds   # exact small integers
    return Microbench("l2_stream", kernel, {"data": data,
                                            "out": np.zeros(ctas * threads, np.float32)},
                      rounds, "one pass of every CTA over its own region",
                      {"rounds": rounds, "ctas": ctas, "threads": threads, "region": region},
                      lambda g: bool(np.array_equal(np.asarray(g["out"]), d4.reshape(-1))))


def measure(out: str, argv: list) -> dict:
    import numpy as np

    from gpusim.backends.cupy_backend import Runner, _summary, _time_launch
    from gpusim.measurements import kernel_fingerprint
    from measurements.campaign import provenance
    from measurements.probe import launch_checked, save_record

    runner = Runner()
    cp = runner.cp
    res = {"format_version": 2, "provenance": provenance(argv), "repeats": REPEATS,
           "warmup": WARMUP, "sizes": {}}
    t0 = time.time()
    for rounds in GPU_ROUNDS:
        m = stream(rounds)
        comp, bufs = launch_checked(runner, m, f"l2_stream (rounds {rounds})")
        times = [_time_launch(cp, runner, comp, bufs, lambda bb: None)
                 for _ in range(WARMUP + REPEATS)][WARMUP:]
        res["sizes"][str(rounds)] = {"t": _summary(times), "params": m.params,
                                     "kernel": kernel_fingerprint(m.kernel)}
    (a, ra), (b, rb) = ((int(k), v) for k, v in res["sizes"].items())
    per = (rb["t"]["median"] - ra["t"]["median"]) / (b - a)
    res["per_round_s"] = per
    res["bandwidth_bytes_per_s"] = CTAS * REGION / per
    res["timing_s"] = time.time() - t0
    print(f"l2_stream: {per * 1e6:.2f} us per round, {res['bandwidth_bytes_per_s'] / 1e12:.2f} "
          f"TB/s ({np.round([ra['t']['median'] * 1e6, rb['t']['median'] * 1e6], 1)} us)",
          flush=True)
    save_record(os.path.join(out, "l2_stream.json"), res)
    return res


def _simulated(spec, rec) -> dict:
    from gpusim.engine import simulate

    cyc = []
    for rounds in SIM_ROUNDS:
        m = stream(rounds)
        r = simulate(m.kernel, m.inputs, spec, l2_warm=True)
        if not m.verify_result(r.globals):
            raise AssertionError(f"l2_stream (rounds {rounds}): the simulator's values fail")
        cyc.append(r.cycles)
    per = (cyc[1] - cyc[0]) / (SIM_ROUNDS[1] - SIM_ROUNDS[0]) / spec.clock_hz
    print(f"l2_stream simulated: {per * 1e6:.2f} us per round, "
          f"{CTAS * REGION / per / 1e12:.2f} TB/s", flush=True)
    return {"cycles": dict(zip(map(str, SIM_ROUNDS), cyc, strict=True)), "per_round_s": per,
            "bandwidth_bytes_per_s": CTAS * REGION / per}


def main(argv: list | None = None) -> int:
    from measurements.probe import add_simulated, probe_main

    return probe_main(argv, __doc__, os.path.relpath(__file__), measure,
                      lambda path: add_simulated(path, _simulated, l2_warm=True))


if __name__ == "__main__":
    sys.exit(main())
